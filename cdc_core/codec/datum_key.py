"""Memcomparable datums (TiDB ``pkg/util/codec/codec.go`` ``EncodeKey``): the values inside index keys
``t{table}_i{index}{datums}`` and, for clustered tables with a non-integer key, the common handle after ``_r``.

Each datum is a flag byte and a payload whose bytes sort as the values do: a signed integer is ``intFlag`` (3) and
8 big-endian bytes with the sign bit flipped, an unsigned one ``uintFlag`` (4) and 8 big-endian bytes, a string
``bytesFlag`` (1) and the memcomparable bytes (``cdc_core.codec.memcomparable``) of its collation key, a DECIMAL
``decimalFlag`` (6) and ``codec.EncodeDecimal`` (precision, frac, ``MyDecimal.ToBin``), a DATE/DATETIME/TIMESTAMP
``uintFlag`` and its packed time, a FLOAT/DOUBLE ``floatFlag`` (5) and its memcomparable float, a TIME
``durationFlag`` (7) and its nanoseconds as a signed integer, ENUM/SET/BIT ``uintFlag`` and their number, NULL
``NilFlag`` (0). The collation key of TiDB's default ``utf8mb4_bin`` is the
UTF-8 bytes without trailing spaces (a PAD SPACE collation, ``pkg/util/collate/bin.go``), so ``'a'`` and ``'a '``
are the same key, as MySQL's unique indexes say.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdc_core.codec import key as keycodec
from cdc_core.codec import memcomparable, rowcodec
from cdc_core.codec import mysql_type as mt

if TYPE_CHECKING:
    from cdc_core.schema.model import Index, TableInfo

_U64 = struct.Struct(">Q")
_SIGN = 1 << 63


def _collation_key(ft: mt.FieldType, value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if ft.binary:
        return raw
    return raw.rstrip(b" ")


def encode_datum(ft: mt.FieldType, value: Any) -> bytes:
    """One value of a column of type ``ft`` as a memcomparable datum (``value`` as the row codec stores it: ENUM,
    SET and BIT as their unsigned numbers, TIME as a ``timedelta``)."""
    if value is None:
        return bytes([rowcodec.NIL_FLAG])
    tp = ft.tp
    if tp in (mt.TypeEnum, mt.TypeSet, mt.TypeBit):  # encodeUnsignedInt of the number
        return bytes([rowcodec.UINT_FLAG]) + _U64.pack(int(value))
    if tp in (mt.TypeFloat, mt.TypeDouble):
        return bytes([rowcodec.FLOAT_FLAG]) + rowcodec.encode_float(float(value))
    if tp == mt.TypeDuration and isinstance(value, dt.timedelta):  # durationFlag, EncodeInt of the nanoseconds
        nanos = value // dt.timedelta(microseconds=1) * 1000
        return bytes([rowcodec.DURATION_FLAG]) + _U64.pack(nanos + _SIGN)
    if tp in mt.INTEGER_TYPES or tp == mt.TypeYear:
        if ft.unsigned:
            return bytes([rowcodec.UINT_FLAG]) + _U64.pack(int(value))
        return bytes([rowcodec.INT_FLAG]) + _U64.pack(int(value) + _SIGN)
    if tp in mt.STRING_TYPES:
        return bytes([rowcodec.BYTES_FLAG]) + memcomparable.encode_bytes(_collation_key(ft, value))
    if tp == mt.TypeNewDecimal:
        precision, frac = (ft.flen, ft.decimal) if ft.flen > 0 and ft.decimal >= 0 else (0, 0)
        return bytes([rowcodec.DECIMAL_FLAG]) + rowcodec.encode_decimal(Decimal(value), precision, frac)
    if tp in mt.TIME_TYPES and isinstance(value, dt.date):
        if isinstance(value, dt.datetime):
            packed = rowcodec.pack_time(value.year, value.month, value.day, value.hour, value.minute, value.second,
                                        value.microsecond)
        else:
            packed = rowcodec.pack_time(value.year, value.month, value.day)
        return bytes([rowcodec.UINT_FLAG]) + _U64.pack(packed)
    raise rowcodec.RowCodecError(f"{mt.type_name(tp)} values cannot be part of a key here: {value!r}")


def encode_key(items: Sequence[tuple[mt.FieldType, Any]]) -> bytes:
    """The datums of an index's (or common handle's) columns, in index order."""
    return b"".join(encode_datum(ft, v) for ft, v in items)


def index_entry_key(info: TableInfo, ix: Index, values: Mapping[str, Any], physical_id: int = 0) -> bytes | None:
    """The key ``t{table}_i{index id}{datums}`` of a row's entry in a unique index (``values`` by column name), or
    None when a column is NULL (no entry: MySQL lets NULLs repeat). A partitioned table's indexes are local: under
    the row's partition id (``physical_id``)."""
    cols = [info.column(c) for c in ix.columns]
    vals = [values.get(c.name) for c in cols]
    if any(v is None for v in vals):
        return None
    encoded = encode_key([(c.field_type(), c.to_stored(v)) for c, v in zip(cols, vals, strict=True)])
    return keycodec.index_key(physical_id or info.id, ix.id, encoded)
