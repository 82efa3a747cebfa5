"""TiDB's DDL job tables, ``mysql.tidb_ddl_job`` and ``mysql.tidb_ddl_history``: their rows to and from cdcflow's
``DDLJob`` (``cdc_core.schema.ddl_job``).

TiDB keeps each DDL job as ``model.Job`` JSON (``cdc_core.schema.tidb_json``) in the ``job_meta`` column of two
system tables at reserved ids (``pkg/meta/metadef/system.go``; columns as ``pkg/ddl/systable`` creates them): the
job runs in ``tidb_ddl_job``, whose row the DDL's last schema change rewrites in state *done* in the same
transaction, so that row's commit ts is the DDL's commit ts; once every server has the new schema the job row is
deleted and the job, now *synced*, is inserted into ``tidb_ddl_history``.

TiCDC takes a DDL from the ``tidb_ddl_job`` row it sees put in state done and uses that row's commit ts as the
job's finished ts, the barrier (``logservice/schemastore``'s ``ddlJobFetcher`` / ``event.ParseDDLJob``); cdcflow's
DDL puller does the same. The schema at a start ts is read from both tables at that ts (synced jobs, and done
jobs not yet moved). The embedded upstream writes both rows exactly so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC
from typing import Any

from cdc_core.codec import tso
from cdc_core.codec.row import decode_row, encode_row
from cdc_core.schema import tidb_json
from cdc_core.schema.ddl_job import DDLJob, sort_key
from cdc_core.schema.model import Column, Index, SchemaError, TableInfo

DB_NAME = "mysql"
SYSTEM_DB_ID = 0xFFFF_FFFF_FFFF  # metadef.SystemDatabaseID = ReservedGlobalIDUpperBound
JOB_TABLE_NAME, HISTORY_TABLE_NAME = "tidb_ddl_job", "tidb_ddl_history"
JOB_TABLE_ID = SYSTEM_DB_ID - 1  # metadef.TiDBDDLJobTableID
HISTORY_TABLE_ID = SYSTEM_DB_ID - 3  # metadef.TiDBDDLHistoryTableID
# User databases and tables get ids from here on.
FIRST_USER_ID = 100
JOB_STATE_DONE, JOB_STATE_SYNCED = 4, 6  # model.JobStateDone / JobStateSynced (pkg/meta/model/job.go)


def _system_table(table_id: int, name: str, columns: tuple[Column, ...]) -> TableInfo:
    return TableInfo(id=table_id, db_name=DB_NAME, name=name, db_id=SYSTEM_DB_ID, pk_is_handle=True, columns=columns,
                     indexes=(Index("PRIMARY", ("job_id",), unique=True, primary=True, id=1),),
                     max_column_id=len(columns))


# create table mysql.tidb_ddl_job (job_id bigint not null, reorg int, schema_ids text(65535),
#   table_ids text(65535), job_meta longblob, type int, processing int, primary key(job_id))
JOB_TABLE_INFO = _system_table(JOB_TABLE_ID, JOB_TABLE_NAME, (
    Column(1, "job_id", "bigint", nullable=False), Column(2, "reorg", "int"), Column(3, "schema_ids", "text"),
    Column(4, "table_ids", "text"), Column(5, "job_meta", "longblob"), Column(6, "type", "int"),
    Column(7, "processing", "int")))
# create table mysql.tidb_ddl_history (job_id bigint not null, job_meta longblob, db_name char(64),
#   table_name char(64), schema_ids text(65535), table_ids text(65535), create_time datetime, primary key(job_id))
HISTORY_TABLE_INFO = _system_table(HISTORY_TABLE_ID, HISTORY_TABLE_NAME, (
    Column(1, "job_id", "bigint", nullable=False), Column(2, "job_meta", "longblob"),
    Column(3, "db_name", "char", length=64), Column(4, "table_name", "char", length=64),
    Column(5, "schema_ids", "text"), Column(6, "table_ids", "text"), Column(7, "create_time", "datetime")))
SYSTEM_TABLES = (JOB_TABLE_INFO, HISTORY_TABLE_INFO)

def job_meta(parts: Sequence[DDLJob], state: int) -> bytes:
    """The ``model.Job`` JSON of a job (its parts, for CREATE TABLES / RENAME TABLES) in ``state``
    (``JOB_STATE_DONE`` / ``JOB_STATE_SYNCED``); ``binlog.FinishedTS`` is set once synced, as TiDB sets it."""
    d = tidb_json.jobs_to_tidb(parts, finished=state == JOB_STATE_SYNCED)
    d["state"] = state
    return tidb_json.go_json(d)


def _ids(parts: Sequence[DDLJob]) -> tuple[str, str]:
    schema_ids = ",".join(dict.fromkeys(str(j.schema_id) for j in parts if j.schema_id is not None))
    table_ids = ",".join(dict.fromkeys(str(i) for j in parts for i in (j.old_table_id, j.table_id) if i is not None))
    return schema_ids, table_ids


def job_table_value(parts: Sequence[DDLJob]) -> bytes:
    """The job's ``mysql.tidb_ddl_job`` row in state done, as the DDL's last transaction writes it."""
    schema_ids, table_ids = _ids(parts)
    meta = job_meta(parts, JOB_STATE_DONE)
    row = {1: parts[0].job_id, 2: 0, 3: schema_ids, 4: table_ids, 5: meta, 6: json.loads(meta)["type"], 7: 0}
    return encode_row(JOB_TABLE_INFO, row)


def history_table_value(parts: Sequence[DDLJob]) -> bytes:
    """The job's ``mysql.tidb_ddl_history`` row (state synced)."""
    schema_ids, table_ids = _ids(parts)
    first = parts[0]
    finished = tso.to_datetime(first.finished_ts).astimezone(UTC).replace(tzinfo=None, microsecond=0)
    row = {1: first.job_id, 2: job_meta(parts, JOB_STATE_SYNCED), 3: first.schema_name or "",
           4: first.table_name or "", 5: schema_ids, 6: table_ids, 7: finished}
    return encode_row(HISTORY_TABLE_INFO, row)


def _meta_json(meta: bytes | str) -> dict[str, Any]:
    try:
        d = json.loads(meta)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SchemaError(f"job_meta is not JSON: {exc}") from None
    if not isinstance(d, dict):
        raise SchemaError("job_meta is not a JSON object")
    return d


def jobs_from_meta(meta: bytes | str, *, commit_ts: int | None = None) -> list[DDLJob]:
    """The finished job of a ``job_meta`` JSON, as one ``DDLJob`` per table for CREATE TABLES / RENAME TABLES;
    ``[]`` when the job is not finished (neither done nor synced). ``commit_ts``, for a ``tidb_ddl_job`` row, is
    the job's finished ts (TiDB writes none before synced; TiCDC takes the row's)."""
    d = _meta_json(meta)
    if d.get("state") not in (JOB_STATE_DONE, JOB_STATE_SYNCED):
        return []
    jobs = tidb_json.jobs_from_tidb(d)
    if commit_ts is not None:
        jobs = [replace(j, finished_ts=commit_ts) for j in jobs]
    return jobs


def done_job_json(table_id: int, value: bytes, commit_ts: int) -> dict[str, Any] | None:
    """The ``model.Job`` JSON of a row value of one of the DDL job tables written at ``commit_ts`` when it is a
    ``tidb_ddl_job`` row in state done (the DDL, finished at ``commit_ts``), else None (a running job, a history
    row). Nothing of the job's tables is decoded yet (``tidb_json.job_concerns`` reads what it concerns)."""
    if table_id != JOB_TABLE_ID:
        return None
    meta = JOB_TABLE_INFO.decode_values(decode_row(JOB_TABLE_INFO, value))["job_meta"]
    if meta is None:
        raise SchemaError(f"tidb_ddl_job row at commit ts {commit_ts} has no job_meta")
    d = _meta_json(meta)
    return d if d.get("state") == JOB_STATE_DONE else None


def jobs_from_done_json(d: dict[str, Any], commit_ts: int) -> list[DDLJob]:
    """The job (one per table for CREATE / RENAME TABLES) of :func:`done_job_json`'s JSON, finished at
    ``commit_ts``; raises ``SchemaError`` for what it cannot decode (a column type, a partitioning, ...)."""
    return [replace(j, finished_ts=commit_ts) for j in tidb_json.jobs_from_tidb(d)]


def jobs_from_value(table_id: int, value: bytes, commit_ts: int) -> list[DDLJob]:
    """The job of a row value of one of the DDL job tables written at ``commit_ts``: a ``tidb_ddl_job`` row in
    state done (the DDL, with ``commit_ts`` as its finished ts), else ``[]`` (a running job, a history row)."""
    d = done_job_json(table_id, value, commit_ts)
    return [] if d is None else jobs_from_done_json(d, commit_ts)


def history_from_value(table_id: int, value: bytes) -> list[DDLJob]:
    """The finished job of a stored row of either DDL job table (a snapshot read of the schema): a synced
    history row, or a done job row not yet moved; ``[]`` otherwise."""
    info = JOB_TABLE_INFO if table_id == JOB_TABLE_ID else HISTORY_TABLE_INFO
    meta = info.decode_values(decode_row(info, value))["job_meta"]
    return [] if meta is None else jobs_from_meta(meta)


def jobs_from_sql(rows: list[dict[str, Any]], at_ts: int) -> list[DDLJob]:
    """The finished jobs of ``SELECT job_meta`` rows of both tables read at ``at_ts``, in commit order (a done job
    still in ``tidb_ddl_job`` carries no finished ts; it finished at or before ``at_ts``)."""
    meta_col = Column(1, "job_meta", "longblob")
    jobs: dict[tuple[int, int], DDLJob] = {}
    for r in rows:
        meta = meta_col.convert(r["job_meta"])
        for job in [] if meta is None else jobs_from_meta(meta):
            if not job.finished_ts:
                job = replace(job, finished_ts=at_ts)
            jobs.setdefault(job.key, job)
    return sorted(jobs.values(), key=sort_key)
