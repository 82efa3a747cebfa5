"""The embedded upstream's ``sql_mode``, as TiDB keeps it: a global value that new sessions take, a session value,
TiDB's default, its mode names and combination modes, validated and normalized as TiDB does.

TiDB (``pkg/parser/mysql/const.go``): ``DefaultSQLMode`` is the global default; ``FormatSQLModeStr`` upper-cases the
value, trims trailing spaces, drops empty parts, expands a combination mode (``ANSI``, ``TRADITIONAL``...) into its
modes followed by itself, and drops repeats; ``GetSQLMode`` refuses a name outside ``Str2SQLMode`` with
``ErrWrongValueForVar`` (1231, "Variable 'sql_mode' can't be set to the value of '<name>'"). The variable's
``SetSession`` (``pkg/sessionctx/variable/sysvar.go``) then sets the session status flag
``ServerStatusNoBackslashEscaped`` when ``NO_BACKSLASH_ESCAPES`` is in the mode.

What the modes mean is left to the parts that honour them, which read ``Session.sql_mode`` (a ``frozenset`` of
names): the tokenizer honours ``NO_BACKSLASH_ESCAPES`` (``cdc_core.codec.sql_literal``); strictness and the zero-date
modes are not interpreted here.
"""

from __future__ import annotations

from typing import Final, Literal, cast

from sqlglot import exp

from cdc_core.codec.sql_literal import NO_BACKSLASH_ESCAPES
from cdc_core.upstream.sql.errors import SqlError

__all__ = ["COMBINATIONS", "DEFAULT_SQL_MODE", "MODES", "NO_BACKSLASH_ESCAPES", "Scope", "SqlModeError", "assignments",
           "evaluate", "modes", "normalize", "with_global_values"]

Scope = Literal["SESSION", "GLOBAL"]
VARIABLE: Final = "sql_mode"

# mysql.DefaultSQLMode
DEFAULT_SQL_MODE: Final = ("ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                           "ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION")
# mysql.Str2SQLMode's names
MODES: Final = frozenset({
    "REAL_AS_FLOAT", "PIPES_AS_CONCAT", "ANSI_QUOTES", "IGNORE_SPACE", "NOT_USED", "ONLY_FULL_GROUP_BY",
    "NO_UNSIGNED_SUBTRACTION", "NO_DIR_IN_CREATE", "POSTGRESQL", "ORACLE", "MSSQL", "DB2", "MAXDB", "NO_KEY_OPTIONS",
    "NO_TABLE_OPTIONS", "NO_FIELD_OPTIONS", "MYSQL323", "MYSQL40", "ANSI", "NO_AUTO_VALUE_ON_ZERO",
    NO_BACKSLASH_ESCAPES, "STRICT_TRANS_TABLES", "STRICT_ALL_TABLES", "NO_ZERO_IN_DATE", "NO_ZERO_DATE",
    "INVALID_DATES", "ERROR_FOR_DIVISION_BY_ZERO", "TRADITIONAL", "NO_AUTO_CREATE_USER", "HIGH_NOT_PRECEDENCE",
    "NO_ENGINE_SUBSTITUTION", "PAD_CHAR_TO_FULL_LENGTH", "ALLOW_INVALID_DATES",
})
_OPTIONS: Final = ("PIPES_AS_CONCAT", "ANSI_QUOTES", "IGNORE_SPACE", "NO_KEY_OPTIONS", "NO_TABLE_OPTIONS",
                   "NO_FIELD_OPTIONS")
# mysql.CombinationSQLMode
COMBINATIONS: Final[dict[str, tuple[str, ...]]] = {
    "ANSI": ("REAL_AS_FLOAT", "PIPES_AS_CONCAT", "ANSI_QUOTES", "IGNORE_SPACE", "ONLY_FULL_GROUP_BY"),
    "DB2": _OPTIONS,
    "MAXDB": (*_OPTIONS, "NO_AUTO_CREATE_USER"),
    "MSSQL": _OPTIONS,
    "MYSQL323": ("MYSQL323", "HIGH_NOT_PRECEDENCE"),
    "MYSQL40": ("MYSQL40", "HIGH_NOT_PRECEDENCE"),
    "ORACLE": (*_OPTIONS, "NO_AUTO_CREATE_USER"),
    "POSTGRESQL": _OPTIONS,
    "TRADITIONAL": ("STRICT_TRANS_TABLES", "STRICT_ALL_TABLES", "NO_ZERO_IN_DATE", "NO_ZERO_DATE",
                    "ERROR_FOR_DIVISION_BY_ZERO", "NO_AUTO_CREATE_USER", "NO_ENGINE_SUBSTITUTION"),
}


class SqlModeError(SqlError):
    """A value ``sql_mode`` cannot take (MySQL error 1231, ER_WRONG_VALUE_FOR_VAR)."""

    CODE: Final = 1231


def normalize(value: str) -> str:
    """``value`` as TiDB stores ``sql_mode`` (``FormatSQLModeStr``), or :class:`SqlModeError` naming the first
    name TiDB does not know (``GetSQLMode``). Names are not trimmed inside: ``'A, B'`` names `` B``, as in TiDB."""
    out: list[str] = []
    for part in value.rstrip(" ").upper().split(","):
        if not part:
            continue
        for name in (*COMBINATIONS.get(part, ()), part):
            if name not in out:
                out.append(name)
    for name in out:
        if name not in MODES:
            raise SqlModeError(f"Variable 'sql_mode' can't be set to the value of '{name}'")
    return ",".join(out)


def modes(value: str) -> frozenset[str]:
    """The mode names of a normalized ``sql_mode`` value."""
    return frozenset(m for m in value.split(",") if m)


def assignments(node: exp.Set) -> tuple[list[tuple[Scope, exp.Expression]], list[exp.Expression]]:
    """The ``sql_mode`` assignments of a ``SET`` statement, ``(scope, value)`` each (``SET [GLOBAL|SESSION|LOCAL]
    sql_mode = v``, ``SET @@[global.|session.|local.]sql_mode = v``; no scope is the session's), and its other items
    in order."""
    ours: list[tuple[Scope, exp.Expression]] = []
    others: list[exp.Expression] = []
    for item in node.expressions:
        eq = item.this if isinstance(item, exp.SetItem) else None
        target = eq.this if isinstance(eq, exp.EQ) else None
        if isinstance(target, exp.SessionParameter) and target.name.lower() == VARIABLE:
            scope = target.text("kind")
        elif isinstance(target, exp.Column) and not target.table and target.name.lower() == VARIABLE:
            scope = item.text("kind")
        else:
            others.append(item)
            continue
        assert isinstance(eq, exp.EQ)
        ours.append(("GLOBAL" if scope.upper() == "GLOBAL" else "SESSION", eq.expression))
    return ours, others


def evaluate(value: exp.Expression, *, scope: Scope, session: str, global_value: str) -> str:
    """The text a ``SET`` assigns to ``sql_mode`` (not yet normalized): a string (a number as its digits, which no
    mode is), ``DEFAULT`` (the global value for a session, TiDB's default for the global one), ``@@sql_mode`` of
    either scope, or ``CONCAT`` of those -- what clients send (``CONCAT(@@sql_mode, ',ANSI_QUOTES')``)."""
    if isinstance(value, exp.Paren):
        return evaluate(value.this, scope=scope, session=session, global_value=global_value)
    if isinstance(value, exp.Literal):
        return str(value.this)
    if isinstance(value, exp.Var | exp.Column) and value.name.upper() == "DEFAULT":
        return DEFAULT_SQL_MODE if scope == "GLOBAL" else global_value
    if isinstance(value, exp.Null):
        raise SqlModeError("Variable 'sql_mode' can't be set to the value of 'NULL'")
    if isinstance(value, exp.SessionParameter) and value.name.lower() == VARIABLE:
        return global_value if value.text("kind").upper() == "GLOBAL" else session
    if isinstance(value, exp.Concat):
        return "".join(evaluate(e, scope=scope, session=session, global_value=global_value)
                       for e in value.expressions)
    raise SqlError(f"unsupported value for sql_mode: {value.sql(dialect='mysql')}")


def with_global_values(node: exp.Expression, global_value: str) -> exp.Expression:
    """``node`` with each ``@@global.sql_mode`` a string of the global value (a select item keeps the name the
    client wrote as its column's), for the session-variable substitution that follows, which knows one scope."""

    def put(n: exp.Expression) -> exp.Expression:
        if not (isinstance(n, exp.SessionParameter) and n.name.lower() == VARIABLE
                and n.text("kind").upper() == "GLOBAL"):
            return n
        text = exp.Literal.string(global_value)
        if isinstance(n.parent, exp.Select) and n.arg_key == "expressions":
            return cast(exp.Expression, exp.alias_(text, exp.to_identifier(n.sql(dialect="mysql"))))
        return text

    return cast(exp.Expression, node.transform(put, copy=False))
