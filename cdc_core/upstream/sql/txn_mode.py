"""The transaction mode rules, as TiDB v8.5 keeps them: ``tidb_txn_mode`` and ``innodb_lock_wait_timeout`` (global and
session values, defaults, validation), which mode a transaction takes, and the retry limits.

TiDB (``pkg/sessionctx/variable/sysvar.go``, defaults in ``tidb_vars.go``):

* ``tidb_txn_mode``: global and session, default ``pessimistic`` (``DefTiDBTxnMode``; TiDB's default since v3.0.8),
  ``TypeEnum`` of ``pessimistic`` / ``optimistic`` matched without case and stored as listed, and ``AllowEmptyAll``:
  ``''`` is accepted, and since only ``PESSIMISTIC`` selects pessimistic locking (``SessionVars.TxnMode``), it means
  optimistic. Anything else is ``ErrWrongValueForVar`` (1231).
* ``innodb_lock_wait_timeout``: global and session, default 50 (``DefInnodbLockWaitTimeout``), seconds,
  ``TypeUnsigned`` 1..3600: a value out of range is clamped (with a warning in TiDB), a non-integer is
  ``ErrWrongTypeForVar`` (1232). It bounds each wait for a lock held by another transaction (1205 then).
* A new session takes the global values; ``SET GLOBAL`` changes what later sessions take, not the running ones.

Which mode a transaction runs in (``pkg/session/session.go``, ``pkg/sessiontxn``): ``BEGIN PESSIMISTIC`` and ``BEGIN
OPTIMISTIC`` override the variable; ``BEGIN`` / ``START TRANSACTION`` take the session's ``tidb_txn_mode``. An
autocommit statement is optimistic unless the config ``pessimistic-txn.pessimistic-auto-commit`` is true (false by
default, ``pkg/config/config.go``), and TiDB retries it on a write conflict up to ``tidb_retry_limit`` (10) times:
an explicit optimistic transaction is not retried (``tidb_disable_txn_auto_retry`` ON). A pessimistic statement
that meets a write newer than its ``for_update_ts`` runs again at a newer one (TiDB's pessimistic retry,
``pkg/executor/adapter.go`` ``handlePessimisticLockError``), at most ``pessimistic-txn.max-retry-count`` (256)
times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from sqlglot import exp

from cdc_core.upstream.sql.errors import SqlError

__all__ = ["DEFAULT_LOCK_WAIT_TIMEOUT", "DEFAULT_TXN_MODE", "LOCK_WAIT_TIMEOUT", "MAX_PESSIMISTIC_RETRIES",
           "OPTIMISTIC", "PESSIMISTIC", "PESSIMISTIC_AUTO_COMMIT", "RETRY_LIMIT", "TXN_MODE", "TxnModeError",
           "TxnSettings", "assignments", "autocommit_pessimistic", "begin_pessimistic", "with_global_values"]

Scope = Literal["SESSION", "GLOBAL"]
TXN_MODE: Final = "tidb_txn_mode"
LOCK_WAIT_TIMEOUT: Final = "innodb_lock_wait_timeout"
VARIABLES: Final = (TXN_MODE, LOCK_WAIT_TIMEOUT)
PESSIMISTIC: Final = "pessimistic"
OPTIMISTIC: Final = "optimistic"
_MODES: Final = (PESSIMISTIC, OPTIMISTIC)
DEFAULT_TXN_MODE: Final = PESSIMISTIC  # DefTiDBTxnMode
DEFAULT_LOCK_WAIT_TIMEOUT: Final = 50  # DefInnodbLockWaitTimeout, seconds
_LOCK_WAIT_TIMEOUT_RANGE: Final = (1, 3600)
PESSIMISTIC_AUTO_COMMIT: Final = False  # config pessimistic-txn.pessimistic-auto-commit
RETRY_LIMIT: Final = 10  # DefTiDBRetryLimit: an autocommit statement's retries on a write conflict
MAX_PESSIMISTIC_RETRIES: Final = 256  # config pessimistic-txn.max-retry-count


class TxnModeError(SqlError):
    """A value one of these variables cannot take: ``code`` 1231 (ER_WRONG_VALUE_FOR_VAR) or 1232
    (ER_WRONG_TYPE_FOR_VAR)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def normalize_mode(value: Any) -> str:
    """``value`` as ``tidb_txn_mode`` stores it (TypeEnum: the listed spelling; ``''`` allowed)."""
    text = "" if value is None else str(value)
    if text == "":
        return ""
    for mode in _MODES:
        if text.lower() == mode:
            return mode
    raise TxnModeError(f"Variable '{TXN_MODE}' can't be set to the value of '{text}'", 1231)


def normalize_lock_wait_timeout(value: Any) -> int:
    """``value`` as ``innodb_lock_wait_timeout`` stores it: an integer clamped to 1..3600 (TypeUnsigned)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TxnModeError(f"Incorrect argument type to variable '{LOCK_WAIT_TIMEOUT}'", 1232)
    try:
        n = int(value)
    except ValueError:
        raise TxnModeError(f"Incorrect argument type to variable '{LOCK_WAIT_TIMEOUT}'", 1232) from None
    lo, hi = _LOCK_WAIT_TIMEOUT_RANGE
    return min(max(n, lo), hi)


@dataclass
class TxnSettings:
    """One scope's values of the two variables (the engine keeps the global one, each session its own)."""

    txn_mode: str = DEFAULT_TXN_MODE
    lock_wait_timeout: int = DEFAULT_LOCK_WAIT_TIMEOUT

    def copy(self) -> TxnSettings:
        return TxnSettings(self.txn_mode, self.lock_wait_timeout)

    def get(self, name: str) -> str | int:
        return self.txn_mode if name == TXN_MODE else self.lock_wait_timeout

    def set(self, name: str, value: Any) -> None:
        if name == TXN_MODE:
            self.txn_mode = normalize_mode(value)
        else:
            self.lock_wait_timeout = normalize_lock_wait_timeout(value)


def begin_pessimistic(session_mode: str, begin_modes: list[str]) -> bool:
    """Whether ``BEGIN [PESSIMISTIC|OPTIMISTIC]`` / ``START TRANSACTION`` (its ``modes``) starts a pessimistic
    transaction in a session whose ``tidb_txn_mode`` is ``session_mode``."""
    words = {m.upper() for m in begin_modes}
    if "PESSIMISTIC" in words:
        return True
    if "OPTIMISTIC" in words:
        return False
    return session_mode == PESSIMISTIC


def autocommit_pessimistic(session_mode: str) -> bool:
    """Whether an autocommit statement runs as a pessimistic transaction (only with pessimistic-auto-commit)."""
    return PESSIMISTIC_AUTO_COMMIT and session_mode == PESSIMISTIC


def assignments(node: exp.Set) -> tuple[list[tuple[Scope, str, exp.Expression]], list[exp.Expression]]:
    """The assignments of these variables in a ``SET`` (``SET [GLOBAL|SESSION|LOCAL] v = x``, ``SET
    @@[global.|session.|local.]v = x``), ``(scope, name, value)`` each, and the statement's other items in order."""
    ours: list[tuple[Scope, str, exp.Expression]] = []
    others: list[exp.Expression] = []
    for item in node.expressions:
        eq = item.this if isinstance(item, exp.SetItem) else None
        target = eq.this if isinstance(eq, exp.EQ) else None
        if isinstance(target, exp.SessionParameter) and target.name.lower() in VARIABLES:
            scope = target.text("kind")
        elif isinstance(target, exp.Column) and not target.table and target.name.lower() in VARIABLES:
            scope = item.text("kind")
        else:
            others.append(item)
            continue
        assert isinstance(eq, exp.EQ) and target is not None
        ours.append(("GLOBAL" if scope.upper() == "GLOBAL" else "SESSION", target.name.lower(), eq.expression))
    return ours, others


def evaluate(value: exp.Expression, *, name: str, scope: Scope, session: TxnSettings, global_: TxnSettings) -> Any:
    """The value a ``SET`` assigns: a literal, ``DEFAULT`` (the global value for a session, TiDB's default for the
    global one), ``ON``-like bare words as text, or ``@@v`` of either scope."""
    if isinstance(value, exp.Paren):
        return evaluate(value.this, name=name, scope=scope, session=session, global_=global_)
    if isinstance(value, exp.Literal):
        return str(value.this) if value.is_string else int(value.this) if value.is_int else float(value.this)
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal) and value.this.is_int:
        return -int(value.this.this)
    if isinstance(value, exp.Var | exp.Column) and value.name.upper() == "DEFAULT":
        return TxnSettings().get(name) if scope == "GLOBAL" else global_.get(name)
    if isinstance(value, exp.Var | exp.Column):  # a bare word: SET tidb_txn_mode = pessimistic
        return value.name
    if isinstance(value, exp.SessionParameter) and value.name.lower() in VARIABLES:
        source = global_ if value.text("kind").upper() == "GLOBAL" else session
        return source.get(value.name.lower())
    if isinstance(value, exp.Null):
        if name == TXN_MODE:
            raise TxnModeError(f"Variable '{TXN_MODE}' can't be set to the value of 'NULL'", 1231)
        raise TxnModeError(f"Incorrect argument type to variable '{LOCK_WAIT_TIMEOUT}'", 1232)
    raise SqlError(f"unsupported value for {name}: {value.sql(dialect='mysql')}")


def with_global_values(node: exp.Expression, global_: TxnSettings) -> exp.Expression:
    """``node`` with each ``@@global.tidb_txn_mode`` / ``@@global.innodb_lock_wait_timeout`` the global value (a
    select item keeps the name the client wrote), for mysql-mimic's substitution, which knows the session's only."""

    def put(n: exp.Expression) -> exp.Expression:
        if not (isinstance(n, exp.SessionParameter) and n.name.lower() in VARIABLES
                and n.text("kind").upper() == "GLOBAL"):
            return n
        v = global_.get(n.name.lower())
        lit = exp.Literal.string(v) if isinstance(v, str) else exp.Literal.number(v)
        if isinstance(n.parent, exp.Select) and n.arg_key == "expressions":
            return cast(exp.Expression, exp.alias_(lit, exp.to_identifier(n.sql(dialect="mysql"))))
        return lit

    return cast(exp.Expression, node.transform(put, copy=False))
