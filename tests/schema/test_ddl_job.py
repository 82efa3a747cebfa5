"""cdcflow's DDL job (``cdc_core/schema/ddl_job.py``): its state-file form and its commit order."""

import json
import random

from cdc_core.schema.ddl_job import MULTI_SCHEMA_CHANGE, DDLJob, sort_key
from cdc_core.schema.model import Column, Index, TableInfo


def _t(tid: int, name: str = "t") -> TableInfo:
    return TableInfo(id=tid, db_name="db", name=name, db_id=2, pk_is_handle=True,
                     columns=(Column(1, "id", "bigint", nullable=False), Column(2, "v", "varchar", length=20)),
                     indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), max_column_id=2)


def test_every_field_survives_the_state_file_form() -> None:
    jobs = [
        DDLJob(1, "create table", 2, 100, "db", "t", "CREATE TABLE t (...)", 7, _t(100), 500),
        DDLJob(2, MULTI_SCHEMA_CHANGE, 2, 100, "db", "t", "ALTER TABLE t ADD c INT, ADD INDEX i (c)", 8, _t(100),
               510, sub_job_types=("add column", "add index")),
        DDLJob(3, "exchange partition", 2, 200, "db", "p", "ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE t", 9,
               _t(200, "p"), 520, old_table_id=100, old_schema_name="db", old_table_name="t", old_schema_id=2,
               partition_id=201, partition_name="p0", with_validation=False),
        DDLJob(4, "alter table partition by", 2, 300, "db", "p", "ALTER TABLE p PARTITION BY HASH(id) PARTITIONS 2",
               10, _t(300, "p"), 530, old_table_id=200, old_physical_ids=(201, 202)),
        DDLJob(5, "rename table", 3, 100, "other", "t2", "RENAME TABLE db.t TO other.t2, db.u TO other.u2", 11,
               _t(100, "t2"), 540, old_table_id=100, old_schema_name="db", old_table_name="t", sub_index=1),
        DDLJob(6, "drop schema", 3, None, "other", None, "DROP DATABASE other", 12, None, 550),
    ]
    for job in jobs:
        row = json.loads(job.to_json())  # what a schema log or a step's arguments hold
        assert row == job.to_row()
        assert DDLJob.from_row(row) == job, job.job_type


def test_a_row_written_before_a_field_existed_reads_with_its_default() -> None:
    row = {"job_id": 9, "job_type": "add column", "schema_id": 2, "table_id": 100, "schema_name": "db",
           "table_name": "t", "query": "ALTER TABLE t ADD c INT", "schema_version": 4, "table_info": None,
           "finished_ts": 70}
    job = DDLJob.from_row(row)
    assert (job.sub_index, job.sub_job_types, job.partition_id, job.with_validation, job.old_physical_ids) == (
        0, (), None, True, ())
    assert job.key == (9, 0)


def test_jobs_sort_in_commit_order_then_by_job_and_part() -> None:
    def job(jid: int, ts: int, part: int = 0) -> DDLJob:
        return DDLJob(jid, "create table", 2, 100 + jid, "db", f"t{jid}", "", jid, None, ts, sub_index=part)

    # Two jobs at one commit ts (a DDL sharing it with another) keep their job order; a job's parts stay together.
    ordered = [job(1, 10), job(3, 20), job(3, 20, 1), job(3, 20, 2), job(4, 20), job(2, 30)]
    shuffled = ordered[:]
    random.Random(7).shuffle(shuffled)
    assert sorted(shuffled, key=sort_key) == ordered
    assert [j.key for j in ordered] == [(1, 0), (3, 0), (3, 1), (3, 2), (4, 0), (2, 0)]


def test_a_job_touches_the_tables_it_names_by_id_partition_or_name() -> None:
    """What decides whether a window's count check may derive the upstream's count (``tasks._untouched_by_ddl``):
    a job touches a table it names by table id, a partition's id (exchanged or left behind) or its name, before or
    after the job; any other table it leaves alone."""
    from dataclasses import replace

    from cdc_core.schema.partition import RANGE, PartitionDef, PartitionInfo

    t, u = _t(100), _t(400, "u")
    pt = replace(_t(300, "p"), partition=PartitionInfo(RANGE, "id", (PartitionDef(301, "p0", 10),
                                                                       PartitionDef(302, "p1", None))))
    alter = DDLJob(2, "add column", 2, 100, "db", "t", "ALTER TABLE t ADD c INT", 8, t, 510)
    assert alter.touches(t) and not alter.touches(u) and not alter.touches(pt)
    # EXCHANGE PARTITION p0 of p with db.u: the normal table is the job's old table, the partition its id
    exchange = DDLJob(3, "exchange partition", 2, 300, "db", "p", "ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE u",
                      9, pt, 520, old_table_id=999, old_schema_name="db", old_table_name="u", partition_id=400)
    assert exchange.touches(pt) and exchange.touches(u) and not exchange.touches(t)
    # a partition left behind by a REORGANIZE names the table that held it, even under another id now
    reorganized = DDLJob(4, "reorganize partition", 2, 777, "x", "y", "ALTER TABLE ... REORGANIZE", 10, None, 530,
                         old_physical_ids=(302,))
    assert reorganized.touches(pt) and not reorganized.touches(t)
    # RENAME TABLE db.t TO db.t2, and a table created where it was: both touched by name
    renamed = DDLJob(5, "rename table", 2, 100, "db", "t2", "RENAME TABLE db.t TO db.t2", 11, _t(100, "t2"), 540,
                     old_table_id=100, old_schema_name="db", old_table_name="t")
    assert renamed.touches(replace(t, id=500)) and renamed.touches(_t(100, "t2")) and not renamed.touches(u)
    # a schema job names no table
    assert not DDLJob(6, "drop schema", 3, None, "other", None, "DROP DATABASE other", 12, None, 550).touches(u)
