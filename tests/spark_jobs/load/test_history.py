"""History tables (spark_jobs.load.history) from bronze windows: several versions of a key in one window, key-changing
updates, deletes, re-run windows, DDL; on the driver (Arrow) and in Spark (a driver budget of 0 events)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.codec.sink_uri import app_id_for
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column
from spark_jobs.apply_window import apply_window
from spark_jobs.checks.history_checks import check_open_rows
from spark_jobs.load import history
from spark_jobs.load.history import END_AT, START_AT, history_path
from spark_jobs.normalize.bronze import write_bronze
from testkit.builders import Bronze, clustered_table, nonclustered_table

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("driver_or_spark")]
CF = "cf1"


@pytest.fixture
def sink(tmp_path):
    return f"file://{tmp_path}/lake"


def _apply(spark, sink, end_ts, b: Bronze, tables, **kw):
    write_bronze(sink, CF, end_ts, b.arrow())
    return apply_window(sink, CF, end_ts, tables, spark=spark, history=[t.qualified_name for t in tables], **kw)


def _history(sink, table) -> list[dict]:
    rows = DeltaTable(history_path(sink, table)).to_pyarrow_table().to_pylist()
    key = list(table.delta_key())
    return sorted(rows, key=lambda r: (*[r[k] for k in key], r[START_AT]))


def test_every_committed_version_of_a_window_is_a_row(spark, sink):
    c = clustered_table()
    b = (Bronze().put(c, 1, 10, {1: 1, 2: 100})
         .put(c, 1, 12, {1: 1, 2: 101}, old={1: 1, 2: 100})  # two updates in two transactions of one window
         .put(c, 1, 14, {1: 1, 2: 102}, old={1: 1, 2: 101})
         .put(c, 2, 11, {1: 2, 2: 200})
         .delete(c, 2, 13, {1: 2, 2: 200})  # inserted and deleted in the window: one closed version
         .put(c, 3, 15, {1: 3, 2: 301}))
    out = _apply(spark, sink, 20, b, [c])
    assert out[c.qualified_name]["history"]["opened"] == 5
    assert _history(sink, c) == [
        {"a": 1, "b": 100, START_AT: 10, END_AT: 12},
        {"a": 1, "b": 101, START_AT: 12, END_AT: 14},
        {"a": 1, "b": 102, START_AT: 14, END_AT: None},
        {"a": 2, "b": 200, START_AT: 11, END_AT: 13},
        {"a": 3, "b": 301, START_AT: 15, END_AT: None},
    ]
    # the next window closes the open rows it changes and leaves the others
    b2 = Bronze().put(c, 1, 25, {1: 1, 2: 103}, old={1: 1, 2: 102}).delete(c, 3, 26, {1: 3, 2: 301}) \
        .put(c, 2, 27, {1: 2, 2: 201})
    _apply(spark, sink, 30, b2, [c], after_ts=20)
    assert _history(sink, c) == [
        {"a": 1, "b": 100, START_AT: 10, END_AT: 12},
        {"a": 1, "b": 101, START_AT: 12, END_AT: 14},
        {"a": 1, "b": 102, START_AT: 14, END_AT: 25},
        {"a": 1, "b": 103, START_AT: 25, END_AT: None},
        {"a": 2, "b": 200, START_AT: 11, END_AT: 13},
        {"a": 2, "b": 201, START_AT: 27, END_AT: None},
        {"a": 3, "b": 301, START_AT: 15, END_AT: 26},
    ]
    assert check_open_rows(sink, c)["success"]


def test_a_key_changing_update_closes_the_old_key_and_opens_the_new(spark, sink):
    # keyed by a (PRIMARY KEY NONCLUSTERED): an update of a is one PUT with an old value, split into DELETE(a=1) +
    # INSERT(a=2); another row taking a=1 in the same transaction gives a=1 a delete and an insert at one commit ts,
    # of which only the last (the insert, deletes first) is a version
    nc = nonclustered_table()
    b = (Bronze().put(nc, 7, 10, {1: 1, 2: "x", 3: 5})
         .put(nc, 7, 12, {1: 2, 2: "x", 3: 5}, old={1: 1, 2: "x", 3: 5})
         .put(nc, 8, 12, {1: 1, 2: "y", 3: 6}))  # the old key taken again in the same transaction
    _apply(spark, sink, 20, b, [nc])
    assert _history(sink, nc) == [
        {"a": 1, "u": "x", "b": 5, START_AT: 10, END_AT: 12},
        {"a": 1, "u": "y", "b": 6, START_AT: 12, END_AT: None},
        {"a": 2, "u": "x", "b": 5, START_AT: 12, END_AT: None},
    ]
    assert check_open_rows(sink, nc)["success"]


def test_a_re_run_window_changes_nothing(spark, sink):
    c = clustered_table()
    b = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 1, 11, {1: 1, 2: 2}, old={1: 1, 2: 1})
    _apply(spark, sink, 20, b, [c])
    before = DeltaTable(history_path(sink, c)).version()
    again = apply_window(sink, CF, 20, [c], spark=spark, history=[c.qualified_name])
    assert again[c.qualified_name]["history"]["skipped"]
    assert DeltaTable(history_path(sink, c)).version() == before
    # the silver commit landed and the history's did not (a crash between them): the re-run writes only the history
    hist = history_path(sink, c)
    import shutil

    shutil.rmtree(hist)
    redo = apply_window(sink, CF, 20, [c], spark=spark, history=[c.qualified_name])
    assert redo[c.qualified_name]["skipped"] and not redo[c.qualified_name]["history"]["skipped"]
    assert _history(sink, c) == [{"a": 1, "b": 1, START_AT: 10, END_AT: 11}, {"a": 1, "b": 2, START_AT: 11,
                                                                                END_AT: None}]
    assert DeltaTable(hist).transaction_version(app_id_for(CF)) == 20


def test_only_the_tables_named_keep_history(spark, sink):
    c, other = clustered_table(), clustered_table(table_id=105, name="other")
    write_bronze(sink, CF, 20, Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(other, 1, 10, {1: 1, 2: 1}).arrow())
    apply_window(sink, CF, 20, [c, other], spark=spark, history=[c.qualified_name])
    assert DeltaTable.is_deltatable(history_path(sink, c))
    assert not DeltaTable.is_deltatable(history_path(sink, other))


def test_ddl_truncate_closes_every_open_row_and_add_drop_column_follow_silver(spark, sink):
    c = clustered_table()
    _apply(spark, sink, 20, Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 2, 11, {1: 2, 2: 2}), [c])
    added = replace(c, columns=(*c.columns, Column(3, "d", "int")), schema_version=2)
    job = _job(5, "add column", 25, added)
    ddl(sink, job, c, added)
    write_bronze(sink, CF, 30, Bronze().put(added, 1, 27, {1: 1, 2: 1, 3: 9}, old={1: 1, 2: 1}).arrow())
    apply_window(sink, CF, 30, [added], after_ts=25, spark=spark, history=[c.qualified_name])
    assert _history(sink, added) == [
        {"a": 1, "b": 1, START_AT: 10, END_AT: 27, "d": None},
        {"a": 1, "b": 1, START_AT: 27, END_AT: None, "d": 9},
        {"a": 2, "b": 2, START_AT: 11, END_AT: None, "d": None},
    ]
    dropped = replace(added, columns=(added.columns[0], added.columns[2]), schema_version=3)
    job = _job(6, "drop column", 35, dropped)
    ddl(sink, job, added, dropped)
    assert _history(sink, dropped) == [
        {"a": 1, "d": None, START_AT: 10, END_AT: 27},
        {"a": 1, "d": 9, START_AT: 27, END_AT: None},
        {"a": 2, "d": None, START_AT: 11, END_AT: None},
    ]
    trunc = _job(7, "truncate table", 40, replace(dropped, id=c.id + 100))
    assert ddl(sink, trunc, dropped, trunc.table_info)["history"]["closed"] == 2
    assert ddl(sink, trunc, dropped, trunc.table_info)["history"]["skipped"]  # a re-run
    assert [r[END_AT] for r in _history(sink, dropped)] == [27, 40, 40]


def _job(job_id, job_type, ts, table_info) -> DDLJob:
    return DDLJob(job_id=job_id, job_type=job_type, schema_id=1, table_id=101, schema_name="test", table_name="c",
                  query="", schema_version=job_id, finished_ts=ts, table_info=table_info)


def ddl(sink, job, before, after):
    """The DDL applied as a barrier applies it (spark_jobs.ddl_apply: the silver table, then its history)."""
    from cdc_core.changefeed.job_args.ddl_apply import DdlApplyArgs
    from spark_jobs.ddl_apply import run_job

    return run_job(DdlApplyArgs(sink, CF, job, before, after, history=True))


def test_the_check_fails_on_a_corrupted_history_naming_the_table(spark, sink):
    c = clustered_table()
    _apply(spark, sink, 20, Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 2, 11, {1: 2, 2: 2}), [c])
    assert check_open_rows(sink, c)["success"]
    DeltaTable(history_path(sink, c)).delete("a = 2")
    got = check_open_rows(sink, c)
    assert not got["success"] and c.qualified_name in got["details"] and got["sample_keys"] == [{"a": 2}]


def test_history_rows_of_versions():
    c = clustered_table()
    versions = pa.table({"a": pa.array([1, 1, 2], pa.int32()), "b": pa.array([5, None, 7], pa.int32()),
                         "_cdc_op": ["upsert", "delete", "upsert"], "_cdc_commit_ts": pa.array([3, 4, 2], pa.int64())})
    opened, closes = history.history_rows(versions, c)
    assert opened.to_pylist() == [{"a": 1, "b": 5, START_AT: 3, END_AT: 4}, {"a": 2, "b": 7, START_AT: 2, END_AT: None}]
    assert closes.to_pylist() == [{"a": 1, START_AT: 3}, {"a": 2, START_AT: 2}]


def test_the_delta_spark_writer_keeps_the_same_history(spark, tmp_path):
    """With delta-spark merging the silver table, the history table (written by delta-rs on the driver) is the same
    as with the delta-rs writer, and its check passes."""
    from spark_jobs.load.delta_writer import DeltaRsWriter, DeltaSparkWriter

    c = clustered_table()
    got = {}
    for name, writer in (("rs", DeltaRsWriter()), ("sp", DeltaSparkWriter(spark))):
        sink = f"file://{tmp_path}/{name}"
        write_bronze(sink, CF, 20, Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 1, 12, {1: 1, 2: 2}, old={1: 1, 2: 1})
                     .put(c, 2, 11, {1: 2, 2: 5}).arrow())
        write_bronze(sink, CF, 30, Bronze().delete(c, 2, 25, {1: 2, 2: 5}).put(c, 1, 26, {1: 1, 2: 3},
                                                                                  old={1: 1, 2: 2}).arrow())
        apply_window(sink, CF, 20, [c], spark=spark, writer=writer, history=[c.qualified_name])
        apply_window(sink, CF, 30, [c], after_ts=20, spark=spark, writer=writer, history=[c.qualified_name])
        assert check_open_rows(sink, c)["success"]
        got[name] = _history(sink, c)
    assert got["rs"] == got["sp"] == [
        {"a": 1, "b": 1, START_AT: 10, END_AT: 12}, {"a": 1, "b": 2, START_AT: 12, END_AT: 26},
        {"a": 1, "b": 3, START_AT: 26, END_AT: None}, {"a": 2, "b": 5, START_AT: 11, END_AT: 25},
    ]


def test_a_renamed_table_takes_its_history_along(spark, sink):
    c = clustered_table()
    _apply(spark, sink, 20, Bronze().put(c, 1, 10, {1: 1, 2: 1}), [c])
    renamed = replace(c, name="c2")
    ddl(sink, _job(8, "rename table", 25, renamed), c, renamed)
    assert not DeltaTable.is_deltatable(history_path(sink, c))
    assert _history(sink, renamed) == [{"a": 1, "b": 1, START_AT: 10, END_AT: None}]
    again = apply_window(sink, CF, 20, [c], spark=spark, history=[c.qualified_name])  # a re-run of the old step
    assert again[c.qualified_name]["skipped"] and "history" not in again[c.qualified_name]
    assert not DeltaTable.is_deltatable(history_path(sink, c))  # no second history under the old name
