"""TiDB's meta keys against bytes TiDB and TiKV wrote: the key TiDB's own test decodes (pkg/store/driver/txn
txn_driver_test.go ``TestWriteConflictPrettyFormat``: ``{metaKey=true, key=DB:56, field=TID:108}``) and the primary
locks a TiDB v6.4 cluster's TiKV logged (``endpoint.rs`` "Key is locked" for ``CREATE DATABASE`` and
``CREATE TABLE``, in the reproduction of pingcap/tidb#39972): ``DBs``/``DB:75`` and ``DDLJobHistory``/job 71."""

from __future__ import annotations

import struct

import pytest

from cdc_core.codec import meta_key
from cdc_core.codec.meta_key import MetaKeyError

# TiDB's test: the hash DB:56, field TID:108 (an auto-id counter of table 108).
TIDB_TEST_KEY = "6d44423a3536000000fc00000000000000685449443a31303800fe"
# TiKV's log: the DBs field of database 75, and the history hash field of job 71 (an 8-byte big-endian id: one
# full memcomparable group, then an empty one).
TIKV_LOG_DBS_KEY = "6D4442730000000000FA000000000000006844423A3735000000FC"
TIKV_LOG_HISTORY_KEY = ("6D44444C4A6F624869FF73746F7279000000FC0000000000000068"
                        "0000000000000047FF0000000000000000F7")


@pytest.mark.parametrize(("key", "field", "golden"), [
    (b"DB:56", b"TID:108", TIDB_TEST_KEY),
    (meta_key.DBS, meta_key.db_field(75), TIKV_LOG_DBS_KEY),
    (b"DDLJobHistory", struct.pack(">Q", 71), TIKV_LOG_HISTORY_KEY),
])
def test_hash_field_keys_are_tidbs_bytes(key: bytes, field: bytes, golden: str) -> None:
    data = bytes.fromhex(golden)
    assert meta_key.hash_field_key(key, field) == data
    assert meta_key.decode_hash_field_key(data) == (key, field)
    start, end = meta_key.hash_range(key)
    assert start <= data < end


def test_table_and_db_fields() -> None:
    assert meta_key.table_field(2) == b"Table:2"
    assert meta_key.db_field(12_345_678_901) == b"DB:12345678901"
    assert meta_key.parse_db_field(b"DB:75") == 75
    assert meta_key.parse_table_field(b"Table:108") == 108
    assert meta_key.is_table_field(b"Table:1") and not meta_key.is_table_field(b"TID:1")
    # The table fields of database 56 sit in its hash, ordered by their text (TiDB's ids in decimal).
    keys = [meta_key.hash_field_key(b"DB:56", meta_key.table_field(i)) for i in (10, 9, 100)]
    assert sorted(keys) == [keys[0], keys[2], keys[1]]
    with pytest.raises(MetaKeyError, match="is not Table:<id>"):
        meta_key.parse_table_field(b"TID:5")
    with pytest.raises(MetaKeyError, match="is not DB:<id>"):
        meta_key.parse_db_field(b"DB:x")


def test_string_key_and_prefix_next() -> None:
    # structure.EncodeStringDataKey: the key encoded, then the flag 's' as 8 big-endian bytes.
    assert meta_key.string_key(b"SchemaVersionKey") == (
        b"m" + b"SchemaVe\xff" + b"rsionKey\xff" + bytes(8) + b"\xf7" + bytes(7) + b"s")
    assert meta_key.prefix_next(b"m\x01\xff") == b"m\x02\x00"  # TiDB's PrefixNext carries, keeping the length
    assert meta_key.prefix_next(b"\xff\xff") == b"\xff\xff\x00"


@pytest.mark.parametrize(("data", "why"), [
    ("74800000000000000a", "does not start with"),  # a table key
    ("6d44423a3536000000fc0000000000000073", "not hash data"),  # a string key's flag
    ("6d44423a3536000000fc000000", "ends inside its type flag"),
    (TIDB_TEST_KEY + "00", "bytes after its field"),
    ("6d44423a3536000000fc00000000000000685449443a313038", "field does not decode"),
])
def test_bad_keys_name_what_is_wrong(data: str, why: str) -> None:
    with pytest.raises(MetaKeyError, match=why):
        meta_key.decode_hash_field_key(bytes.fromhex(data))
