"""The Delta writers: delta-rs details, writer selection, delta-spark's checks (parity: test_writer_parity)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.codec.sink_uri import app_id_for, table_path
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.load.delta_writer import (
    DeltaRsWriter,
    DeltaSparkWriter,
    changes_to_arrow,
    default_writer_kind,
    delta_spark_available,
    get_writer,
    merge_predicate,
)
from testkit.builders import clustered_table, nonclustered_table, rowid_table

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
    monkeypatch.setenv("CDCFLOW_DELTA_WRITER", "delta-spark")
    assert isinstance(get_writer(spark=spark), DeltaSparkWriter)  # the session has the jars jars.lock pins
    assert delta_spark_available(spark)
    with pytest.raises(ChangefeedError, match="unknown Delta writer"):
        get_writer("parquet", spark)


class _Conf:
    def __init__(self, master: str) -> None:
        self.master = master

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.master if key == "spark.master" else default


class _Session:
    def __init__(self, master: str) -> None:
        self.conf = _Conf(master)


@pytest.mark.parametrize(("master", "kind"), [("local[2]", "delta-rs"), ("local", "delta-rs"),
                                              ("spark://10.0.0.5:7077", "delta-spark"), ("yarn", "delta-spark"),
                                              ("k8s://https://api:6443", "delta-spark")])
def test_unset_the_writer_follows_where_spark_runs(master, kind):
    assert default_writer_kind(_Session(master)) == kind  # type: ignore[arg-type]


def test_delta_spark_writer_checks_the_schema_and_names_a_missing_column(spark, tmp_path):
    t = clustered_table()
    w, path = DeltaSparkWriter(spark), str(tmp_path / "c")
    ch = pa.table({"a": pa.array([1], pa.int32()), "b": pa.array([5], pa.int32()), "_cdc_op": ["upsert"]})
    res = w.merge(path, t, ch, app_id="cdcflow/t", version=5)
    assert (res.rows_upserted, res.rows_deleted, res.applied_version, res.changes) == (1, 0, 5, 1)
    assert w.merge(path, t, ch, app_id="cdcflow/t", version=5).skipped
    with pytest.raises(ChangefeedError, match="lacks columns"):
        w.merge(path, t, spark.createDataFrame(ch.drop_columns(["b"])), app_id="cdcflow/t", version=6)
    wider = TableInfo(id=t.id, db_name=t.db_name, name=t.name, columns=(*t.columns, Column(3, "c", "int")),
                      indexes=t.indexes, pk_is_handle=True)
    with pytest.raises(ChangefeedError, match="apply the pending DDL first"):
        w.merge(path, wider, ch.append_column("c", pa.array([1], pa.int32())), app_id="cdcflow/t", version=6)
    assert DeltaTable(path).transaction_version("cdcflow/t") == 5  # neither failure recorded anything


def test_a_table_with_column_mapping_is_refused_not_misread(spark, tmp_path):
    """deltalake 1.6 reads a column renamed under column mapping as NULLs: both writers stop with the fix."""
    t = clustered_table()
    path = str(tmp_path / "c")
    ch = pa.table({"a": pa.array([1], pa.int32()), "b": pa.array([5], pa.int32()), "_cdc_op": ["upsert"]})
    DeltaRsWriter().merge(path, t, ch, app_id="cdcflow/t", version=5)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
              "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
    for writer in (DeltaRsWriter(), DeltaSparkWriter(spark)):
        with pytest.raises(ChangefeedError, match=r"column mapping \(delta.columnMapping.mode=name\).*--mode snapshot"):
            writer.merge(path, t, ch, app_id="cdcflow/t", version=6)
    assert DeltaTable(path).transaction_version("cdcflow/t") == 5


def test_a_table_created_while_another_threads_merge_holds_the_session_confs_carries_none_of_them(spark, tmp_path):
    """A window's tables are merged four at a time on one session: a create commit reads the session's
    commitInfo.userMetadata as a merge does, so it waits for a merge holding its confs (a create that carried the
    merge's cdcflow.ts gave readers a second commit at that ts: CI of stop 37, test_writer_parity)."""
    import json
    import threading

    from cdc_core.changefeed.versions import commit_ts
    from spark_jobs.load.delta_writer import _CONF_LOCK, _USER_METADATA_CONF, commit_metadata

    path, t = str(tmp_path / "c"), clustered_table()
    DeltaSparkWriter(spark).ensure_table(str(tmp_path / "warm"), t)  # a session's first create takes seconds
    created = threading.Thread(target=DeltaSparkWriter(spark).ensure_table, args=(path, t))
    with _CONF_LOCK:  # another thread's merge, mid-flight
        spark.conf.set(_USER_METADATA_CONF, json.dumps(commit_metadata(nonclustered_table(), 15)))
        created.start()
        created.join(timeout=3)  # unlocked, the create commits within this (about 1 s)
        spark.conf.unset(_USER_METADATA_CONF)
    created.join()
    history = DeltaTable(path).history()
    assert [h["operation"] for h in history] == ["CREATE TABLE"]
    assert not commit_ts(history[0]), history[0]


@pytest.mark.parametrize(("env", "known", "kind", "session"), [
    ({}, "local[2]", "delta-rs", False),  # the local engine's default master: known without a session
    ({"CDCFLOW_SPARK_MASTER": "local[4]"}, "local[4]", "delta-rs", False),
    # a cluster: known, and its writer, delta-spark, needs the session
    ({"CDCFLOW_SPARK_MASTER": "spark://10.0.0.5:7077"}, "spark://10.0.0.5:7077", "delta-spark", True),
    ({"CDCFLOW_SPARK_MASTER": "sc://connect:15002"}, None, "delta-rs", True),  # the server's: only a session tells
    ({"PYSPARK_GATEWAY_PORT": "40123"}, None, "delta-rs", True),  # spark-submit's driver: the submit's master
])
def test_unset_the_writer_starts_a_session_only_when_it_needs_one(no_session_yet, monkeypatch, env, known, kind,
                                                                  session):
    import spark_jobs.session as sessions

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert sessions.known_master() == known
    assert get_writer().name == kind  # asked, the session (the tests' local one) says delta-rs
    assert bool(no_session_yet) == session


def test_turning_vectors_on_keeps_the_features_a_legacy_protocol_implied(tmp_path):
    """A table with the change data feed on (writer version 4) keeps changeDataFeed, appendOnly and invariants in
    every version's protocol when deletion vectors come on (PROTOCOL.md "Table Features"): delta-spark refuses a
    version whose metadata enables a feature its protocol does not list."""
    from deltalake import write_deltalake

    from spark_jobs.load.delta_writer import align_deletion_vectors

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int32())}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    assert DeltaTable(path).protocol().min_writer_version == 4
    assert align_deletion_vectors(DeltaTable(path), True)
    last = DeltaTable(path).version()
    for v in range(1, last + 1):
        p = DeltaTable(path, version=v).protocol()
        assert p.min_writer_version == 7
        assert {"changeDataFeed", "appendOnly", "invariants", "deletionVectors"} <= set(p.writer_features or []), v
        assert "deletionVectors" in (p.reader_features or []), v
