"""The Spark jobs' arguments (``cdc_core.changefeed.job_args``): each class refuses a bad value when read from JSON,
naming the job and the argument, and its JSON reads back into an equal object (what the submit engine sends the
job server); the job names are those of ``spark_engine.JOBS``."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from cdc_core.changefeed import spark_engine
from cdc_core.changefeed.job_args.apply_window import ApplyArgs
from cdc_core.changefeed.job_args.base import JobArgs
from cdc_core.changefeed.job_args.data_quality import ReconcileArgs
from cdc_core.changefeed.job_args.ddl_apply import DdlApplyArgs, Exchange, Upstream
from cdc_core.changefeed.job_args.maintain import MaintainArgs
from cdc_core.changefeed.job_args.registry import ARGS, from_job_dict
from cdc_core.changefeed.job_args.rollback import RollbackArgs
from cdc_core.changefeed.job_args.snapshot_load import DEFAULT_MAX_CHUNKS, BaseLoad, SnapshotJobArgs
from cdc_core.changefeed.job_args.window_checks import ReadAheadArgs, WindowChecksArgs
from cdc_core.errors import ChangefeedError
from cdc_core.schema.ddl_job import DDLJob
from testkit.builders import clustered_table, rowid_table, typed_table


def test_apply_window_arguments_are_checked_when_read() -> None:
    c = clustered_table()
    base = {"sink_uri": "file:///lake", "changefeed_id": "cf", "window_end_ts": "40", "tables": [c.to_json()]}
    a = ApplyArgs.from_dict({**base, "checkpoint_ts": 20, "ignore_txn_start_ts": [7, "8"], "writer": "delta-rs"})
    assert (a.window_end_ts, a.after_ts, a.upto_ts, a.ignore_txn_start_ts, a.writer) == (40, 20, None, (7, 8),
                                                                                            "delta-rs")
    assert ApplyArgs.from_dict({**base, "after_ts": None, "checkpoint_ts": 20}).after_ts is None  # after_ts wins
    for bad, message in (
        ({"after_tss": 20}, r"unknown argument\(s\) \['after_tss'\]"),  # a typo is not a whole-window run
        ({"barrier_ts": 20}, "no longer takes barrier_ts"),
        ({"writer": "parquet"}, r"writer must be one of \['delta-rs', 'delta-spark'\], got 'parquet'"),
        ({"upto_ts": "soon"}, "upto_ts must be an integer ts, got 'soon'"),
        ({"version": True}, "version must be an integer ts, got True"),
        ({"tables": None}, r"missing argument\(s\) \['tables'\]"),
    ):
        with pytest.raises(ValueError, match=message):
            ApplyArgs.from_dict({**base, **bad})


def test_ddl_apply_arguments_are_checked_when_read() -> None:
    t = clustered_table()
    job = _create_job(t)
    args = {"sink_uri": "file:///lake", "changefeed_id": "cf", "job": job.to_json()}
    got = DdlApplyArgs.from_dict({**args, "after": t.to_json()})
    assert (got.job, got.before, got.after, got.exchange, got.upstream) == (job, None, t, None, None)
    with pytest.raises(ValueError, match=r"ddl_apply: unknown argument\(s\) \['table'\]"):
        DdlApplyArgs.from_dict({**args, "table": t.to_json()})
    with pytest.raises(ValueError, match=r"ddl_apply: missing argument\(s\) \['job'\]"):
        DdlApplyArgs.from_dict({**args, "job": None})
    with pytest.raises(ValueError, match=r"ddl_apply upstream: missing argument\(s\) \['pd_addr'\]"):
        DdlApplyArgs.from_dict({**args, "upstream": {"tidb": "127.0.0.1:4000"}})
    with pytest.raises(ChangefeedError, match="exchange argument 'normal_before' is missing"):
        DdlApplyArgs.from_dict({**args, "exchange": {"normal_after": t.to_json(), "pd_addr": "p"}})


def _create_job(t: Any) -> DDLJob:
    return DDLJob(job_id=7, job_type="create table", schema_id=t.db_id, table_id=t.id, schema_name=t.db_name,
                  table_name=t.name, query="CREATE TABLE", schema_version=7, table_info=t, finished_ts=200)


def _one_of_each() -> list[JobArgs]:
    t, r = clustered_table(), rowid_table()
    checks = WindowChecksArgs(sink_uri="s", changefeed_id="cf", window_end_ts=2**64 - 1, tables=((t, True), (r, False)),
                              after_ts=5, ts=9, mode="count", pd_addr="p:2379", tidb="t:4000",
                              derive_counts=(r.qualified_name,), history=(t.qualified_name,))
    return [
        ApplyArgs(sink_uri="s", changefeed_id="cf", window_end_ts=30, tables=(t, {"table": r, "event_filters": []}),
                  after_ts=10, upto_ts=19, version=19, at_barrier=True,
                  event_filters={t.id: [{"ignore_event": ["insert"]}]},
                  ignore_txn_start_ts=(3, 4), writer="delta-rs", ignore_moves=True, deletion_vectors=True,
                  history=(t.qualified_name,)),
        DdlApplyArgs("s", "cf", _create_job(t), None, t, upstream=Upstream("p:2379"), history=True),
        DdlApplyArgs("s", "cf", _create_job(t), t, t, Exchange(r, r, replace(r, name="n2"), True, "p:2379", "t:4000")),
        checks,
        ReadAheadArgs.ahead_of(checks),
        ReconcileArgs(sink_uri="s", ts=9, tables=((t, False),), mode="off", as_of_ts=8, pd_addr="p", single=True),
        ReconcileArgs(sink_uri="s", ts=9, tables=((t, True), (r, True)), pd_addr="p", history=(r.qualified_name,)),
        SnapshotJobArgs(phase="fetch", sink_uri="s", changefeed_id="cf", ts=9, tables=(t, r), pd_addr="p",
                        max_chunks=8),
        SnapshotJobArgs(phase="load", sink_uri="s", changefeed_id="cf",
                        loads=(BaseLoad(t, "/b", 7, "snapshot/1"), BaseLoad(r, "/c", 7, "snapshot/1", history=True))),
        SnapshotJobArgs(phase="fold", sink_uri="s", changefeed_id="cf", ts=9, tables=(t,)),
        RollbackArgs("s", "cf", (t, r), 9, "rows_equal failed"),
        MaintainArgs(path="/lake/shop/orders", retention_hours=0, enforce_retention_duration=False, checkpoint=True),
    ]


@pytest.mark.parametrize("args", _one_of_each(), ids=lambda a: type(a).JOB)
def test_the_json_of_a_jobs_arguments_reads_back_into_them(args: JobArgs) -> None:
    back = from_job_dict(args.JOB, json.loads(json.dumps(args.to_dict())))
    assert type(back) is type(args)
    if isinstance(args, ApplyArgs):  # its tables and filters cross as JSON; the job reads either
        assert back.to_dict() == args.to_dict() and isinstance(back, ApplyArgs) and back.after_ts == args.after_ts
    else:
        assert back == args


def test_every_job_has_its_arguments_class_and_an_unknown_one_is_refused() -> None:
    assert set(ARGS) == set(spark_engine.JOBS)
    with pytest.raises(ChangefeedError, match="unknown Spark job 'drop_everything'"):
        from_job_dict("drop_everything", {})
    assert WindowChecksArgs.JOB != ReadAheadArgs.JOB  # one class per job: the class picks the job


def test_window_checks_arguments_are_checked_when_built_and_name_what_is_wrong() -> None:
    table = clustered_table()
    args: dict[str, Any] = {"sink_uri": "file:///lake", "changefeed_id": "cf", "window_end_ts": "18446744073709551615",
                            "tables": [{"table": table.to_json()}, {"table": table.to_dict(), "content": False}],
                            "after_ts": 5, "ts": 9, "pd_addr": "127.0.0.1:2379"}
    opts = WindowChecksArgs.from_dict(args)
    assert opts.window_end_ts == 2**64 - 1 and opts.mode == "checksum" and opts.tidb is None  # a ts past 2**53
    assert opts.tables == ((table, True), (table, False)) and opts.reads_upstream
    # the read ahead finds a job's result by its arguments: equal arguments, equal keys; another ts, another key
    assert opts.key() == WindowChecksArgs.from_dict(dict(args)).key()
    assert opts.key() != WindowChecksArgs.from_dict({**args, "ts": 8}).key()
    with pytest.raises(ValueError, match=r"window_checks: unknown argument\(s\) \['tss'\]"):
        WindowChecksArgs.from_dict({**args, "tss": 9})
    with pytest.raises(ValueError, match=r"window_checks: missing argument\(s\) \['after_ts'\]"):
        WindowChecksArgs.from_dict({k: v for k, v in args.items() if k != "after_ts"})
    with pytest.raises(ValueError, match="window_checks: ts must be an integer ts, got 'soon'"):
        WindowChecksArgs.from_dict({**args, "ts": "soon"})
    with pytest.raises(ValueError, match=r"window_checks: tables\[1\] must be"):
        WindowChecksArgs.from_dict({**args, "tables": [{"table": table.to_json()}, table.to_json()]})
    for mode in ("sha1", None):
        with pytest.raises(ValueError, match="data-quality mode must be one of"):
            WindowChecksArgs.from_dict({**args, "mode": mode})
        with pytest.raises(ValueError, match="data-quality mode must be one of"):
            WindowChecksArgs.from_dict({**args, "mode": mode, "tables": []})
    with pytest.raises(ValueError, match="the changed-key checks need the upstream"):
        WindowChecksArgs.from_dict({**args, "pd_addr": None})
    # without the upstream: mode "off", or only tables whose content is not checked
    assert not WindowChecksArgs.from_dict({**args, "pd_addr": None, "mode": "off"}).reads_upstream
    only_structure = {**args, "pd_addr": None, "tables": [{"table": table.to_json(), "content": False}]}
    assert not WindowChecksArgs.from_dict(only_structure).reads_upstream
    # a count derived from the previous check's names a table the job checks; by default every table is counted
    assert not opts.derives_count(table) and opts.derive_counts == ()
    derived = WindowChecksArgs.from_dict({**args, "derive_counts": [table.qualified_name]})
    assert derived.derives_count(table) and derived.key() != opts.key()
    with pytest.raises(ValueError, match=r"window_checks: derive_counts names tables it does not check: \['db.nope'\]"):
        WindowChecksArgs.from_dict({**args, "derive_counts": ["db.nope"]})
    with pytest.raises(ValueError, match="window_checks: derive_counts must be a list of table names"):
        WindowChecksArgs.from_dict({**args, "derive_counts": "t"})



def test_data_quality_arguments_are_checked_when_built_and_name_what_is_wrong() -> None:
    T = typed_table()
    JSON_ROWS = [{c.name: None for c in T.columns}]
    common = {"sink_uri": "file:///lake", "ts": "18446744073709551615", "pd_addr": "127.0.0.1:2379", "mode": "count"}
    one = ReconcileArgs.from_dict({**common, "table": T.to_json(), "content": False, "as_of_ts": 7})
    assert one.single and one.tables == ((T, False),) and one.ts == 2**64 - 1 and one.as_of_ts == 7
    many = ReconcileArgs.from_dict({**common, "tables": [{"table": T.to_dict()}, {"table": T.to_json()}]})
    assert not many.single and many.tables == ((T, True), (T, True)) and many.mode == "count"
    with pytest.raises(ValueError, match=r"data_quality: unknown argument\(s\) \['cotnent'\]"):
        ReconcileArgs.from_dict({**common, "table": T.to_json(), "cotnent": False})
    with pytest.raises(ValueError, match=r"give either table .* or tables; got both"):
        ReconcileArgs.from_dict({**common, "table": T.to_json(), "tables": []})
    with pytest.raises(ValueError, match="content goes with table; each of tables says its own"):
        ReconcileArgs.from_dict({**common, "tables": [{"table": T.to_json()}], "content": False})
    with pytest.raises(ValueError, match=r"give either table .* or tables; got neither"):
        ReconcileArgs.from_dict(common)
    with pytest.raises(ValueError, match=r"data_quality: missing argument\(s\) \['ts'\]"):
        ReconcileArgs.from_dict({**common, "ts": None, "table": T.to_json()})
    with pytest.raises(ValueError, match=r"data_quality: as_of_ts must be an integer ts, got 1\.5"):
        ReconcileArgs.from_dict({**common, "table": T.to_json(), "as_of_ts": 1.5})
    with pytest.raises(ValueError, match="data-quality mode must be one of"):
        ReconcileArgs.from_dict({**common, "table": T.to_json(), "mode": "crc"})
    with pytest.raises(ValueError, match=r"data_quality: tables\[0\] must be"):
        ReconcileArgs.from_dict({**common, "tables": [T.to_json()]})
    with pytest.raises(ValueError, match="expected_rows are one table's rows, got 2 tables"):
        ReconcileArgs.from_dict({**common, "tables": [{"table": T.to_json()}] * 2, "expected_rows": JSON_ROWS})


def test_rollback_arguments_are_checked_when_built_and_name_what_is_wrong() -> None:
    t = clustered_table()
    args = {"sink_uri": "file:///lake", "changefeed_id": "cf", "tables": [t.to_json()], "ts": str(2**64 - 1)}
    opts = RollbackArgs.from_dict(args)
    assert opts.tables == (t,) and opts.ts == 2**64 - 1 and opts.reason == "a check failed"
    with pytest.raises(ValueError, match=r"rollback: unknown argument\(s\) \['to_ts'\]"):
        RollbackArgs.from_dict({**args, "to_ts": 5})
    with pytest.raises(ValueError, match=r"rollback: missing argument\(s\) \['ts'\]"):
        RollbackArgs.from_dict({k: v for k, v in args.items() if k != "ts"})
    with pytest.raises(ValueError, match="rollback: ts must be an integer ts, got 'checkpoint'"):
        RollbackArgs.from_dict({**args, "ts": "checkpoint"})



def test_each_snapshot_load_phase_takes_its_own_arguments_and_a_wrong_one_is_named() -> None:
    t, r = clustered_table(), rowid_table()
    common = {"sink_uri": "file:///lake", "changefeed_id": "cf"}
    fetch = SnapshotJobArgs.from_dict({**common, "phase": "fetch", "pd_addr": "127.0.0.1:2379",
                                       "ts": "18446744073709551615", "tables": [t.to_json(), r.to_dict()]})
    assert fetch.tables == (t, r) and fetch.ts == 2**64 - 1 and fetch.max_chunks == DEFAULT_MAX_CHUNKS
    load = SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [
        {"table": t.to_json(), "base": "/bases/c", "version": 7, "load_id": "snapshot/1"}]})
    assert load.loads == (BaseLoad(t, "/bases/c", 7, "snapshot/1"),) and load.ts is None
    fold = SnapshotJobArgs.from_dict({**common, "phase": "fold", "ts": 9, "tables": [t.to_json()]})
    assert fold.ts == 9 and fold.tables == (t,)

    with pytest.raises(ValueError, match="phase must be 'fetch', 'load' or 'fold', got 'copy'"):
        SnapshotJobArgs.from_dict({**common, "phase": "copy"})
    with pytest.raises(ValueError, match=r"snapshot_load \(fetch\): missing argument\(s\) \['pd_addr'\]"):
        SnapshotJobArgs.from_dict({**common, "phase": "fetch", "ts": 9, "tables": []})
    with pytest.raises(ValueError, match=r"snapshot_load \(fold\): unknown argument\(s\) \['pd_addr'\]"):
        SnapshotJobArgs.from_dict({**common, "phase": "fold", "ts": 9, "tables": [], "pd_addr": "127.0.0.1:2379"})
    with pytest.raises(ValueError, match=r"snapshot_load \(load\): loads\[0\] must be"):
        SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [t.to_json()]})
    with pytest.raises(ValueError, match=r"snapshot_load \(load\) loads\[0\]: missing argument\(s\) "
                                         r"\['version', 'load_id'\]"):
        SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [{"table": t.to_json(), "base": "/b"}]})
    with pytest.raises(ValueError, match=r"snapshot_load \(load\) loads\[0\]: unknown argument\(s\) \['ts'\]"):
        SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [
            {"table": t.to_json(), "base": "/b", "version": 1, "load_id": "x", "ts": 1}]})
    with pytest.raises(ValueError, match="phase must be 'fetch', 'load' or 'fold', got \\['fetch'\\]"):
        SnapshotJobArgs.from_dict({**common, "phase": ["fetch"]})
    for bad in ("64", 0, 2.5):
        with pytest.raises(ValueError, match=r"snapshot_load \(fetch\): max_chunks must be a positive integer"):
            SnapshotJobArgs.from_dict({**common, "phase": "fetch", "pd_addr": "p", "ts": 1, "tables": [],
                                       "max_chunks": bad})
    assert SnapshotJobArgs.from_dict({**common, "phase": "fetch", "pd_addr": "p", "ts": 1, "tables": [],
                                      "max_chunks": 8}).max_chunks == 8
    with pytest.raises(ValueError, match=r"snapshot_load \(load\): loads\[0\]\.version must be an integer ts"):
        SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [
            {"table": t.to_json(), "base": "/b", "version": "v1", "load_id": "x"}]})


def test_maintain_arguments_are_checked_when_read() -> None:
    got = MaintainArgs.from_dict({"path": "/lake/t", "retention_hours": 168})
    assert (got.enforce_retention_duration, got.checkpoint) == (True, False)
    for bad, message in (
        ({"retention_hours": -1}, "maintain: retention_hours must be an integer >= 0, got -1"),
        ({"retention_hours": "168"}, "maintain: retention_hours must be an integer >= 0, got '168'"),
        ({"checkpoint": "yes"}, "maintain: checkpoint must be true or false, got 'yes'"),
        ({"retention": 1}, r"maintain: unknown argument\(s\) \['retention'\]"),
        ({"path": None}, r"maintain: missing argument\(s\) \['path'\]"),
    ):
        with pytest.raises(ValueError, match=message):
            MaintainArgs.from_dict({"path": "/lake/t", "retention_hours": 168, **bad})
