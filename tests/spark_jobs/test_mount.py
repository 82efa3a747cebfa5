"""Mount: bronze events of one table decoded natively in Spark."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from spark_jobs_builders import Bronze, nonclustered_table, rowid_table, typed_table

from spark_jobs.mount import image_columns, mount

pytestmark = pytest.mark.spark


def _rows(spark, bronze: Bronze, table):
    df = mount(spark.createDataFrame(bronze.arrow()), table).orderBy("commit_ts")
    return [r.asDict(recursive=True) for r in df.collect()]


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


def test_other_tables_filtered_and_rowid(spark):
    nc, r = nonclustered_table(), rowid_table()
    b = Bronze().put(nc, 9, 10, {1: 1, 2: "x", 3: 4}).put(r, 77, 11, {1: 1, 2: "y"})
    (row,) = _rows(spark, b, nc)
    assert row["_handle"] == 9 and row["_new"] == {"a": 1, "u": "x", "b": 4}  # no _tidb_rowid: PK is the key
    (row,) = _rows(spark, b, r)
    assert row["_new"] == {"a": 1, "b": "y", "_tidb_rowid": 77}
    assert image_columns(r)[-1] == ("_tidb_rowid", "BIGINT")


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
