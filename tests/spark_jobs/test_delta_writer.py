"""The Delta writers: delta-rs details, writer selection, and the delta-spark path (cluster only)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from spark_jobs_builders import Bronze, clustered_table, nonclustered_table, rowid_table

from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.apply_window import apply_window
from spark_jobs.bronze import write_bronze
from spark_jobs.delta_writer import (
    DeltaRsWriter,
    DeltaSparkWriter,
    app_id_for,
    changes_to_arrow,
    delta_spark_available,
    get_writer,
    merge_predicate,
    table_path,
)

pytestmark = pytest.mark.spark


def test_paths_and_predicates():
    t = clustered_table()
    assert table_path("file:///lake", t) == "/lake/test/c"
    assert table_path("/lake/", t) == "/lake/test/c"
    assert table_path("s3://bucket/lake/", t) == "s3://bucket/lake/test/c"
    assert app_id_for("cf") == "cdcflow/cf"
    odd = TableInfo(
        id=1, db_name="d", name="x",
        columns=(Column(1, "Weird`Id", "int", nullable=False), Column(2, "K", "int", False)),
        indexes=(Index("PRIMARY", ("Weird`Id", "K"), unique=True, primary=True),),
    )  # fmt: skip
    assert merge_predicate(odd) == "t.`Weird``Id` = s.`Weird``Id` AND t.`K` = s.`K`"
    assert merge_predicate(rowid_table()) == "t.`_tidb_rowid` = s.`_tidb_rowid`"


def test_changes_to_arrow_matches_the_delta_schema():
    t = nonclustered_table()
    loose = pa.table({"_cdc_op": ["upsert"], "b": pa.array([1], pa.int64()), "u": pa.array(["x"], pa.large_string()),
                      "a": pa.array([3], pa.int64()), "extra": [1]})  # fmt: skip
    out = changes_to_arrow(loose, t)
    assert out.schema == pa.schema([*t.arrow_schema(), pa.field("_cdc_op", pa.string())])
    with pytest.raises(ChangefeedError, match="lacks columns"):
        changes_to_arrow(loose.drop_columns(["a"]), t)
    with pytest.raises(pa.ArrowInvalid):  # an INT that does not fit is never truncated
        changes_to_arrow(loose.set_column(3, "a", pa.array([2**40], pa.int64())), t)


def test_delta_rs_writer_from_arrow_and_weird_names(tmp_path):
    odd = TableInfo(
        id=1, db_name="d", name="x", columns=(Column(1, "userId", "int", nullable=False), Column(2, "Val", "text")),
        indexes=(Index("PRIMARY", ("userId",), unique=True, primary=True),),
    )  # fmt: skip
    w, path = DeltaRsWriter(), str(tmp_path / "x")
    ch = pa.table({"userId": pa.array([1, 2], pa.int32()), "Val": ["a", "b"], "_cdc_op": ["upsert", "upsert"]})
    res = w.merge(path, odd, ch, app_id="cdcflow/t", version=5)
    assert (res.rows_upserted, res.rows_deleted, res.applied_version, res.skipped) == (2, 0, 5, False)
    ch2 = pa.table({"userId": pa.array([1, 2], pa.int32()), "Val": ["z", None], "_cdc_op": ["upsert", "delete"]})
    res = w.merge(path, odd, ch2, app_id="cdcflow/t", version=6)
    assert (res.rows_upserted, res.rows_deleted) == (1, 1)
    assert DeltaTable(path).to_pyarrow_table().to_pylist() == [{"userId": 1, "Val": "z"}]
    assert w.merge(path, odd, ch, app_id="cdcflow/t", version=6).skipped
    assert DeltaTable(path).history(1)[0]["operation"] == "MERGE"


def test_writer_selection(spark, monkeypatch):
    monkeypatch.delenv("CDCFLOW_DELTA_WRITER", raising=False)
    assert isinstance(get_writer(spark=spark), DeltaRsWriter)
    monkeypatch.setenv("CDCFLOW_DELTA_WRITER", "delta-rs")
    assert get_writer(spark=spark).name == "delta-rs"
    with pytest.raises(ChangefeedError, match="unknown Delta writer"):
        get_writer("parquet", spark)
    if not delta_spark_available(spark):
        monkeypatch.setenv("CDCFLOW_DELTA_WRITER", "delta-spark")
        with pytest.raises(ChangefeedError, match=r"io\.delta classes are not on the Spark classpath"):
            get_writer(spark=spark)


def test_delta_spark_writer_seed002_swap(spark, tmp_path):
    if not delta_spark_available(spark):
        pytest.skip(
            "delta-spark path: io.delta classes are not on the Spark JVM classpath (the package registries here "
            "serve no JVM jars); runs on a cluster with the Delta jars and CDCFLOW_DELTA_WRITER=delta-spark"
        )
    writer = DeltaSparkWriter(spark)
    sink = f"file://{tmp_path}/lake"
    c, nc = clustered_table(), nonclustered_table()
    b1 = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 2, 10, {1: 2, 2: 2})
    b1.put(nc, 100, 10, {1: 1, 2: "x", 3: 1}).put(nc, 101, 10, {1: 2, 2: "y", 3: 2})
    write_bronze(sink, "cf", 15, b1.arrow())
    apply_window(sink, "cf", 15, [c, nc], spark=spark, writer=writer)
    b2 = Bronze().put(c, 2, 30, {1: 2, 2: 1}, old={1: 2, 2: 2}).put(c, 1, 30, {1: 1, 2: 2}, old={1: 1, 2: 1})
    b2.put(nc, 101, 30, {1: 1, 2: "y", 3: 2}, old={1: 2, 2: "y", 3: 2})
    b2.put(nc, 100, 30, {1: 2, 2: "x", 3: 1}, old={1: 1, 2: "x", 3: 1})
    write_bronze(sink, "cf", 35, b2.arrow())
    apply_window(sink, "cf", 35, [c, nc], spark=spark, writer=writer)
    rows = sorted(r.asDict() for r in spark.read.format("delta").load(table_path(sink, nc)).collect())
    assert [(r["a"], r["u"]) for r in sorted(rows, key=lambda r: r["a"])] == [(1, "y"), (2, "x")]
    assert writer.applied_version(table_path(sink, c), app_id_for("cf")) == 35
    again = apply_window(sink, "cf", 35, [c, nc], spark=spark, writer=writer)
    assert all(s["skipped"] for s in again.values())
