"""Multi-version schema storage: the table infos of every table over time, from DDL history jobs.

Built by replaying finished DDL jobs (TiDB's ``mysql.tidb_ddl_job`` / ``tidb_ddl_history``, after the synthetic jobs
of the meta snapshot a changefeed starts from, ``changefeed.schema_loader``) in commit-ts order; answers
"what was table ``id`` at ts" and "which tables existed at ts". Versions at or below a GC ts
(the changefeed checkpoint) are collapsed to the one still in force there.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from cdc_core.schema.ddl_job import REPARTITION_JOB_TYPES, DDLJob, sort_key
from cdc_core.schema.model import SchemaError, TableInfo


@dataclass
class _Versions:
    ts: list[int] = field(default_factory=list)
    infos: list[TableInfo | None] = field(default_factory=list)  # None = dropped at that ts


class SchemaStorage:
    def __init__(self) -> None:
        self._tables: dict[int, _Versions] = {}
        self._jobs: list[DDLJob] = []
        self.resolved_ts = 0

    @classmethod
    def from_jobs(cls, jobs: Iterable[DDLJob]) -> SchemaStorage:
        s = cls()
        for job in sorted(jobs, key=sort_key):
            s.apply(job)
        return s

    def apply(self, job: DDLJob) -> DDLJob:
        """Record a finished job; jobs must arrive in commit-ts order. Returns the job as recorded (an EXCHANGE
        PARTITION gains the names TiDB's job leaves out, see :meth:`_exchange`)."""
        if job.finished_ts < self.resolved_ts:
            raise ValueError(f"DDL job {job.job_id} at ts {job.finished_ts} arrived after ts {self.resolved_ts}")
        if job.job_type == "exchange partition":
            job = self._exchange(job)
        self._jobs.append(job)
        self.resolved_ts = job.finished_ts
        if (job.job_type == "truncate table" or job.job_type in REPARTITION_JOB_TYPES) and job.old_table_id is not None:
            self._put(job.old_table_id, job.finished_ts, None)
        if job.job_type == "drop table" and job.table_id is not None:
            self._put(job.table_id, job.finished_ts, None)
        elif job.job_type == "drop schema" and job.schema_id is not None:
            for tid in list(self._tables):
                info = self._latest(tid)
                if info is not None and info.db_id == job.schema_id:
                    self._put(tid, job.finished_ts, None)
        if job.table_info is not None:
            self._put(job.table_info.id, job.finished_ts, job.table_info)
        return job

    def _exchange(self, job: DDLJob) -> DDLJob:
        """EXCHANGE PARTITION: the partition's id passes to the normal table and the normal table's id to the
        partition; no row moves (TiDB swaps the ids of the two key ranges). The job's TableInfo is the partitioned
        table's after the swap, under the database name the table had (TiDB's job names only the normal table's,
        pingcap/tidb#43819); the normal table continues under the partition's id with its own schema, as TiCDC's
        schema snapshot does (``exchangePartition``, cdc/entry/schema/snapshot.go)."""
        info, nt_id = job.table_info, job.old_table_id
        where = f"DDL job {job.job_id} (exchange partition) at ts {job.finished_ts}"
        if info is None or nt_id is None:
            raise SchemaError(f"{where}: without its two tables")
        pt_before, nt_before = self._latest(info.id), self._latest(nt_id)
        if pt_before is None and nt_before is None:
            raise SchemaError(f"{where}: neither table {info.id} nor table {nt_id} is in the schema")
        if pt_before is None or nt_before is None:
            pt_before, nt_before = self._infer_side(job, info, nt_id, pt_before, nt_before, where)
        # TiCDC's rule (getSourceTable): the one id the partitions lost is the partition swapped out, the one
        # they gained the normal table's; the job's args, when readable, must say the same.
        lost, gained = set(pt_before.physical_ids) - set(info.physical_ids), set(info.physical_ids) - set(
            pt_before.physical_ids)
        if len(lost) != 1 or gained != {nt_id} or (job.partition_id is not None and lost != {job.partition_id}):
            raise SchemaError(f"{where}: the partitions of table {info.id} lost {sorted(lost)} and gained "
                              f"{sorted(gained)}, not one partition for table {nt_id}")
        (part_id,) = lost
        part_name = next(d.name for d in pt_before.partition.definitions if d.id == part_id) \
            if pt_before.partition is not None else None
        info = replace(info, db_name=pt_before.db_name, db_id=pt_before.db_id)
        nt_after = replace(nt_before, id=part_id, schema_version=job.schema_version)
        self._put(nt_id, job.finished_ts, None)
        self._put(part_id, job.finished_ts, nt_after)
        return replace(job, table_info=info, schema_id=pt_before.db_id, schema_name=pt_before.db_name,
                       table_name=info.name, old_schema_name=nt_before.db_name, old_table_name=nt_before.name,
                       old_schema_id=nt_before.db_id, partition_id=part_id, partition_name=part_name)

    def _infer_side(self, job: DDLJob, info: TableInfo, nt_id: int, pt_before: TableInfo | None,
                    nt_before: TableInfo | None, where: str) -> tuple[TableInfo, TableInfo]:
        """EXCHANGE PARTITION with one table outside the schema (a changefeed's starting schema holds only the tables
        its filter matches): that table before the job, inferred and recorded at the ts before it. TiDB exchanges
        only tables of one definition (``pkg/ddl/partition.go`` ``checkTableDefCompatible``: the same columns in the
        same order, the same indexes), so a normal table has the partitioned table's columns and indexes under the
        job's own names (TiDB's job is the normal table's); a partitioned table is its TableInfo after the job with
        the partition the args name back in the normal table's place."""
        ts = job.finished_ts - 1
        if nt_before is None:
            assert pt_before is not None
            if job.old_schema_name is None or job.old_table_name is None or job.old_schema_id is None:
                raise SchemaError(f"{where}: the normal table {nt_id} is not in the schema and the job does not "
                                  "name it")
            nt_before = replace(pt_before, id=nt_id, db_name=job.old_schema_name, db_id=job.old_schema_id,
                                name=job.old_table_name, partition=None)
            self._put(nt_id, ts, nt_before)
            return pt_before, nt_before
        db_name = self._db_name(info.db_id)
        if job.partition_id is None or info.partition is None or db_name is None:
            raise SchemaError(f"{where}: the partitioned table {info.id} is not in the schema, and the job's args "
                              "do not name the partition or its database is unknown")
        defs = tuple(replace(d, id=job.partition_id) if d.id == nt_id else d for d in info.partition.definitions)
        pt_before = replace(info, db_name=db_name, partition=replace(info.partition, definitions=defs))
        self._put(info.id, ts, pt_before)
        return pt_before, nt_before

    def _db_name(self, db_id: int) -> str | None:
        """A database's name from its CREATE SCHEMA job or a table of it (the storage keeps no databases)."""
        for j in reversed(self._jobs):
            if j.job_type == "create schema" and j.schema_id == db_id:
                return j.schema_name
        return next((v.infos[-1].db_name for v in self._tables.values()
                     if v.infos and v.infos[-1] is not None and v.infos[-1].db_id == db_id), None)

    def _put(self, table_id: int, ts: int, info: TableInfo | None) -> None:
        v = self._tables.setdefault(table_id, _Versions())
        if v.ts and v.ts[-1] == ts:
            v.infos[-1] = info
        else:
            v.ts.append(ts)
            v.infos.append(info)

    def _latest(self, table_id: int) -> TableInfo | None:
        v = self._tables.get(table_id)
        return v.infos[-1] if v and v.infos else None

    def table_at(self, table_id: int, ts: int) -> TableInfo | None:
        """The table's schema in force at ``ts`` (a job committed at ``ts`` is in force at ``ts``)."""
        v = self._tables.get(table_id)
        if not v:
            return None
        i = bisect.bisect_right(v.ts, ts) - 1
        return v.infos[i] if i >= 0 else None

    def versions(self, table_id: int) -> list[TableInfo | None]:
        """Every recorded version of a table, oldest first (None = dropped)."""
        v = self._tables.get(table_id)
        return list(v.infos) if v else []

    def tables_at(self, ts: int) -> list[TableInfo]:
        out = []
        for tid in sorted(self._tables):
            info = self.table_at(tid, ts)
            if info is not None:
                out.append(info)
        return out

    def jobs_between(self, after_ts: int, upto_ts: int) -> list[DDLJob]:
        """Jobs with ``after_ts < finished_ts <= upto_ts`` in commit order."""
        return [j for j in self._jobs if after_ts < j.finished_ts <= upto_ts]

    def gc(self, ts: int) -> None:
        """Drop versions no reader at or above ``ts`` can need."""
        for tid in list(self._tables):
            v = self._tables[tid]
            i = bisect.bisect_right(v.ts, ts) - 1
            if i > 0:
                del v.ts[:i]
                del v.infos[:i]
            if len(v.infos) == 1 and v.infos[0] is None and v.ts[0] <= ts:
                del self._tables[tid]
        self._jobs = [j for j in self._jobs if j.finished_ts > ts]
