"""Evaluation of SQL expressions (sqlglot ASTs) against one row: WHERE, SET, SELECT lists.

Only a closed set of node types is evaluated (literals, columns, comparisons, AND/OR/NOT with
SQL's three-valued logic, IN, IS [NOT] NULL, BETWEEN, LIKE, arithmetic, and the functions of a
checksum query as sync_diff_inspector writes it: ``CRC32``, ``CONCAT``, ``CONCAT_WS``, ``ISNULL``,
``HEX``, ``DATE_FORMAT``, ``CAST(... AS UNSIGNED | SIGNED | CHAR)``); anything else is an ``SqlError``
naming the construct. Nothing is ever handed to Python's ``eval``. A value turned into a string
takes MySQL's text form (:func:`text_of`).

Comparisons follow MySQL loosely: numbers compare numerically (a numeric string compares as a
number), a DATE/DATETIME/TIMESTAMP or TIME compares with a string by parsing it, strings compare
binary (TiDB's default ``utf8mb4_bin`` collation), a byte string with text by the text's UTF-8
bytes, and anything compared with NULL is NULL. ``0x..``/``x'..'`` and ``b'..'`` literals are
byte strings.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal, DivisionByZero, InvalidOperation
from typing import Any

from sqlglot import exp

from cdc_core.schema.model import Column
from cdc_core.upstream.errors import SqlError

Row = Mapping[str, Any]  # lower-case column name -> typed value

_DT_PARSER = Column(0, "literal", "datetime", fsp=6)
_INTEGER = re.compile(r"[+-]?\d+")
_TIME_PARSER = Column(0, "literal", "time", fsp=6)


def literal_value(node: exp.Expression) -> Any:
    """The Python value of a constant expression (no column references)."""
    return evaluate(node, None)


def evaluate(node: exp.Expression, row: Row | None) -> Any:
    fn = _DISPATCH.get(type(node))
    if fn is None:
        raise SqlError(f"unsupported expression {node.sql(dialect='mysql')!r} ({type(node).__name__})")
    return fn(node, row)


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


# --- node evaluators --------------------------------------------------------------------------
def _literal(node: exp.Expression, row: Row | None) -> Any:
    assert isinstance(node, exp.Literal)
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


def _hex_string(node: exp.Expression, row: Row | None) -> Any:
    text = str(node.this)
    try:
        return bytes.fromhex(text if len(text) % 2 == 0 else "0" + text)
    except ValueError as exc:
        raise SqlError(f"bad hexadecimal literal {text!r}") from exc


def _bit_string(node: exp.Expression, row: Row | None) -> Any:
    text = str(node.this)
    if not re.fullmatch(r"[01]*", text):
        raise SqlError(f"bad bit-value literal b'{text}'")
    return int(text or "0", 2).to_bytes(max(1, (len(text) + 7) // 8), "big")


def _column(node: exp.Expression, row: Row | None) -> Any:
    name = column_name(node).lower()
    if row is None:
        raise SqlError(f"column {name!r} is not allowed here (a constant is expected)")
    if name not in row:
        raise SqlError(f"unknown column {name!r}")
    return row[name]


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


def _comparable(a: Any, b: Any) -> tuple[Any, Any]:
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
    x, y = _comparable(a, b)
    return (x > y) - (x < y)


def _cmp(pred: Any) -> Any:
    def run(node: exp.Expression, row: Row | None) -> Any:
        c = compare(evaluate(node.this, row), evaluate(node.expression, row))
        return None if c is None else pred(c)

    return run


def _and(node: exp.Expression, row: Row | None) -> Any:
    a = evaluate(node.this, row)
    if a is not None and not truthy(a):
        return False
    b = evaluate(node.expression, row)
    if b is not None and not truthy(b):
        return False
    return None if a is None or b is None else True


def _or(node: exp.Expression, row: Row | None) -> Any:
    a = evaluate(node.this, row)
    if a is not None and truthy(a):
        return True
    b = evaluate(node.expression, row)
    if b is not None and truthy(b):
        return True
    return None if a is None or b is None else False


def _null_safe_eq(node: exp.Expression, row: Row | None) -> Any:
    a, b = evaluate(node.this, row), evaluate(node.expression, row)
    if a is None or b is None:
        return a is None and b is None
    return compare(a, b) == 0


def _not(node: exp.Expression, row: Row | None) -> Any:
    v = evaluate(node.this, row)
    return None if v is None else not truthy(v)


def _is(node: exp.Expression, row: Row | None) -> Any:
    v = evaluate(node.this, row)
    target = node.expression
    if isinstance(target, exp.Null):
        return v is None
    if isinstance(target, exp.Boolean):
        return v is not None and truthy(v) == bool(target.this)
    raise SqlError(f"unsupported IS operand {target.sql(dialect='mysql')!r}")


def _in(node: exp.Expression, row: Row | None) -> Any:
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        raise SqlError(f"unsupported IN form {node.sql(dialect='mysql')!r} (only a list of values)")
    v = evaluate(node.this, row)
    if v is None:
        return None
    consts = _in_constants(node)
    if consts is not None and _kinds(v) == consts[0]:
        # A list of constants of the value's kind: a hash lookup, exact for integers and (binary-collated) strings
        # alike, instead of comparing with each item (a WHERE id IN (1000 values) over the 1000 rows it selects).
        return True if v in consts[1] else (None if consts[2] else False)
    saw_null = False
    for item in node.expressions:
        c = compare(v, evaluate(item, row))
        if c is None:
            saw_null = True
        elif c == 0:
            return True
    return None if saw_null else False


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


def _in_constants(node: exp.Expression) -> tuple[tuple[type, ...], frozenset[Any], bool] | None:
    """The IN list's values when they are constants of one kind (and whether one is NULL), evaluated once per
    statement (kept in the node's ``meta``); None when they are not."""
    meta = node.meta
    if "in_constants" not in meta:
        found: tuple[tuple[type, ...], frozenset[Any], bool] | None = None
        try:
            values = [evaluate(item, None) for item in node.expressions]
        except SqlError:  # a column in the list
            values = None
        if values is not None:
            present = [x for x in values if x is not None]
            kinds = {_kinds(x) for x in present}
            if len(kinds) == 1 and None not in kinds:
                (kind,) = kinds
                assert kind is not None
                found = (kind, frozenset(present), len(present) < len(values))
        meta["in_constants"] = found
    return meta["in_constants"]  # type: ignore[no-any-return]


def _tuple(node: exp.Expression, row: Row | None) -> Any:
    return tuple(evaluate(e, row) for e in node.expressions)


def _between(node: exp.Expression, row: Row | None) -> Any:
    v = evaluate(node.this, row)
    lo = compare(v, evaluate(node.args["low"], row))
    hi = compare(v, evaluate(node.args["high"], row))
    if (lo is not None and lo < 0) or (hi is not None and hi > 0):
        return False
    return None if lo is None or hi is None else True


def _like(node: exp.Expression, row: Row | None) -> Any:
    v = evaluate(node.this, row)
    pat = evaluate(node.expression, row)
    if v is None or pat is None:
        return None
    rx = "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in str(pat))
    return re.fullmatch(rx, str(v), flags=re.DOTALL) is not None


def _arith(op: str) -> Any:
    def run(node: exp.Expression, row: Row | None) -> Any:
        a, b = evaluate(node.this, row), evaluate(node.expression, row)
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


def _neg(node: exp.Expression, row: Row | None) -> Any:
    v = evaluate(node.this, row)
    return None if v is None else -_to_number(v)


def _paren(node: exp.Expression, row: Row | None) -> Any:
    return evaluate(node.this, row)


def _null(node: exp.Expression, row: Row | None) -> Any:
    return None


def _boolean(node: exp.Expression, row: Row | None) -> Any:
    return 1 if node.this else 0


# --- string functions (the checksum query's) -----------------------------------------------------
def text_of(v: Any) -> str | None:
    """MySQL's text form of a value where a string is wanted (CONCAT, CRC32): integers and DECIMAL digits as
    written (a DECIMAL keeps its scale), booleans 1/0, DATETIME ``YYYY-MM-DD HH:MM:SS[.ffffff]``, DATE ISO, byte
    strings as their bytes (kept through ``surrogateescape``)."""
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


def _concat(node: exp.Expression, row: Row | None) -> Any:
    parts = [text_of(evaluate(e, row)) for e in node.expressions]
    return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)


def _concat_ws(node: exp.Expression, row: Row | None) -> Any:
    sep, *rest = [text_of(evaluate(e, row)) for e in node.expressions]
    if sep is None:
        return None
    return sep.join(p for p in rest if p is not None)  # MySQL skips NULL arguments after the separator


def _hex(node: exp.Expression, row: Row | None) -> Any:
    v = evaluate(node.this, row)
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return format(v & 0xFFFFFFFFFFFFFFFF, "X")  # a number: its 64-bit value in hex
    text = text_of(v)
    assert text is not None
    return _bytes_of(text).hex().upper()


def _date_format(node: exp.Expression, row: Row | None) -> Any:
    inner = node.this
    if isinstance(inner, exp.TsOrDsToTimestamp):  # sqlglot's wrapper of DATE_FORMAT's first argument
        inner = inner.this
    v = evaluate(inner, row)
    fmt = evaluate(node.args["format"], row)
    if v is None or fmt is None:
        return None
    if not isinstance(v, date):
        v = _DT_PARSER.convert(v)
    # sqlglot rewrote MySQL's specifiers into strftime's (%i -> %M, %s -> %S, %T -> %H:%M:%S); %f is microseconds
    return v.strftime(str(fmt))


def _anonymous(node: exp.Expression, row: Row | None) -> Any:
    name = str(node.this).upper()
    args = node.expressions
    if name == "CRC32" and len(args) == 1:
        text = text_of(evaluate(args[0], row))
        return None if text is None else zlib.crc32(_bytes_of(text))
    if name == "ISNULL" and len(args) == 1:
        return 1 if evaluate(args[0], row) is None else 0
    raise SqlError(f"unsupported function {node.sql(dialect='mysql')!r}")


def _cast(node: exp.Expression, row: Row | None) -> Any:
    assert isinstance(node, exp.Cast)
    v = evaluate(node.this, row)
    to = node.to.this
    if v is None:
        return None
    if to in (exp.DataType.Type.UBIGINT, exp.DataType.Type.BIGINT, exp.DataType.Type.INT):
        if isinstance(v, bytes | bytearray):  # a BIT value: its bytes big-endian
            n = int.from_bytes(v, "big")
        else:
            n = int(_to_number(v))
        return n & 0xFFFFFFFFFFFFFFFF if to == exp.DataType.Type.UBIGINT else n
    if to in (exp.DataType.Type.CHAR, exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT):
        return text_of(v)
    raise SqlError(f"unsupported CAST {node.sql(dialect='mysql')!r}")


_DISPATCH: dict[type[exp.Expression], Any] = {
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
