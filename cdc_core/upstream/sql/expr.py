"""Evaluation of SQL expressions (sqlglot ASTs) against rows: WHERE, SET, SELECT lists, aggregates' arguments.

An expression is compiled once (:func:`compile_expr`) into a function of a row, built from closures over its
children's functions, and that function runs on each row: a scan does not walk the tree row after row (the
checksum of a chunk evaluates about a dozen nodes a row; ``tests/bench/test_checksum_eval_bench.py``).
:func:`evaluate` compiles and runs once. Only a closed set of node types is compiled (literals, columns,
comparisons, AND/OR/NOT with SQL's three-valued logic, IN, IS [NOT] NULL, BETWEEN, LIKE, arithmetic, and the
functions of a checksum query as sync_diff_inspector writes it: ``CRC32``, ``CONCAT``, ``CONCAT_WS``, ``ISNULL``,
``HEX``, ``DATE_FORMAT``, ``CAST(... AS UNSIGNED | SIGNED | CHAR)``); anything else is an ``SqlError`` naming the
construct, raised when the statement is compiled, before any row. Nothing is ever handed to Python's ``eval``. A
value turned into a string takes MySQL's text form (:func:`text_of`).

Comparisons follow MySQL loosely: numbers compare numerically (a numeric string compares as a
number), a DATE/DATETIME/TIMESTAMP or TIME compares with a string by parsing it, strings compare
binary (TiDB's default ``utf8mb4_bin`` collation), a byte string with text by the text's UTF-8
bytes, and anything compared with NULL is NULL. ``0x..``/``x'..'`` and ``b'..'`` literals are
byte strings.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal, DivisionByZero, InvalidOperation
from typing import Any, cast

from sqlglot import exp

from cdc_core.codec.rowcodec import MySQLTime
from cdc_core.schema.column_type import STORED_DATES
from cdc_core.schema.model import Column
from cdc_core.upstream.sql import tidb_functions
from cdc_core.upstream.sql.errors import SqlError

Row = Mapping[str, Any]  # lower-case column name -> typed value
Evaluator = Callable[[Row | None], Any]  # a compiled expression: its value on a row
Compiler = Callable[[exp.Expression], Evaluator]

_DT_PARSER = Column(0, "literal", "datetime", fsp=6)
_INTEGER = re.compile(r"[+-]?\d+")
_TIME_PARSER = Column(0, "literal", "time", fsp=6)


def literal_value(node: exp.Expression) -> Any:
    """The Python value of a constant expression (no column references)."""
    return evaluate(node, None)


def evaluate(node: exp.Expression, row: Row | None) -> Any:
    """``node``'s value on ``row`` (None: no row, a constant is expected). To evaluate one expression on many rows,
    compile it once with :func:`compile_expr`."""
    t = type(node)
    if t is exp.Literal:  # most one-off evaluations (a point read's 1,000 keys, INSERT's values): no closure built
        return _literal_value(cast(exp.Literal, node))
    if t is exp.Null:
        return None
    if t is exp.Neg and type(node.this) is exp.Literal:
        return _negated(_to_number(_literal_value(cast(exp.Literal, node.this))))
    return compile_expr(node)(row)


def compile_expr(node: exp.Expression) -> Evaluator:
    """``node`` as a function of a row: its tree is walked once, here, into closures over its children's, so that
    evaluating it on each of a scan's rows does no dispatch on node types and no argument lookups in the tree; a
    literal's value and an IN list of constants are computed here once (TiDB builds an expression once per statement
    and evaluates it per row or per chunk, ``pkg/expression``). A construct outside the supported set is an
    ``SqlError`` here, before any row."""
    make = _COMPILERS.get(type(node))
    if make is None:
        raise SqlError(f"unsupported expression {node.sql(dialect='mysql')!r}")
    return make(node)  # type: ignore[no-any-return]


def truthy(v: Any) -> bool:
    """WHERE semantics: NULL and false/zero filter the row out."""
    if v is None:
        return False
    if isinstance(v, str):
        try:
            return Decimal(v) != 0
        except InvalidOperation:
            return False
    return bool(v)


def column_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Column):
        return str(node.name)
    if isinstance(node, exp.Identifier):
        return str(node.this)
    raise SqlError(f"expected a column name, got {node.sql(dialect='mysql')!r}")


# --- node compilers: each returns the node's evaluator -----------------------------------------------
def _const(value: Any) -> Evaluator:
    return lambda row: value


def _literal_value(node: exp.Literal) -> Any:
    text = str(node.this)
    if node.is_string:
        return text
    if text.isascii() and text.isdigit():  # most literals (a point read's 1,000 keys): no pattern to match
        return int(text)
    try:
        if _INTEGER.fullmatch(text):
            return int(text)
        return Decimal(text)
    except InvalidOperation as exc:
        raise SqlError(f"bad number literal {text!r}") from exc


def _constant(node: exp.Expression, make: Callable[[], Any]) -> Evaluator:
    """A constant node's evaluator: its value, computed now; an error it raises is raised by each evaluation
    instead (as evaluating it would), not here."""
    try:
        return _const(make())
    except SqlError as exc:
        err = exc

        def fail(row: Row | None) -> Any:
            raise err

        return fail


def _literal(node: exp.Expression) -> Evaluator:
    assert isinstance(node, exp.Literal)
    return _constant(node, lambda: _literal_value(node))


def _hex_string(node: exp.Expression) -> Evaluator:
    text = str(node.this)

    def value() -> bytes:
        try:
            return bytes.fromhex(text if len(text) % 2 == 0 else "0" + text)
        except ValueError as exc:
            raise SqlError(f"bad hexadecimal literal {text!r}") from exc

    return _constant(node, value)


def _bit_string(node: exp.Expression) -> Evaluator:
    text = str(node.this)

    def value() -> bytes:
        if not re.fullmatch(r"[01]*", text):
            raise SqlError(f"bad bit-value literal b'{text}'")
        return int(text or "0", 2).to_bytes(max(1, (len(text) + 7) // 8), "big")

    return _constant(node, value)


_MISSING = object()


def _column(node: exp.Expression) -> Evaluator:
    name = column_name(node).lower()
    table = str(node.table).lower() if isinstance(node, exp.Column) and node.table else ""
    if table:
        # A join's rows hold each column as ``alias.name`` (and the unambiguous ones bare as well); one table's rows
        # hold bare names only (the qualifier was checked against the table when the statement was planned).
        qualified = f"{table}.{name}"

        def qualified_run(row: Row | None) -> Any:
            if row is None:
                raise SqlError(f"column {qualified!r} is not allowed here (a constant is expected)")
            v = row.get(qualified, _MISSING)
            if v is _MISSING:
                try:
                    return row[name]
                except KeyError:
                    raise SqlError(f"Unknown column '{qualified}' in 'field list'") from None
            return v

        return qualified_run

    def run(row: Row | None) -> Any:
        if row is None:
            raise SqlError(f"column {name!r} is not allowed here (a constant is expected)")
        try:
            return row[name]
        except KeyError:
            raise SqlError(f"unknown column {name!r}") from None

    return run


def _to_number(v: Any) -> int | Decimal:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int | Decimal):
        return v
    if isinstance(v, float):
        return Decimal(str(v))
    if isinstance(v, bytes):  # a binary string in a numeric context: its big-endian value, as MySQL reads 0x...
        return int.from_bytes(v, "big")
    if isinstance(v, str):
        try:
            d = Decimal(v.strip())
        except InvalidOperation as exc:
            raise SqlError(f"{v!r} is not a number") from exc
        return int(d) if d == d.to_integral_value() and "." not in v and "e" not in v.lower() else d
    raise SqlError(f"{v!r} is not a number")


to_number = _to_number  # a value in a numeric context (SUM, AVG): int or Decimal


def _time_fields(v: date | MySQLTime) -> tuple[int, ...]:
    """A time's fields in order, what TiDB compares times by (their packed value): a zero date sorts first."""
    if isinstance(v, datetime | MySQLTime):
        return v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond
    return v.year, v.month, v.day, 0, 0, 0, 0


def _comparable(a: Any, b: Any) -> tuple[Any, Any]:
    if isinstance(a, MySQLTime) or isinstance(b, MySQLTime):  # a zero or invalid date, as TiDB stores it
        try:
            x, y = (_DT_PARSER.convert(v, STORED_DATES) for v in (a, b))
        except ValueError as exc:
            raise SqlError(f"cannot compare {a!r} with {b!r}: {exc}") from exc
        return _time_fields(x), _time_fields(y)
    for parser, typ in ((_DT_PARSER, date), (_TIME_PARSER, timedelta)):
        if isinstance(a, typ) or isinstance(b, typ):
            try:
                return parser.convert(a), parser.convert(b)
            except ValueError as exc:
                raise SqlError(f"cannot compare {a!r} with {b!r}: {exc}") from exc
    if isinstance(a, bytes) and isinstance(b, str | bytes):
        return a, b.encode() if isinstance(b, str) else b
    if isinstance(b, bytes) and isinstance(a, str):
        return a.encode(), b
    if isinstance(a, str) and isinstance(b, str):
        return a, b
    return _to_number(a), _to_number(b)


def compare(a: Any, b: Any) -> int | None:
    """-1/0/1, or None when either side is NULL; row constructors ``(a, b)`` compare element by element, the first
    pair that differs deciding (MySQL's row comparison)."""
    if a is None or b is None:
        return None
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple)) or len(a) != len(b):
            raise SqlError(f"Operand should contain {len(a) if isinstance(a, tuple) else 1} column(s)")
        for x, y in zip(a, b, strict=True):
            c = compare(x, y)
            if c != 0:
                return c
        return 0
    t = type(a)
    if t is type(b) and (t is int or t is str):  # MIN / MAX over a scan: no conversion to look for
        return (a > b) - (a < b)  # type: ignore[no-any-return]
    x, y = _comparable(a, b)
    return (x > y) - (x < y)


def _cmp(pred: Callable[[int], bool]) -> Compiler:
    def make(node: exp.Expression) -> Evaluator:
        a, b = compile_expr(node.this), compile_expr(node.expression)

        def run(row: Row | None) -> Any:
            c = compare(a(row), b(row))
            return None if c is None else pred(c)

        return run

    return make


def _and(node: exp.Expression) -> Evaluator:
    left, right = compile_expr(node.this), compile_expr(node.expression)

    def run(row: Row | None) -> Any:
        a = left(row)
        if a is not None and not truthy(a):
            return False
        b = right(row)
        if b is not None and not truthy(b):
            return False
        return None if a is None or b is None else True

    return run


def _or(node: exp.Expression) -> Evaluator:
    left, right = compile_expr(node.this), compile_expr(node.expression)

    def run(row: Row | None) -> Any:
        a = left(row)
        if a is not None and truthy(a):
            return True
        b = right(row)
        if b is not None and truthy(b):
            return True
        return None if a is None or b is None else False

    return run


def _null_safe_eq(node: exp.Expression) -> Evaluator:
    left, right = compile_expr(node.this), compile_expr(node.expression)

    def run(row: Row | None) -> Any:
        a, b = left(row), right(row)
        if a is None or b is None:
            return a is None and b is None
        return compare(a, b) == 0

    return run


def _not(node: exp.Expression) -> Evaluator:
    inner = compile_expr(node.this)

    def run(row: Row | None) -> Any:
        v = inner(row)
        return None if v is None else not truthy(v)

    return run


def _is(node: exp.Expression) -> Evaluator:
    inner = compile_expr(node.this)
    target = node.expression
    if isinstance(target, exp.Null):
        return lambda row: inner(row) is None
    if isinstance(target, exp.Boolean):
        want = bool(target.this)

        def run(row: Row | None) -> Any:
            v = inner(row)
            return v is not None and truthy(v) == want

        return run
    raise SqlError(f"unsupported IS operand {target.sql(dialect='mysql')!r}")


def _in(node: exp.Expression) -> Evaluator:
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        raise SqlError(f"unsupported IN form {node.sql(dialect='mysql')!r} (only a list of values)")
    value = compile_expr(node.this)
    items = [compile_expr(item) for item in node.expressions]
    consts = _in_constants(items)

    def run(row: Row | None) -> Any:
        v = value(row)
        if v is None:
            return None
        if consts is not None and _kinds(v) == consts[0]:
            # A list of constants of the value's kind: a hash lookup, exact for integers and (binary-collated)
            # strings alike, instead of comparing with each item (a WHERE id IN (1000 values) over its 1000 rows).
            return True if v in consts[1] else (None if consts[2] else False)
        saw_null = False
        for item in items:
            c = compare(v, item(row))
            if c is None:
                saw_null = True
            elif c == 0:
                return True
        return None if saw_null else False

    return run


def _kinds(v: Any) -> tuple[type, ...] | None:
    """``(int,)``, ``(str,)`` or a row constructor's per-element kinds; None for any other value."""
    if isinstance(v, tuple):
        kinds = tuple(_kinds(x) for x in v)
        return None if any(k is None or len(k) != 1 for k in kinds) else tuple(k[0] for k in kinds)  # type: ignore[index]
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return (int,)
    if isinstance(v, str):
        return (str,)
    return None


def _in_constants(items: list[Evaluator]) -> tuple[tuple[type, ...], frozenset[Any], bool] | None:
    """The IN list's values when they are constants of one kind (and whether one is NULL), evaluated once, when
    the statement is compiled; None when they are not."""
    try:
        values = [item(None) for item in items]
    except (SqlError, ValueError, ArithmeticError):  # a column in the list, or an item that fails: left to each row
        return None
    present = [x for x in values if x is not None]
    kinds = {_kinds(x) for x in present}
    if len(kinds) != 1 or None in kinds:
        return None
    (kind,) = kinds
    assert kind is not None
    return kind, frozenset(present), len(present) < len(values)


def _tuple(node: exp.Expression) -> Evaluator:
    parts = [compile_expr(e) for e in node.expressions]
    return lambda row: tuple(p(row) for p in parts)


def _between(node: exp.Expression) -> Evaluator:
    value, low, high = compile_expr(node.this), compile_expr(node.args["low"]), compile_expr(node.args["high"])

    def run(row: Row | None) -> Any:
        v = value(row)
        lo = compare(v, low(row))
        hi = compare(v, high(row))
        if (lo is not None and lo < 0) or (hi is not None and hi > 0):
            return False
        return None if lo is None or hi is None else True

    return run


def _like(node: exp.Expression) -> Evaluator:
    value, pattern = compile_expr(node.this), compile_expr(node.expression)

    def run(row: Row | None) -> Any:
        v = value(row)
        pat = pattern(row)
        if v is None or pat is None:
            return None
        rx = "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in str(pat))
        return re.fullmatch(rx, str(v), flags=re.DOTALL) is not None

    return run


def _arith(op: str) -> Compiler:
    def make(node: exp.Expression) -> Evaluator:
        left, right = compile_expr(node.this), compile_expr(node.expression)

        def run(row: Row | None) -> Any:
            a, b = left(row), right(row)
            if a is None or b is None:
                return None
            x, y = _to_number(a), _to_number(b)
            try:
                if op == "+":
                    return x + y
                if op == "-":
                    return x - y
                if op == "*":
                    return x * y
                if y == 0:
                    return None  # MySQL: division by zero is NULL
                if op == "/":
                    return Decimal(x) / Decimal(y)
                if op == "%":
                    return x % y
                return int(Decimal(x) // Decimal(y))  # DIV
            except (InvalidOperation, DivisionByZero) as exc:
                raise SqlError(f"arithmetic error in {node.sql(dialect='mysql')!r}: {exc}") from exc

        return run

    return make


def _neg(node: exp.Expression) -> Evaluator:
    inner = compile_expr(node.this)

    def run(row: Row | None) -> Any:
        v = inner(row)
        return None if v is None else _negated(_to_number(v))

    return run


def _negated(n: int | Decimal) -> int | Decimal:
    # Decimal's unary minus rounds to the context's 28 digits; a DECIMAL(65) literal keeps all of them
    return n.copy_negate() if isinstance(n, Decimal) else -n


def _paren(node: exp.Expression) -> Evaluator:
    return compile_expr(node.this)


def _null(node: exp.Expression) -> Evaluator:
    return _const(None)


def _boolean(node: exp.Expression) -> Evaluator:
    return _const(1 if node.this else 0)


# --- string functions (the checksum query's) -----------------------------------------------------
def text_of(v: Any) -> str | None:
    """MySQL's text form of a value where a string is wanted (CONCAT, CRC32): integers and DECIMAL digits as
    written (a DECIMAL keeps its scale), booleans 1/0, DATETIME ``YYYY-MM-DD HH:MM:SS[.ffffff]``, DATE ISO, byte
    strings as their bytes (kept through ``surrogateescape``)."""
    t = type(v)
    if t is str:  # the common kinds first, by exact type (a checksum takes the text of every value of every row)
        return v  # type: ignore[no-any-return]
    if t is int:
        return str(v)
    if v is None:
        return None
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Decimal):
        return format(v.copy_abs() if v.is_zero() else v, "f")  # no -0.00
    if isinstance(v, bytes | bytearray):
        return bytes(v).decode("utf-8", "surrogateescape")
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f" if v.microsecond else "%Y-%m-%d %H:%M:%S")
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _bytes_of(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _concat(node: exp.Expression) -> Evaluator:
    parts = [compile_expr(e) for e in node.expressions]

    def run(row: Row | None) -> Any:
        texts = [text_of(p(row)) for p in parts]
        return None if None in texts else "".join(texts)  # type: ignore[arg-type]

    return run


def _concat_ws(node: exp.Expression) -> Evaluator:
    sep, *rest = [compile_expr(e) for e in node.expressions]

    def run(row: Row | None) -> Any:
        s = text_of(sep(row))
        if s is None:
            return None
        texts = [text_of(p(row)) for p in rest]
        return s.join(t for t in texts if t is not None)  # MySQL skips NULL arguments after the separator

    return run


def _hex(node: exp.Expression) -> Evaluator:
    inner = compile_expr(node.this)

    def run(row: Row | None) -> Any:
        v = inner(row)
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            return format(v & 0xFFFFFFFFFFFFFFFF, "X")  # a number: its 64-bit value in hex
        text = text_of(v)
        assert text is not None
        return _bytes_of(text).hex().upper()

    return run


def _date_format(node: exp.Expression) -> Evaluator:
    inner = node.this
    if isinstance(inner, exp.TsOrDsToTimestamp):  # sqlglot's wrapper of DATE_FORMAT's first argument
        inner = inner.this
    value, form = compile_expr(inner), compile_expr(node.args["format"])

    def run(row: Row | None) -> Any:
        v = value(row)
        fmt = form(row)
        if v is None or fmt is None:
            return None
        if not isinstance(v, date | MySQLTime):
            v = _DT_PARSER.convert(v, STORED_DATES)
        if isinstance(v, MySQLTime):  # a date Python has none of (builtinDateFormatSig: InvalidZero is NULL)
            return None if v.month == 0 or v.day == 0 else _format_fields(v, str(fmt))
        # sqlglot rewrote MySQL's specifiers into strftime's (%i -> %M, %s -> %S, %T -> %H:%M:%S); %f: microseconds
        return v.strftime(str(fmt))

    return run


_FIELD_FORMATS = {"Y": "{0.year:04d}", "m": "{0.month:02d}", "d": "{0.day:02d}", "H": "{0.hour:02d}",
                  "M": "{0.minute:02d}", "S": "{0.second:02d}", "f": "{0.microsecond:06d}", "%": "%"}


def _format_fields(v: MySQLTime, fmt: str) -> str:
    """strftime's numeric specifiers of a ``MySQLTime`` (year 0, an invalid day), as TiDB's ``DateFormat`` prints
    them; another specifier is an error naming it."""
    def one(m: re.Match[str]) -> str:
        spec = _FIELD_FORMATS.get(m.group(1))
        if spec is None:
            raise SqlError(f"unsupported DATE_FORMAT specifier %{m.group(1)} for {v}")
        return spec.format(v)

    return re.sub(r"%(.)", one, fmt)


def _anonymous(node: exp.Expression) -> Evaluator:
    name = str(node.this).upper()
    args = node.expressions
    if name == "CRC32" and len(args) == 1:
        inner = compile_expr(args[0])

        def crc32(row: Row | None) -> Any:
            text = text_of(inner(row))
            return None if text is None else zlib.crc32(_bytes_of(text))

        return crc32
    if name == "ISNULL" and len(args) == 1:
        arg = compile_expr(args[0])
        return lambda row: 1 if arg(row) is None else 0
    tidb = tidb_functions.compile_call(name, [compile_expr(a) for a in args])
    if tidb is not None:
        return tidb
    raise tidb_functions.unknown_function(str(node.this))


_INT_TYPES = (exp.DataType.Type.UBIGINT, exp.DataType.Type.BIGINT, exp.DataType.Type.INT)
_TEXT_TYPES = (exp.DataType.Type.CHAR, exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT)


def _cast(node: exp.Expression) -> Evaluator:
    assert isinstance(node, exp.Cast)
    inner = compile_expr(node.this)
    to = node.to.this
    if to in _INT_TYPES:
        unsigned = to == exp.DataType.Type.UBIGINT

        def integer(row: Row | None) -> Any:
            v = inner(row)
            if v is None:
                return None
            if type(v) is int:  # a CRC32, an integer column: most casts of a checksum
                n = v
            elif isinstance(v, bytes | bytearray):  # a BIT value: its bytes big-endian
                n = int.from_bytes(v, "big")
            else:
                n = int(_to_number(v))
            return n & 0xFFFFFFFFFFFFFFFF if unsigned else n

        return integer
    if to in _TEXT_TYPES:
        return lambda row: text_of(inner(row))
    unsupported = SqlError(f"unsupported CAST {node.sql(dialect='mysql')!r}")

    def other(row: Row | None) -> Any:  # NULL cast to anything is NULL; any other value is an error
        if inner(row) is None:
            return None
        raise unsupported

    return other


_COMPILERS: dict[type[exp.Expression], Compiler] = {
    exp.Concat: _concat,
    exp.ConcatWs: _concat_ws,
    exp.Hex: _hex,
    exp.TimeToStr: _date_format,
    exp.Anonymous: _anonymous,
    exp.Cast: _cast,
    exp.Literal: _literal,
    exp.HexString: _hex_string,
    exp.BitString: _bit_string,
    exp.Column: _column,
    exp.Null: _null,
    exp.Boolean: _boolean,
    exp.Paren: _paren,
    exp.Tuple: _tuple,
    exp.Neg: _neg,
    exp.Not: _not,
    exp.And: _and,
    exp.Or: _or,
    exp.EQ: _cmp(lambda c: c == 0),
    exp.NEQ: _cmp(lambda c: c != 0),
    exp.LT: _cmp(lambda c: c < 0),
    exp.LTE: _cmp(lambda c: c <= 0),
    exp.GT: _cmp(lambda c: c > 0),
    exp.GTE: _cmp(lambda c: c >= 0),
    exp.NullSafeEQ: _null_safe_eq,
    exp.Is: _is,
    exp.In: _in,
    exp.Between: _between,
    exp.Like: _like,
    exp.Add: _arith("+"),
    exp.Sub: _arith("-"),
    exp.Mul: _arith("*"),
    exp.Div: _arith("/"),
    exp.Mod: _arith("%"),
    exp.IntDiv: _arith("div"),
}
