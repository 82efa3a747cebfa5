"""TiDB's meta keys: where TiDB keeps its schema (databases, tables, the schema version) in TiKV.

TiDB's meta layer (``pkg/meta/meta.go``) stores its structures through ``pkg/structure`` under the prefix ``m``:

- a *string* ``key`` is the TiKV key ``m + EncodeBytes(key) + EncodeUint('s')`` (``type.go``
  ``EncodeStringDataKey``), its value the bytes (``SchemaVersionKey`` holds the schema version in decimal);
- a *hash* ``key`` holds fields, each the TiKV key ``m + EncodeBytes(key) + EncodeUint('h') + EncodeBytes(field)``
  (``encodeHashDataKey``); all fields of one hash share the prefix ``m + EncodeBytes(key) + EncodeUint('h')``
  (``hashDataKeyPrefix``), so one range scan lists a hash (``IterateHash``) in field order.

``EncodeBytes`` is the memcomparable group encoding (``cdc_core.codec.memcomparable``), ``EncodeUint`` eight
big-endian bytes (``pkg/util/codec/number.go``). The schema lives in two kinds of hash: ``DBs`` holds a field
``DB:<id>`` per database (its ``model.DBInfo`` JSON), and each database's hash ``DB:<id>`` a field
``Table:<id>`` per table (its ``model.TableInfo`` JSON) next to other fields (``TID:<id>`` auto-id counters, ...),
which readers skip by prefix (``meta.go`` ``IterTables``, ``ListSimpleTables``). Ids are written in decimal
(``fmt.Sprintf("%s:%d", ...)``).

Cost: O(length) for every function.
"""

from __future__ import annotations

import struct

from cdc_core.codec.memcomparable import KeyDecodeError, decode_bytes, encode_bytes

PREFIX = b"m"  # mMetaPrefix
STRING_DATA = ord("s")  # structure.StringData
HASH_DATA = ord("h")  # structure.HashData
DBS = b"DBs"  # mDBs: the hash of every database
SCHEMA_VERSION = b"SchemaVersionKey"  # mSchemaVersionKey: the global schema version
DB_PREFIX = b"DB:"  # mDBPrefix + ":"
TABLE_PREFIX = b"Table:"  # mTablePrefix + ":"
_U64 = struct.Struct(">Q")


class MetaKeyError(ValueError):
    """Bytes that are not the meta key they were read as."""


def _flagged(key: bytes, flag: int) -> bytes:
    return PREFIX + encode_bytes(key) + _U64.pack(flag)


def string_key(key: bytes) -> bytes:
    """The TiKV key of the string ``key``, e.g. ``string_key(b"SchemaVersionKey")``."""
    return _flagged(key, STRING_DATA)


def hash_prefix(key: bytes) -> bytes:
    """What every field key of the hash ``key`` starts with: scanning ``[hash_prefix, prefix_next(hash_prefix))``
    lists the hash."""
    return _flagged(key, HASH_DATA)


def hash_field_key(key: bytes, field: bytes) -> bytes:
    """The TiKV key of ``field`` in the hash ``key``, e.g. ``hash_field_key(DBS, db_field(1))``."""
    return hash_prefix(key) + encode_bytes(field)


def prefix_next(prefix: bytes) -> bytes:
    """The exclusive end of the keys starting with ``prefix``, as TiDB's ``kv.Key.PrefixNext`` makes it: the last
    byte below 0xFF incremented, the 0xFF bytes after it carried to 0 (all 0xFF: the prefix and a 0)."""
    b = bytearray(prefix)
    for i in range(len(b) - 1, -1, -1):
        b[i] = (b[i] + 1) & 0xFF
        if b[i]:
            return bytes(b)
    return prefix + b"\x00"


def hash_range(key: bytes) -> tuple[bytes, bytes]:
    """``[start, end)`` holding exactly the field keys of the hash ``key``."""
    p = hash_prefix(key)
    return p, prefix_next(p)


def decode_hash_field_key(data: bytes) -> tuple[bytes, bytes]:
    """``(hash key, field)`` of a hash field's TiKV key (``structure.decodeHashDataKey``); ``MetaKeyError`` naming
    what is wrong for anything else."""
    if not data.startswith(PREFIX):
        raise MetaKeyError(f"meta key {data.hex()} does not start with {PREFIX!r}")
    try:
        key, used = decode_bytes(data[len(PREFIX):])
    except KeyDecodeError as exc:
        raise MetaKeyError(f"meta key {data.hex()}: its hash key does not decode: {exc}") from None
    pos = len(PREFIX) + used
    if len(data) < pos + 8:
        raise MetaKeyError(f"meta key {data.hex()} ends inside its type flag")
    (flag,) = _U64.unpack_from(data, pos)
    if flag != HASH_DATA:
        raise MetaKeyError(f"meta key {data.hex()} has type flag {flag:#x}, not hash data ('h')")
    try:
        field, used = decode_bytes(data[pos + 8:])
    except KeyDecodeError as exc:
        raise MetaKeyError(f"meta key {data.hex()}: its field does not decode: {exc}") from None
    if pos + 8 + used != len(data):
        raise MetaKeyError(f"meta key {data.hex()} has {len(data) - pos - 8 - used} bytes after its field")
    return key, field


def db_field(db_id: int) -> bytes:
    """``DB:<id>``: a database's field in ``DBs`` and the name of its own hash (``meta.DBkey``)."""
    return DB_PREFIX + str(db_id).encode()


def table_field(table_id: int) -> bytes:
    """``Table:<id>``: a table's field in its database's hash (``meta.TableKey``)."""
    return TABLE_PREFIX + str(table_id).encode()


def _parse_id(field: bytes, prefix: bytes, what: str) -> int:
    text = field[len(prefix):]
    if not field.startswith(prefix) or not text.isdigit():
        raise MetaKeyError(f"meta field {field!r} is not {what}")
    return int(text)


def parse_db_field(field: bytes) -> int:
    """The database id of a ``DB:<id>`` field (``meta.ParseDBKey``)."""
    return _parse_id(field, DB_PREFIX, "DB:<id>")


def is_table_field(field: bytes) -> bool:
    """Whether a field of a database's hash is a table's (``meta.IsTableKey``), not an auto-id counter or other."""
    return field.startswith(TABLE_PREFIX)


def parse_table_field(field: bytes) -> int:
    """The table id of a ``Table:<id>`` field (``meta.ParseTableKey``)."""
    return _parse_id(field, TABLE_PREFIX, "Table:<id>")
