"""Mount: bronze events of one table decoded natively in Spark."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from cdc_core.codec import mysql_type as mt
from cdc_core.codec.datum_key import encode_key
from cdc_core.codec.key import common_row_key, decode_int, row_key
from cdc_core.codec.memcomparable import decode_key
from spark_jobs.normalize.mount import handle_array, image_columns, mount
from testkit.builders import Bronze, nonclustered_table, rowid_table, typed_table


def _rows(spark, bronze: Bronze, table):
    df = mount(spark.createDataFrame(bronze.arrow()), table).orderBy("commit_ts")
    return [r.asDict(recursive=True) for r in df.collect()]


@pytest.mark.spark
def test_every_type_null_default_and_dropped_ids(spark):
    t = typed_table()
    b = Bronze()
    full = {1: 5, 2: -2147483648, 3: 9223372036854775807, 4: "héllo ✓", 5: "123456789.125",
            6: "2024-02-29 23:59:58.123456", 7: "long text", 9: 1, 10: "2.25", 11: "2021-05-06 07:08:09",
            12: "abc"}  # fmt: skip
    b.put(t, 5, 10, full)
    # NULL everywhere it is allowed; ids 8 and 99 are dropped columns and must be ignored.
    b.put(t, -7, 11, {2: None, 3: None, 4: None, 5: None, 6: None, 7: None, 8: "gone", 99: 1,
                      9: None, 10: None, 11: None, 12: None})  # fmt: skip
    # Absent ids take the column default (NULL when none); the clustered PK comes from the key.
    b.put(t, 2**63 - 1, 12, {2: 3}, old={2: 2})
    b.delete(t, -(2**63), 13, None)
    rows = _rows(spark, b, t)
    assert [r["_handle"] for r in rows] == [5, -7, 2**63 - 1, -(2**63)]
    assert rows[0]["_new"] == {
        "id": 5, "i": -2147483648, "bi": 9223372036854775807, "s": "héllo ✓", "d": Decimal("123456789.125"),
        "dt": datetime(2024, 2, 29, 23, 59, 58, 123456), "tx": "long text", "def_i": 1,
        "def_d": Decimal("2.25"), "def_dt": datetime(2021, 5, 6, 7, 8, 9), "def_s": "abc",
    }  # fmt: skip
    assert rows[0]["_old"] is None
    assert rows[1]["_new"] == {"id": -7, **{c: None for c in
                               ("i", "bi", "s", "d", "dt", "tx", "def_i", "def_d", "def_dt", "def_s")}}  # fmt: skip
    assert rows[2]["_new"] == {
        "id": 2**63 - 1, "i": 3, "bi": None, "s": None, "d": None, "dt": None, "tx": None, "def_i": 7,
        "def_d": Decimal("1.50"), "def_dt": datetime(2020, 1, 1), "def_s": "dflt",
    }  # fmt: skip
    assert rows[2]["_old"]["i"] == 2 and rows[2]["_old"]["id"] == 2**63 - 1
    assert rows[3]["_new"] is None and rows[3]["_old"] is None and rows[3]["op"] == "delete"


@pytest.mark.spark
def test_other_tables_filtered_and_rowid(spark):
    nc, r = nonclustered_table(), rowid_table()
    b = Bronze().put(nc, 9, 10, {1: 1, 2: "x", 3: 4}).put(r, 77, 11, {1: 1, 2: "y"})
    (row,) = _rows(spark, b, nc)
    assert row["_handle"] == 9 and row["_new"] == {"a": 1, "u": "x", "b": 4}  # no _tidb_rowid: PK is the key
    (row,) = _rows(spark, b, r)
    assert row["_new"] == {"a": 1, "b": "y", "_tidb_rowid": 77}
    assert image_columns(r)[-1] == ("_tidb_rowid", "BIGINT")


@pytest.mark.spark
def test_corrupt_value_fails_naming_table_column_key_and_ts(spark):
    t = rowid_table()
    b = Bronze().put(t, 1, 10, {1: 1})
    b.rows[0]["value"] = b"{not json"  # not a row format at all
    with pytest.raises(Exception, match=r"table test\.r \(id 103\), key 7480000000000000675f728000000000000001 "
                                        r"at commit ts 10 \(value\).*unknown datum flag"):
        mount(spark.createDataFrame(b.arrow()), t).collect()
    b.rows[0]["value"] = bytes([128, 0, 1, 0, 0, 0, 1, 3, 0, 1, 2, 3])  # column 1 (INT) holds 3 bytes
    with pytest.raises(Exception, match=r"column 'a' \(id 1\), key 7480000000000000675f728000000000000001 at "
                                        r"commit ts 10 \(value\).*3-byte integer"):
        mount(spark.createDataFrame(b.arrow()), t).collect()


def _handles(keys: list[bytes]) -> list[int | None]:
    return handle_array(pa.array(keys, pa.binary())).to_pylist()


# Row keys with the handle TiDB/TiKV say they hold, as literals of their own tests and docs.
_GOLDEN: list[tuple[bytes, int]] = [
    # pingcap/tidb pkg/util/keydecoder/keydecoder_test.go (TestDecodeKey): table 1 handle 1, partition 5 handle 10.
    (b"t" + bytes([0x80, 0, 0, 0, 0, 0, 0, 0x01]) + b"_r" + bytes([0x80, 0, 0, 0, 0, 0, 0, 0x01]), 1),
    (b"t\x80\x00\x00\x00\x00\x00\x00\x05_r\x80\x00\x00\x00\x00\x00\x00\x0a", 10),
    # tikv/tikv src/coprocessor/codec/table2/mod.rs (test_record_key_codec_decode_only_handle): a handle using
    # more than the low bytes, and a key one byte longer whose handle is still the 8 bytes after "_r".
    (b"t\x80\x00\x00\x00\x00\x00\x01\x02_r\x80\x40\x00\x00\x00\x00\x2c\x0c", 0x40000000002C0C),
    (b"t\x80\x00\x00\x00\x00\x00\x01\x02_r\x80\x00\x00\x00\x00\x00\x00\xaa\x00", 0xAA),
    # pingcap/docs functions-and-operators/tidb-functions.md: TIDB_ENCODE_RECORD_KEY('test', 't', 1) of table 132,
    # and a region START_KEY (memcomparable-wrapped, as PD stores it) TIDB_DECODE_KEY reads as _tidb_rowid 1958897.
    (bytes.fromhex("7480000000000000845f728000000000000001"), 1),
    (decode_key(bytes.fromhex("7480000000000000FF3B5F728000000000FF1DE3F10000000000FA")), 1958897),
    # No literal key with these handles was found in TiDB/TiKV: derived by hand from pkg/util/codec/number.go
    # EncodeInt (uint64(v) ^ 0x8000000000000000, big-endian) after "t" + EncodeInt(table id) + "_r".
    (b"t\x80\x00\x00\x00\x00\x00\x00\x2a_r\x80\x00\x00\x00\x00\x00\x00\x00", 0),
    (b"t\x80\x00\x00\x00\x00\x00\x00\x2a_r\x7f\xff\xff\xff\xff\xff\xff\xff", -1),
    (b"t\x80\x00\x00\x00\x00\x00\x00\x2a_r\x00\x00\x00\x00\x00\x00\x00\x00", -(2**63)),
    (b"t\x80\x00\x00\x00\x00\x00\x00\x2a_r\xff\xff\xff\xff\xff\xff\xff\xff", 2**63 - 1),
]


def test_handle_array_decodes_tidb_golden_row_keys() -> None:
    """handle_array gives TiDB's own handles of its row keys; a key too short to hold one gives null, and a
    common handle's key gives whatever its first 8 bytes after ``_r`` read as (no handle: never used as one)."""
    keys = [k for k, _ in _GOLDEN]
    assert _handles(keys) == [h for _, h in _GOLDEN]
    # The keys TiKV's decode_only_handle rejects as too short (same test of tikv/tikv table2/mod.rs): null, not 0.
    assert _handles([b"", b"t\x80\x00\x00", b"t\x80\x00\x00\x00\x00\x00\x01\x02", keys[0][:18]]) == [None] * 4
    # A null key stays null, and nulls do not shift the handles of the keys around them.
    assert handle_array(pa.array([keys[0], None, keys[1]], pa.binary())).to_pylist() == [1, None, 10]
    # pingcap/docs tidb-functions.md: the START_KEY of table t2 (PRIMARY KEY (a, id) CLUSTERED), a common handle
    # {a: 6, id: "c4038db2-..."}; its bytes 12..19 are the uint datum's flag and high bytes.
    common = decode_key(bytes.fromhex(
        "7480000000000000FF3E5F720400000000FF0000000601633430FF3338646232FF2D64FF3531632D3131FF65FF622D386337352D"
        "FFFF3830653635303138FFFF61396265000000FF00FB000000000000F9"))
    assert _handles([common]) == [decode_int(common[11:19])]
    # A common handle's key can also be shorter than an int handle's (a DECIMAL(5,0) PK: flag, precision, frac and
    # 3 bytes): null, which is as good, as only int-handle and _tidb_rowid tables read the handle.
    short = common_row_key(70, encode_key([(mt.FieldType(tp=mt.TypeNewDecimal, flen=5, decimal=0), 12345)]))
    assert len(short) == 17 and _handles([short]) == [None]
    # Sliced arrays: the Arrow offset must be honoured (handle_array reads the raw buffer).
    sliced = pa.array([b"x", *keys], pa.binary()).slice(1)
    assert handle_array(sliced).to_pylist() == [h for _, h in _GOLDEN]


def test_handle_array_matches_row_key_encoder_on_random_handles() -> None:
    """On thousands of random handles (and the int64 edges), handle_array inverts ``row_key``, the encoder of the
    project's own keys, whatever the table id."""
    rng = np.random.default_rng(20240229)
    handles = [int(h) for h in rng.integers(-(2**63), 2**63 - 1, size=4000, dtype=np.int64, endpoint=True)]
    # Small magnitudes too: most real handles are, and a sign bug would show around 0.
    handles += [int(h) for h in rng.integers(-1000, 1000, size=1000)] + [0, 1, -1, 2**63 - 1, -(2**63)]
    table_ids = [int(t) for t in rng.integers(1, 2**40, size=len(handles))]
    keys = [row_key(t, h) for t, h in zip(table_ids, handles, strict=True)]
    assert _handles(keys) == handles


@pytest.mark.spark
def test_vectors_wide_decimals_and_mapped_dates_in_both_engines(spark):
    """Spark's mapInArrow and the driver's decode give the same images: a vector's float32 list, a DECIMAL(65,30)'s
    text, NULL for a zero date; ``_new_mapped`` names the new image's mapped columns (the old image's are not
    counted: that row is not written)."""
    from cdc_core.codec.rowcodec import ZERO_TIME
    from cdc_core.schema.model import Column, TableInfo
    from spark_jobs.normalize.mapped_values import NEW_MAPPED
    from spark_jobs.normalize.mount import EVENT_COLUMNS, decode_events

    t = TableInfo(id=108, db_name="test", name="vm", columns=(
        Column(1, "id", "int", nullable=False), Column(2, "v", "vector"), Column(3, "w", "decimal", precision=40,
                                                                                 scale=3),
        Column(4, "d", "date")))
    b = (Bronze().put(t, 1, 10, {1: 1, 2: "[1,2.5]", 3: "-1.5", 4: ZERO_TIME})
         .put(t, 1, 11, {1: 1, 2: "[]", 3: None, 4: "2020-01-01"}, old={1: 1, 4: ZERO_TIME}))
    spark_rows = _rows(spark, b, t)
    driver = decode_events(t, b.arrow().select(list(EVENT_COLUMNS)).to_batches()[0]).to_pylist()
    for got in (spark_rows, driver):
        assert [(r["_new"]["v"], r["_new"]["w"], r["_new"]["d"], r[NEW_MAPPED]) for r in got] == [
            ([1.0, 2.5], "-1.500", None, [4]), ([], None, datetime(2020, 1, 1).date(), None)]
        assert got[1]["_old"]["d"] is None


def test_a_value_of_the_key_delta_cannot_hold_stops_the_apply_naming_the_row():
    """A zero date in a DATE primary key (TiDB takes it under a permissive sql_mode) would leave the row keyed by
    NULL, which merges with nothing: the mount stops, naming the table, the key column, the row's key and commit ts,
    instead of losing or repeating the row; and a snapshot read of such a row does too."""
    from cdc_core.codec.rowcodec import ZERO_TIME
    from cdc_core.errors import ChangefeedError
    from cdc_core.schema.model import Column, Index, TableInfo
    from spark_jobs.normalize.mapped_values import row_marker
    from spark_jobs.normalize.mount import EVENT_COLUMNS, decode_events

    t = TableInfo(id=109, db_name="test", name="dk", is_common_handle=True, columns=(
        Column(1, "d", "date", nullable=False), Column(2, "v", "int")),
        indexes=(Index("PRIMARY", ("d",), unique=True, primary=True, id=1),))
    b = Bronze().put(t, 1, 10, {1: "2020-01-01", 2: 1}).put(t, 2, 12, {1: ZERO_TIME, 2: 2})
    with pytest.raises(ChangefeedError, match=r"table test\.dk \(id 109\): column 'd' of its Delta key \['d'\] holds "
                                             r"a value Delta cannot hold .* at commit ts 12"):
        decode_events(t, b.arrow().select(list(EVENT_COLUMNS)).to_batches()[0])
    with pytest.raises(ChangefeedError, match=r"column 'd' of its Delta key .* the row with key \{'d': "):
        row_marker(t, [ZERO_TIME, 2])
    assert row_marker(t, ["2020-01-01", 2]) is None
