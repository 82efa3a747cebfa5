from dataclasses import replace

import pytest

from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column, Index, TableInfo
from cdc_core.schema.storage import SchemaStorage


def _t(tid: int, name: str = "t", cols: int = 2) -> TableInfo:
    return TableInfo(
        id=tid, db_name="db", name=name, db_id=100, pk_is_handle=True,
        columns=tuple(Column(i, f"c{i}", "int", nullable=i != 1) for i in range(1, cols + 1)),
        indexes=(Index("PRIMARY", ("c1",), unique=True, primary=True),),
    )


def _job(jid: int, kind: str, ts: int, info: TableInfo | None, table_id: int | None = None, **kw) -> DDLJob:
    return DDLJob(jid, kind, 100, table_id if table_id is not None else (info.id if info else None), "db",
                  info.name if info else None, kind, jid, info, ts, **kw)


def test_versions_by_ts():
    t1 = _t(101)
    t1b = replace(t1, columns=(*t1.columns, Column(3, "c3", "int")), schema_version=2)
    s = SchemaStorage.from_jobs([_job(2, "add column", 20, t1b), _job(1, "create table", 10, t1)])
    assert s.table_at(101, 9) is None
    assert s.table_at(101, 10) == t1
    assert s.table_at(101, 19) == t1
    assert s.table_at(101, 20) == t1b
    assert [t.id for t in s.tables_at(15)] == [101]
    assert [j.job_id for j in s.jobs_between(10, 20)] == [2]


def test_drop_and_truncate_end_table_ids():
    t1 = _t(101)
    t2 = _t(102, "u")
    t2_new = replace(t2, id=103)
    s = SchemaStorage.from_jobs([
        _job(1, "create table", 10, t1),
        _job(2, "create table", 11, t2),
        _job(3, "drop table", 20, None, table_id=101),
        _job(4, "truncate table", 30, t2_new, old_table_id=102),
    ])
    assert [t.id for t in s.tables_at(15)] == [101, 102]
    assert [t.id for t in s.tables_at(25)] == [102]
    assert [t.id for t in s.tables_at(30)] == [103]


def test_gc_keeps_the_version_in_force():
    t1 = _t(101)
    t1b = replace(t1, schema_version=2, name="renamed")
    s = SchemaStorage.from_jobs([_job(1, "create table", 10, t1), _job(2, "rename table", 20, t1b)])
    s.gc(25)
    assert s.table_at(101, 25) == t1b
    assert s.jobs_between(0, 100) == []


def test_out_of_order_jobs_are_rejected():
    s = SchemaStorage()
    s.apply(_job(1, "create table", 10, _t(101)))
    with pytest.raises(ValueError, match="arrived after"):
        s.apply(_job(2, "create table", 5, _t(102)))


def test_exchange_partition_swaps_the_partition_and_the_normal_table_ids():
    from cdc_core.schema.partition import RANGE, PartitionDef, PartitionInfo

    def parts(*ids: int) -> PartitionInfo:
        return PartitionInfo(RANGE, "c1", (PartitionDef(ids[0], "p0", 10), PartitionDef(ids[1], "p1", None)))

    pt = replace(_t(101, "pt"), partition=parts(102, 103))
    nt = replace(_t(104, "nt"), db_name="stage", db_id=200)
    # The job as parsed from TiDB's JSON: the partitioned table's TableInfo after the swap, under no database name
    # (TiDB's job names the normal table's); the normal table as old_*; the partition swapped out.
    pt_after = replace(pt, db_name="", partition=parts(104, 103), schema_version=3)
    job = DDLJob(3, "exchange partition", 100, 101, None, "pt", "ALTER TABLE pt EXCHANGE PARTITION p0 WITH TABLE "
                 "stage.nt", 3, pt_after, 30, old_table_id=104, old_schema_id=200, old_schema_name="stage",
                 old_table_name="nt", partition_id=102, partition_name="p0")
    s = SchemaStorage.from_jobs([_job(1, "create table", 10, pt), _job(2, "create table", 11, nt), job])
    assert s.table_at(101, 29).physical_ids == (102, 103) and s.table_at(104, 29) == nt
    after = s.table_at(101, 30)
    assert after.physical_ids == (104, 103) and after.qualified_name == "db.pt"
    assert s.table_at(104, 30) is None
    assert s.table_at(102, 30) == replace(nt, id=102, schema_version=3)
    [recorded] = s.jobs_between(29, 30)
    assert (recorded.schema_name, recorded.table_info.db_name, recorded.old_schema_name) == ("db", "db", "stage")
    # A normal table outside the schema (not replicated): it had the partitioned table's definition under the job's
    # names (TiDB exchanges only such tables), and goes on under the partition's id.
    alone = SchemaStorage.from_jobs([_job(1, "create table", 10, pt), job])
    inferred = replace(pt, id=104, db_name="stage", db_id=200, name="nt", partition=None)
    assert alone.table_at(104, 29) == inferred and alone.table_at(104, 30) is None
    assert alone.table_at(102, 30) == replace(inferred, id=102, schema_version=3)
    assert alone.table_at(101, 30).physical_ids == (104, 103)
    # A partitioned table outside it: its TableInfo after the job with the partition the args name put back, in
    # the database its CREATE SCHEMA names.
    s2 = SchemaStorage.from_jobs([_job(0, "create schema", 5, None, table_id=None), _job(2, "create table", 11, nt),
                                  job])
    assert s2.table_at(101, 29).physical_ids == (102, 103) and s2.table_at(101, 29).qualified_name == "db.pt"
    assert s2.table_at(102, 30) == replace(nt, id=102, schema_version=3) and s2.table_at(104, 30) is None
    with pytest.raises(Exception, match="table 101 is not in the schema, and the job's args do not name"):
        SchemaStorage.from_jobs([_job(2, "create table", 11, nt), replace(job, partition_id=None)])
    with pytest.raises(Exception, match="neither table 101 nor table 104 is in the schema"):
        SchemaStorage.from_jobs([job])
    # Without readable args the partition is the one id the partitions lost (TiCDC's getSourceTable).
    blind = replace(job, partition_id=None, partition_name=None)
    [found] = SchemaStorage.from_jobs([_job(1, "create table", 10, pt), _job(2, "create table", 11, nt),
                                       blind]).jobs_between(29, 30)
    assert (found.partition_id, found.partition_name) == (102, "p0")
    odd = replace(job, table_info=replace(pt_after, partition=parts(104, 105)))  # two partitions changed
    with pytest.raises(Exception, match=r"lost \[102, 103\] and gained \[104, 105\], not one partition"):
        SchemaStorage.from_jobs([_job(1, "create table", 10, pt), _job(2, "create table", 11, nt), odd])
