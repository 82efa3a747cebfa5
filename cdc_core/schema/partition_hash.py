"""TiDB's KEY partitioning hash: which of ``n`` partitions a row's KEY columns put it in.

``ForKeyPruning.LocateKeyPartition`` (``pkg/table/tables/partition.go``): one CRC-32 (IEEE) over the KEY columns in
order, each written as its datum's ``ToHashKey()`` bytes and a NULL as the single byte ``0x00``; the partition is
``crc % n``. ``Datum.ToHashKey`` (``pkg/types/datum.go``) is the collation key of the datum's text: a string's
collation key (TiDB's default ``utf8mb4_bin`` drops trailing spaces, ``pkg/util/collate/bin.go``
``binPaddingCollator.Key``; a binary string is its bytes), and for any other datum the key of ``ToString()``:
an integer's decimal digits, a DECIMAL's digits with the column's scale (``MyDecimal.String``), a FLOAT/DOUBLE's
shortest round-trip digits without an exponent (``strconv.FormatFloat(f, 'f', -1, 32|64)``), ``YYYY-MM-DD`` for a
DATE, ``YYYY-MM-DD HH:MM:SS[.fsp digits]`` for a DATETIME (``Time.String``), ``[-]HH:MM:SS[.fsp digits]`` for a
TIME, the member names of an ENUM or SET.

Checked against TiDB's own expectations (``TestKeyPartitionTableBasic`` and ``TestKeyPartitionTableAllFeildType``
in ``pkg/table/tables/partition_test.go``, the rows each ``PARTITION(pN)`` holds): the golden vectors are in
``tests/schema/test_partition_hash.py``. Not hashed here, and refused with the reason: TIMESTAMP (TiDB hashes the
value in the writing session's time zone, which no row event records) and BIT (its datum's collation decides
whether a trailing 0x20 byte counts); TiDB itself refuses BLOB/TEXT, JSON and VECTOR (``isValidKeyPartitionColType``).
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Protocol

from cdc_core.codec.rowcodec import MySQLTime
from cdc_core.codec.value_text import format_datetime, format_duration, format_mysql_time
from cdc_core.schema import column_type as ct
from cdc_core.schema.partition import PartitionError

__all__ = ["NOT_ALLOWED_IN_KEY", "check_key_column", "hash_key", "key_partition"]

# pkg/ddl/partition.go isValidKeyPartitionColType: TypeBlob, TypeMediumBlob, TypeLongBlob, TypeJSON, TypeGeometry,
# TypeTiDBVectorFloat32 (TINYTEXT/TINYBLOB are TypeTinyBlob and allowed).
NOT_ALLOWED_IN_KEY = frozenset({"text", "mediumtext", "longtext", "blob", "mediumblob", "longblob", "json", "vector"})
_NOT_HASHED_HERE = {
    "timestamp": "TiDB hashes a TIMESTAMP in the writing session's time zone, which no row event records",
    "bit": "whether TiDB drops a BIT value's trailing 0x20 byte depends on its datum's collation",
}
_NULL = b"\x00"


class KeyColumn(Protocol):
    """What the hash reads of a column (``cdc_core.schema.model.Column`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def fsp(self) -> int | None: ...


def check_key_column(col: KeyColumn) -> None:
    """Refuse a column KEY partitioning cannot use (TiDB's text) or whose hash cdcflow does not reproduce."""
    if col.type in NOT_ALLOWED_IN_KEY or col.type not in ct.TYPES:
        raise PartitionError(f"Field '{col.name}' is of a not allowed type for this type of partitioning")
    why = _NOT_HASHED_HERE.get(col.type)
    if why is not None:
        raise PartitionError(f"KEY partitioning over {col.type.upper()} column {col.name!r} is not supported by "
                             f"cdcflow: {why}")


def _float_text(value: float, bits: int) -> str:
    """``strconv.FormatFloat(f, 'f', -1, bits)``: the shortest digits that read back as the same float32/64, never
    an exponent (numpy's positional form is that algorithm)."""
    import numpy as np

    return str(np.format_float_positional(np.float32(value) if bits == 32 else np.float64(value), unique=True,
                                          trim="-"))


def _date_text(v: Any) -> str:
    """``Time.String()`` of a DATE: ``YYYY-MM-DD`` (a zero date's fields as they are)."""
    return format_mysql_time(v, date_only=True) if isinstance(v, MySQLTime) else v.isoformat()


def _datetime_text(v: Any, fsp: int) -> str:
    """``Time.String()`` of a DATETIME(fsp): the date, ``HH:MM:SS`` and ``fsp`` digits of the fraction."""
    if isinstance(v, MySQLTime):
        return format_mysql_time(v, fsp=fsp)
    return format_datetime(v if isinstance(v, dt.datetime) else dt.datetime(v.year, v.month, v.day), fsp)


def hash_key(col: KeyColumn, value: Any) -> bytes:
    """The bytes TiDB hashes for ``value`` (the column's Python value, ``Column.convert``'s) of column ``col``;
    NULL is ``0x00``."""
    if value is None:
        return _NULL
    kind = ct.TYPES[col.type].kind
    if kind == ct.BINARY:
        return bytes(value)
    if kind in (ct.TEXT, ct.ENUM, ct.SET):
        raw = value.encode() if isinstance(value, str) else bytes(value)
        return raw.rstrip(b" ")
    if kind in (ct.INT, ct.YEAR):
        return b"%d" % int(value)
    if kind == ct.DECIMAL:
        d = value if isinstance(value, Decimal) else Decimal(str(value))
        return format(d if d != 0 else abs(d), "f").encode()
    if kind == ct.FLOAT:
        return _float_text(float(value), 32 if col.type == "float" else 64).encode()
    if kind == ct.DATE:
        return _date_text(value).encode()
    if kind == ct.DATETIME:
        return _datetime_text(value, col.fsp or 0).encode()
    if kind == ct.TIME:
        return format_duration(value, col.fsp or 0).encode()
    check_key_column(col)  # raises for what is not hashed here
    raise PartitionError(f"KEY partitioning over {col.type.upper()} column {col.name!r} is not supported")


def key_partition(cols: Sequence[KeyColumn], values: Sequence[Any], n: int) -> int:
    """The index (0..n-1) of the KEY partition of a row whose KEY columns ``cols`` hold ``values``."""
    crc = 0
    for col, v in zip(cols, values, strict=True):
        crc = zlib.crc32(hash_key(col, v), crc)
    return crc % n
