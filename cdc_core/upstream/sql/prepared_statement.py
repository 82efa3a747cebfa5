"""A prepared statement as the SQL front keeps it: parsed once with its ``?`` parameter markers, bound to typed values.

A statement is tokenized and parsed at COM_STMT_PREPARE, as TiDB's ``PrepareExec`` parses it
(``pkg/executor/prepared.go``: one statement, else ``ErrPrepareMulti`` 8115; its ``ParamMarkerExpr`` in text
order). Each execute binds the values the client sent to the tree as literal nodes built from the values
themselves: a value is never pasted into SQL text, so a quote in it is a character of a string, not the end of one
(mysql-mimic's own ``_interpolate_params`` splices ``'value'`` into the text unescaped; that is what this replaces).

The values come typed from the binary protocol (``stmt_protocol``), as TiDB's ``param.ExecArgs``
(``pkg/param/binary_params.go``) makes datums of them: integers (signed or unsigned), floats, DECIMAL as its
digits, strings in the connection's character set, BLOB parameters as bytes, DATE/DATETIME/TIMESTAMP and TIME as
the text TiDB formats them to before parsing them, NULL.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from cdc_core.codec.sql_literal import mysql_dialect
from cdc_core.upstream.sql import mysql_errors
from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.mysql_errors import MysqlCode
from cdc_core.upstream.sql.sql_front import ParsedStatement, split_script

# What a ``?`` becomes in the text sqlglot parses: a named placeholder, so that each marker's position in the text
# is known after parsing (sqlglot's tree puts ``LIMIT ?, ?``'s offset after its count).
_MARK: Final = "_cdcflow_param_"
_MARK_RE: Final = re.compile(rf":{_MARK}\d+")


class PrepareError(Exception):
    """A statement that cannot be prepared, with the MySQL code TiDB answers it with."""

    def __init__(self, message: str, code: MysqlCode) -> None:
        super().__init__(message)
        self.message, self.code = message, code


@dataclass
class PreparedStatement:
    """One COM_STMT_PREPARE's statement: its template tree, its parameter count, and what the protocol keeps
    between executes (TiDB's ``TiDBStatement``: the parameter types bound last, SEND_LONG_DATA's buffers, a cursor)."""

    stmt_id: int
    template: ParsedStatement
    num_params: int
    param_types: bytes = b""  # two bytes a parameter (type, flags), from the last execute that sent them
    long_data: dict[int, bytearray] = field(default_factory=dict)
    cursor: Any = None

    def bind(self, values: list[Any]) -> ParsedStatement:
        """The template with parameter ``i`` replaced by a literal node of ``values[i]``."""
        if not self.num_params:
            return self.template
        node = self.template.node.copy()
        for ph in list(node.find_all(exp.Placeholder)):
            ph.replace(literal(values[int(str(ph.this)[len(_MARK):])]))
        return replace(self.template, node=node)


    def probe(self) -> ParsedStatement | None:
        """For a query, the statement that describes its result columns at prepare, as TiDB sends them there: its
        parameters NULL, ``LIMIT 0`` and no ``FOR UPDATE``, so it reads and locks no row. None for other statements
        (they return no rows)."""
        node = self.template.node
        if not isinstance(node, exp.Query):
            return None
        node = node.copy()
        for ph in list(node.find_all(exp.Placeholder)):
            ph.replace(exp.Null())
        node.set("limit", exp.Limit(expression=exp.Literal.number(0)))
        node.set("offset", None)
        node.set("locks", None)
        return replace(self.template, node=node)


def prepare(sql: str, *, no_backslash_escapes: bool = False) -> tuple[ParsedStatement, int]:
    """``(template, parameter count)`` of a statement to prepare. Raises ``SqlError`` for SQL that does not parse
    and ``PrepareError`` for what TiDB refuses to prepare."""
    dialect = mysql_dialect(no_backslash_escapes=no_backslash_escapes)
    try:
        tokens = dialect.tokenize(sql)
    except TokenError as exc:
        raise SqlError(f"cannot tokenize SQL: {exc}") from exc
    marks = [t for t in tokens if t.token_type == TokenType.PLACEHOLDER]
    parts, at = [], 0
    for i, t in enumerate(marks):
        parts += [sql[at:t.start], f":{_MARK}{i}"]
        at = t.end + 1
    statements = split_script("".join(parts) + sql[at:], no_backslash_escapes=no_backslash_escapes)
    if len(statements) != 1:
        if not statements:
            raise PrepareError("Query was empty", mysql_errors.ER_EMPTY_QUERY)
        raise PrepareError("Can not prepare multiple statements", mysql_errors.TIDB_PREPARE_MULTI)
    st = statements[0]
    found = sorted(str(ph.this) for ph in st.node.find_all(exp.Placeholder))
    if found != sorted(f"{_MARK}{i}" for i in range(len(marks))):
        # a ``:name`` the client wrote, or a marker the parser dropped: not SQL TiDB parses
        raise SqlError(f"syntax error near a parameter marker in `{sql[:80]}`")
    if marks and isinstance(st.node, exp.Command):  # kept as text (SPLIT, IMPORT INTO, ...): nothing to bind into
        raise PrepareError("This command is not supported in the prepared statement protocol yet",
                           mysql_errors.ER_UNSUPPORTED_PS)
    texts = st.item_texts
    if marks and texts is not None:  # a result column is named by its text as the client wrote it: ``?``
        texts = tuple(_MARK_RE.sub("?", t) for t in texts)
    return replace(st, text=sql.strip().rstrip(";").strip() if marks else st.text, item_texts=texts), len(marks)


def literal(value: Any) -> exp.Expression:
    """The literal node of a bound value, as the parser would build it for the value written in SQL."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Literal.number(int(value))
    if isinstance(value, int):
        return _signed(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SqlError(f"bad number literal {value!r}")
        return _signed(repr(value))
    if isinstance(value, Float32):
        return _signed(value.text)
    if isinstance(value, Decimal):
        return _signed(format(value, "f"))
    if isinstance(value, bytes | bytearray):
        try:
            return exp.Literal.string(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:  # not text: the bytes themselves, as x'...' gives them
            return exp.HexString(this=bytes(value).hex())
    return exp.Literal.string(str(value))


def _signed(text: str) -> exp.Expression:
    # "-5" parses to a negated 5: the same tree, so the access paths that read literals see it the same way
    if text.startswith("-"):
        return exp.Neg(this=exp.Literal(this=text[1:], is_string=False))
    return exp.Literal(this=text, is_string=False)


@dataclass(frozen=True)
class Float32:
    """A FLOAT parameter (TiDB's ``NewFloat32Datum``): the shortest decimal text that reads back as the same
    32-bit float, so ``1.1f`` binds as 1.1 rather than as its double widening 1.100000023841858."""

    value: float

    @property
    def text(self) -> str:
        packed = struct.pack("<f", self.value)
        for digits in range(6, 10):
            text = f"{self.value:.{digits}g}"
            if struct.pack("<f", float(text)) == packed:
                return text
        return repr(self.value)


def decimal_param(text: str) -> Decimal:
    """A NEWDECIMAL parameter's digits (``MyDecimal.FromString``); anything else is not a number."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation as exc:
        raise SqlError(f"bad number literal {text!r}") from exc
    if not value.is_finite():
        raise SqlError(f"bad number literal {text!r}")
    return value
