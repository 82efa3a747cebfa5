"""Batch decoding of TiDB row values into typed Arrow columns, with numpy over the whole batch.

The Spark job mounts millions of row values; decoding them one by one with :mod:`cdc_core.codec.rowcodec` would
cost a Python call per row per column. :func:`decode_rows` takes an Arrow array of values (one table, one
schema) and works on its buffers: it parses every rowcodec v2 header at once, finds a column in all rows with one
``searchsorted`` over the rows' sorted ids (``row << 32 | id``), gathers the value bytes with fancy indexing and
converts a whole column at a time. Formats as in ``rowcodec`` (TiDB ``pkg/util/rowcodec``; value encodings from
``encodeValueDatum``): compact little-endian integers of 1, 2, 4 or 8 bytes, memcomparable floats, DECIMAL as
precision, frac and ``MyDecimal.ToBin`` words, times packed (``Time.ToPackedUint``), strings raw.

Per-value Python remains only where a batch is not the common case: rows in the older datum format (clusters
upgraded from before v2), DECIMAL values stored with a precision or scale the column no longer has (after a
MODIFY COLUMN, until TiDB's reorg rewrites them), DECIMAL columns wider than 38 digits, and JSON columns.

Arrow types (:func:`arrow_type`): TINYINT int8, SMALLINT int16, MEDIUMINT/INT int32, BIGINT int64 (UNSIGNED one
size up; BIGINT UNSIGNED decimal128(20,0)); FLOAT float32, DOUBLE float64; DECIMAL(p,s) decimal128(p,s) for p <= 38,
else string (its text with exactly s fraction digits, as TiDB prints it: every digit kept); DATE date32; DATETIME
timestamp[us]; TIMESTAMP timestamp[us, UTC]; TIME int64 nanoseconds; YEAR int16; text string and binary strings
binary; ENUM/SET string; BIT binary (big-endian, ``(n + 7) // 8`` bytes); JSON string; VECTOR list<float32> (the
field named ``element``, as Delta's schema names it). A date Delta's DATE/TIMESTAMP cannot hold (a zero date, a zero
month or day, year 0, an invalid day: values TiDB stores under a permissive ``sql_mode``) is NULL, and
:func:`decode_batch` says which rows it mapped so (``column_type.maps_to_null``); bytes no TiDB value has are a
:class:`RowDecodeError`, never a NULL.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from cdc_core.codec import mysql_type as mt
from cdc_core.codec import rowcodec
from cdc_core.codec.rowcodec import RowCodecError
from cdc_core.codec.value_text import WIDE_DECIMAL, decimal_text
from cdc_core.codec.vector import VectorFloat32

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_MAX_ARROW_PRECISION = 38
VECTOR_TYPE = pa.list_(pa.field("element", pa.float32()))
_SIGN = np.uint64(1 << 63)
_EPOCH_DAYS = 719_468  # days from 0000-03-01 to 1970-01-01 in the proleptic Gregorian calendar
_COMPACT_INT_TYPES = mt.INTEGER_TYPES | {mt.TypeYear, mt.TypeDuration, mt.TypeEnum, mt.TypeSet, mt.TypeBit}


class RowDecodeError(RowCodecError):
    """A value of a batch that does not decode; ``row`` is its index in the batch, ``col_id`` its column."""

    def __init__(self, message: str, *, row: int | None = None, col_id: int | None = None) -> None:
        super().__init__(message)
        self.row = row
        self.col_id = col_id


@dataclass(frozen=True)
class ArrowColumn:
    """A column to decode: its id, type, and the value of rows that lack the id (its origin default; None = NULL),
    as the scalar decoder returns values."""

    col_id: int
    ft: mt.FieldType
    default: Any = None


@dataclass(frozen=True)
class Decoded:
    """What :func:`decode_batch` gives: one array per column, and per column the rows whose value the decoder mapped
    to NULL (a date Delta cannot hold; None: no row of that column)."""

    arrays: list[pa.Array]
    mapped: list[np.ndarray | None]


def _decimal_digits(ft: mt.FieldType) -> tuple[int, int]:
    return (ft.flen, ft.decimal) if ft.flen > 0 and ft.decimal >= 0 else (10, 0)


def arrow_type(ft: mt.FieldType) -> pa.DataType:
    """The Arrow type a column of type ``ft`` decodes to (the module docstring lists them)."""
    tp = ft.tp
    if tp in mt.INTEGER_TYPES:
        signed = {mt.TypeTiny: pa.int8(), mt.TypeShort: pa.int16(), mt.TypeInt24: pa.int32(),
                  mt.TypeLong: pa.int32(), mt.TypeLonglong: pa.int64()}
        unsigned = {mt.TypeTiny: pa.int16(), mt.TypeShort: pa.int32(), mt.TypeInt24: pa.int32(),
                    mt.TypeLong: pa.int64(), mt.TypeLonglong: pa.decimal128(20, 0)}
        return (unsigned if ft.unsigned else signed)[tp]
    if tp == mt.TypeFloat:
        return pa.float32()
    if tp == mt.TypeDouble:
        return pa.float64()
    if tp == mt.TypeNewDecimal:
        p, s = _decimal_digits(ft)
        return pa.string() if p > _MAX_ARROW_PRECISION else pa.decimal128(p, s)
    if tp in (mt.TypeDate, mt.TypeNewDate):
        return pa.date32()
    if tp == mt.TypeDatetime:
        return pa.timestamp("us")
    if tp == mt.TypeTimestamp:
        return pa.timestamp("us", tz="UTC")
    if tp == mt.TypeDuration:
        return pa.int64()
    if tp == mt.TypeYear:
        return pa.int16()
    if tp in mt.STRING_TYPES:
        return pa.binary() if ft.binary else pa.string()
    if tp in (mt.TypeEnum, mt.TypeSet, mt.TypeJSON):
        return pa.string()
    if tp == mt.TypeBit:
        return pa.binary()
    if tp == mt.TypeTiDBVectorFloat32:
        return VECTOR_TYPE
    raise rowcodec.UnsupportedValueError(f"{mt.type_name(tp)} columns are not supported")


# --- the batch's layout ------------------------------------------------------------------------------------------


class _Layout:
    """Every v2 row's not-null and null ids and the absolute byte span of each not-null value."""

    def __init__(self, values: pa.Array) -> None:
        n = len(values)
        self.n = n
        bufs = values.buffers()
        off_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
        offsets = np.frombuffer(bufs[1], dtype=off_type)[values.offset:values.offset + n + 1].astype(np.int64)
        raw = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and len(bufs[2]) else np.zeros(0, np.uint8)
        self.data = np.concatenate([raw, np.zeros(8, np.uint8)])  # gathers of up to 8 bytes never run off the end
        self.valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        starts, ends = offsets[:-1], offsets[1:]
        lens = ends - starts
        nonempty = self.valid & (lens > 0)
        first = np.where(nonempty, self.data[np.minimum(starts, len(raw))], 0)
        self.v2 = nonempty & (first == rowcodec.CODEC_VER)
        self.datum_rows = np.flatnonzero(nonempty & ~self.v2)
        rows = np.flatnonzero(self.v2)
        self.rows = rows
        s, e = starts[rows], ends[rows]
        short = np.flatnonzero(e - s < 6)
        if len(short):
            self._fail(rows[short[0]], "is shorter than a v2 header (6 bytes)")
        flags = self.data[s + 1]
        large = (flags & rowcodec.ROW_FLAG_LARGE) != 0
        nn = self._u16(s + 2)
        nl = self._u16(s + 4)
        idw = np.where(large, 4, 1)
        offw = np.where(large, 4, 2)
        ids_at = s + 6
        offs_at = ids_at + (nn + nl) * idw
        vals_at = offs_at + nn * offw
        over = np.flatnonzero(vals_at > e)
        if len(over):
            self._fail(rows[over[0]], f"has {nn[over[0]]} + {nl[over[0]]} ids that run past its end")
        # Not-null entries, flattened: entry j belongs to v2 row rowpos[j] and is its k[j]-th id.
        self.nn_first = np.concatenate([[0], np.cumsum(nn)]).astype(np.int64)
        rowpos = np.repeat(np.arange(len(rows)), nn)
        k = np.arange(len(rowpos)) - self.nn_first[rowpos]
        ids = self._id(ids_at[rowpos] + k * idw[rowpos], large[rowpos])
        end = self._uint(offs_at[rowpos] + k * offw[rowpos], offw[rowpos])
        prev = np.where(k > 0, np.concatenate([[0], end[:-1]]), 0)
        self.val_start = vals_at[rowpos] + prev
        self.val_end = vals_at[rowpos] + end
        bad = np.flatnonzero((end < prev) | (self.val_end > e[rowpos]))
        if len(bad):
            self._fail(rows[rowpos[bad[0]]], f"has a value offset {end[bad[0]]} out of order or past its end")
        self.nn_keys = self._keys(rowpos, ids, rows)
        nrow = np.repeat(np.arange(len(rows)), nl)
        nk = np.arange(len(nrow)) - np.concatenate([[0], np.cumsum(nl)])[nrow].astype(np.int64)
        nids = self._id(ids_at[nrow] + (nn[nrow] + nk) * idw[nrow], large[nrow])
        self.null_keys = self._keys(nrow, nids, rows)

    def _fail(self, row: int, what: str) -> None:
        raise RowDecodeError(f"row value {row} of the batch {what}", row=int(row))

    def _u16(self, at: np.ndarray) -> np.ndarray:
        return self.data[at].astype(np.int64) | (self.data[at + 1].astype(np.int64) << 8)

    def _uint(self, at: np.ndarray, width: np.ndarray) -> np.ndarray:
        out = np.zeros(len(at), np.int64)
        for i in range(4):
            out |= np.where(i < width, self.data[at + i].astype(np.int64) << (8 * i), 0)
        return out

    def _id(self, at: np.ndarray, large: np.ndarray) -> np.ndarray:
        return np.where(large, self._uint(at, np.full(len(at), 4)), self.data[at].astype(np.int64))

    def _keys(self, rowpos: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        keys = (rowpos.astype(np.int64) << 32) | ids
        unsorted = np.flatnonzero(np.diff(keys) <= 0)
        if len(unsorted):
            self._fail(rows[rowpos[unsorted[0] + 1]], "has column ids that are not strictly ascending")
        return keys

    def find(self, col_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(v2 row positions holding a value, their entry indices, v2 row positions holding NULL) of ``col_id``."""
        probe = (np.arange(len(self.rows), dtype=np.int64) << 32) | col_id
        pos = np.searchsorted(self.nn_keys, probe)
        hit = pos < len(self.nn_keys)
        hit[hit] = self.nn_keys[pos[hit]] == probe[hit]
        npos = np.searchsorted(self.null_keys, probe)
        nhit = npos < len(self.null_keys)
        nhit[nhit] = self.null_keys[npos[nhit]] == probe[nhit]
        return np.flatnonzero(hit), pos[hit], np.flatnonzero(nhit)


# --- value conversions (one column's found values at a time) ----------------------------------------------------


def _gather(data: np.ndarray, start: np.ndarray, width: int) -> np.ndarray:
    return data[start[:, None] + np.arange(width)]


def _compact(data: np.ndarray, start: np.ndarray, length: np.ndarray, signed: bool) -> np.ndarray:
    """Little-endian integers of 1, 2, 4 or 8 bytes as int64 (signed) or uint64 bit patterns."""
    b = _gather(data, start, 8).astype(np.uint64)
    keep = np.arange(8) < length[:, None]
    u = (np.where(keep, b, 0) << (np.arange(8, dtype=np.uint64) * np.uint64(8))).sum(axis=1, dtype=np.uint64)
    if not signed:
        return u
    shift = (64 - 8 * length).astype(np.uint64)
    return (u << shift).view(np.int64) >> shift.astype(np.int64)


def _float(data: np.ndarray, start: np.ndarray) -> np.ndarray:
    b = _gather(data, start, 8).astype(np.uint64)
    u = (b << (np.arange(7, -1, -1, dtype=np.uint64) * np.uint64(8))).sum(axis=1, dtype=np.uint64)
    u = np.where(u & _SIGN, u ^ _SIGN, ~u)  # memcomparable: positive had the sign flipped, negative all bits
    return u.view(np.float64)


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    # Howard Hinnant's days_from_civil, vectorized: no per-row datetime objects.
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - _EPOCH_DAYS


def _leap(y: np.ndarray) -> np.ndarray:
    return ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)


_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def _decimal_words(b: np.ndarray, precision: int, frac: int) -> list[tuple[np.ndarray, int]]:
    """The (value, digits) groups of ``ToBin`` bytes ``b`` (rows x size), already sign-normalized."""
    groups: list[tuple[np.ndarray, int]] = []
    pos = 0

    def take(digits: int) -> None:
        nonlocal pos
        width = _DIG2BYTES[digits] if digits < 9 else 4
        v = np.zeros(len(b), np.uint64)
        for i in range(width):
            v = (v << np.uint64(8)) | b[:, pos + i].astype(np.uint64)
        pos += width
        groups.append((v, digits))

    words, lead = divmod(precision - frac, 9)
    if lead:
        take(lead)
    for _ in range(words):
        take(9)
    full, trail = divmod(frac, 9)
    for _ in range(full):
        take(9)
    if trail:
        take(trail)
    return groups


def _decimal128(groups: list[tuple[np.ndarray, int]], negative: np.ndarray, scale_up: int) -> np.ndarray:
    """The unscaled values as 16-byte little-endian two's complement (rows x 16 uint8): 4 uint32 limbs kept in
    uint64 so that a limb times 10^9 plus a carry never overflows."""
    m = len(negative)
    limbs = np.zeros((4, m), np.uint64)
    mask = np.uint64(0xFFFFFFFF)

    def mul_add(mult: int, add: np.ndarray) -> None:
        carry = add.astype(np.uint64)
        for i in range(4):
            t = limbs[i] * np.uint64(mult) + carry
            limbs[i] = t & mask
            carry = t >> np.uint64(32)

    for v, digits in groups:
        mul_add(10**digits, v)
    while scale_up > 0:
        step = min(scale_up, 9)
        mul_add(10**step, np.zeros(m, np.uint64))
        scale_up -= step
    if negative.any():
        inv = limbs ^ mask
        carry = np.ones(m, np.uint64)
        for i in range(4):
            t = inv[i] + carry
            inv[i] = t & mask
            carry = t >> np.uint64(32)
        limbs = np.where(negative, inv, limbs)
    return np.ascontiguousarray(limbs.T.astype("<u4")).view(np.uint8).reshape(m, 16)


# --- one column ---------------------------------------------------------------------------------------------------


class _Column:
    def __init__(self, layout: _Layout, col: ArrowColumn) -> None:
        self.layout = layout
        self.col = col
        self.type = arrow_type(col.ft)
        self.mapped: np.ndarray | None = None  # of the found values decode() gave: mapped to NULL

    def fail(self, v2pos: int, what: str) -> RowDecodeError:
        row = int(self.layout.rows[v2pos])
        return RowDecodeError(f"column {self.col.col_id} ({mt.type_name(self.col.ft.tp)}) of row value {row}: {what}",
                              row=row, col_id=self.col.col_id)

    def decode(self, at: np.ndarray, entries: np.ndarray) -> pa.Array:
        """The values of ``entries`` (v2 rows ``at``) as an Arrow array of the column's type."""
        lay = self.layout
        start, end = lay.val_start[entries], lay.val_end[entries]
        length = end - start
        tp, ft = self.col.ft.tp, self.col.ft
        if tp in _COMPACT_INT_TYPES or tp in mt.TIME_TYPES:
            bad = np.flatnonzero(~np.isin(length, (1, 2, 4, 8)))
            if len(bad):
                raise self.fail(at[bad[0]], f"a {length[bad[0]]}-byte integer (1, 2, 4 or 8 bytes expected)")
            signed = tp in (mt.TypeYear, mt.TypeDuration) or (tp in mt.INTEGER_TYPES and not ft.unsigned)
            ints = _compact(lay.data, start, length, signed)
            return self._from_ints(at, ints)
        if tp in (mt.TypeFloat, mt.TypeDouble):
            bad = np.flatnonzero(length != 8)
            if len(bad):
                raise self.fail(at[bad[0]], f"a {length[bad[0]]}-byte float (8 bytes expected)")
            return pa.array(_float(lay.data, start), pa.float64()).cast(self.type)
        if tp in mt.STRING_TYPES:
            return self._bytes(at, start, length)
        if tp == mt.TypeNewDecimal:
            return self._decimal(at, start, length) if pa.types.is_decimal(self.type) else self._decimal_text(at,
                                                                                                           start, end)
        if tp == mt.TypeTiDBVectorFloat32:
            return self._vector(at, start, length)
        if tp == mt.TypeJSON:
            texts = []
            for i, (a, b) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
                try:
                    texts.append(json_text(rowcodec.decode_json(lay.data[a:b].tobytes())))
                except RowCodecError as exc:
                    raise self.fail(at[i], str(exc)) from None
            return pa.array(texts, pa.string())
        raise self.fail(at[0] if len(at) else 0, "this column type has no row value encoding")

    def _decimal_text(self, at: np.ndarray, start: np.ndarray, end: np.ndarray) -> pa.Array:
        """A DECIMAL wider than Arrow's: each value's text with exactly the column's scale (value by value)."""
        _, scale = _decimal_digits(self.col.ft)
        texts = []
        for i, (a, b) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
            try:
                value, _, _, used = rowcodec.decode_decimal(self.layout.data[a:b].tobytes())
            except RowCodecError as exc:
                raise self.fail(at[i], str(exc)) from None
            if used != b - a:
                raise self.fail(at[i], f"a DECIMAL with {b - a - used} stray bytes")
            texts.append(decimal_text(value, scale))
        return pa.array(texts, pa.string())

    def _vector(self, at: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
        """VECTOR values (u32 count, then the float32 elements, little-endian: ``VectorFloat32.SerializeTo``) as one
        list array over all their elements, with no Python per value."""
        short = np.flatnonzero(length < 4)
        if len(short):
            raise self.fail(at[short[0]], f"bad VectorFloat32 value header (len={length[short[0]]})")
        count = _compact(self.layout.data, start, np.full(len(start), 4), signed=False).astype(np.int64)
        wrong = np.flatnonzero(length != 4 + 4 * count)
        if len(wrong):
            i = wrong[0]
            raise self.fail(at[i], f"bad VectorFloat32 value (len={length[i]}, expected={4 + 4 * count[i]})")
        offsets = np.concatenate([[0], np.cumsum(count)]).astype(np.int32)
        body_len = length - 4
        idx = np.repeat(start + 4 - np.concatenate([[0], np.cumsum(body_len)[:-1]]), body_len) + np.arange(
            int(body_len.sum()))
        floats = self.layout.data[idx].view("<f4") if len(idx) else np.zeros(0, np.float32)
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(floats, pa.float32()),
                                        type=VECTOR_TYPE)

    def _bytes(self, at: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
        offsets = np.concatenate([[0], np.cumsum(length)]).astype(np.int32)
        idx = np.repeat(start - offsets[:-1], length) + np.arange(offsets[-1])
        body = self.layout.data[idx]
        arr = pa.Array.from_buffers(self.type, len(length), [None, pa.py_buffer(offsets), pa.py_buffer(body)])
        if self.type == pa.string():
            try:
                arr.validate(full=True)
            except pa.ArrowInvalid:
                for i in range(len(arr)):
                    try:
                        body[offsets[i]:offsets[i + 1]].tobytes().decode()
                    except UnicodeDecodeError as exc:
                        raise self.fail(at[i], f"text that is not UTF-8 ({exc.reason} at byte {exc.start})") from None
        return arr

    def _from_ints(self, at: np.ndarray, ints: np.ndarray) -> pa.Array:
        tp, ft = self.col.ft.tp, self.col.ft
        if tp in mt.TIME_TYPES:
            return self._time(at, ints.astype(np.uint64))
        if tp == mt.TypeEnum or tp == mt.TypeSet:
            return self._names(at, ints.astype(np.uint64))
        if tp == mt.TypeBit:
            width = max(1, (ft.flen if ft.flen > 0 else 1) + 7) // 8
            be = ints.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 8 - width:]
            return pa.array([r.tobytes() for r in be], pa.binary()) if len(be) else pa.array([], pa.binary())
        if isinstance(self.type, pa.Decimal128Type):  # BIGINT UNSIGNED
            return pa.array(ints.astype(np.uint64), pa.uint64()).cast(self.type)
        values = pa.array(ints, pa.uint64() if ints.dtype == np.uint64 else pa.int64())
        try:
            return values.cast(self.type)
        except pa.ArrowInvalid:
            lo, hi = (np.iinfo(self.type.to_pandas_dtype()).min, np.iinfo(self.type.to_pandas_dtype()).max)
            bad = np.flatnonzero((ints < lo) | (ints > hi))
            raise self.fail(at[bad[0]], f"{ints[bad[0]]} does not fit {self.type}") from None

    def _time(self, at: np.ndarray, packed: np.ndarray) -> pa.Array:
        micro = (packed & np.uint64(0xFFFFFF)).astype(np.int64)
        ymdhms = (packed >> np.uint64(24)).astype(np.int64)
        ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
        day, ym = ymd & 31, ymd >> 5
        year, month = ym // 13, ym % 13
        hour, minute, second = hms >> 12, (hms >> 6) & 63, hms & 63
        mdays = _MONTH_DAYS[np.clip(month, 0, 12)] + ((month == 2) & _leap(year))
        # What TiDB can store (checkDateType, checkMonthDay with ALLOW_INVALID_DATES: days up to 31) ...
        sane = ((year <= 9999) & (month <= 12) & (day <= 31) & (hour <= 23) & (minute <= 59) & (second <= 59)
                & (micro <= 999_999))
        is_date = self.col.ft.tp in (mt.TypeDate, mt.TypeNewDate)
        if is_date:
            sane &= (hour == 0) & (minute == 0) & (second == 0) & (micro == 0)
        bad = np.flatnonzero(~sane)
        if len(bad):
            i = bad[0]
            raise self.fail(at[i], f"{year[i]:04d}-{month[i]:02d}-{day[i]:02d} {hour[i]:02d}:{minute[i]:02d}:"
                                   f"{second[i]:02d}.{micro[i]:06d} is no date TiDB stores")
        # ... and what Delta's DATE/TIMESTAMP cannot (0001-01-01 onwards, real days): NULL, and counted
        mapped = (year < 1) | (month < 1) | (day < 1) | (day > mdays)
        self.mapped = mapped if mapped.any() else None
        year, month, day = (np.where(mapped, v, x) for v, x in ((1970, year), (1, month), (1, day)))
        days = _days_from_civil(year, month, day)
        if is_date:
            return pa.array(days.astype(np.int32), pa.int32(), mask=mapped).view(pa.date32())
        us = days * 86_400_000_000 + ((hour * 60 + minute) * 60 + second) * 1_000_000 + micro
        return pa.array(us, pa.int64(), mask=mapped).view(self.type)

    def _names(self, at: np.ndarray, ints: np.ndarray) -> pa.Array:
        elems = self.col.ft.elems
        uniq, inverse = np.unique(ints, return_inverse=True)
        names = []
        for u in uniq.tolist():
            if self.col.ft.tp == mt.TypeEnum:
                if u > len(elems):
                    raise self.fail(at[int(np.flatnonzero(ints == u)[0])], f"ENUM index {u} past {len(elems)} members")
                names.append(elems[u - 1] if u else "")
            else:
                if u >> len(elems):
                    raise self.fail(at[int(np.flatnonzero(ints == u)[0])], f"SET bits {u:#x} past {len(elems)} members")
                names.append(",".join(e for i, e in enumerate(elems) if u >> i & 1))
        return pa.array(names, pa.string()).take(pa.array(inverse.reshape(-1)))

    def _decimal(self, at: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
        data = self.layout.data
        assert isinstance(self.type, pa.Decimal128Type)
        p, s = self.type.precision, self.type.scale
        short = np.flatnonzero(length < 3)
        if len(short):
            raise self.fail(at[short[0]], f"a {length[short[0]]}-byte DECIMAL (at least 3 bytes)")
        header = data[start].astype(np.int64) << 8 | data[start + 1]
        out = np.zeros((len(start), 16), np.uint8)
        for h in np.unique(header).tolist():
            sel = np.flatnonzero(header == h)
            prec, frac = h >> 8, h & 0xFF
            try:
                size = rowcodec.decimal_bin_size(prec, frac)
            except RowCodecError as exc:
                raise self.fail(at[sel[0]], str(exc)) from None
            wrong = sel[length[sel] != 2 + size]
            if len(wrong):
                raise self.fail(at[wrong[0]], f"DECIMAL({prec},{frac}) takes {2 + size} bytes, not {length[wrong[0]]}")
            if prec - frac <= p - s and frac <= s:  # fits the column: exact, vectorized
                b = _gather(data, start[sel] + 2, size).copy()
                negative = (b[:, 0] & 0x80) == 0
                b[:, 0] ^= 0x80
                b[negative] ^= 0xFF
                groups = _decimal_words(b, prec, frac)
                over = [np.flatnonzero(v >= 10**d) for v, d in groups]
                for o in over:
                    if len(o):
                        raise self.fail(at[sel[o[0]]], f"a DECIMAL({prec},{frac}) word with more digits than it may")
                out[sel] = _decimal128(groups, negative, s - frac)
                continue
            # Stored under another precision/scale (a MODIFY COLUMN TiDB has not reorganized): value by value.
            for i in sel.tolist():
                raw = data[start[i]:start[i] + length[i]].tobytes()
                try:
                    value, _, _, _ = rowcodec.decode_decimal(raw)
                    q = value.quantize(Decimal(1).scaleb(-s), context=WIDE_DECIMAL)
                except (RowCodecError, ArithmeticError) as exc:
                    raise self.fail(at[i], str(exc)) from None
                if q != value or (len(q.as_tuple().digits) > p and q != 0):
                    raise self.fail(at[i], f"{value} does not fit DECIMAL({p},{s})")
                unscaled = int(q.scaleb(s, context=WIDE_DECIMAL))
                out[i] = np.frombuffer(unscaled.to_bytes(16, "little", signed=True), np.uint8)
        return pa.Array.from_buffers(self.type, len(start), [None, pa.py_buffer(out.tobytes())])

    def scalar(self, value: Any) -> pa.Array:
        """A one-element array of a value as the scalar decoder returns it (a default or a datum-row value); a date
        Delta cannot hold is NULL (``maps_to_null``, which the caller counts)."""
        if value is None or isinstance(value, rowcodec.MySQLTime):
            return pa.nulls(1, self.type)
        tp = self.col.ft.tp
        if isinstance(value, VectorFloat32):
            value = list(value.elements)
        elif tp == mt.TypeNewDecimal and isinstance(value, Decimal) and pa.types.is_string(self.type):
            value = decimal_text(value, _decimal_digits(self.col.ft)[1])
        elif tp == mt.TypeJSON:
            value = json_text(value)
        elif tp == mt.TypeDuration and isinstance(value, dt.timedelta):
            value = value // dt.timedelta(microseconds=1) * 1000
        elif tp in (mt.TypeEnum, mt.TypeSet) and isinstance(value, int):
            return self._names(np.zeros(1, np.int64), np.array([value], np.uint64))
        elif tp == mt.TypeBit and isinstance(value, int):
            width = max(1, (self.col.ft.flen if self.col.ft.flen > 0 else 1) + 7) // 8
            value = value.to_bytes(width, "big")
        elif tp == mt.TypeTimestamp and isinstance(value, dt.datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        try:
            return pa.array([value], self.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise RowDecodeError(f"column {self.col.col_id}: {value!r} does not fit {self.type}: {exc}",
                                 col_id=self.col.col_id) from None


def json_text(value: Any) -> str:
    """A JSON value as TiDB prints it (``BinaryJSON.String``: ``", "`` and ``": "`` separators)."""
    return json.dumps(None if value is rowcodec.JSON_NULL else value, ensure_ascii=False, default=str)


def decode_rows(values: pa.Array, columns: Sequence[ArrowColumn]) -> list[pa.Array]:
    """The ``columns`` of every row value in ``values`` (binary or large_binary), one array per column
    (:func:`decode_batch`'s arrays)."""
    return decode_batch(values, columns).arrays


def decode_batch(values: pa.Array, columns: Sequence[ArrowColumn]) -> Decoded:
    """The ``columns`` of every row value in ``values`` (binary or large_binary), one array per column, and the rows
    of each whose value was mapped to NULL (see the module docstring).

    A row holding a column's id gives its value (NULL if the id is among the row's null ids); a row without the
    id gives the column's default; a null input value (no row: a delete) gives NULL. Ids no column names (dropped
    columns) are skipped. Raises :class:`RowDecodeError` naming the row and column of the first bad value.
    O(total bytes + rows x columns x log(ids))."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    layout = _Layout(values)
    n = layout.n
    datum: list[dict[int, Any]] = []
    if len(layout.datum_rows):
        schema = {c.col_id: c.ft for c in columns}
        for r in layout.datum_rows.tolist():
            try:
                datum.append(rowcodec.decode_row(values[r].as_py(), schema))
            except RowCodecError as exc:
                raise RowDecodeError(f"row value {r} of the batch (datum format): {exc}", row=r) from None
    out = []
    mapped_out: list[np.ndarray | None] = []
    for col in columns:
        c = _Column(layout, col)
        at, entries, null_at = layout.find(col.col_id)
        found = c.decode(at, entries)
        maps = [c.mapped if c.mapped is not None else np.zeros(len(found), bool)]
        # Index into [found values..., datum values..., default, NULL] per input row, then one take.
        idx = np.full(n, len(found) + len(datum), np.int64)  # the default
        idx[~layout.valid] = len(found) + len(datum) + 1
        idx[layout.rows[at]] = np.arange(len(found))
        idx[layout.rows[null_at]] = len(found) + len(datum) + 1
        pieces = [found]
        default_maps = isinstance(col.default, rowcodec.MySQLTime)
        for i, (r, row) in enumerate(zip(layout.datum_rows.tolist(), datum, strict=True)):
            value = row[col.col_id] if col.col_id in row else col.default
            try:
                pieces.append(c.scalar(value))
            except RowDecodeError as exc:
                raise RowDecodeError(f"row value {r} of the batch: {exc}", row=r, col_id=col.col_id) from None
            maps.append(np.array([isinstance(value, rowcodec.MySQLTime)]))
            idx[r] = len(found) + i
        pieces.append(c.scalar(col.default))
        pieces.append(pa.nulls(1, c.type))
        maps.append(np.array([default_maps, False]))
        taken = pa.array(idx)
        out.append(pa.concat_arrays(pieces).take(taken))
        mapped = np.concatenate(maps)[idx]
        mapped_out.append(mapped if mapped.any() else None)
    return Decoded(out, mapped_out)
