"""TiDB's own SQL functions, compiled by the expression evaluator (``expr``) wherever an expression may stand.

- ``TIDB_CURRENT_TSO()``: the session's ``tidb_current_ts`` (``pkg/expression/builtin_info.go``,
  ``builtinTiDBCurrentTsoSig``) -- the start ts of the transaction the statement reads in: the open
  transaction's, else the autocommit statement's own, a fresh ts from the TSO.
- ``TIDB_VERSION()``: TiDB's ``printer.GetTiDBInfo`` text (``pkg/util/printer/printer.go``), multi-line, with
  cdcflow's version as the build.
- ``TIDB_PARSE_TSO(ts)``: the ts's physical time as a DATETIME(6) in the session's time zone, NULL for a
  non-positive ts (``builtinTidbParseTsoSig``, ``pkg/expression/builtin_time.go``).
- ``TIDB_PARSE_TSO_LOGICAL(ts)``: its logical part.

A function neither TiDB's nor the evaluator's is TiDB's ``ErrSpDoesNotExist`` (1305, ``FUNCTION db.fn does not
exist``, or 1046 with no current database: ``pkg/expression/expression.go`` ``NewFunctionBase``). What a statement
evaluates against (its ts, database, time zone) is its :class:`StatementContext`, set around the statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from decimal import Decimal, InvalidOperation
from importlib import metadata
from typing import Any, Final

from cdc_core.codec.tso import LOGICAL_BITS
from cdc_core.schema.model import Column
from cdc_core.upstream.sql.errors import SqlError

TIDB_RELEASE_VERSION: Final = "v8.5.0"
SERVER_VERSION: Final = f"8.0.11-TiDB-{TIDB_RELEASE_VERSION}-cdcflow"  # @@version (mysql.ServerVersion + ours)
# What TIDB_PARSE_TSO returns, for the result column's type: DATETIME(6), as TiDB's (types.MaxFsp)
PARSE_TSO_COLUMN: Final = Column(0, "tidb_parse_tso", "datetime", fsp=6)


def _cdcflow_version() -> str:
    try:
        return metadata.version("cdcflow")
    except metadata.PackageNotFoundError:
        return "unknown"


def tidb_version_text() -> str:
    """``SELECT TIDB_VERSION()``: the lines of TiDB's ``GetTiDBInfo``."""
    version = _cdcflow_version()
    return (f"Release Version: {TIDB_RELEASE_VERSION}\n"
            "Edition: Community\n"
            f"Git Commit Hash: cdcflow-{version}\n"
            "Git Branch: cdcflow\n"
            "UTC Build Time: None\n"
            f"GoVersion: cdcflow {version} (Python)\n"
            "Race Enabled: false\n"
            "Check Table Before Drop: false\n"
            "Store: tikv")


@dataclass(frozen=True)
class StatementContext:
    """What a statement's expressions read of their session: the ts it reads at, the current database, the time
    zone (``@@time_zone``)."""

    start_ts: int = 0
    db: str | None = None
    time_zone: tzinfo | None = None  # None: the system's, looked up when a function needs it

    def zone(self) -> tzinfo:
        return self.time_zone or datetime.now().astimezone().tzinfo or UTC


_CONTEXT: ContextVar[StatementContext | None] = ContextVar("cdcflow_statement_context", default=None)


def enter_statement(ctx: StatementContext) -> Token[StatementContext | None]:
    """Expressions compiled from now read ``ctx`` (:func:`current_context`), until :func:`leave_statement` (a pair
    of calls, not a context manager: a point read's statement costs tens of microseconds, a generator-based
    ``with`` several of them)."""
    return _CONTEXT.set(ctx)


def leave_statement(token: Token[StatementContext | None]) -> None:
    _CONTEXT.reset(token)



def current_context() -> StatementContext:
    return _CONTEXT.get() or StatementContext()


Row = Any
Evaluator = Callable[[Row], Any]


def _arity(name: str, args: Sequence[Evaluator], n: int) -> None:
    if len(args) != n:
        # ErrWrongParamcountToNativeFct (1582)
        raise SqlError(f"Incorrect parameter count in the call to native function '{name.lower()}'")


def _ts_arg(arg: Evaluator, row: Row) -> int | None:
    v = arg(row)
    if v is None:
        return None
    try:
        n = int(Decimal(v.strip() if isinstance(v, str) else v))
    except (InvalidOperation, TypeError, ValueError):
        n = 0  # not a number: TiDB reads it as 0, which is NULL here
    return n if n > 0 else None


def compile_call(name: str, args: Sequence[Evaluator]) -> Evaluator | None:
    """``name(args)`` as a TiDB function, None when ``name`` is not one of them. The statement's values (its ts,
    its time zone) are read here, when the statement is compiled: they are constant for the statement, as TiDB
    folds them."""
    upper = name.upper()
    if upper == "TIDB_CURRENT_TSO":
        _arity(upper, args, 0)
        ts = current_context().start_ts
        return lambda row: ts
    if upper == "TIDB_VERSION":
        _arity(upper, args, 0)
        text = tidb_version_text()
        return lambda row: text
    if upper == "TIDB_PARSE_TSO":
        _arity(upper, args, 1)
        (arg,) = args
        tz = current_context().zone()

        def parse_tso(row: Row) -> Any:
            ts = _ts_arg(arg, row)
            if ts is None:
                return None
            physical_ms = ts >> LOGICAL_BITS
            return datetime.fromtimestamp(physical_ms / 1000, tz).replace(tzinfo=None)

        return parse_tso
    if upper == "TIDB_PARSE_TSO_LOGICAL":
        _arity(upper, args, 1)
        (arg,) = args

        def parse_logical(row: Row) -> Any:
            ts = _ts_arg(arg, row)
            return None if ts is None else ts & ((1 << LOGICAL_BITS) - 1)

        return parse_logical
    return None


def unknown_function(name: str) -> SqlError:
    """TiDB's error for a call of a function that does not exist."""
    db = current_context().db
    if not db:
        return SqlError("No database selected")
    return SqlError(f"FUNCTION {db}.{name.lower()} does not exist")  # the name lower-cased (FnName.L)
