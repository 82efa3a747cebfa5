import json
from dataclasses import replace

import pyarrow as pa
import pytest

from cdc_core.changefeed import ddl_puller
from cdc_core.changefeed.barriers import DdlStep, DmlStep, plan_steps, relevant
from cdc_core.codec import changelog, key
from cdc_core.codec.row import encode_row
from cdc_core.errors import ChangefeedError
from cdc_core.filter.table_filter import TableFilter
from cdc_core.schema import ddl_history
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column, Index, TableInfo
from cdc_core.schema.storage import SchemaStorage


def _t(tid: int, name: str = "t", db: str = "db") -> TableInfo:
    return TableInfo(id=tid, db_name=db, name=name, db_id=100, pk_is_handle=True, max_column_id=1,
                     columns=(Column(1, "id", "int", nullable=False),),
                     indexes=(Index("PRIMARY", ("id",), unique=True, primary=True, id=0),))


def _job(jid: int, kind: str, ts: int, info: TableInfo | None, **kw) -> DDLJob:
    base = {"schema_id": 100, "table_id": info.id if info else None, "schema_name": info.db_name if info else "db",
            "table_name": info.name if info else None}
    base.update(kw)
    return DDLJob(job_id=jid, job_type=kind, query=kind, schema_version=jid, table_info=info, finished_ts=ts, **base)


def test_steps_interleave_dml_and_ddl_with_versions():
    jobs = [_job(2, "add column", 20, _t(101)), _job(1, "create table", 10, _t(101))]
    steps = plan_steps(5, 30, jobs)
    assert steps == [DmlStep(5, 9, 9), DdlStep(jobs[1]), DmlStep(10, 19, 19), DdlStep(jobs[0]), DmlStep(20, 30, 30)]
    assert [s.version for s in steps] == sorted(s.version for s in steps)  # strictly increasing per table


def test_adjacent_ddls_and_ddl_at_the_window_end():
    a, b = _job(1, "create table", 6, _t(101)), _job(2, "create table", 7, _t(102, "u"))
    assert plan_steps(5, 7, [a, b]) == [DdlStep(a), DdlStep(b)]
    assert plan_steps(5, 9, []) == [DmlStep(5, 9, 9)]
    with pytest.raises(ValueError, match="outside the window"):
        plan_steps(5, 6, [b])


def test_sub_window_cuts_split_dml_steps_and_ddl_barriers_stay():
    jobs = [_job(1, "add column", 20, _t(101))]
    steps = plan_steps(5, 40, jobs, cuts=[12, 19, 25, 40, 3, 12])  # 40 and 3: not inside; 19: right before the DDL
    assert steps == [DmlStep(5, 12, 12, cut=True), DmlStep(12, 19, 19), DdlStep(jobs[0]),
                     DmlStep(20, 25, 25, cut=True), DmlStep(25, 40, 40)]
    assert [s.version for s in steps] == sorted(s.version for s in steps)
    assert plan_steps(5, 40, [], cuts=[]) == [DmlStep(5, 40, 40)]


def test_dml_at_a_ddls_commit_ts_is_an_at_barrier_step_before_it():
    jobs = [_job(1, "add column", 20, _t(101))]
    steps = plan_steps(5, 30, jobs, shared={20})
    assert steps == [DmlStep(5, 19, 19), DmlStep(19, 20, 20, at_barrier=True), DdlStep(jobs[0]), DmlStep(20, 30, 30)]
    at = steps[1]
    assert isinstance(at, DmlStep) and at.schema_ts == 19  # the schema before the DDL
    assert all(s.schema_ts == s.upto_ts for s in steps if isinstance(s, DmlStep) and not s.at_barrier)
    # a DDL right after the checkpoint, two DDLs at adjacent ts, a cut right before the barrier, a shared ts that is
    # not a DDL's (ignored), and a job of two tables at one ts (one at-barrier step before its first part)
    a, b = _job(1, "create table", 6, _t(101)), _job(2, "add column", 7, _t(102, "u"))
    assert plan_steps(5, 7, [a, b], shared={6, 7}) == [
        DmlStep(5, 6, 6, at_barrier=True), DdlStep(a), DmlStep(6, 7, 7, at_barrier=True), DdlStep(b)]
    assert plan_steps(5, 40, jobs, cuts=[19], shared={20, 33}) == [
        DmlStep(5, 19, 19), DmlStep(19, 20, 20, at_barrier=True), DdlStep(jobs[0]), DmlStep(20, 40, 40)]
    assert plan_steps(5, 40, jobs, cuts=[12], shared={20}) == [
        DmlStep(5, 12, 12, cut=True), DmlStep(12, 19, 19), DmlStep(19, 20, 20, at_barrier=True), DdlStep(jobs[0]),
        DmlStep(20, 40, 40)]
    parts = [_job(3, "rename table", 20, _t(101, "x"), sub_index=0), _job(3, "rename table", 20, _t(102, "y"),
                                                                         sub_index=1)]
    assert plan_steps(5, 20, parts, shared={20}) == [
        DmlStep(5, 19, 19), DmlStep(19, 20, 20, at_barrier=True), DdlStep(parts[0]), DdlStep(parts[1])]


def test_relevance_by_name_before_and_after():
    flt = TableFilter(["db.*", "!db.tmp*"])
    t = _t(101)
    storage = SchemaStorage.from_jobs([_job(1, "create table", 10, t)])
    assert relevant(_job(2, "add column", 20, t), storage, flt)
    renamed_out = _job(3, "rename table", 30, replace(t, name="tmp_t"), old_schema_name="db", old_table_name="t")
    assert relevant(renamed_out, storage, flt)  # it leaves the replicated set: the Delta table must follow
    assert not relevant(_job(4, "create table", 40, _t(102, "tmp_x")), storage, flt)
    assert relevant(_job(5, "create schema", 50, None, schema_name="db"), storage, flt)
    assert not relevant(_job(6, "create schema", 60, None, schema_name="other"), storage, flt)


def _bronze(jobs: list[DDLJob], extra_rows: int = 0) -> pa.Table:
    rows = [
        {"region_id": 1, "table_id": ddl_history.JOB_TABLE_ID, "key": key.row_key(ddl_history.JOB_TABLE_ID, j.job_id),
         "op": "put", "start_ts": j.finished_ts - 1, "commit_ts": j.finished_ts,
         "value": ddl_history.job_table_value((j,)), "old_value": None}
        for j in jobs
    ]
    rows += [{"region_id": 2, "table_id": 101, "key": key.row_key(101, i), "op": "put", "start_ts": 1,
              "commit_ts": 2, "value": b'{"1":1}', "old_value": None} for i in range(extra_rows)]
    return pa.Table.from_pylist(rows, schema=changelog.SCHEMA)


def _job_row(jid: int, ts: int, meta: bytes | None, op: str = "put") -> dict:
    """A ``tidb_ddl_job`` row change as the puller stores it, with ``meta`` as its job_meta JSON."""
    value = None if op == "delete" else encode_row(ddl_history.JOB_TABLE_INFO, {1: jid, 5: meta})
    return {"region_id": 1, "table_id": ddl_history.JOB_TABLE_ID, "key": key.row_key(ddl_history.JOB_TABLE_ID, jid),
            "op": op, "start_ts": ts - 1, "commit_ts": ts, "value": value, "old_value": None}


def test_decode_jobs_deduplicates_and_refuses_unreplicated_data_jobs_on_replicated_tables():
    a, b = _job(1, "create table", 10, _t(101)), _job(2, "add column", 20, _t(101))
    # A RECOVER TABLE job (ActionRecoverTable = 25) as TiDB writes it: it brings rows back without row events.
    odd = json.dumps({"id": 3, "type": 25, "schema_id": 100, "table_id": 101, "schema_name": "db",
                      "table_name": "t", "state": ddl_history.JOB_STATE_DONE, "query": "RECOVER TABLE t",
                      "binlog": {"SchemaVersion": 3, "TableInfo": None, "FinishedTS": 0}}).encode()
    window = pa.concat_tables([_bronze([b, a, a], extra_rows=3),
                               pa.Table.from_pylist([_job_row(3, 30, odd)], schema=changelog.SCHEMA)])
    got = ddl_puller.decode_jobs(window)
    assert [j.job_id for j in got] == [1, 2, 3]  # a's duplicate collapses; every job reaches the schema storage
    # The table as TiDB's job carries it, at the job's schema version.
    assert got[0].table_info == replace(a.table_info, schema_version=1) and got[0].finished_ts == 10
    # On a replicated table it stops the changefeed: the rows it moves between tables go without row events.
    with pytest.raises(ChangefeedError, match=r"DDL job 3 \(recover table\) on db\.t at commit ts 30: it changes "
                                              r"rows without row events and is not replicated"):
        ddl_puller.decode_jobs(window, TableFilter(["db.*"]).match)
    assert [j.job_id for j in ddl_puller.decode_jobs(window, TableFilter(["other.*"]).match)] == [1, 2, 3]


def _undecodable(jid: int, ts: int, db: str, table: str, tid: int) -> dict:
    """A done ADD COLUMN job whose table has a column of a type cdcflow does not know (Tp 226: a type of next
    year): the job's names and ids read, its TableInfo does not decode."""
    info = _t(tid, table, db)
    job = _job(jid, "add column", ts, info, table_id=tid, schema_name=db, table_name=table)
    meta = json.loads(ddl_history.job_meta((job,), ddl_history.JOB_STATE_DONE))
    col = dict(meta["binlog"]["TableInfo"]["cols"][0], id=2, offset=1, name={"O": "v", "L": "v"})
    col["type"] = dict(col["type"], Tp=226)
    meta["binlog"]["TableInfo"]["cols"].append(col)
    return _job_row(jid, ts, json.dumps(meta).encode())


def test_a_job_that_cannot_be_decoded_stops_only_the_changefeeds_that_replicate_its_table(caplog):
    ok = _job(1, "create table", 10, _t(101))
    window = pa.concat_tables([_bronze([ok]), pa.Table.from_pylist([_undecodable(2, 20, "other", "x", 102)],
                                                                     schema=changelog.SCHEMA)])
    got = ddl_puller.decode_jobs(window, TableFilter(["db.*"]).match)  # by its names: not replicated here
    assert [j.job_id for j in got] == [1]
    with pytest.raises(ChangefeedError, match=r"DDL job 2 \(add column\) on other\.x at commit ts 20 cannot be "
                                              r"decoded: .*column 'v': unsupported column type .*Tp 226"):
        ddl_puller.decode_jobs(window, TableFilter(["other.*"]).match)
    # by its table id: a table the changefeed replicates, whatever the job's names say
    with pytest.raises(ChangefeedError, match="DDL job 2"):
        ddl_puller.decode_jobs(window, TableFilter(["db.*"]).match, known_ids={102})


def test_every_finished_job_of_a_table_reaches_the_schema_storage_with_its_table():
    """A job off the DDL whitelist (RENAME INDEX, ActionRenameIndex = 18) still carries its table after it, and the
    schema storage takes it; a view's jobs carry no table."""
    t = _t(101)
    renamed = replace(t, indexes=(replace(t.indexes[0], name="PRIMARY"),), schema_version=2)
    meta = json.loads(ddl_history.job_meta((_job(2, "add index", 20, renamed),), ddl_history.JOB_STATE_DONE))
    meta["type"], meta["query"] = 18, "ALTER TABLE t RENAME INDEX a TO b"
    view = json.loads(ddl_history.job_meta((_job(3, "create table", 30, _t(103, "v")),), ddl_history.JOB_STATE_DONE))
    view["type"] = 21  # ActionCreateView: the TableInfo is a view's
    view["binlog"]["TableInfo"]["view"] = {"view_select": "SELECT 1"}
    window = pa.concat_tables([_bronze([_job(1, "create table", 10, t)]), pa.Table.from_pylist(
        [_job_row(2, 20, json.dumps(meta).encode()), _job_row(3, 30, json.dumps(view).encode())],
        schema=changelog.SCHEMA)])
    got = ddl_puller.decode_jobs(window, TableFilter(["db.*"]).match)
    assert [(j.job_id, j.job_type, j.table_info is not None) for j in got] == [
        (1, "create table", True), (2, "rename index", True), (3, "create view", False)]
    storage = SchemaStorage.from_jobs(got)
    assert storage.table_at(101, 20).schema_version == 2 and storage.table_at(103, 30) is None


def test_decode_takes_jobs_when_done_at_the_row_commit_ts():
    j = _job(1, "create table", 10, _t(101))
    running = json.loads(ddl_history.job_meta((j,), ddl_history.JOB_STATE_DONE))
    running["state"] = 2  # model.JobStateRunning: TiCDC waits for the row that puts it in state done
    rows = [_job_row(1, 7, json.dumps(running).encode()),
            _job_row(1, 11, ddl_history.job_meta((j,), ddl_history.JOB_STATE_DONE)),
            _job_row(1, 12, None, op="delete")]  # moved to tidb_ddl_history once synced
    got = ddl_puller.decode_jobs(pa.Table.from_pylist(rows, schema=changelog.SCHEMA))
    assert [(g.job_id, g.finished_ts) for g in got] == [(1, 11)]  # the done row's commit ts is the barrier


def test_decode_names_a_corrupt_job_row():
    rows = [_job_row(4, 40, b'{"id": 4, "type": 3, "state": 4')]
    row_key = key.row_key(ddl_history.JOB_TABLE_ID, 4).hex()
    with pytest.raises(ChangefeedError, match=f"corrupt tidb_ddl_job row \\(key {row_key}\\) at commit ts 40"):
        ddl_puller.decode_jobs(pa.Table.from_pylist(rows, schema=changelog.SCHEMA))


def test_schema_log_persists_advances_and_gcs(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    t1, t2 = _t(101), _t(102, "u")
    log = ddl_puller.SchemaLog("cf", [_job(1, "create table", 10, t1), _job(2, "create table", 11, t2)], 15)
    log.save()
    again = ddl_puller.SchemaLog.load("cf")
    again.advance([_job(2, "create table", 11, t2), _job(3, "drop table", 20, None, table_id=102),
                   _job(4, "add column", 25, replace(t1, schema_version=4))], 30)
    assert [j.job_id for j in again.jobs] == [1, 2, 3, 4] and again.resolved_ts == 30
    again.gc(22)  # t2 is gone at 22: its jobs go; t1's defining job stays; later jobs stay
    assert [j.job_id for j in again.jobs] == [1, 4]
    s = again.storage()
    assert s.table_at(101, 22) == t1 and s.table_at(101, 25).schema_version == 4
    with pytest.raises(ChangefeedError, match="no schema storage"):
        ddl_puller.SchemaLog.load("nope")


def test_schema_log_gc_keeps_both_tables_an_exchange_partition_defined(tmp_path, monkeypatch):
    from cdc_core.schema.partition import RANGE, PartitionDef, PartitionInfo

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))

    def parts(*ids: int) -> PartitionInfo:
        return PartitionInfo(RANGE, "id", (PartitionDef(ids[0], "p0", 10), PartitionDef(ids[1], "p1", None)))

    pt, nt = replace(_t(101, "pt"), partition=parts(102, 103)), _t(104, "nt")
    exchange = _job(3, "exchange partition", 20, replace(pt, partition=parts(104, 103), schema_version=3),
                    old_table_id=104, old_schema_id=100, old_schema_name="db", old_table_name="nt", partition_id=102,
                    partition_name="p0")
    altered = _job(4, "add column", 30, replace(pt, schema_version=4, partition=parts(104, 103)))
    log = ddl_puller.SchemaLog("cf", [_job(1, "create table", 10, pt), _job(2, "create table", 11, nt), exchange,
                                      altered], 30)
    before = log.storage()
    log.gc(25)
    # The exchange alone cannot replay (it needs both tables' earlier jobs): each table it defined is kept as a
    # CREATE TABLE at its ts, the later job as it is.
    assert [(j.job_id, j.sub_index, j.job_type) for j in log.jobs] == [
        (3, 0, "create table"), (3, 1, "create table"), (4, 0, "add column")]
    after = log.storage()
    for tid in (101, 102, 104):
        assert after.table_at(tid, 25) == before.table_at(tid, 25)
    assert after.table_at(102, 25).name == "nt" and after.table_at(101, 30).schema_version == 4


def test_schema_log_gc_finds_the_exchanged_partition_when_the_args_do_not_say(tmp_path, monkeypatch):
    from cdc_core.schema.partition import RANGE, PartitionDef, PartitionInfo

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    parts = PartitionInfo(RANGE, "id", (PartitionDef(102, "p0", 10), PartitionDef(103, "p1", None)))
    pt, nt = replace(_t(101, "pt"), partition=parts), _t(104, "nt")
    swapped = replace(parts, definitions=(replace(parts.definitions[0], id=104), parts.definitions[1]))
    blind = _job(3, "exchange partition", 20, replace(pt, partition=swapped), old_table_id=104)  # no partition_id
    log = ddl_puller.SchemaLog("cf", [_job(1, "create table", 10, pt), _job(2, "create table", 11, nt), blind], 20)
    log.gc(25)
    assert [(j.job_id, j.sub_index, j.table_id) for j in log.jobs] == [(3, 0, 101), (3, 1, 102)]
    assert log.storage().table_at(102, 25).name == "nt"
