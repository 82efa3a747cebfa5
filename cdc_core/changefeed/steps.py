"""Run a window's barrier steps (``barriers.plan_steps``) against the silver tables: the apply code.

An incremental window (``tasks.apply``) and a rebuild's replay (``rebuild``) go through this one loop: each
DML step is an ``apply_window`` Spark job over the step's tables, each DDL step a ``ddl_apply`` job (or
nothing, when the event filter ignores the DDL). What differs is given by the caller: which tables a step
covers, where their Delta tables are (``target_of``: a rebuild writes every version of a table to the path
the table has now), and what happens after a step (barrier checks and checkpoint moves for a window).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from cdc_core import failpoint
from cdc_core.codec import changelog
from cdc_core.errors import ChangefeedError
from cdc_core.log import get_logger
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import ROWID_COLUMN, TableInfo
from cdc_core.schema.storage import SchemaStorage

from . import spark_engine
from .barriers import DmlStep, Step
from .config import ChangefeedConfig
from .job_args.apply_window import ApplyArgs
from .job_args.ddl_apply import DdlApplyArgs, Exchange, Upstream

log = get_logger("cdcflow.changefeed")


def replicated_at(cfg: ChangefeedConfig, storage: SchemaStorage, ts: int) -> list[TableInfo]:
    """The tables the changefeed's table filter matches at ``ts`` (by their names then)."""
    flt = cfg.table_filter
    return [t for t in storage.tables_at(ts) if flt.match(t.db_name, t.name)]


def window_tables(cfg: ChangefeedConfig, storage: SchemaStorage, after_ts: int, upto_ts: int) -> list[TableInfo]:
    """Every table replicated at some point of ``(after_ts, upto_ts]``: those replicated at ``after_ts``, then each
    table as a job of the interval leaves it, from the schema storage (which names an exchanged partitioned table,
    and holds the normal table under the partition's id: neither is a job's own TableInfo). Their physical ids are
    the spans a pull (or the capture) reads."""
    flt = cfg.table_filter
    touched = (storage.table_at(tid, j.finished_ts) for j in storage.jobs_between(after_ts, upto_ts)
               for tid in (j.table_info.id if j.table_info else None, j.partition_id) if tid is not None)
    return [*replicated_at(cfg, storage, after_ts),
            *(t for t in touched if t is not None and flt.match(t.db_name, t.name))]


def shared_commit_ts(cfg: ChangefeedConfig, storage: SchemaStorage, window_end_ts: int, jobs: list[DDLJob]
                     ) -> set[int]:
    """The commit ts of ``jobs`` at which row events of tables replicated just before them committed too (in the
    bronze window ending at ``window_end_ts``): where the plan needs an at-barrier step (``barriers``)."""
    out: set[int] = set()
    at = changelog.window_table_ids_at(cfg.sink_uri, cfg.changefeed_id, window_end_ts, {j.finished_ts for j in jobs})
    for b, ids in sorted(at.items()):
        if any(ids.intersection(t.physical_ids) for t in replicated_at(cfg, storage, b - 1)):
            out.add(b)
    if out:
        log.info("DML shares a DDL's commit ts: applied before the DDL, with the schema before it",
                 changefeed_id=cfg.changefeed_id, commit_ts=sorted(out))
    return out


@dataclass
class StepsResult:
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # per Delta table: rows, version, skipped
    barriers: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0


def _identity(t: TableInfo) -> TableInfo:
    return t


def apply_steps(
    cfg: ChangefeedConfig,
    storage: SchemaStorage,
    steps: list[Step],
    *,
    window_end_ts: int,
    tables_at: Callable[[int], list[TableInfo]],
    target_of: Callable[[TableInfo], TableInfo] = _identity,
    after_dml: Callable[[DmlStep, list[TableInfo], dict[str, Any]], object] | None = None,
    after_ddl: Callable[[DDLJob, dict[str, Any] | None], object] | None = None,
    ignore_moves: bool = False,
) -> StepsResult:
    """Apply ``steps`` of the bronze window ending at ``window_end_ts``.

    ``tables_at(ts)``: the tables (as they were at ``ts``, names included: event filters match those) a DML
    step up to ``ts`` applies (at its ``schema_ts``: the DML at a DDL's commit ts goes with the schema before it).
    ``target_of``: the table info whose names give the Delta path written.
    ``after_dml(step, tables, result)`` / ``after_ddl(job, result)``: called after each step (a DDL's result None
    when the event filter ignored it).
    """
    out = StepsResult(steps=len(steps))
    efilter = cfg.event_filter
    for step in steps:
        if isinstance(step, DmlStep):
            tables = tables_at(step.schema_ts)
            targets = [target_of(t) for t in tables]
            idle = _idle_step(cfg, step, window_end_ts, targets)
            result = idle if idle is not None else spark_engine.run_job(ApplyArgs(
                sink_uri=cfg.sink_uri,
                changefeed_id=cfg.changefeed_id,
                after_ts=step.after_ts,
                upto_ts=step.upto_ts,
                version=step.version,
                at_barrier=step.at_barrier,
                window_end_ts=window_end_ts,
                tables=tuple(targets),
                event_filters={str(t.id): efilter.dml_specs(t.db_name, t.name) for t in tables},
                ignore_txn_start_ts=tuple(sorted(efilter.ignore_txn_start_ts)),
                ignore_moves=ignore_moves,
                deletion_vectors=cfg.deletion_vectors,
                history=tuple(t.qualified_name for t in targets if cfg.keeps_history(t)),
                change_data_feed=cfg.change_data_feed,
            ))
            for name, st in result.get("tables", {}).items():
                agg = out.tables.setdefault(name, {"rows_upserted": 0, "rows_deleted": 0, "skipped": True})
                agg["rows_upserted"] += int(st.get("rows_upserted") or 0)
                agg["rows_deleted"] += int(st.get("rows_deleted") or 0)
                agg["skipped"] = agg["skipped"] and bool(st.get("skipped"))
                agg["delta_version"] = st.get("delta_version")
            failpoint.hit("apply.dml_step_done")
            if after_dml is not None:
                after_dml(step, targets, result)
        else:
            job = step.job
            res = None
            if efilter.ignores_ddl(job.job_type, job.query, job.schema_name, job.table_name):
                log.info("DDL ignored by the event filter (schema storage updated, not applied)",
                         job_id=job.job_id, query=job.query)
                out.barriers.append({"ts": job.finished_ts, "job": job.job_type, "applied": False})
            else:
                res = spark_engine.run_job(_ddl_args(cfg, storage, job, target_of))
                out.barriers.append({"ts": job.finished_ts, "job": job.job_type, "applied": True, "result": res})
                failpoint.hit("apply.ddl_applied")
            if after_ddl is not None:
                after_ddl(job, res)
    return out


def _idle_step(cfg: ChangefeedConfig, step: DmlStep, window_end_ts: int, tables: list[TableInfo]
               ) -> dict[str, Any] | None:
    """The ``apply_window`` result of a step without a row event of its tables, computed without a Spark job (what
    the job returns for such a step: every table skipped, nothing committed), when every table's Delta table exists
    (the job would create a missing one); None otherwise. An idle window then costs a read of the bronze window's
    ``table_id`` column and of the tables' Delta logs, not a Spark application (under ``spark-submit``, a JVM)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from cdc_core.changefeed.apply_result import no_events_reason, skipped
    from cdc_core.codec.sink_uri import app_id_for, local_path, table_path

    try:
        local_path(cfg.sink_uri)
    except ValueError:  # a sink the embedded engine does not read: the job decides
        return None
    ids = changelog.window_table_ids(cfg.sink_uri, cfg.changefeed_id, window_end_ts, step.after_ts, step.upto_ts)
    if any(ids.intersection(t.physical_ids) for t in tables):
        return None
    out: dict[str, Any] = {}
    app_id, reason = app_id_for(cfg.changefeed_id), no_events_reason(step.after_ts, step.upto_ts)
    for t in tables:
        path = table_path(cfg.sink_uri, t)
        try:
            dt = DeltaTable(path)  # one read of its log
        except TableNotFoundError:
            return None
        out[t.qualified_name] = skipped(t, path, reason, dt.version(), dt.transaction_version(app_id))
    log.info("DML step without row events: no apply job", after_ts=step.after_ts, upto_ts=step.upto_ts,
             tables=len(tables))
    return {"window_end_ts": window_end_ts, "after_ts": step.after_ts, "upto_ts": step.upto_ts,
            "version": step.version, "tables": out, "rows_upserted": 0, "rows_deleted": 0}


def _ddl_args(cfg: ChangefeedConfig, storage: SchemaStorage, job: DDLJob,
              target_of: Callable[[TableInfo], TableInfo]) -> DdlApplyArgs:
    """The ``ddl_apply`` job's arguments: the job and its table just before and after it."""
    if job.job_type == "exchange partition":
        return _exchange_args(cfg, storage, job, target_of)
    before_id = job.old_table_id if job.old_table_id is not None else job.table_id
    before = storage.table_at(before_id, job.finished_ts - 1) if before_id is not None else None
    if before is not None and job.job_type == "rename table" and job.old_table_name:
        # One part of a RENAME TABLES: the parts apply in order at one ts, and a table renamed twice
        # (``a TO tmp, b TO a, tmp TO b``) starts this part from the name the last one gave it.
        before = replace(before, name=job.old_table_name, db_name=job.old_schema_name or before.db_name,
                         db_id=job.old_schema_id if job.old_schema_id is not None else before.db_id)
    after = job.table_info
    upstream = None
    if before is not None and after is not None and after.delta_key() == (ROWID_COLUMN,) != before.delta_key():
        from cdc_core.client.upstream import resolve_pd_addr

        # a re-key by _tidb_rowid reads the rows' handles from the upstream at the barrier (ddl_apply)
        upstream = Upstream(resolve_pd_addr(cfg.upstream), cfg.tidb)
    named = target_of(after) if after else target_of(before) if before else None
    return DdlApplyArgs(cfg.sink_uri, cfg.changefeed_id, job, target_of(before) if before else None,
                        target_of(after) if after else None, upstream=upstream,
                        history=named is not None and cfg.keeps_history(named))


def _exchange_args(cfg: ChangefeedConfig, storage: SchemaStorage, job: DDLJob,
                   target_of: Callable[[TableInfo], TableInfo]) -> DdlApplyArgs:
    """EXCHANGE PARTITION touches two tables, each only where the table filter replicates it: ``before`` /
    ``after`` are the partitioned table's (null when it is not replicated), ``exchange`` the normal table's and
    the upstream's addresses (the rows that change sides are read there, at the barrier)."""
    from cdc_core.client.upstream import resolve_pd_addr

    b, flt = job.finished_ts, cfg.table_filter
    pt_before = storage.table_at(job.table_id, b - 1) if job.table_id is not None else None
    nt_before = storage.table_at(job.old_table_id, b - 1) if job.old_table_id is not None else None
    nt_after = storage.table_at(job.partition_id, b) if job.partition_id is not None else None
    if pt_before is None or nt_before is None or nt_after is None or job.table_info is None:
        raise ChangefeedError(f"EXCHANGE PARTITION (job {job.job_id}, ts {b}): its tables are not in the schema "
                              f"storage (partitioned {job.table_id}, normal {job.old_table_id})")
    pt_on = flt.match(pt_before.db_name, pt_before.name)
    exchange = Exchange(
        normal_before=nt_before,
        normal_after=nt_after,  # read upstream by its names then
        normal_target=target_of(nt_after),  # whose names give the Delta path
        replicate_normal=flt.match(nt_before.db_name, nt_before.name),
        pd_addr=resolve_pd_addr(cfg.upstream),
        tidb=cfg.tidb,
    )
    return DdlApplyArgs(cfg.sink_uri, cfg.changefeed_id, job, target_of(pt_before) if pt_on else None,
                        target_of(job.table_info) if pt_on else None, exchange)


def changed(result: dict[str, Any], table: TableInfo) -> bool:
    """Whether an ``apply_window`` result changed ``table``'s Delta table."""
    st = result.get("tables", {}).get(table.qualified_name) or {}
    return not st.get("skipped") and bool(st.get("rows_upserted") or st.get("rows_deleted"))
