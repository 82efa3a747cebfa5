"""MySQL column types as TiDB supports them: names, TiDB ``FieldType``s, and the Python values of a column.

``Column.type`` is one of :data:`TYPES` (lower case, as written in SQL). This module owns what a type means for
the rest of cdcflow: its TiDB ``FieldType`` (``pkg/parser/mysql/type.go`` codes, with TiDB's default lengths from
``pkg/types/field_type.go`` ``DefaultLengthOfMysqlTypes``), how it prints in SQL, how a SQL literal, a JSON form
or a decoded value becomes the column's Python value (:func:`convert`, with TiDB's ``table.CastValue`` checks under
a session's ``sql_mode``: :class:`DateRules`), the values the row codec stores (:func:`to_stored` /
:func:`from_stored`), and the values the lake holds (:func:`arrow_value`, the mapping below).

Python values (what ``convert`` returns, what the SQL front evaluates):

==========================================  ===============================================================
TINYINT .. BIGINT [UNSIGNED], YEAR           ``int`` (range-checked; a fraction rounds half away from zero)
FLOAT, DOUBLE                                ``float`` (FLOAT rounded to float32)
DECIMAL(p,s)                                 ``Decimal`` quantized to ``s`` (half away from zero)
DATE                                         ``datetime.date``; ``rowcodec.MySQLTime`` for a date Python has none
                                             of (``0000-00-00``, a zero month or day, year 0, Feb 30)
DATETIME(fsp), TIMESTAMP(fsp)                naive ``datetime`` rounded to fsp (TIMESTAMP in UTC); ``MySQLTime``
                                             likewise
TIME(fsp)                                    ``datetime.timedelta`` within +-838:59:59
CHAR, VARCHAR, *TEXT                         ``str`` (CHAR without trailing spaces, as TiDB stores it)
BINARY, VARBINARY, *BLOB                     ``bytes`` (BINARY(n) zero-padded to n)
ENUM, SET                                    ``str``: the member(s) as defined, SET members in definition order
BIT(n)                                       ``bytes``: big-endian, ``(n + 7) // 8`` of them
JSON                                         ``str``: the document as TiDB prints it (keys sorted, ``", "``)
VECTOR, VECTOR(D)                            ``cdc_core.codec.vector.VectorFloat32`` (D elements when given)
==========================================  ===============================================================

The JSON form of a value (``cdc_core.codec.value_text.json_value``, for JSON rows and table-info defaults) is the
value itself where JSON has one, DECIMAL/date/time/vectors as text, and bytes as ``{"$binary": <base64>}``.

What the lake holds of a value (:func:`arrow_value`; the Arrow type is ``rowcodec_batch.arrow_type``'s) is the value,
but for three mappings that keep every value Delta can hold: a DECIMAL wider than Arrow's 38 digits is its text with
exactly the column's scale (as TiDB prints it), a VECTOR its elements (a list of float32), and a date Delta's
DATE/TIMESTAMP cannot hold (a ``MySQLTime``: :func:`maps_to_null`) is NULL -- counted where a window or a snapshot
maps one (``spark_jobs.normalize.mapped_values``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Protocol

from cdc_core.codec import mysql_type as mt
from cdc_core.codec import rowcodec
from cdc_core.codec import vector as vec
from cdc_core.codec.value_text import WIDE_DECIMAL, decimal_text, format_datetime, format_duration, format_mysql_time


class Column(Protocol):
    """What this module reads of a column's definition: ``cdc_core.schema.model.Column`` is one (a protocol, so that
    the model, which builds on this module, is not imported back)."""

    @property
    def type(self) -> str: ...
    @property
    def nullable(self) -> bool: ...
    @property
    def length(self) -> int | None: ...
    @property
    def precision(self) -> int | None: ...
    @property
    def scale(self) -> int | None: ...
    @property
    def unsigned(self) -> bool: ...
    @property
    def fsp(self) -> int | None: ...
    @property
    def elems(self) -> tuple[str, ...]: ...
    @property
    def collate(self) -> str: ...


class ColumnValueError(ValueError):
    """A value the column cannot hold (``SchemaError`` wraps it with the column's name)."""


@dataclass(frozen=True)
class TypeFacts:
    """What cdcflow needs of one SQL type: TiDB's type code, the kind of Python value, the default length."""

    tp: int
    kind: str
    flen: int = mt.UnspecifiedLength
    binary: bool = False
    max_bytes: int = 0  # TEXT/BLOB types: the most bytes a value may have


INT, FLOAT, DECIMAL, DATE, DATETIME, TIMESTAMP, TIME, YEAR = (
    "int", "float", "decimal", "date", "datetime", "timestamp", "time", "year")
TEXT, BINARY, ENUM, SET, BIT, JSON, VECTOR = "text", "binary", "enum", "set", "bit", "json", "vector"

TYPES: dict[str, TypeFacts] = {
    "tinyint": TypeFacts(mt.TypeTiny, INT, 4),
    "smallint": TypeFacts(mt.TypeShort, INT, 6),
    "mediumint": TypeFacts(mt.TypeInt24, INT, 9),
    "int": TypeFacts(mt.TypeLong, INT, 11),
    "bigint": TypeFacts(mt.TypeLonglong, INT, 20),
    "float": TypeFacts(mt.TypeFloat, FLOAT, 12),
    "double": TypeFacts(mt.TypeDouble, FLOAT, 22),
    "decimal": TypeFacts(mt.TypeNewDecimal, DECIMAL),
    "date": TypeFacts(mt.TypeDate, DATE, 10),
    "datetime": TypeFacts(mt.TypeDatetime, DATETIME, 19),
    "timestamp": TypeFacts(mt.TypeTimestamp, TIMESTAMP, 19),
    "time": TypeFacts(mt.TypeDuration, TIME, 10),
    "year": TypeFacts(mt.TypeYear, YEAR, 4),
    "char": TypeFacts(mt.TypeString, TEXT, 1),
    "varchar": TypeFacts(mt.TypeVarchar, TEXT),
    "binary": TypeFacts(mt.TypeString, BINARY, 1, binary=True),
    "varbinary": TypeFacts(mt.TypeVarchar, BINARY, binary=True),
    "tinytext": TypeFacts(mt.TypeTinyBlob, TEXT, 255, max_bytes=255),
    "text": TypeFacts(mt.TypeBlob, TEXT, 65535, max_bytes=65535),
    "mediumtext": TypeFacts(mt.TypeMediumBlob, TEXT, 16777215, max_bytes=16777215),
    "longtext": TypeFacts(mt.TypeLongBlob, TEXT, 4294967295, max_bytes=4294967295),
    "tinyblob": TypeFacts(mt.TypeTinyBlob, BINARY, 255, binary=True, max_bytes=255),
    "blob": TypeFacts(mt.TypeBlob, BINARY, 65535, binary=True, max_bytes=65535),
    "mediumblob": TypeFacts(mt.TypeMediumBlob, BINARY, 16777215, binary=True, max_bytes=16777215),
    "longblob": TypeFacts(mt.TypeLongBlob, BINARY, 4294967295, binary=True, max_bytes=4294967295),
    "enum": TypeFacts(mt.TypeEnum, ENUM),
    "set": TypeFacts(mt.TypeSet, SET),
    "bit": TypeFacts(mt.TypeBit, BIT, 1),
    "json": TypeFacts(mt.TypeJSON, JSON, binary=True),
    # TiDB v8.4+ (parser: VECTOR [<FLOAT>] [(D)], flen D or unspecified, charset binary); TiDB spells it vector
    "vector": TypeFacts(mt.TypeTiDBVectorFloat32, VECTOR, binary=True),
}
INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}
_LENGTH_TYPES = frozenset({"char", "varchar", "binary", "varbinary", "bit"})  # type(n)
# Collations that order strings by their bytes (trailing spaces aside: PAD SPACE), as cdcflow compares them; a
# case- or accent-insensitive one (utf8mb4_general_ci, utf8mb4_0900_ai_ci, ...) compares by weights
# (``pkg/util/collate``) and is kept on the column (``Column.collate``).
BIN_COLLATIONS = frozenset({"", "binary", "utf8mb4_bin", "utf8_bin", "ascii_bin", "latin1_bin"})
_DATE_KINDS = frozenset({DATE, DATETIME, TIMESTAMP})
MAX_ARROW_DECIMAL = 38  # decimal128's digits; a wider DECIMAL is held as its text
_FSP_KINDS = frozenset({DATETIME, TIMESTAMP, TIME})
MAX_TIME = dt.timedelta(hours=838, minutes=59, seconds=59)
_TIMESTAMP_MIN = dt.datetime(1970, 1, 1, 0, 0, 1)
_TIMESTAMP_MAX = dt.datetime(2038, 1, 19, 3, 14, 7, 999999)
_FLOAT32_MAX = 3.4028234663852886e38
_TIME_RE = re.compile(r"\s*(-)?(?:(\d+)\s+)?(\d+):(\d{1,2})(?::(\d{1,2})(?:\.(\d*))?)?\s*")
_DATETIME_RE = re.compile(r"\s*(\d{1,4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d*))?)?\s*")
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class DateRules:
    """What a DATE/DATETIME/TIMESTAMP takes under a session's ``sql_mode`` (TiDB ``pkg/table/column.go``
    ``handleZeroDatetime`` after ``pkg/types/time.go`` ``checkDateType``/``checkMonthDay``, with the type flags
    ``pkg/executor`` ``ResetContextOfStmt`` sets for INSERT/UPDATE).

    ``strict``: STRICT_TRANS_TABLES or STRICT_ALL_TABLES. A zero date ``0000-00-00`` is refused under NO_ZERO_DATE
    and strict mode (stored as zero without strict mode); a zero month or day is kept without NO_ZERO_IN_DATE,
    refused with it and strict mode, else stored as the zero date; a day past its month (Feb 30) is kept under
    ALLOW_INVALID_DATES, else refused in strict mode and stored as the zero date without; a TIMESTAMP takes the
    zero value but never a zero month/day or an invalid day (refused in strict mode, else zero)."""

    strict: bool = True
    no_zero_date: bool = True
    no_zero_in_date: bool = True
    allow_invalid_dates: bool = False

    @classmethod
    def of_sql_mode(cls, modes: Iterable[str]) -> DateRules:
        """The rules of a session's ``sql_mode`` names (``Session.sql_mode``)."""
        m = frozenset(modes)
        return cls(strict=bool(m & {"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"}), no_zero_date="NO_ZERO_DATE" in m,
                   no_zero_in_date="NO_ZERO_IN_DATE" in m, allow_invalid_dates="ALLOW_INVALID_DATES" in m)


STRICT_DATES = DateRules()  # TiDB's default sql_mode
# Values TiDB has stored (read back over SQL, from a row, a default in a table's JSON): every date it can hold.
STORED_DATES = DateRules(strict=False, no_zero_date=False, no_zero_in_date=False, allow_invalid_dates=True)


def facts(type_name: str) -> TypeFacts:
    try:
        return TYPES[type_name]
    except KeyError:
        raise ColumnValueError(f"unsupported type {type_name!r}") from None


def kind(col: Column) -> str:
    """The kind of Python value of the column (``INT``, ``TEXT``, ...)."""
    return TYPES[col.type].kind


def is_handle_type(col: Column | dict[str, Any]) -> bool:
    """Whether a column (or a column spec's fields) can be the row handle of a clustered table: an integer type
    whose values fit the signed 64-bit handle (TiDB's ``PKIsHandle``; BIGINT UNSIGNED is left to the hidden
    ``_tidb_rowid`` here, its upper half would wrap)."""
    name, unsigned = (col["type"], bool(col.get("unsigned"))) if isinstance(col, dict) else (col.type, col.unsigned)
    return name in INT_BITS and not (name == "bigint" and unsigned)


def check_definition(col: Column) -> None:
    """Raise ``ColumnValueError`` for a definition TiDB refuses (lengths, precision, fsp, members)."""
    f = facts(col.type)
    if col.type == "decimal":
        p, s = col.precision or 10, col.scale or 0
        if not 1 <= p <= 65 or not 0 <= s <= 30 or s > p:
            raise ColumnValueError(f"DECIMAL({p},{s}) is not valid (precision 1..65, scale 0..30 and <= precision)")
    if col.type in ("char", "binary") and col.length is not None and not 0 <= col.length <= 255:
        raise ColumnValueError(f"{col.type.upper()}({col.length}): the length is 0..255")
    if col.type in ("varchar", "varbinary"):
        if col.length is None:
            raise ColumnValueError(f"{col.type.upper()} needs a length, e.g. {col.type.upper()}(64)")
        if not 0 <= col.length <= 65535:
            raise ColumnValueError(f"{col.type.upper()}({col.length}): the length is 0..65535")
    if col.type == "bit" and col.length is not None and not 1 <= col.length <= 64:
        raise ColumnValueError(f"BIT({col.length}): the width is 1..64")
    if f.kind == VECTOR:
        try:
            vec.check_dimension_definition(col.length)
        except vec.VectorError as exc:
            raise ColumnValueError(str(exc)) from None
    if f.kind in _FSP_KINDS and col.fsp is not None and not 0 <= col.fsp <= 6:
        raise ColumnValueError(f"{col.type.upper()}({col.fsp}): fractional seconds precision is 0..6")
    if f.kind in (ENUM, SET):
        if not col.elems:
            raise ColumnValueError(f"{col.type.upper()} needs members, e.g. {col.type.upper()}('a','b')")
        if len({e.lower().rstrip(" ") for e in col.elems}) != len(col.elems):
            raise ColumnValueError(f"{col.type.upper()} has duplicate members {list(col.elems)}")
        if f.kind == SET and (len(col.elems) > 64 or any("," in e for e in col.elems)):
            raise ColumnValueError("SET members: at most 64, none containing ','")
    if col.unsigned and f.kind not in (INT, FLOAT, DECIMAL):
        raise ColumnValueError(f"UNSIGNED is for numeric types, not {col.type.upper()}")


def field_type(col: Column) -> mt.FieldType:
    """The TiDB ``FieldType`` the column's row values are encoded by."""
    f = TYPES[col.type]
    flag = 0 if col.nullable else mt.NotNullFlag
    if col.unsigned:
        flag |= mt.UnsignedFlag
    if f.tp in (mt.TypeTinyBlob, mt.TypeBlob, mt.TypeMediumBlob, mt.TypeLongBlob):
        flag |= mt.BlobFlag
    charset, collate = ("binary", "binary") if f.binary else ("utf8mb4", "utf8mb4_bin")
    if col.collate and not f.binary:
        charset, collate = col.collate.split("_", 1)[0], col.collate  # a collation's name starts with its charset
    if f.binary:
        flag |= mt.BinaryFlag
    if f.kind == INT:
        flen = f.flen - 1 if col.unsigned and col.type != "bigint" else f.flen
        return mt.FieldType(f.tp, flag, flen=flen, decimal=0)
    if f.kind == FLOAT:
        return mt.FieldType(f.tp, flag, flen=f.flen)
    if f.kind == DECIMAL:
        return mt.FieldType(f.tp, flag, flen=col.precision or 10, decimal=col.scale or 0)
    if f.kind == DATE:
        return mt.FieldType(f.tp, flag | mt.BinaryFlag, flen=10, decimal=0, charset="binary", collate="binary")
    if f.kind in _FSP_KINDS:
        fsp = col.fsp or 0
        return mt.FieldType(f.tp, flag | mt.BinaryFlag, flen=f.flen + (fsp + 1 if fsp else 0), decimal=fsp,
                            charset="binary", collate="binary")
    if f.kind == YEAR:
        return mt.FieldType(f.tp, flag | mt.UnsignedFlag | mt.ZerofillFlag, flen=4, decimal=0)
    if f.kind in (ENUM, SET):
        return mt.FieldType(f.tp, flag, flen=_elems_flen(col), charset=charset, collate=collate, elems=col.elems)
    if f.kind == BIT:
        return mt.FieldType(f.tp, flag | mt.UnsignedFlag, flen=col.length or 1)
    if f.kind == JSON:
        return mt.FieldType(f.tp, flag, flen=mt.UnspecifiedLength, charset=charset, collate=collate)
    if f.kind == VECTOR:  # the parser's decimal 0; ddl processColumnFlags: a binary-charset string kind, BinaryFlag
        dim = col.length if col.length is not None else mt.UnspecifiedLength
        return mt.FieldType(f.tp, flag, flen=dim, decimal=0, charset=charset, collate=collate)
    flen = col.length if col.type in _LENGTH_TYPES and col.length is not None else f.flen
    return mt.FieldType(f.tp, flag, flen=flen, charset=charset, collate=collate)


def _elems_flen(col: Column) -> int:
    if col.type == "enum":
        return max(len(e) for e in col.elems)
    return sum(len(e) for e in col.elems) + len(col.elems) - 1


def sql_type(col: Column) -> str:
    """The type as ``SHOW CREATE TABLE`` writes it, e.g. ``BIGINT UNSIGNED``, ``DATETIME(3)``, ``ENUM('a','b')``."""
    f = TYPES[col.type]
    name = col.type.upper()
    if col.type == "decimal":
        name = f"DECIMAL({col.precision or 10},{col.scale or 0})"
    elif col.type in _LENGTH_TYPES:
        name = f"{name}({col.length if col.length is not None else f.flen})"
    elif f.kind in _FSP_KINDS and col.fsp:
        name = f"{name}({col.fsp})"
    elif f.kind in (ENUM, SET):
        name = name + "(" + ",".join("'" + e.replace("'", "''") + "'" for e in col.elems) + ")"
    elif f.kind == VECTOR and col.length is not None:  # FieldType.CompactStr: VECTOR alone when unspecified
        name = f"{name}({col.length})"
    return f"{name} UNSIGNED" if col.unsigned else name


# --- converting values ------------------------------------------------------------------------------------------


def _round_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ColumnValueError(f"{value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ColumnValueError(f"{value!r} is not a number")
        value = Decimal(repr(value))
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(value).strip())
        return int(d.to_integral_value(rounding=ROUND_HALF_UP))
    except (InvalidOperation, ValueError):
        raise ColumnValueError(f"{value!r} is not an integer") from None


def _int_range(col: Column) -> tuple[int, int]:
    bits = INT_BITS[col.type]
    return (0, (1 << bits) - 1) if col.unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _int(col: Column, value: Any) -> int:
    iv = _round_int(value)
    lo, hi = _int_range(col)
    if not lo <= iv <= hi:
        raise ColumnValueError(f"{iv} is out of range [{lo}, {hi}]")
    return iv


def _float(col: Column, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        raise ColumnValueError(f"{value!r} is not a number")
    try:
        fv = float(value)
    except ValueError:
        raise ColumnValueError(f"{value!r} is not a number") from None
    if not math.isfinite(fv):
        raise ColumnValueError(f"{value!r} is not a finite number")
    if col.unsigned and fv < 0:
        raise ColumnValueError(f"{value!r} is out of range for UNSIGNED")
    if col.type == "float":
        if abs(fv) > _FLOAT32_MAX:
            raise ColumnValueError(f"{value!r} is out of range for FLOAT")
        fv = struct.unpack("<f", struct.pack("<f", fv))[0]
    return fv + 0.0 if fv != 0 else 0.0  # no -0.0: TiDB stores zero once


def _decimal(col: Column, value: Any) -> Decimal:
    if isinstance(value, bool):
        raise ColumnValueError(f"{value!r} is not a number")
    try:
        dv = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value).strip())
    except InvalidOperation:
        raise ColumnValueError(f"{value!r} is not a number") from None
    if not dv.is_finite():
        raise ColumnValueError(f"{value!r} is not a finite number")
    p, s = col.precision or 10, col.scale or 0
    if dv != 0 and dv.adjusted() + 1 > p - s:
        raise ColumnValueError(f"{value!r} does not fit DECIMAL({p},{s})")
    dv = dv.quantize(Decimal(1).scaleb(-s), rounding=ROUND_HALF_UP, context=WIDE_DECIMAL)
    if dv != 0 and dv.adjusted() + 1 > p - s:  # 9.995 rounds up to 10.00
        raise ColumnValueError(f"{value!r} does not fit DECIMAL({p},{s})")
    if col.unsigned and dv < 0:
        raise ColumnValueError(f"{value!r} is out of range for UNSIGNED")
    return dv if dv != 0 else abs(dv)


def _fraction_micros(frac: str | None) -> tuple[int, bool]:
    """Microseconds of a fraction's digits, and whether a 7th digit rounds them up."""
    digits = (frac or "")[:7].ljust(7, "0")
    return int(digits[:6]), digits[6] >= "5"


def _round_fsp(micros: int, fsp: int) -> int:
    unit = 10 ** (6 - fsp)
    return (micros + unit // 2) // unit * unit


def _parse_parts(value: str) -> tuple[int, int, int, int, int, int, int, bool]:
    """(year, month, day, hour, minute, second, microsecond, whether a 7th fraction digit rounds up) of date/time
    text, whatever the values (checked by :func:`_dates`)."""
    m = _DATETIME_RE.fullmatch(value)
    if m is None:
        raise ColumnValueError(f"{value!r} is not a date/time (YYYY-MM-DD[ HH:MM:SS[.ffffff]])")
    y, mo, d, h, mi, s = (int(x or 0) for x in m.group(1, 2, 3, 4, 5, 6))
    micros, carry = _fraction_micros(m.group(7))
    return y, mo, d, h, mi, s, micros, carry


def _days_in(year: int, month: int) -> int:
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 29 if month == 2 and leap else _MONTH_DAYS[month - 1]


_DATE_NAMES = {DATE: "date", DATETIME: "datetime", TIMESTAMP: "timestamp"}  # types.TypeStr, in TiDB's 1292 text


def _wrong_date(col: Column, shown: str, why: str) -> ColumnValueError:
    # TiDB's ErrTruncatedWrongValue (1292) text, completed by insert_common.go's completeInsertErr
    return ColumnValueError(f"Incorrect {_DATE_NAMES[kind(col)]} value: {shown!r} ({why})")


def _dates(col: Column, value: Any, rules: DateRules) -> dt.date | rowcodec.MySQLTime:
    """A DATE/DATETIME/TIMESTAMP value of ``value`` under ``rules``: a ``date``/``datetime``, or a ``MySQLTime`` for
    a date Python has none of (a zero date, a zero month or day, year 0, an invalid day) when the rules let the
    column take it, as TiDB's ``handleZeroDatetime`` does (:class:`DateRules`)."""
    k = kind(col)
    if isinstance(value, dt.datetime) and k == DATE:
        if value.time() != dt.time(0):
            raise ColumnValueError(f"{value!r} has a time of day (DATE holds none)")
        return value.date()
    if isinstance(value, dt.datetime):
        out = value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo is not None else value
        return _valid_time(col, out, value, rules)
    if isinstance(value, dt.date):
        return value if k == DATE else _valid_time(col, dt.datetime(value.year, value.month, value.day), value, rules)
    if isinstance(value, rowcodec.MySQLTime):
        y, mo, d, h, mi, sec, us = (value.year, value.month, value.day, value.hour, value.minute, value.second,
                                    value.microsecond)
        carry, shown = False, format_mysql_time(value, date_only=k == DATE)
    elif isinstance(value, str):
        y, mo, d, h, mi, sec, us, carry = _parse_parts(value)
        shown = value
    else:
        raise ColumnValueError(f"{value!r} is not a date/time")
    if k == DATE and (h or mi or sec or us):
        raise ColumnValueError(f"{value!r} has a time of day (DATE holds none)")
    zero = rowcodec.ZERO_TIME
    if mo > 12 or d > 31 or h > 23 or mi > 59 or sec > 59 or y > 9999:  # checkDateType / checkMonthDay: ErrWrongValue
        if rules.strict:
            raise _wrong_date(col, shown, "not a date")
        return zero
    if (y, mo, d, h, mi, sec, us) == (0, 0, 0, 0, 0, 0, 0):
        if rules.no_zero_date and rules.strict:
            raise _wrong_date(col, shown, "the zero date under NO_ZERO_DATE and strict mode")
        return zero
    zero_in_date = mo == 0 or d == 0
    bad_day = not zero_in_date and d > _days_in(y, mo)
    if k == TIMESTAMP and (zero_in_date or bad_day or y == 0):  # "can by definition not have invalid dates"
        if rules.strict:
            raise _wrong_date(col, shown, "no TIMESTAMP")
        return zero
    if zero_in_date:
        if not rules.no_zero_in_date:
            return _mysql_time(col, y, mo, d, h, mi, sec, us)
        if rules.strict:
            raise _wrong_date(col, shown, "a zero month or day under NO_ZERO_IN_DATE and strict mode")
        return zero
    if bad_day:
        if rules.allow_invalid_dates:
            return _mysql_time(col, y, mo, d, h, mi, sec, us)
        if rules.strict:
            raise _wrong_date(col, shown, f"{_days_in(y, mo)} days in that month, and no ALLOW_INVALID_DATES")
        return zero
    if y == 0:  # a valid month and day of year 0: TiDB stores it; Python has no year 0
        return _mysql_time(col, y, mo, d, h, mi, sec, us)
    out = dt.datetime(y, mo, d, h, mi, sec, us)
    if carry:
        out += dt.timedelta(microseconds=1)
    if k == DATE:
        return out.date()
    return _valid_time(col, out, value, rules)


def _mysql_time(col: Column, y: int, mo: int, d: int, h: int, mi: int, sec: int, us: int) -> rowcodec.MySQLTime:
    unit = 10 ** (6 - (col.fsp or 0))
    return rowcodec.MySQLTime(y, mo, d, h, mi, sec, min(_round_fsp(us, col.fsp or 0), 1_000_000 - unit))


def _valid_time(col: Column, out: dt.datetime, given: Any, rules: DateRules) -> dt.datetime | rowcodec.MySQLTime:
    """A DATETIME/TIMESTAMP ``datetime`` rounded to the column's fsp, TIMESTAMP's range checked (out of it: refused
    in strict mode, else the zero value, as TiDB stores it)."""
    fsp = col.fsp or 0
    rounded = _round_fsp(out.microsecond, fsp)
    try:
        out = out.replace(microsecond=0) + dt.timedelta(microseconds=rounded)
    except OverflowError:
        raise ColumnValueError(f"{given!r} is out of range") from None
    if col.type == "timestamp" and not _TIMESTAMP_MIN <= out <= _TIMESTAMP_MAX:
        if not rules.strict:
            return rowcodec.ZERO_TIME
        raise ColumnValueError(f"{given!r} is outside TIMESTAMP's range (1970-01-01 00:00:01 to 2038-01-19 "
                               "03:14:07 UTC)")
    return out


def _time(col: Column, value: Any) -> dt.timedelta:
    if isinstance(value, dt.timedelta):
        out = value
    elif isinstance(value, int) and not isinstance(value, bool):  # HHMMSS, as MySQL reads a number
        sign, n = (-1, -value) if value < 0 else (1, value)
        h, rest = divmod(n, 10000)
        mi, s = divmod(rest, 100)
        if mi > 59 or s > 59:
            raise ColumnValueError(f"{value!r} is not a time (HHMMSS)")
        out = sign * dt.timedelta(hours=h, minutes=mi, seconds=s)
    elif isinstance(value, str):
        m = _TIME_RE.fullmatch(value)
        if m is None:
            raise ColumnValueError(f"{value!r} is not a time ([-][D ]HH:MM:SS[.ffffff])")
        days, h, mi, s = (int(x or 0) for x in m.group(2, 3, 4, 5))
        if mi > 59 or s > 59:
            raise ColumnValueError(f"{value!r} is not a time (minutes and seconds are 0..59)")
        micros, carry = _fraction_micros(m.group(6))
        out = dt.timedelta(days=days, hours=h, minutes=mi, seconds=s, microseconds=micros + carry)
        if m.group(1):
            out = -out
    else:
        raise ColumnValueError(f"{value!r} is not a time")
    total = out // dt.timedelta(microseconds=1)
    sign, mag = (-1, -total) if total < 0 else (1, total)
    out = dt.timedelta(microseconds=sign * _round_fsp(mag, col.fsp or 0))
    if abs(out) > MAX_TIME:
        raise ColumnValueError(f"{value!r} is outside TIME's range (-838:59:59 to 838:59:59)")
    return out


def _year(col: Column, value: Any) -> int:
    short = isinstance(value, str) and len(value.strip()) <= 2
    y = _round_int(value)
    if short or 0 < y < 100:  # MySQL: 1-69 are 2001-2069, 70-99 are 1970-1999 ('0'/'00' as a string is 2000)
        y = y + 2000 if y < 70 else y + 1900
    if y != 0 and not 1901 <= y <= 2155:
        raise ColumnValueError(f"{value!r} is outside YEAR's range (1901 to 2155)")
    return y


def _text(col: Column, value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        try:
            sv = bytes(value).decode()
        except UnicodeDecodeError:
            raise ColumnValueError("bytes that are not UTF-8") from None
    elif isinstance(value, dict | list | bool):
        raise ColumnValueError(f"{value!r} is not a string")
    elif isinstance(value, dt.datetime):
        sv = format_datetime(value)
    elif isinstance(value, dt.timedelta):
        sv = format_duration(value)
    else:
        sv = format(value, "f") if isinstance(value, Decimal) else str(value)
    if col.type == "char":
        sv = sv.rstrip(" ")  # TiDB stores CHAR without trailing spaces (table.CastValue)
    limit = col.length if col.type in ("char", "varchar") else None
    if limit is not None and len(sv) > limit:
        raise ColumnValueError(f"value of length {len(sv)} is too long (at most {limit} characters)")
    f = TYPES[col.type]
    if f.max_bytes and len(sv.encode()) > f.max_bytes:
        raise ColumnValueError(f"value of {len(sv.encode())} bytes is too long for {col.type.upper()}")
    return sv


def _binary(col: Column, value: Any) -> bytes:
    if isinstance(value, dict) and set(value) == {"$binary"}:
        value = base64.b64decode(value["$binary"])
    if isinstance(value, str):
        bv = value.encode()
    elif isinstance(value, bytes | bytearray | memoryview):
        bv = bytes(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        bv = str(value).encode()
    else:
        raise ColumnValueError(f"{value!r} is not a byte string")
    f = TYPES[col.type]
    limit = col.length if col.type in ("binary", "varbinary") else f.max_bytes
    if limit is not None and len(bv) > limit:
        raise ColumnValueError(f"value of {len(bv)} bytes is too long (at most {limit})")
    if col.type == "binary":
        bv = bv.ljust(col.length if col.length is not None else 1, b"\0")  # BINARY(n) pads with 0x00
    return bv


def _enum(col: Column, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= len(col.elems):
            raise ColumnValueError(f"{value} is not an ENUM index (1..{len(col.elems)})")
        return col.elems[value - 1]
    if not isinstance(value, str):
        raise ColumnValueError(f"{value!r} is not an ENUM member")
    key = value.rstrip(" ").lower()
    for e in col.elems:
        if e.rstrip(" ").lower() == key:
            return e
    raise ColumnValueError(f"{value!r} is not one of {list(col.elems)}")


def _set(col: Column, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0 or value >> len(col.elems):
            raise ColumnValueError(f"{value} is not a SET bitmask of {len(col.elems)} members")
        mask = value
    elif isinstance(value, str):
        mask = 0
        lowered = [e.rstrip(" ").lower() for e in col.elems]
        for part in value.split(",") if value else []:
            try:
                mask |= 1 << lowered.index(part.rstrip(" ").lower())
            except ValueError:
                raise ColumnValueError(f"{part!r} is not one of {list(col.elems)}") from None
    else:
        raise ColumnValueError(f"{value!r} is not a SET value")
    return ",".join(e for i, e in enumerate(col.elems) if mask >> i & 1)


def _bit(col: Column, value: Any) -> bytes:
    width = col.length or 1
    if isinstance(value, dict) and set(value) == {"$binary"}:
        value = base64.b64decode(value["$binary"])
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes | bytearray):
        iv = int.from_bytes(value, "big")
    elif isinstance(value, int) and not isinstance(value, bool):
        iv = value
    else:
        raise ColumnValueError(f"{value!r} is not a BIT value")
    if iv < 0 or iv >> width:
        raise ColumnValueError(f"{value!r} does not fit BIT({width})")
    return iv.to_bytes((width + 7) // 8, "big")


def json_text(doc: Any) -> str:
    """A JSON document as TiDB prints it: through its binary form (object keys sorted by their bytes), then
    ``BinaryJSON.String``'s separators."""
    from cdc_core.codec.rowcodec_batch import json_text as printed

    return printed(rowcodec.decode_json(rowcodec.encode_json(doc)))


def _json(col: Column, value: Any) -> str:
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ColumnValueError(f"invalid JSON text ({exc.msg} at character {exc.pos})") from None
    elif isinstance(value, Decimal):
        doc = float(value)
    else:
        doc = value
    try:
        return json_text(doc)
    except rowcodec.RowCodecError as exc:
        raise ColumnValueError(f"not a JSON value TiDB stores: {exc}") from None


def _vector(col: Column, value: Any) -> vec.VectorFloat32:
    """``ParseVectorFloat32`` of text, or a value's elements (a JSON array, a decoded value), then
    ``CheckDimsFitColumn``."""
    try:
        if isinstance(value, vec.VectorFloat32):
            out = value
        elif isinstance(value, str):
            out = vec.parse(value)
        elif isinstance(value, list | tuple):
            out = vec.VectorFloat32.of(value)
        else:
            raise ColumnValueError(f"{value!r} is not a vector (text such as '[1.5,2]')")
        out.check_dimension(col.length)
    except vec.VectorError as exc:
        raise ColumnValueError(str(exc)) from None
    return out


_CONVERT = {INT: _int, FLOAT: _float, DECIMAL: _decimal, TIME: _time, YEAR: _year, TEXT: _text, BINARY: _binary,
            ENUM: _enum, SET: _set, BIT: _bit, JSON: _json, VECTOR: _vector}


def convert(col: Column, value: Any, dates: DateRules = STRICT_DATES) -> Any:
    """The column's Python value of ``value`` (a SQL literal's value, a JSON form, a typed value); ``None`` stays
    NULL. Raises ``ColumnValueError`` when the value does not fit, as TiDB's strict mode refuses it; a
    DATE/DATETIME/TIMESTAMP goes by ``dates`` (a session's ``sql_mode``: :class:`DateRules`; ``STORED_DATES`` for a
    value TiDB stored)."""
    if value is None:
        return None
    k = TYPES[col.type].kind
    if k in _DATE_KINDS:
        return _dates(col, value, dates)
    return _CONVERT[k](col, value)


# --- the values the row codec stores ----------------------------------------------------------------------------


def to_stored(col: Column, value: Any) -> Any:
    """A converted value as ``cdc_core.codec.rowcodec`` encodes it: ENUM as its 1-based index, SET as its bitmask,
    BIT as an unsigned integer, JSON as the document; other values unchanged."""
    if value is None:
        return None
    k = TYPES[col.type].kind
    if k == ENUM:
        return col.elems.index(value) + 1
    if k == SET:
        members = set(value.split(",")) if value else set()
        return sum(1 << i for i, e in enumerate(col.elems) if e in members)
    if k == BIT:
        return int.from_bytes(value, "big")
    if k == JSON:
        doc = json.loads(value)
        return rowcodec.JSON_NULL if doc is None else doc
    return value


def from_stored(col: Column, value: Any) -> Any:
    """The Python value of a value the row codec decoded (the inverse of :func:`to_stored`).

    An integer, or a string (its UTF-8 bytes, or the text the row codec decoded them to), is taken as it is:
    :func:`convert` stored it under this column's id, and a MODIFY COLUMN after which it might not fit moves the
    column to a new id, its values converted
    (``ddl_alter.need_change_column_data``, TiDB's ``needChangeColumnData``). TiDB's row decoder does not check
    them again either. Every other kind goes through :func:`convert` (its representation differs)."""
    if value is None:
        return None
    k = TYPES[col.type].kind
    t = type(value)
    if k == INT and t is int:
        return value
    if k == TEXT:
        if t is str:  # the row codec decoded it (checked as UTF-8 there)
            return value
        if t is bytes:
            try:
                return value.decode()
            except UnicodeDecodeError:
                raise ColumnValueError("bytes that are not UTF-8") from None
    if k == ENUM:
        return "" if value == 0 else _enum(col, value)  # 0 is MySQL's error value '' of a non-strict insert
    if k == JSON:
        return json_text(value)
    if k == VECTOR and t is vec.VectorFloat32:
        return value
    return convert(col, value, STORED_DATES)


def decimal_as_text(col: Column) -> bool:
    """Whether the column's values are held as text in the lake: a DECIMAL wider than Arrow's 38 digits."""
    return kind(col) == DECIMAL and (col.precision or 10) > MAX_ARROW_DECIMAL


def maps_to_null(col: Column, value: Any) -> bool:
    """Whether the lake holds NULL for this non-NULL value (a date Delta's DATE/TIMESTAMP cannot hold: a zero date, a
    zero month or day, year 0, an invalid day) -- what :func:`arrow_value` maps, and the mapped values counted."""
    return isinstance(value, rowcodec.MySQLTime)


def arrow_value(col: Column, value: Any) -> Any:
    """A Python value as ``pyarrow.array`` takes it for the column's Arrow type (the row decoder's): TIME as int64
    nanoseconds, BIGINT UNSIGNED as a ``Decimal`` (decimal128(20,0)), a DECIMAL wider than 38 digits as its text, a
    VECTOR as its elements, a date Delta cannot hold (:func:`maps_to_null`) as NULL; other values unchanged."""
    if value is None or maps_to_null(col, value):
        return None
    if isinstance(value, dt.timedelta):
        return value // dt.timedelta(microseconds=1) * 1000
    if isinstance(value, vec.VectorFloat32):
        return list(value.elements)
    if col.type == "bigint" and col.unsigned:
        return Decimal(value)
    if isinstance(value, Decimal) and decimal_as_text(col):
        return decimal_text(value, col.scale or 0)
    return value


def from_arrow(col: Column, value: Any) -> Any:
    """The Python value of a value read from the column's Arrow type (the inverse of :func:`arrow_value`; a mapped
    date reads back as NULL)."""
    if value is None:
        return None
    if kind(col) == TIME and isinstance(value, int):
        return dt.timedelta(microseconds=value // 1000 if value >= 0 else -(-value // 1000))
    if col.type == "bigint" and col.unsigned and isinstance(value, Decimal):
        return int(value)
    return convert(col, value, STORED_DATES)


def members_appended(old: Column, new: Column) -> bool:
    """Whether ``new``'s ENUM/SET members are ``old``'s with others appended (values keep their meaning)."""
    return new.elems[:len(old.elems)] == old.elems


def delta_widens(old: Column, new: Column) -> bool:
    """Whether the silver column of ``old`` can be cast to ``new``'s Delta type without losing a value: a wider
    integer (signed, or from unsigned), FLOAT to DOUBLE, a DECIMAL with no fewer integer or fraction digits."""
    ko, kn = kind(old), kind(new)
    if ko == kn == INT:
        return _int_range(new)[0] <= _int_range(old)[0] and _int_range(old)[1] <= _int_range(new)[1]
    if ko == kn == FLOAT:
        return old.type == "float" or new.type == "double"
    if ko == kn == DECIMAL:
        p, s = old.precision or 10, old.scale or 0
        p2, s2 = new.precision or 10, new.scale or 0
        return s2 >= s and p2 - s2 >= p - s  # held as text: the rewrite prints each value with the new scale
    return False


__all__ = [
    "STORED_DATES",
    "STRICT_DATES",
    "TYPES",
    "ColumnValueError",
    "DateRules",
    "arrow_value",
    "check_definition",
    "convert",
    "decimal_as_text",
    "decimal_text",
    "delta_widens",
    "field_type",
    "from_arrow",
    "from_stored",
    "kind",
    "maps_to_null",
    "sql_type",
    "to_stored",
]
