"""cdcflow's DDL job: what one finished DDL did to one table or database, and the job types cdcflow reads.

A ``DDLJob`` is TiDB's ``model.Job`` (``pkg/meta/model/job.go``) as cdcflow keeps it: the ids and names before and
after, the query, the schema version and the ``TableInfo`` after the job, and the commit ts that made it the barrier.
TiDB's JSON of it is ``tidb_json``'s, the system tables that hold that JSON ``ddl_history``'s; ``to_row`` /
``from_row`` are cdcflow's own state files' form (schema logs, snapshots, step arguments).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cdc_core.schema.model import TableInfo

# One ALTER TABLE of several column and index changes, one job (TiDB's ActionMultiSchemaChange).
MULTI_SCHEMA_CHANGE = "alter table multi-schema change"
JOB_TYPES = (
    "create schema",
    "drop schema",
    "create table",
    "drop table",
    "truncate table",
    "rename table",
    "add column",
    "drop column",
    "modify column",
    "add index",
    "drop index",
    MULTI_SCHEMA_CHANGE,
    "add partition",
    "drop partition",
    "truncate partition",
    "exchange partition",
    "alter table reorganize partition",
    "alter table partition by",
    "alter table remove partitioning",
    "add primary key",
    "drop primary key",
)
# Jobs that rebuild a table under a new table id (old_table_id -> table_id), its rows unchanged.
REPARTITION_JOB_TYPES = frozenset({"alter table partition by", "alter table remove partitioning"})


@dataclass(frozen=True)
class DDLJob:
    job_id: int
    job_type: str
    schema_id: int | None
    table_id: int | None
    schema_name: str | None
    table_name: str | None
    query: str
    schema_version: int
    table_info: TableInfo | None  # the table after the job (None for drops and schema jobs)
    finished_ts: int  # the commit ts of the job
    old_table_id: int | None = None
    old_schema_name: str | None = None
    old_table_name: str | None = None
    old_schema_id: int | None = None  # RENAME TABLE: the database the table left
    # The table's place in a job of several tables (CREATE TABLES, RENAME TABLES): TiCDC splits such a job
    # into one DDL event per table, all at the job's finished ts; (job_id, sub_index) names each.
    sub_index: int = 0
    # A multi-schema change (one ALTER TABLE of several changes, one job): its sub-jobs' types, in order.
    sub_job_types: tuple[str, ...] = ()
    # EXCHANGE PARTITION: the partition swapped out (its id before the job, which the normal table takes; the
    # partition takes the normal table's), its name and WITH/WITHOUT VALIDATION. The job is the partitioned
    # table's (table_id, schema_id, table_info); the normal table is old_table_id / old_schema_id / ... (TiDB's
    # job names the normal table, args the partitioned one: pkg/ddl/executor.go ExchangeTablePartition).
    partition_id: int | None = None
    partition_name: str | None = None
    with_validation: bool = True
    # REORGANIZE PARTITION, PARTITION BY, REMOVE PARTITIONING: the physical tables the job left behind (TiDB's
    # finished args, which its delete-range reads: ``TablePartitionArgs.OldPhysicalTblIDs``).
    old_physical_ids: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[int, int]:
        """What identifies the job (or the one table's part of a multi-table job)."""
        return (self.job_id, self.sub_index)

    def touches(self, table: TableInfo) -> bool:
        """Whether the job names ``table`` -- by its table id or a physical id (a partition's, one exchanged or
        left behind), before or after the job, or by ``(schema, name)`` before or after it: whether rows may have
        come or gone under ``table`` without a row event naming them (a RENAME, TRUNCATE, partition DDL, EXCHANGE
        PARTITION, a table created or dropped under its name). O(the job's ids + the table's partitions)."""
        ti = self.table_info
        ids = {self.table_id, self.old_table_id, self.partition_id, *self.old_physical_ids}
        if ti is not None:
            ids.update((ti.id, *ti.physical_ids))
        if table.id in ids or not ids.isdisjoint(table.physical_ids):
            return True
        return (table.db_name, table.name) in {(self.schema_name, self.table_name),
                                               (self.old_schema_name, self.old_table_name)}

    def to_row(self) -> dict[str, Any]:
        """``{field: value}`` of cdcflow's own state files (schema logs, snapshots, step arguments)."""
        return {
            "job_id": self.job_id,
            "job_type": self.job_type,
            "schema_id": self.schema_id,
            "table_id": self.table_id,
            "schema_name": self.schema_name,
            "table_name": self.table_name,
            "query": self.query,
            "schema_version": self.schema_version,
            "table_info": self.table_info.to_json() if self.table_info else None,
            "finished_ts": self.finished_ts,
            "old_table_id": self.old_table_id,
            "old_schema_name": self.old_schema_name,
            "old_table_name": self.old_table_name,
            "old_schema_id": self.old_schema_id,
            "sub_index": self.sub_index,
            "sub_job_types": list(self.sub_job_types),
            "partition_id": self.partition_id,
            "partition_name": self.partition_name,
            "with_validation": self.with_validation,
            "old_physical_ids": list(self.old_physical_ids),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DDLJob:
        ti = row.get("table_info")
        return cls(
            job_id=int(row["job_id"]),
            job_type=str(row["job_type"]),
            schema_id=_opt_int(row.get("schema_id")),
            table_id=_opt_int(row.get("table_id")),
            schema_name=row.get("schema_name"),
            table_name=row.get("table_name"),
            query=str(row.get("query") or ""),
            schema_version=int(row.get("schema_version") or 0),
            table_info=TableInfo.from_json(ti) if ti else None,
            finished_ts=int(row["finished_ts"]),
            old_table_id=_opt_int(row.get("old_table_id")),
            old_schema_name=row.get("old_schema_name"),
            old_table_name=row.get("old_table_name"),
            old_schema_id=_opt_int(row.get("old_schema_id")),
            sub_index=int(row.get("sub_index") or 0),
            sub_job_types=tuple(row.get("sub_job_types") or ()),
            partition_id=_opt_int(row.get("partition_id")),
            partition_name=row.get("partition_name"),
            with_validation=bool(row.get("with_validation", True)),
            old_physical_ids=tuple(int(i) for i in row.get("old_physical_ids") or ()),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_row(), sort_keys=True)


def sort_key(job: DDLJob) -> tuple[int, int, int]:
    """Commit order of jobs, then the parts of one job in order."""
    return (job.finished_ts, job.job_id, job.sub_index)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)
