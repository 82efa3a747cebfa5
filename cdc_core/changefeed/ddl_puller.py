"""The DDL puller and the changefeed's persisted schema storage.

DDL jobs reach the changefeed like any row change: the puller subscribes the span of TiDB's
``mysql.tidb_ddl_job`` with the tables', so every bronze window holds the job rows committed in it.
This module takes, as TiCDC does, each row put in state done as its job finished at the row's commit
ts (``ddl_history``), decodes them into ``DDLJob``s, and keeps the jobs that define the schema at and
after the checkpoint in ``$CDCFLOW_HOME/state/<id>/schema.json``, from which ``SchemaStorage`` is
rebuilt for any ts at or above the checkpoint. Every job goes to the storage, whatever its type: which jobs are
applied to the silver tables is the barrier planner's call (``barriers.applies``: the DDL whitelist, and any job
that changes a silver table's key or columns). The storage starts from TiDB's meta snapshot at the changefeed's
start-ts (``schema_loader``).

A job is read by its names and ids first (``tidb_json.job_concerns``) and decoded after: one that cannot be decoded
(a column type or a partitioning cdcflow does not know) stops the changefeed, naming the job, table, column and
type, only when it concerns a replicated table; for any other it is skipped with one log line, and no other
changefeed notices. Jobs of tables that are not replicated are still decoded when they can be: the normal table of
a later EXCHANGE PARTITION must be in the storage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core import durable
from cdc_core.codec.changelog import OP_PUT
from cdc_core.errors import ChangefeedError
from cdc_core.home import state_dir
from cdc_core.log import get_logger
from cdc_core.schema import ddl_history, tidb_json
from cdc_core.schema.ddl_job import DDLJob, sort_key
from cdc_core.schema.model import SchemaError
from cdc_core.schema.storage import SchemaStorage

log = get_logger("cdcflow.ddl")


# TiDB's jobs that change a table's rows without row events and that cdcflow does not replicate (model.ActionType
# names, cdc_core.schema.tidb_json.OTHER_ACTIONS): RECOVER / FLASHBACK TABLE brings a dropped table back with its
# rows, FLASHBACK DATABASE a database, FLASHBACK CLUSTER every table to an earlier ts. A RECOVER of a replicated
# table, and any flashback of a database or the cluster, stops the changefeed before it (checkpoint unmoved)
# instead of leaving the lake wrong.
# Every partition DDL is replicated (spark_jobs/ddl_apply.py).
UNREPLICATED_DATA_JOB_TYPES = frozenset({"recover table", "flashback schema", "flashback cluster"})


def _refuse(job: DDLJob) -> ChangefeedError:
    where = f"{job.schema_name}.{job.table_name}" if job.table_name else (job.schema_name or "the cluster")
    return ChangefeedError(
        f"DDL job {job.job_id} ({job.job_type}) on {where} at commit ts {job.finished_ts}: it changes rows without "
        f"row events and is not replicated; the changefeed stops before it (its checkpoint stays below the job). "
        f"Query: {job.query}")


def decode_jobs(window: pa.Table, replicated: Callable[[str, str], bool] | None = None,
                known_ids: Collection[int] = ()) -> list[DDLJob]:
    """Every finished DDL job in a bronze window, in commit order (reconnects' duplicates collapsed).

    ``replicated(schema, table)`` (None: every table is) and ``known_ids`` (the ids of the tables replicated when
    the window starts) say which jobs concern the changefeed (module docstring): such a job that cannot be decoded
    raises ``ChangefeedError``, and so does one that changes rows without row events
    (:data:`UNREPLICATED_DATA_JOB_TYPES`); any other job that cannot be decoded is skipped."""
    hist = window.filter(pc.equal(window["table_id"], ddl_history.JOB_TABLE_ID))
    jobs: dict[tuple[int, int], DDLJob] = {}
    known = frozenset(known_ids)

    def concerns(d: dict[str, Any]) -> bool:
        names, ids = tidb_json.job_concerns(d)
        return replicated is None or any(replicated(db, t) for db, t in names) or not known.isdisjoint(ids)

    for row in hist.to_pylist():
        if row["op"] != OP_PUT or row["value"] is None:
            continue  # a job row deleted: the job moved to the history table
        ts = row["commit_ts"]
        try:
            # None for a job still running (TiCDC takes it once done)
            d = ddl_history.done_job_json(ddl_history.JOB_TABLE_ID, row["value"], ts)
        except (ValueError, KeyError, TypeError) as exc:
            key = row.get("key")
            raise ChangefeedError(f"corrupt tidb_ddl_job row (key {key.hex() if isinstance(key, bytes) else key}) at "
                                  f"commit ts {ts}: {exc}") from exc
        if d is None:
            continue
        try:
            parts = ddl_history.jobs_from_done_json(d, ts)  # a part per table of CREATE/RENAME TABLES
        except (SchemaError, ValueError, KeyError, TypeError) as exc:
            what = (f"DDL job {d.get('id')} ({tidb_json.job_type_name(int(d.get('type') or 0))}) on "
                    f"{d.get('schema_name') or '?'}.{d.get('table_name') or '?'} at commit ts {ts}")
            if concerns(d):
                raise ChangefeedError(f"{what} cannot be decoded: {exc}. The changefeed replicates its table and "
                                      f"stops before the job (its checkpoint stays below it). Query: "
                                      f"{d.get('query')}") from exc
            log.warning("DDL job skipped: it cannot be decoded and concerns no replicated table", job_id=d.get("id"),
                        commit_ts=ts, table=f"{d.get('schema_name')}.{d.get('table_name')}", error=str(exc))
            continue
        for job in parts:
            if job.job_type in UNREPLICATED_DATA_JOB_TYPES and replicated is not None and (
                    job.job_type != "recover table" or replicated(job.schema_name or "", job.table_name or "")):
                raise _refuse(job)  # a flashback of a database or the cluster: whatever the filter
            jobs[job.key] = job
    return sorted(jobs.values(), key=sort_key)


def _path(changefeed_id: str) -> Path:
    return state_dir() / changefeed_id / "schema.json"


class SchemaLog:
    """The DDL jobs a changefeed still needs, persisted; ``storage()`` rebuilds the versions."""

    def __init__(self, changefeed_id: str, jobs: list[DDLJob], resolved_ts: int) -> None:
        self.changefeed_id = changefeed_id
        self.jobs = sorted(jobs, key=sort_key)
        self.resolved_ts = resolved_ts

    @classmethod
    def exists(cls, changefeed_id: str) -> bool:
        return _path(changefeed_id).exists()

    @classmethod
    def load(cls, changefeed_id: str) -> SchemaLog:
        p = _path(changefeed_id)
        try:
            data = json.loads(p.read_text())
            jobs = [DDLJob.from_row(r) for r in data["jobs"]]
            return cls(changefeed_id, jobs, int(data["resolved_ts"]))
        except FileNotFoundError as exc:
            raise ChangefeedError(f"changefeed {changefeed_id!r} has no schema storage ({p})") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise ChangefeedError(f"schema storage {p} is corrupt: {exc}") from exc

    def save(self) -> None:
        p = _path(self.changefeed_id)
        p.parent.mkdir(parents=True, exist_ok=True)
        durable.write_file(p, json.dumps({"resolved_ts": self.resolved_ts, "jobs": [j.to_row() for j in self.jobs]}))

    def storage(self) -> SchemaStorage:
        return SchemaStorage.from_jobs(self.jobs)

    def advance(self, jobs: list[DDLJob], resolved_ts: int) -> None:
        """Add the jobs pulled up to ``resolved_ts`` (already known ones are ignored)."""
        known = {j.key for j in self.jobs}
        new = [j for j in jobs if j.key not in known and j.finished_ts > self.resolved_ts]
        self.jobs = sorted([*self.jobs, *new], key=sort_key)
        self.resolved_ts = max(self.resolved_ts, resolved_ts)

    def gc(self, checkpoint_ts: int) -> None:
        """Drop jobs no read at or above ``checkpoint_ts`` needs (TiCDC GCs schema versions the same way)."""
        storage = self.storage()
        alive = {t.id for t in storage.tables_at(checkpoint_ts)}
        resolved = {j.key: j for j in storage.jobs_between(-1, checkpoint_ts)}
        keep: list[DDLJob] = []
        latest_defining: dict[int, DDLJob] = {}
        schema_jobs: dict[int, DDLJob] = {}
        for j in self.jobs:
            if j.finished_ts > checkpoint_ts:
                keep.append(j)
            else:
                if j.table_info is not None and j.table_info.id in alive:
                    latest_defining[j.table_info.id] = j
                # The normal table, under the partition's id since (as the storage resolved the job: TiDB's args
                # may not name the partition).
                part_id = resolved.get(j.key, j).partition_id
                if j.job_type == "exchange partition" and part_id in alive:
                    latest_defining[part_id] = j
                elif j.job_type == "create schema" and j.schema_id is not None:
                    schema_jobs[j.schema_id] = j
        defining = [j if j.job_type != "exchange partition" else _as_create(j, tid, storage, checkpoint_ts)
                    for tid, j in latest_defining.items()]
        kept_old = sorted([*defining, *schema_jobs.values()], key=sort_key)
        self.jobs = [*kept_old, *keep]


def _as_create(job: DDLJob, table_id: int, storage: SchemaStorage, ts: int) -> DDLJob:
    """A table that an EXCHANGE PARTITION defined last, as a CREATE TABLE at that job's ts: the exchange replays only
    after both of its tables' earlier jobs, which GC drops (part 0: the partitioned table, 1: the normal one)."""
    info = storage.table_at(table_id, ts)
    assert info is not None  # alive at ts
    return DDLJob(job_id=job.job_id, job_type="create table", schema_id=info.db_id, table_id=table_id,
                  schema_name=info.db_name, table_name=info.name, query=job.query, schema_version=job.schema_version,
                  table_info=info, finished_ts=job.finished_ts, sub_index=0 if table_id == job.table_id else 1)
