"""TiDB's row value formats, scalar and in pure Python: rowcodec v2 and the older datum row, both ways.

A TiKV row value (the value of a ``t{table}_r{handle}`` key) is one of two formats, told apart by its first byte:

* **rowcodec v2** (first byte ``128``; TiDB ``pkg/util/rowcodec``: ``row.go``, ``encoder.go``, ``decoder.go``,
  ``common.go``; TiKV ``components/tidb_query_datatype/src/codec/row/v2/``)::

      128 | flags | u16 not-null count | u16 null count | column ids | u16/u32 end offsets | values | [checksum]

  Flag ``0x01`` is the large layout (4-byte ids and offsets instead of 1 and 2; TiDB sets it when an id is above
  255 or the values exceed 65535 bytes); flag ``0x02`` says a checksum follows the values: a header byte (bits 0-2
  the checksum version, bit 3 "an extra checksum follows") and one or two little-endian CRC32s. Ids are sorted,
  not-null ones first, each group ascending; values carry no type, so decoding needs the column types.
* **datum row** (v1; TiDB ``pkg/tablecodec/tablecodec.go`` ``EncodeOldRow``/``DecodeRowWithMap``): alternating
  column-id and value datums of ``pkg/util/codec/codec.go``, each a flag byte and a payload; a row with no columns
  is the single byte ``0`` (``NilFlag``).

Values inside v2 (``encodeValueDatum``): integers, ENUM, SET, BIT as the smallest little-endian integer of 1, 2, 4
or 8 bytes (signed or not by ``UnsignedFlag``); FLOAT/DOUBLE as memcomparable float (``codec.EncodeFloat``);
strings raw; DECIMAL as ``codec.EncodeDecimal`` (precision byte, frac byte, MyDecimal's ``ToBin``, TiDB
``pkg/types/mydecimal.go``); DATE/DATETIME/TIMESTAMP as ``CoreTime.ToPackedUint`` (``pkg/types/time.go``) in UTC for
TIMESTAMP; TIME as signed nanoseconds; YEAR as a signed integer; JSON as TiDB's binary JSON
(``pkg/types/json_binary.go``, ``json_constants.go``); VECTOR as ``VectorFloat32.SerializeTo`` (u32 count, float32
elements, little-endian: :mod:`cdc_core.codec.vector`), in the datum format after ``vectorFloat32Flag`` (20).

Python values: integers, YEAR, ENUM/SET/BIT (the stored number) as ``int``; FLOAT/DOUBLE ``float``; DECIMAL
``Decimal``; text ``str`` (UTF-8) and binary strings ``bytes`` (``FieldType.binary``); DATE ``date``;
DATETIME/TIMESTAMP naive ``datetime`` (TIMESTAMP in UTC); TIME ``timedelta``; JSON the parsed value, a document that
is JSON's ``null`` as :data:`JSON_NULL` (so that it is not SQL's NULL); VECTOR ``VectorFloat32``; NULL ``None``.
Dates Python cannot hold (``0000-00-00``, a zero month or day, year 0, Feb 30 under ``ALLOW_INVALID_DATES``) decode
to ``MySQLTime``. Not covered: JSON opaque/date/time/duration values raise ``UnsupportedValueError``; GEOMETRY and
NULL-typed columns with a value raise ``RowCodecError``.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cdc_core.codec import mysql_type as mt
from cdc_core.codec.memcomparable import KeyDecodeError
from cdc_core.codec.memcomparable import decode_bytes as _decode_memcomparable
from cdc_core.codec.mysql_type import FieldType
from cdc_core.codec.vector import VectorError, VectorFloat32
from cdc_core.errors import CdcflowError

CODEC_VER = 128  # rowcodec.CodecVer: above every datum flag, so the first byte tells the formats apart
ROW_FLAG_LARGE = 0x01
ROW_FLAG_CHECKSUM = 0x02
CHECKSUM_MASK_VERSION = 0b0111
CHECKSUM_FLAG_EXTRA = 0b1000
CHECKSUM_VERSIONS = (0, 1, 2)  # row.go fromBytes accepts these; anything else is errInvalidChecksumVer

# Datum flags (pkg/util/codec/codec.go).
NIL_FLAG = 0
BYTES_FLAG = 1
COMPACT_BYTES_FLAG = 2
INT_FLAG = 3
UINT_FLAG = 4
FLOAT_FLAG = 5
DECIMAL_FLAG = 6
DURATION_FLAG = 7
VARINT_FLAG = 8
UVARINT_FLAG = 9
JSON_FLAG = 10
VECTOR_FLOAT32_FLAG = 20
MAX_FLAG = 250

# Binary JSON type codes and literals (pkg/types/json_constants.go).
JSON_OBJECT = 0x01
JSON_ARRAY = 0x03
JSON_LITERAL = 0x04
JSON_INT64 = 0x09
JSON_UINT64 = 0x0A
JSON_FLOAT64 = 0x0B
JSON_STRING = 0x0C
JSON_OPAQUE = 0x0D
JSON_DATE = 0x0E
JSON_DATETIME = 0x0F
JSON_TIMESTAMP = 0x10
JSON_DURATION = 0x11
JSON_LITERAL_NULL = 0x00
JSON_LITERAL_TRUE = 0x01
JSON_LITERAL_FALSE = 0x02
_JSON_UNSUPPORTED = {
    JSON_OPAQUE: "opaque",
    JSON_DATE: "date",
    JSON_DATETIME: "datetime",
    JSON_TIMESTAMP: "timestamp",
    JSON_DURATION: "duration",
}
_JSON_MAX_DEPTH = 100  # types.maxJSONDepth
_JSON_NUMBER_FORMATS = {JSON_INT64: "<q", JSON_UINT64: "<Q", JSON_FLOAT64: "<d"}

# MyDecimal (pkg/types/mydecimal.go): 9 decimal digits per 4-byte word, a partial word in dig2bytes[n] bytes.
_DIGITS_PER_WORD = 9
_WORD_SIZE = 4
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_MAX_DECIMAL_PRECISION = 81  # digitsPerWord * maxWordBufLen: WriteBin's limit
_MAX_DECIMAL_SCALE = 30  # mysql.MaxDecimalScale
_MAX_DECIMAL_INPUT_DIGITS = 200  # refuse absurd Python Decimals before building their digit strings

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
_SIGN_MASK = 1 << 63
_FLOAT32_MAX = 3.4028234663852886e38


class RowCodecError(CdcflowError, ValueError):
    """Row bytes that are not a valid row (or a value the format cannot hold); the message says what is wrong and
    at which byte offset and/or column id."""


class UnsupportedValueError(RowCodecError, NotImplementedError):
    """A valid value of a kind this codec does not implement (JSON opaque/date/time/duration values)."""


@dataclass(frozen=True)
class MySQLTime:
    """A DATE/DATETIME/TIMESTAMP Python's ``datetime`` cannot hold: ``0000-00-00 00:00:00``, a zero month or day,
    year 0, or an invalid day such as ``2021-02-30`` (TiDB stores these under a permissive ``sql_mode``)."""

    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    microsecond: int = 0


ZERO_TIME = MySQLTime(0, 0, 0)


@dataclass(frozen=True)
class RowChecksum:
    """A v2 row's checksum trailer: the header's version (0 legacy column checksum, 1 CRC32 of the row bytes and
    the row key, 2 of the row bytes and the handle), the CRC32 and the extra CRC32 if the header says so."""

    version: int
    checksum: int
    extra: int | None = None


@dataclass(frozen=True)
class RowV2:
    """A parsed v2 row: ``values[offsets[i-1]:offsets[i]]`` is the value of ``not_null_ids[i]``; ``values_at``
    is where ``values`` starts in the row (for error messages)."""

    large: bool
    not_null_ids: tuple[int, ...]
    null_ids: tuple[int, ...]
    offsets: tuple[int, ...]
    values: bytes
    values_at: int
    checksum: RowChecksum | None

    def value(self, col_id: int) -> bytes | None:
        """The raw value of ``col_id``, ``None`` if the row has it as NULL; ``KeyError`` if the row lacks it.
        O(number of columns)."""
        for i, cid in enumerate(self.not_null_ids):
            if cid == col_id:
                return self.values[self.offsets[i - 1] if i else 0:self.offsets[i]]
        if col_id in self.null_ids:
            return None
        raise KeyError(col_id)


# --- small integers, floats, varints ----------------------------------------------------------------------------


def encode_compact_int(v: int) -> bytes:
    """``common.go encodeInt``: ``v`` (int64) little-endian in the fewest of 1, 2, 4 or 8 bytes."""
    for size, lo in ((1, -(1 << 7)), (2, -(1 << 15)), (4, -(1 << 31))):
        if lo <= v < -lo:
            return v.to_bytes(size, "little", signed=True)
    return v.to_bytes(8, "little", signed=True)


def encode_compact_uint(v: int) -> bytes:
    """``common.go encodeUint``: ``v`` (uint64) little-endian in the fewest of 1, 2, 4 or 8 bytes."""
    for size in (1, 2, 4):
        if v < 1 << (8 * size):
            return v.to_bytes(size, "little")
    return v.to_bytes(8, "little")


def _compact_len_ok(raw: bytes) -> bool:
    return len(raw) in (1, 2, 4, 8)


def encode_float(v: float) -> bytes:
    """``codec.EncodeFloat``: 8 big-endian bytes that sort as the floats do (sign bit set for non-negative
    numbers, all bits inverted for negative ones)."""
    u = struct.unpack(">Q", struct.pack(">d", v))[0]
    u = u | _SIGN_MASK if not u & _SIGN_MASK else u ^ _UINT64_MAX
    return u.to_bytes(8, "big")


def decode_float(raw: bytes) -> float:
    """The inverse of ``encode_float`` for exactly 8 bytes."""
    u = int.from_bytes(raw, "big")
    u = u & ~_SIGN_MASK if u & _SIGN_MASK else u ^ _UINT64_MAX
    return float(struct.unpack(">d", u.to_bytes(8, "big"))[0])


def _to_float32(v: float) -> float:
    """Go's ``float64(float32(v))``: round to nearest float32, out-of-range finite values become infinities."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", v))[0])
    except OverflowError:
        return math.copysign(math.inf, v)


def _put_uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _put_varint(v: int) -> bytes:
    # Go's binary.PutVarint: zig-zag, so small negative numbers stay short.
    return _put_uvarint((v << 1) ^ (v >> 63))


def _read_uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    start, result, shift = pos, 0, 0
    for i in range(10):
        if pos >= len(data):
            raise RowCodecError(f"{what}: varint at byte {start} is truncated at byte {pos}")
        b = data[pos]
        pos += 1
        if i == 9 and b > 1:
            raise RowCodecError(f"{what}: varint at byte {start} overflows 64 bits")
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise RowCodecError(f"{what}: varint at byte {start} is longer than 10 bytes")


def _read_varint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    ux, pos = _read_uvarint(data, pos, what)
    x = ux >> 1
    return (~x if ux & 1 else x), pos


# --- DECIMAL (MyDecimal ToBin/FromBin, codec.EncodeDecimal/DecodeDecimal) ---------------------------------------


def decimal_bin_size(precision: int, frac: int) -> int:
    """``DecimalBinSize``: bytes of the binary form of DECIMAL(precision, frac). O(1)."""
    if not 0 <= frac <= precision or precision > _MAX_DECIMAL_PRECISION:
        raise RowCodecError(f"DECIMAL({precision},{frac}) is not a valid decimal type")
    int_digits = precision - frac
    return (
        int_digits // _DIGITS_PER_WORD * _WORD_SIZE
        + _DIG2BYTES[int_digits % _DIGITS_PER_WORD]
        + frac // _DIGITS_PER_WORD * _WORD_SIZE
        + _DIG2BYTES[frac % _DIGITS_PER_WORD]
    )


def _decimal_parts(value: Decimal) -> tuple[bool, int, str]:
    """(negative, integer part, fraction digits as written) of a finite decimal; negative zero is not negative,
    as in MyDecimal."""
    if not value.is_finite():
        raise RowCodecError(f"decimal {value} is not a finite number")
    sign, digits, exp = value.as_tuple()
    assert isinstance(exp, int)  # finite
    if len(digits) + max(exp, 0) > _MAX_DECIMAL_INPUT_DIGITS or -exp > _MAX_DECIMAL_INPUT_DIGITS:
        raise RowCodecError(f"decimal {value} has more digits than a DECIMAL can hold")
    coefficient = int("".join(map(str, digits)))
    negative = bool(sign) and coefficient != 0
    if exp >= 0:
        return negative, coefficient * 10**exp, ""
    int_part, frac_part = divmod(coefficient, 10**-exp)
    return negative, int_part, str(frac_part).zfill(-exp)


def decimal_precision_and_frac(value: Decimal) -> tuple[int, int]:
    """``MyDecimal.PrecisionAndFrac``: (significant integer digits + fraction digits as written, fraction digits),
    at least precision 1; ``Decimal("011.9900")`` gives ``(6, 4)``."""
    _, int_part, frac_digits = _decimal_parts(value)
    int_digits = len(str(int_part)) if int_part else 0
    return max(1, int_digits + len(frac_digits)), len(frac_digits)


def decimal_to_bin(value: Decimal, precision: int, frac: int) -> tuple[bytes, str | None]:
    """``MyDecimal.ToBin``: ``value`` as the memcomparable binary of DECIMAL(precision, frac), and ``None``,
    ``"truncated"`` (fraction digits beyond ``frac`` were dropped, even zeros, as TiDB's ``ErrTruncated``) or
    ``"overflow"`` (the integer part kept only its low ``precision - frac`` digits, ``ErrOverflow``).

    Layout: the integer digits, then the fraction digits, in groups of 9 aligned on the decimal point; a full
    group is a big-endian u32, a partial one (the leading integer or trailing fraction group) takes
    ``dig2bytes[digits]`` bytes; a negative number has every byte inverted; the first bit is flipped last, so
    numbers of one type compare as their bytes. O(precision)."""
    if not 1 <= precision <= _MAX_DECIMAL_PRECISION or not 0 <= frac <= min(precision, _MAX_DECIMAL_SCALE):
        raise RowCodecError(f"DECIMAL({precision},{frac}) is not a valid decimal type")
    negative, int_part, frac_digits = _decimal_parts(value)
    loss: str | None = None
    int_digits = precision - frac
    if int_part >= 10**int_digits:
        loss = "overflow"
        int_part %= 10**int_digits
    if len(frac_digits) > frac:
        loss = "truncated"  # WriteBin reports truncation over overflow when both happen
        frac_digits = frac_digits[:frac]
    else:
        frac_digits = frac_digits.ljust(frac, "0")
    out = bytearray()
    words, lead = divmod(int_digits, _DIGITS_PER_WORD)
    if lead:
        out += (int_part // 10 ** (_DIGITS_PER_WORD * words)).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(words - 1, -1, -1):
        out += (int_part // 10 ** (_DIGITS_PER_WORD * i) % 10**_DIGITS_PER_WORD).to_bytes(_WORD_SIZE, "big")
    full, trail = divmod(frac, _DIGITS_PER_WORD)
    for i in range(full):
        out += int(frac_digits[_DIGITS_PER_WORD * i:_DIGITS_PER_WORD * (i + 1)]).to_bytes(_WORD_SIZE, "big")
    if trail:
        out += int(frac_digits[frac - trail:]).to_bytes(_DIG2BYTES[trail], "big")
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out), loss


def decimal_from_bin(data: bytes, precision: int, frac: int, *, at: int = 0) -> Decimal:
    """``MyDecimal.FromBin``: the DECIMAL(precision, frac) at the start of ``data`` (it may run on), with exactly
    ``frac`` fraction digits. Stricter than TiDB: a partial group holding more digits than it may is an error.
    ``at`` is ``data``'s offset in the row, for messages. O(precision)."""
    size = decimal_bin_size(precision, frac)
    if size == 0 or len(data) < size:
        raise RowCodecError(f"DECIMAL({precision},{frac}) at byte {at} needs {size} bytes, has {len(data)}")
    buf = bytearray(data[:size])
    negative = not buf[0] & 0x80
    buf[0] ^= 0x80
    if negative:
        buf = bytearray(b ^ 0xFF for b in buf)
    pos = 0

    def group(digits: int) -> int:
        nonlocal pos
        n = _DIG2BYTES[digits] if digits < _DIGITS_PER_WORD else _WORD_SIZE
        x = int.from_bytes(buf[pos:pos + n], "big")
        if x >= 10**digits:
            raise RowCodecError(f"DECIMAL({precision},{frac}) at byte {at}: group at byte {at + pos} holds {x}, "
                                f"more than {digits} digits")
        pos += n
        return x

    words, lead = divmod(precision - frac, _DIGITS_PER_WORD)
    int_part = group(lead) if lead else 0
    for _ in range(words):
        int_part = int_part * 10**_DIGITS_PER_WORD + group(_DIGITS_PER_WORD)
    full, trail = divmod(frac, _DIGITS_PER_WORD)
    frac_digits = "".join(f"{group(_DIGITS_PER_WORD):09d}" for _ in range(full))
    if trail:
        frac_digits += str(group(trail)).zfill(trail)
    sign = "-" if negative and (int_part or frac_digits.strip("0")) else ""
    return Decimal(f"{sign}{int_part}.{frac_digits}" if frac else f"{sign}{int_part}")


def encode_decimal(value: Decimal, precision: int = 0, frac: int = 0) -> bytes:
    """``codec.EncodeDecimal``: precision byte, frac byte, ``ToBin``. ``precision == 0`` takes both from the
    value (``PrecisionAndFrac``); frac is capped at 30. Unlike TiDB, surplus fraction zeros are dropped silently,
    but losing a non-zero digit raises ``RowCodecError``. O(precision)."""
    if precision <= 0:
        precision, frac = decimal_precision_and_frac(value)
    frac = min(frac, _MAX_DECIMAL_SCALE)
    _, int_part, frac_digits = _decimal_parts(value)
    if frac > precision or int_part >= 10 ** max(precision - frac, 0) or frac_digits[frac:].strip("0"):
        raise RowCodecError(f"decimal {value} does not fit DECIMAL({precision},{frac})")
    body, _ = decimal_to_bin(value, precision, frac)
    return bytes([precision, frac]) + body


def decode_decimal(data: bytes, pos: int = 0, *, base: int = 0) -> tuple[Decimal, int, int, int]:
    """``codec.DecodeDecimal`` at ``data[pos:]``: (value, precision, frac, end position); ``base`` is ``data``'s
    offset in the row, for messages."""
    if len(data) - pos < 3:
        raise RowCodecError(f"decimal at byte {base + pos} needs at least 3 bytes, has {len(data) - pos}")
    precision, frac = data[pos], data[pos + 1]
    if not 1 <= precision <= _MAX_DECIMAL_PRECISION or frac > min(precision, _MAX_DECIMAL_SCALE):
        raise RowCodecError(f"decimal at byte {base + pos} has a bad header: precision {precision}, frac {frac}")
    value = decimal_from_bin(data[pos + 2:], precision, frac, at=base + pos + 2)
    return value, precision, frac, pos + 2 + decimal_bin_size(precision, frac)


# --- DATE / DATETIME / TIMESTAMP (Time.ToPackedUint / FromPackedUint) -------------------------------------------


def pack_time(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0,
              microsecond: int = 0) -> int:
    """``Time.ToPackedUint``: ``((((year*13 + month) << 5 | day) << 17 | hour << 12 | minute << 6 | second) << 24)
    | microsecond``; the zero time packs to 0."""
    ymd = ((year * 13 + month) << 5) | day
    hms = (hour << 12) | (minute << 6) | second
    return ((ymd << 17 | hms) << 24) | microsecond


def unpack_time(packed: int) -> tuple[int, int, int, int, int, int, int]:
    """``Time.FromPackedUint``: (year, month, day, hour, minute, second, microsecond)."""
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    ym = ymd >> 5
    hms = ymdhms & ((1 << 17) - 1)
    return (ym // 13, ym % 13, ymd & 0x1F, hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F, packed & ((1 << 24) - 1))


def _time_to_packed(col_id: int, ft: FieldType, value: Any) -> int:
    is_date = ft.tp in (mt.TypeDate, mt.TypeNewDate)
    if isinstance(value, MySQLTime):
        parts = (value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond)
        limits = (9999, 12, 31, 23, 59, 59, 999_999)
        if any(not 0 <= p <= lim for p, lim in zip(parts, limits, strict=True)) or (is_date and any(parts[3:])):
            raise RowCodecError(f"column {col_id} ({mt.type_name(ft.tp)}): {value} is out of range")
        return pack_time(*parts)
    if is_date:
        if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
            raise RowCodecError(f"column {col_id} ({mt.type_name(ft.tp)}) wants a datetime.date, got {value!r}")
        return pack_time(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise RowCodecError(f"column {col_id} ({mt.type_name(ft.tp)}) wants a datetime.datetime, got {value!r}")
    if value.tzinfo is not None:
        if ft.tp != mt.TypeTimestamp:
            raise RowCodecError(f"column {col_id} (DATETIME) wants a naive datetime, got {value!r}")
        value = value.astimezone(dt.UTC).replace(tzinfo=None)  # TIMESTAMP values are stored in UTC
    return pack_time(value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond)


def _packed_to_time(col_id: int, ft: FieldType, packed: int, at: int) -> dt.date | MySQLTime:
    year, month, day, hour, minute, second, micro = unpack_time(packed)
    if year > 9999 or hour > 23 or minute > 59 or second > 59 or micro > 999_999:
        raise RowCodecError(f"column {col_id} ({mt.type_name(ft.tp)}): packed time {packed} at byte {at} is "
                            f"out of range ({year}-{month}-{day} {hour}:{minute}:{second}.{micro})")
    if ft.tp in (mt.TypeDate, mt.TypeNewDate):
        if hour or minute or second or micro:
            raise RowCodecError(f"column {col_id} (DATE): packed time {packed} at byte {at} has a time of day")
        try:
            return dt.date(year, month, day)
        except ValueError:
            return MySQLTime(year, month, day)
    try:
        return dt.datetime(year, month, day, hour, minute, second, micro)
    except ValueError:
        return MySQLTime(year, month, day, hour, minute, second, micro)


def _duration_to_nanos(col_id: int, value: Any) -> int:
    if not isinstance(value, dt.timedelta):
        raise RowCodecError(f"column {col_id} (TIME) wants a datetime.timedelta, got {value!r}")
    nanos = value // dt.timedelta(microseconds=1) * 1000
    if not _INT64_MIN <= nanos <= _INT64_MAX:
        raise RowCodecError(f"column {col_id} (TIME): {value} does not fit int64 nanoseconds")
    return nanos


def _nanos_to_duration(nanos: int) -> dt.timedelta:
    # timedelta stops at microseconds; TiDB never stores finer (fsp <= 6), so truncate toward zero like a cast.
    micros = nanos // 1000 if nanos >= 0 else -(-nanos // 1000)
    return dt.timedelta(microseconds=micros)


# --- JSON (pkg/types/json_binary.go) ----------------------------------------------------------------------------


class _JsonNull:
    """JSON's ``null`` as a whole JSON column value, which SQL's NULL (``None``) must not be taken for."""

    _instance: _JsonNull | None = None

    def __new__(cls) -> _JsonNull:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "JSON_NULL"


JSON_NULL = _JsonNull()


def _json_column_value(doc: Any) -> Any:
    return JSON_NULL if doc is None else doc


def encode_json(value: Any) -> bytes:
    """TiDB's binary JSON of a Python value: a type-code byte, then the body. ``None``/``True``/``False`` are
    literals, ints int64 (uint64 above int64), floats float64, ``str`` strings, lists/tuples arrays, dicts (str
    keys) objects with keys sorted by their UTF-8 bytes. Containers: u32 count, u32 size, key entries (u32 offset,
    u16 length), value entries (type, u32 offset or an inlined literal), keys, values; all little-endian.
    O(size of the result)."""
    buf = bytearray()
    code = _json_append(buf, None if value is JSON_NULL else value, 0)
    return bytes([code]) + bytes(buf)


def _json_append(buf: bytearray, value: Any, depth: int) -> int:
    if depth > _JSON_MAX_DEPTH:
        raise RowCodecError(f"JSON value nests deeper than {_JSON_MAX_DEPTH}")
    if value is None:
        buf.append(JSON_LITERAL_NULL)
        return JSON_LITERAL
    if isinstance(value, bool):
        buf.append(JSON_LITERAL_TRUE if value else JSON_LITERAL_FALSE)
        return JSON_LITERAL
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            buf += struct.pack("<q", value)
            return JSON_INT64
        if 0 <= value <= _UINT64_MAX:
            buf += struct.pack("<Q", value)
            return JSON_UINT64
        raise RowCodecError(f"JSON integer {value} does not fit int64 or uint64")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RowCodecError(f"JSON cannot hold the float {value}")
        buf += struct.pack("<d", value)
        return JSON_FLOAT64
    if isinstance(value, str):
        raw = value.encode()
        buf += _put_uvarint(len(raw)) + raw
        return JSON_STRING
    if isinstance(value, list | tuple):
        _json_append_container(buf, None, list(value), depth)
        return JSON_ARRAY
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise RowCodecError("JSON object keys must be str")
        keys = sorted(value, key=lambda k: k.encode())
        _json_append_container(buf, [k.encode() for k in keys], [value[k] for k in keys], depth)
        return JSON_OBJECT
    raise RowCodecError(f"cannot encode {type(value).__name__} {value!r} as JSON")


def _json_append_container(buf: bytearray, keys: list[bytes] | None, values: list[Any], depth: int) -> None:
    doc = len(buf)
    buf += struct.pack("<II", len(values), 0)
    key_entries = len(buf)
    if keys is not None:
        buf += bytes(6 * len(keys))
    value_entries = len(buf)
    buf += bytes(5 * len(values))
    for i, key in enumerate(keys or ()):
        if len(key) > 0xFFFF:
            raise RowCodecError(f"JSON object key of {len(key)} bytes is longer than 65535")
        struct.pack_into("<IH", buf, key_entries + 6 * i, len(buf) - doc, len(key))
        buf += key
    for i, item in enumerate(values):
        entry = value_entries + 5 * i
        start = len(buf)
        code = _json_append(buf, item, depth + 1)
        buf[entry] = code
        if code == JSON_LITERAL:  # literals live in the entry itself
            buf[entry + 1] = buf[start]
            del buf[start:]
        else:
            struct.pack_into("<I", buf, entry + 1, start - doc)
    struct.pack_into("<I", buf, doc + 4, len(buf) - doc)


def decode_json(data: bytes) -> Any:
    """The Python value of a binary JSON (type-code byte and body), the inverse of ``encode_json``; the body
    may run on past the value. Raises ``RowCodecError`` on corrupt bytes and ``UnsupportedValueError`` for
    opaque/date/datetime/timestamp/duration values. O(len(data))."""
    if not data:
        raise RowCodecError("JSON value is empty (no type code)")
    return _JsonDecoder(len(data)).value(data[0], memoryview(data)[1:], 0)


class _JsonDecoder:
    """Decodes one binary JSON document. Every element takes at least a 5-byte value entry, so a document has
    fewer elements than bytes; ``budget`` enforces that, which keeps corrupt documents whose entries point at
    shared or enclosing data from costing exponential time."""

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def value(self, code: int, body: memoryview, depth: int) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise RowCodecError("JSON value has more elements than its bytes can hold (overlapping entries)")
        if depth > _JSON_MAX_DEPTH:
            raise RowCodecError(f"JSON value nests deeper than {_JSON_MAX_DEPTH}")
        if code == JSON_LITERAL:
            if not body or body[0] > JSON_LITERAL_FALSE:
                raise RowCodecError(f"JSON literal {bytes(body[:1]).hex() or '(missing)'} is not null/true/false")
            return (None, True, False)[body[0]]
        if code in _JSON_NUMBER_FORMATS:
            if len(body) < 8:
                raise RowCodecError(f"JSON number (type {code:#04x}) needs 8 bytes, has {len(body)}")
            return struct.unpack_from(_JSON_NUMBER_FORMATS[code], body)[0]
        if code == JSON_STRING:
            n, start = _read_uvarint(bytes(body[:10]), 0, "JSON string length")
            if start + n > len(body):
                raise RowCodecError(f"JSON string of {n} bytes runs past its value ({len(body) - start} bytes left)")
            return _utf8(bytes(body[start:start + n]), "JSON string")
        if code in (JSON_OBJECT, JSON_ARRAY):
            return self.container(code, body, depth)
        if code in _JSON_UNSUPPORTED:
            raise UnsupportedValueError(
                f"JSON {_JSON_UNSUPPORTED[code]} value (type code {code:#04x}) is not supported")
        raise RowCodecError(f"unknown JSON type code {code:#04x}")

    def container(self, code: int, body: memoryview, depth: int) -> Any:
        if len(body) < 8:
            raise RowCodecError(f"JSON container header needs 8 bytes, has {len(body)}")
        count, size = struct.unpack_from("<II", body)
        key_entries = 8
        value_entries = 8 + 6 * count if code == JSON_OBJECT else 8
        entries_end = value_entries + 5 * count
        if size > len(body) or entries_end > size:
            raise RowCodecError(f"JSON container of {count} elements claims {size} bytes; {len(body)} available, "
                                f"its entries alone need {entries_end}")
        doc = body[:size]
        values = []
        for i in range(count):
            entry = value_entries + 5 * i
            vcode, off = doc[entry], struct.unpack_from("<I", doc, entry + 1)[0]
            if vcode == JSON_LITERAL:
                values.append(self.value(vcode, doc[entry + 1:entry + 2], depth + 1))
            elif not entries_end <= off < size:
                raise RowCodecError(f"JSON element {i} at offset {off} lies outside its container's data "
                                    f"[{entries_end}, {size})")
            else:
                values.append(self.value(vcode, doc[off:], depth + 1))
        if code == JSON_ARRAY:
            return values
        obj = {}
        for i, item in enumerate(values):
            key_off, key_len = struct.unpack_from("<IH", doc, key_entries + 6 * i)
            if key_off + key_len > size:
                raise RowCodecError(f"JSON key {i} at offset {key_off} (+{key_len}) lies outside its object")
            obj[_utf8(bytes(doc[key_off:key_off + key_len]), "JSON object key")] = item
        return obj


def json_size(data: bytes, pos: int) -> int:
    """``types.PeekBytesAsJSON``: how many bytes the binary JSON (type code included) at ``data[pos:]`` takes."""
    if pos >= len(data):
        raise RowCodecError(f"JSON datum at byte {pos} has no type code")
    code, body = data[pos], pos + 1
    if code in (JSON_OBJECT, JSON_ARRAY):
        if body + 8 > len(data):
            raise RowCodecError(f"JSON container at byte {pos} is truncated")
        size = 1 + int.from_bytes(data[body + 4:body + 8], "little")
    elif code == JSON_LITERAL:
        size = 2
    elif code in (JSON_INT64, JSON_UINT64, JSON_FLOAT64, JSON_DATE, JSON_DATETIME, JSON_TIMESTAMP):
        size = 9
    elif code == JSON_DURATION:
        size = 13
    elif code in (JSON_STRING, JSON_OPAQUE):
        head = body + (code == JSON_OPAQUE)  # an opaque value starts with its MySQL type byte
        n, start = _read_uvarint(data, head, f"JSON at byte {pos}")
        size = start + n - pos
    else:
        raise RowCodecError(f"unknown JSON type code {code:#04x} at byte {pos}")
    if pos + size > len(data):
        raise RowCodecError(f"JSON value at byte {pos} needs {size} bytes, the row has {len(data) - pos}")
    return size


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as e:
        raise RowCodecError(f"{what} is not valid UTF-8: {e}") from None


# --- Python value <-> stored kind ---------------------------------------------------------------------------------

# What a column's value is stored as, common to both formats: a signed or unsigned integer, a float, raw bytes,
# an encoded decimal (header + bin) or a binary JSON (type code + body).
_INT, _UINT, _FLOAT, _BYTES, _DECIMAL, _JSON, _VECTOR = "int", "uint", "float", "bytes", "decimal", "json", "vector"
_UNSIGNED_TYPES = frozenset({mt.TypeEnum, mt.TypeSet, mt.TypeBit})
# Column types whose values are stored as integers: v2's compact integers, the datum row's (u)varints.
_INT_STORED_TYPES = mt.INTEGER_TYPES | mt.TIME_TYPES | _UNSIGNED_TYPES | {mt.TypeYear, mt.TypeDuration}


def _require_int(col_id: int, ft: FieldType, value: Any, lo: int, hi: int) -> int:
    if not isinstance(value, int):
        raise RowCodecError(f"column {col_id} ({mt.type_name(ft.tp)}) wants an int, got {value!r}")
    if not lo <= value <= hi:
        raise RowCodecError(f"column {col_id} ({mt.type_name(ft.tp)}): {value} is outside [{lo}, {hi}]")
    return int(value)


def _to_stored(col_id: int, ft: FieldType, value: Any) -> tuple[str, Any]:
    """``encodeValueDatum`` after ``table.CastValue``: the kind and payload a non-NULL value is stored as."""
    tp = ft.tp
    if tp in mt.INTEGER_TYPES:
        if ft.unsigned:
            return _UINT, _require_int(col_id, ft, value, 0, _UINT64_MAX)
        return _INT, _require_int(col_id, ft, value, _INT64_MIN, _INT64_MAX)
    if tp == mt.TypeYear:
        return _INT, _require_int(col_id, ft, value, _INT64_MIN, _INT64_MAX)
    if tp in _UNSIGNED_TYPES:
        return _UINT, _require_int(col_id, ft, value, 0, _UINT64_MAX)
    if tp in (mt.TypeFloat, mt.TypeDouble):
        if not isinstance(value, int | float):
            raise RowCodecError(f"column {col_id} ({mt.type_name(tp)}) wants a float, got {value!r}")
        f = float(value)
        if tp == mt.TypeFloat:
            if math.isfinite(f) and abs(f) > _FLOAT32_MAX:
                raise RowCodecError(f"column {col_id} (FLOAT): {f} is outside float32")
            f = _to_float32(f)
        return _FLOAT, f
    if tp in mt.STRING_TYPES:
        if isinstance(value, str):
            return _BYTES, value.encode()
        if isinstance(value, bytes | bytearray | memoryview):
            return _BYTES, bytes(value)
        raise RowCodecError(f"column {col_id} ({mt.type_name(tp)}) wants str or bytes, got {value!r}")
    if tp == mt.TypeNewDecimal:
        if isinstance(value, bool) or not isinstance(value, Decimal | int):
            raise RowCodecError(f"column {col_id} (DECIMAL) wants a Decimal, got {value!r}")
        precision, frac = (ft.flen, ft.decimal) if ft.flen > 0 and ft.decimal >= 0 else (0, 0)
        try:
            return _DECIMAL, encode_decimal(Decimal(value), precision, frac)
        except RowCodecError as e:
            raise RowCodecError(f"column {col_id}: {e}") from None
    if tp in mt.TIME_TYPES:
        return _UINT, _time_to_packed(col_id, ft, value)
    if tp == mt.TypeDuration:
        return _INT, _duration_to_nanos(col_id, value)
    if tp == mt.TypeJSON:
        try:
            return _JSON, encode_json(value)
        except RowCodecError as e:
            raise RowCodecError(f"column {col_id} (JSON): {e}") from None
    if tp == mt.TypeTiDBVectorFloat32:
        if not isinstance(value, VectorFloat32):
            raise RowCodecError(f"column {col_id} (VECTOR) wants a VectorFloat32, got {value!r}")
        return _VECTOR, value.to_bytes()
    raise RowCodecError(f"column {col_id}: {mt.type_name(tp)} columns have no row value encoding")


def _from_int(col_id: int, ft: FieldType, v: int, at: int) -> Any:
    """An integer as stored (both formats) to the column's Python value."""
    if ft.tp in mt.TIME_TYPES:
        return _packed_to_time(col_id, ft, v, at)
    if ft.tp == mt.TypeDuration:
        return _nanos_to_duration(v)
    return v


def _mismatch(col_id: int, ft: FieldType, what: str, at: int) -> RowCodecError:
    return RowCodecError(f"column {col_id} ({mt.type_name(ft.tp)}): {what} at byte {at} does not fit the column type")


def _decode_v2_value(col_id: int, ft: FieldType, raw: bytes, at: int) -> Any:
    """``decodeColDatum``: one not-NULL v2 value (``raw`` starts at byte ``at`` of the row)."""
    tp = ft.tp
    if tp in _INT_STORED_TYPES:
        if not _compact_len_ok(raw):
            raise RowCodecError(f"column {col_id} ({mt.type_name(tp)}): {len(raw)}-byte value at byte {at} is not "
                                f"1, 2, 4 or 8 bytes")
        signed = tp in (mt.TypeYear, mt.TypeDuration) or (tp in mt.INTEGER_TYPES and not ft.unsigned)
        return _from_int(col_id, ft, int.from_bytes(raw, "little", signed=signed), at)
    if tp in (mt.TypeFloat, mt.TypeDouble):
        if len(raw) != 8:
            raise RowCodecError(f"column {col_id} ({mt.type_name(tp)}): {len(raw)}-byte value at byte {at} is not 8")
        f = decode_float(raw)
        return _to_float32(f) if tp == mt.TypeFloat else f
    if tp in mt.STRING_TYPES:
        return raw if ft.binary else _utf8(raw, f"column {col_id} ({mt.type_name(tp)}) value at byte {at}")
    if tp == mt.TypeNewDecimal:
        try:
            value, _, _, end = decode_decimal(raw, base=at)
        except RowCodecError as e:
            raise RowCodecError(f"column {col_id} (DECIMAL): {e}") from None
        if end != len(raw):
            raise RowCodecError(f"column {col_id} (DECIMAL) value at byte {at} has {len(raw) - end} stray bytes")
        return value
    if tp == mt.TypeJSON:
        try:
            return _json_column_value(decode_json(raw))
        except RowCodecError as e:
            raise type(e)(f"column {col_id} (JSON) value at byte {at}: {e}") from None
    if tp == mt.TypeTiDBVectorFloat32:  # rowcodec decoder.go: types.ZeroCopyDeserializeVectorFloat32
        try:
            return VectorFloat32.from_bytes(raw)
        except VectorError as e:
            raise RowCodecError(f"column {col_id} (VECTOR) value at byte {at}: {e}") from None
    raise _mismatch(col_id, ft, "a value", at)


# --- rowcodec v2 ---------------------------------------------------------------------------------------------


def encode_row_v2(columns: Sequence[tuple[int, FieldType, Any]]) -> bytes:
    """``rowcodec.Encoder.Encode`` without a checksum: a v2 row of ``(column id, type, value)`` triples (``None``
    is NULL; order does not matter). The large layout is used when an id exceeds 255 or the values exceed 65535
    bytes. Raises ``RowCodecError`` for a value the column type cannot hold, a duplicate id or an id outside
    [0, 2**32). O(total value bytes + n log n) for n columns."""
    seen: set[int] = set()
    not_null: list[tuple[int, bytes]] = []
    null_ids: list[int] = []
    for col_id, ft, value in columns:
        if not 0 <= col_id <= 0xFFFFFFFF:
            raise RowCodecError(f"column id {col_id} does not fit the v2 row format (0..2**32-1)")
        if col_id in seen:
            raise RowCodecError(f"column id {col_id} appears twice")
        seen.add(col_id)
        if value is None:
            null_ids.append(col_id)
            continue
        kind, payload = _to_stored(col_id, ft, value)
        if kind == _INT:
            raw = encode_compact_int(payload)
        elif kind == _UINT:
            raw = encode_compact_uint(payload)
        elif kind == _FLOAT:
            raw = encode_float(payload)
        else:  # bytes, decimal, JSON and vectors are stored as they are
            raw = payload
        not_null.append((col_id, raw))
    if len(not_null) > 0xFFFF or len(null_ids) > 0xFFFF:
        raise RowCodecError(f"{len(not_null)} non-NULL and {len(null_ids)} NULL columns: at most 65535 of each")
    not_null.sort(key=lambda c: c[0])
    null_ids.sort()
    values = b"".join(raw for _, raw in not_null)
    offsets: list[int] = []
    end = 0
    for _, raw in not_null:
        end += len(raw)
        offsets.append(end)
    ids = [cid for cid, _ in not_null] + null_ids
    large = any(cid > 0xFF for cid in ids) or len(values) > 0xFFFF
    if len(values) > 0xFFFFFFFF:
        raise RowCodecError(f"row values of {len(values)} bytes exceed the format's 4 GiB")
    header = struct.pack("<BBHH", CODEC_VER, ROW_FLAG_LARGE if large else 0, len(not_null), len(null_ids))
    if large:
        layout = struct.pack(f"<{len(ids)}I{len(offsets)}I", *ids, *offsets)
    else:
        layout = bytes(ids) + struct.pack(f"<{len(offsets)}H", *offsets)
    return header + layout + values


def parse_row_v2(data: bytes) -> RowV2:
    """``row.fromBytes`` with every bound checked: the header, ids, offsets, values and checksum of a v2 row.
    Raises ``RowCodecError`` on a wrong version byte, truncation, ids out of order, decreasing offsets, offsets
    past the end, a bad checksum header or bytes after the row. O(number of columns)."""
    n = len(data)
    if n < 6:
        raise RowCodecError(f"row v2 header truncated: {n} bytes, the header is 6")
    if data[0] != CODEC_VER:
        raise RowCodecError(f"unknown codec version {data[0]} at byte 0 (row v2 is {CODEC_VER})")
    flags = data[1]
    large = bool(flags & ROW_FLAG_LARGE)
    n_not_null, n_null = struct.unpack_from("<HH", data, 2)
    id_size, off_size = (4, 4) if large else (1, 2)
    ids_end = 6 + (n_not_null + n_null) * id_size
    offsets_end = ids_end + n_not_null * off_size
    if offsets_end > n:
        raise RowCodecError(f"row v2 truncated: {n_not_null} + {n_null} column ids and {n_not_null} offsets need "
                            f"bytes 6..{offsets_end}, the row has {n}")
    if large:
        ids = struct.unpack_from(f"<{n_not_null + n_null}I", data, 6)
        offsets = struct.unpack_from(f"<{n_not_null}I", data, ids_end)
    else:
        ids = tuple(data[6:ids_end])
        offsets = struct.unpack_from(f"<{n_not_null}H", data, ids_end)
    not_null_ids, null_ids = ids[:n_not_null], ids[n_not_null:]
    for group, name, base in ((not_null_ids, "non-NULL", 0), (null_ids, "NULL", n_not_null)):
        for i in range(1, len(group)):
            if group[i] <= group[i - 1]:
                raise RowCodecError(f"row v2 {name} column ids are not ascending: {group[i - 1]} then {group[i]} "
                                    f"at byte {6 + (base + i) * id_size}")
    previous = 0
    for i, off in enumerate(offsets):
        if off < previous:
            raise RowCodecError(f"row v2 offset of column {not_null_ids[i]} at byte {ids_end + i * off_size} is "
                                f"{off}, before the previous end {previous}")
        previous = off
    values_end = offsets_end + previous
    if values_end > n:
        raise RowCodecError(f"row v2 offsets run past the end: values end at byte {values_end} (last offset "
                            f"{previous}), the row has {n} bytes")
    checksum = None
    cursor = values_end
    if flags & ROW_FLAG_CHECKSUM:
        if cursor >= n:
            raise RowCodecError(f"row v2 checksum header missing at byte {cursor}")
        header = data[cursor]
        version = header & CHECKSUM_MASK_VERSION
        if version not in CHECKSUM_VERSIONS:
            raise RowCodecError(f"row v2 checksum version {version} at byte {cursor} is unknown")
        extra = bool(header & CHECKSUM_FLAG_EXTRA)
        need = 1 + 4 * (1 + extra)
        if cursor + need > n:
            raise RowCodecError(f"row v2 checksum at byte {cursor} needs {need} bytes, the row has {n - cursor}")
        sums = struct.unpack_from("<II" if extra else "<I", data, cursor + 1)
        checksum = RowChecksum(version, sums[0], sums[1] if extra else None)
        cursor += need
    if cursor != n:
        raise RowCodecError(f"row v2 has {n - cursor} stray bytes after byte {cursor}")
    return RowV2(large, tuple(not_null_ids), tuple(null_ids), tuple(offsets), bytes(data[offsets_end:values_end]),
                 offsets_end, checksum)


def _decode_v2(data: bytes, schema: Mapping[int, FieldType]) -> dict[int, Any]:
    row = parse_row_v2(data)
    out: dict[int, Any] = {}
    start = 0
    for col_id, end in zip(row.not_null_ids, row.offsets, strict=True):
        ft = schema.get(col_id)
        if ft is not None:
            out[col_id] = _decode_v2_value(col_id, ft, row.values[start:end], row.values_at + start)
        start = end
    for col_id in row.null_ids:
        if col_id in schema:
            out[col_id] = None
    return out


# --- datum row (v1) ------------------------------------------------------------------------------------------


def _encode_datum(kind: str, payload: Any) -> bytes:
    """``codec.EncodeValue`` of a flattened datum (values use the compact, not the comparable, forms)."""
    if kind == _INT:
        return bytes([VARINT_FLAG]) + _put_varint(payload)
    if kind == _UINT:
        return bytes([UVARINT_FLAG]) + _put_uvarint(payload)
    if kind == _FLOAT:
        return bytes([FLOAT_FLAG]) + encode_float(payload)
    if kind == _BYTES:
        return bytes([COMPACT_BYTES_FLAG]) + _put_varint(len(payload)) + payload
    if kind == _VECTOR:
        return bytes([VECTOR_FLOAT32_FLAG]) + payload  # codec.go encode: vectorFloat32Flag, then SerializeTo
    return bytes([DECIMAL_FLAG if kind == _DECIMAL else JSON_FLAG]) + payload


def encode_row_datum(columns: Sequence[tuple[int, FieldType, Any]]) -> bytes:
    """``tablecodec.EncodeOldRow``: column-id datum (varint), value datum, ... in the given order; times, ENUM,
    SET and BIT flattened to uvarints, TIME to a varint of nanoseconds; no columns is ``b"\\x00"``. O(total
    value bytes)."""
    if not columns:
        return bytes([NIL_FLAG])
    out = bytearray()
    for col_id, ft, value in columns:
        if not _INT64_MIN <= col_id <= _INT64_MAX:
            raise RowCodecError(f"column id {col_id} does not fit int64")
        out += bytes([VARINT_FLAG]) + _put_varint(col_id)
        out += bytes([NIL_FLAG]) if value is None else _encode_datum(*_to_stored(col_id, ft, value))
    return bytes(out)


def _read_datum(data: bytes, pos: int) -> tuple[str | None, Any, int]:
    """``codec.DecodeOne`` at ``data[pos:]``: (kind or None for NULL, payload, end); JSON payloads stay bytes."""
    flag = data[pos]
    body = pos + 1

    def fixed8() -> int:
        if body + 8 > len(data):
            raise RowCodecError(f"datum (flag {flag}) at byte {pos} needs 8 bytes, has {len(data) - body}")
        return int.from_bytes(data[body:body + 8], "big")

    what = f"datum (flag {flag}) at byte {pos}"
    if flag == NIL_FLAG:
        return None, None, body
    if flag == INT_FLAG:
        return _INT, fixed8() - _SIGN_MASK, body + 8  # comparable int: sign bit flipped
    if flag == UINT_FLAG:
        return _UINT, fixed8(), body + 8
    if flag == DURATION_FLAG:
        return _INT, fixed8() - _SIGN_MASK, body + 8
    if flag == FLOAT_FLAG:
        fixed8()
        return _FLOAT, decode_float(data[body:body + 8]), body + 8
    if flag == VARINT_FLAG:
        v, end = _read_varint(data, body, what)
        return _INT, v, end
    if flag == UVARINT_FLAG:
        v, end = _read_uvarint(data, body, what)
        return _UINT, v, end
    if flag == COMPACT_BYTES_FLAG:
        length, start = _read_varint(data, body, what)
        if length < 0 or start + length > len(data):
            raise RowCodecError(f"{what}: {length} bytes of data, {len(data) - start} left in the row")
        return _BYTES, bytes(data[start:start + length]), start + length
    if flag == BYTES_FLAG:
        try:
            raw, used = _decode_memcomparable(data[body:])
        except KeyDecodeError as e:
            raise RowCodecError(f"{what}: {e}") from None
        return _BYTES, raw, body + used
    if flag == DECIMAL_FLAG:
        value, _, _, end = decode_decimal(data, body)
        return _DECIMAL, value, end
    if flag == JSON_FLAG:
        size = json_size(data, body)
        return _JSON, bytes(data[body:body + size]), body + size
    if flag == VECTOR_FLOAT32_FLAG:  # types.PeekBytesAsVectorFloat32: the count says how many bytes follow
        if body + 4 > len(data):
            raise RowCodecError(f"{what}: bad VectorFloat32 value header (len={len(data) - body})")
        end = body + 4 + 4 * int.from_bytes(data[body:body + 4], "little")
        if end > len(data):
            raise RowCodecError(f"{what}: bad VectorFloat32 value (len={len(data) - body}, expected={end - body})")
        return _VECTOR, VectorFloat32.from_bytes(bytes(data[body:end])), end
    raise RowCodecError(f"unknown datum flag {flag} at byte {pos}")


def _datum_value(col_id: int, ft: FieldType, kind: str | None, payload: Any, at: int) -> Any:
    """``tablecodec.Unflatten``: a decoded datum as the column's Python value."""
    tp = ft.tp
    if kind is None:
        return None
    if kind in (_INT, _UINT) and tp in _INT_STORED_TYPES:
        return _from_int(col_id, ft, payload, at)
    if kind == _FLOAT and tp in (mt.TypeFloat, mt.TypeDouble):
        return _to_float32(payload) if tp == mt.TypeFloat else payload
    if kind == _BYTES and tp in mt.STRING_TYPES:
        return payload if ft.binary else _utf8(payload, f"column {col_id} ({mt.type_name(tp)}) value at byte {at}")
    if kind == _DECIMAL and tp == mt.TypeNewDecimal:
        return payload
    if kind == _JSON and tp == mt.TypeJSON:
        try:
            return _json_column_value(decode_json(payload))
        except RowCodecError as e:
            raise type(e)(f"column {col_id} (JSON) value at byte {at}: {e}") from None
    if kind == _VECTOR and tp == mt.TypeTiDBVectorFloat32:
        return payload
    raise _mismatch(col_id, ft, f"{kind} datum", at)


def _decode_datum_row(data: bytes, schema: Mapping[int, FieldType]) -> dict[int, Any]:
    if data == bytes([NIL_FLAG]):
        return {}
    out: dict[int, Any] = {}
    pos = 0
    while pos < len(data):
        kind, col_id, value_at = _read_datum(data, pos)
        if kind not in (_INT, _UINT):
            raise RowCodecError(f"column id datum at byte {pos} is {kind or 'NULL'}, not an integer")
        if value_at >= len(data):
            raise RowCodecError(f"row ends after column id {col_id} (byte {pos}) without its value")
        kind, payload, pos = _read_datum(data, value_at)
        ft = schema.get(col_id)
        if ft is not None:
            out[col_id] = _datum_value(col_id, ft, kind, payload, value_at)
    return out


# --- both formats ----------------------------------------------------------------------------------------------


def decode_row(data: bytes, schema: Mapping[int, FieldType]) -> dict[int, Any]:
    """``tablecodec.DecodeRowToDatumMap``: the values of a row, v2 (first byte 128) or datum format, keyed by
    column id. Ids the schema lacks (dropped columns) are skipped; ids the schema has but the row lacks are left
    out (the caller applies defaults); NULL is ``None``; ``b""`` is an empty row. Raises ``RowCodecError`` (never
    ``IndexError``/``struct.error``) on corrupt input. O(len(data)); a v2 row decodes only the schema's values."""
    data = bytes(data)
    if not data:
        return {}
    if data[0] == CODEC_VER:
        return _decode_v2(data, schema)
    if data[0] > CODEC_VER:  # above every datum flag a column id can start with
        raise RowCodecError(f"unknown codec version {data[0]} at byte 0 (row v2 is {CODEC_VER})")
    return _decode_datum_row(data, schema)


def row_checksum(data: bytes) -> RowChecksum | None:
    """The checksum trailer of a v2 row, ``None`` if it has none or is a datum row."""
    data = bytes(data)
    if not data or data[0] != CODEC_VER:
        return None
    return parse_row_v2(data).checksum
