"""The five steps of one window — plan, pull, apply, check, publish — as plain functions.

Both ``cdcflow changefeed run`` and the Airflow DAG tasks call exactly these; their inputs and
outputs are JSON-serializable dicts so that they can travel through XCom. Any failure that is not
transient puts the changefeed in error, and the checkpoint only moves in ``publish``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyarrow as pa

from cdc_core import failpoint
from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec import changelog, key, tso
from cdc_core.errors import ChangefeedError, DataQualityError
from cdc_core.log import get_logger
from cdc_core.puller.window_collector import collect_window
from cdc_core.schema import ddl_history
from cdc_core.schema.model import TableInfo
from cdc_core.schema.storage import SchemaStorage

from . import dq_results, spark_engine
from .barriers import DmlStep, plan_steps, relevant
from .config import ChangefeedConfig, load_config
from .ddl_puller import SchemaLog, decode_jobs
from .schema_loader import load_schema_jobs
from .state import advance_checkpoint, load_state, locked_state, set_error

log = get_logger("cdcflow.changefeed")



def _client(cfg: ChangefeedConfig) -> UpstreamClient:
    return UpstreamClient(resolve_pd_addr(cfg.upstream))


def plan(changefeed_id: str, *, interval_end_ts: int | None, target_ts: int | None = None) -> dict[str, Any]:
    """Fix the window ``(checkpoint, T]`` with ``T = min(interval end, changefeed target-ts, target_ts)``.

    With no bound at all, ``T`` is the upstream's current TSO ("now").
    """
    cfg = load_config(changefeed_id)
    st = load_state(changefeed_id)
    if st.state == "error":
        msg = (st.error or {}).get("message", "unknown error")
        raise ChangefeedError(
            f"changefeed {changefeed_id!r} is in error ({msg}); fix the cause and `cdcflow changefeed resume` it"
        )
    bounds = [b for b in (interval_end_ts, cfg.target_ts, target_ts) if b]
    if bounds:
        target = min(bounds)
    else:
        with _client(cfg) as c:
            target = c.get_ts()
    out: dict[str, Any] = {
        "changefeed_id": changefeed_id,
        "sink_uri": cfg.sink_uri,
        "checkpoint_ts": st.checkpoint_ts,
        "target_ts": target,
        "skip": False,
        "reason": "",
    }
    if st.state in ("paused", "finished", "removed"):
        out.update(skip=True, reason=f"changefeed is {st.state}")
    elif target <= st.checkpoint_ts:
        out.update(
            skip=True,
            reason=f"window already covered by checkpoint {st.checkpoint_ts} "
            f"({tso.to_datetime(st.checkpoint_ts).isoformat()}) >= target {target}",
        )
    log.info("planned window", **out)
    return out


def _schema_log(cfg: ChangefeedConfig, checkpoint_ts: int) -> SchemaLog:
    """The changefeed's schema log; on first use, a snapshot of the DDL history at the checkpoint."""
    if SchemaLog.exists(cfg.changefeed_id):
        return SchemaLog.load(cfg.changefeed_id)
    with _client(cfg) as c:
        jobs = load_schema_jobs(c, checkpoint_ts)
    slog = SchemaLog(cfg.changefeed_id, jobs, checkpoint_ts)
    slog.save()
    return slog


def _replicated_at(cfg: ChangefeedConfig, storage: SchemaStorage, ts: int) -> list[TableInfo]:
    flt = cfg.table_filter
    return [t for t in storage.tables_at(ts) if flt.match(t.db_name, t.name)]


def _replicated_tables(cfg: ChangefeedConfig, ts: int) -> list[TableInfo]:
    """The replicated tables at ``ts`` (at or below the schema log's resolved ts)."""
    slog = SchemaLog.load(cfg.changefeed_id)
    if ts > slog.resolved_ts:
        raise ChangefeedError(f"schema storage is resolved to {slog.resolved_ts}, below ts {ts}: pull the window first")
    return _replicated_at(cfg, slog.storage(), ts)


def wait_spec(p: dict[str, Any]) -> dict[str, Any]:
    """What the deferrable wait needs: the upstream, the spans the window pulls (hex keys) and the window end.

    ``already_resolved`` is true when a pull already saw every span's resolved ts at or past the window end
    (``state.resolved_ts``): nothing to wait for.
    """
    cfg = load_config(p["changefeed_id"])
    target = p["target_ts"]
    tables = _replicated_tables(cfg, p["checkpoint_ts"])
    spans = [key.table_span(ddl_history.TABLE_ID), *(key.table_span(t.id) for t in tables)]
    return {
        "pd_addr": resolve_pd_addr(cfg.upstream),
        "spans": [[s.hex(), e.hex()] for s, e in spans],
        "target_ts": target,
        "already_resolved": load_state(cfg.changefeed_id).resolved_ts >= target,
    }


def _guard(changefeed_id: str, step: str, fn: Any, *args: Any) -> Any:
    """Run a step; a non-transient failure puts the changefeed in error (the checkpoint stays)."""
    try:
        return fn(*args)
    except DataQualityError:
        raise  # check() records its own, richer error
    except ChangefeedError as exc:
        set_error(changefeed_id, f"{step}: {exc}", step=step)
        raise


def pull(p: dict[str, Any]) -> dict[str, Any]:
    """Pull every row change of the window into the bronze changelog (written whole, then renamed)."""
    if p["skip"]:
        log.info("pull skipped", reason=p["reason"])
        return {"skipped": True, "reason": p["reason"]}
    return _guard(p["changefeed_id"], "pull", _pull, p)  # type: ignore[no-any-return]


def _pull(p: dict[str, Any]) -> dict[str, Any]:
    cfg = load_config(p["changefeed_id"])
    checkpoint, target = p["checkpoint_ts"], p["target_ts"]
    pd_addr = resolve_pd_addr(cfg.upstream)
    started = time.monotonic()
    # 1. The DDL puller: the history table's span first, so that the schema storage knows every
    #    table that exists at any moment of the window (tables created in it included).
    ddl_span = {ddl_history.TABLE_ID: key.table_span(ddl_history.TABLE_ID)}
    ddl_events, _ = asyncio.run(collect_window(pd_addr, ddl_span, checkpoint, target, options=cfg.puller))
    slog = _schema_log(cfg, checkpoint)
    jobs = decode_jobs(ddl_events)
    slog.advance(jobs, target)
    slog.save()
    storage = slog.storage()
    flt = cfg.table_filter
    ids = {t.id for t in _replicated_at(cfg, storage, checkpoint)}
    ids |= {j.table_info.id for j in jobs if j.table_info and flt.match(j.table_info.db_name, j.table_info.name)}
    # 2. The row changes of every table replicated at some point of the window.
    spans = {tid: key.table_span(tid) for tid in sorted(ids)}
    rows, resolved = asyncio.run(collect_window(pd_addr, spans, checkpoint, target, options=cfg.puller))
    events = pa.concat_tables([ddl_events, rows])
    path = changelog.write_window(cfg.sink_uri, cfg.changefeed_id, target, events)
    failpoint.hit("pull.bronze_written")
    with locked_state(cfg.changefeed_id) as st:
        st.resolved_ts = max(st.resolved_ts, min(resolved.values(), default=target))
    names = sorted({t.qualified_name for tid in ids for t in [storage.table_at(tid, target) or _last(storage, tid)]
                    if t is not None})
    out = {
        "skipped": False,
        "bronze_path": str(path),
        "events": events.num_rows,
        "ddl_jobs": len(jobs),
        "tables": names,
        "seconds": round(time.monotonic() - started, 3),
    }
    log.info("pulled window", changefeed_id=cfg.changefeed_id, target_ts=target, **out)
    return out


def _last(storage: SchemaStorage, table_id: int) -> TableInfo | None:
    """A table's last known schema (for naming tables dropped within the window)."""
    return next((t for t in reversed(storage.versions(table_id)) if t is not None), None)


def apply(p: dict[str, Any]) -> dict[str, Any]:
    """Apply the bronze window to the silver Delta tables (exactly once per table and window)."""
    if p["skip"]:
        log.info("apply skipped", reason=p["reason"])
        return {"skipped": True, "reason": p["reason"], "tables": {}}
    return _guard(p["changefeed_id"], "apply", _apply, p)  # type: ignore[no-any-return]


def _apply(p: dict[str, Any]) -> dict[str, Any]:
    """Apply the window barrier by barrier: DML < b, checks at b - 1, the DDL at b, checkpoint := b."""
    cfg = load_config(p["changefeed_id"])
    checkpoint, target = p["checkpoint_ts"], p["target_ts"]
    slog = SchemaLog.load(cfg.changefeed_id)
    storage = slog.storage()
    efilter = cfg.event_filter
    jobs = [j for j in storage.jobs_between(checkpoint, target) if relevant(j, storage, cfg.table_filter)]
    steps = plan_steps(checkpoint, target, jobs)
    totals: dict[str, dict[str, Any]] = {}
    barriers: list[dict[str, Any]] = []
    for step in steps:
        if isinstance(step, DmlStep):
            tables = _replicated_at(cfg, storage, step.upto_ts)
            result = spark_engine.run_job("apply_window", {
                "sink_uri": cfg.sink_uri,
                "changefeed_id": cfg.changefeed_id,
                "after_ts": step.after_ts,
                "upto_ts": step.upto_ts,
                "version": step.version,
                "window_end_ts": target,
                "tables": [t.to_json() for t in tables],
                "event_filters": {str(t.id): efilter.dml_specs(t.db_name, t.name) for t in tables},
                "ignore_txn_start_ts": sorted(efilter.ignore_txn_start_ts),
            })
            for name, st in result.get("tables", {}).items():
                agg = totals.setdefault(name, {"rows_upserted": 0, "rows_deleted": 0, "skipped": True})
                agg["rows_upserted"] += int(st.get("rows_upserted") or 0)
                agg["rows_deleted"] += int(st.get("rows_deleted") or 0)
                agg["skipped"] = agg["skipped"] and bool(st.get("skipped"))
                agg["delta_version"] = st.get("delta_version")
            failpoint.hit("apply.dml_step_done")
            if step.upto_ts < target:  # a barrier: check the tables this step changed before the DDL
                changed = [t for t in tables if _changed(result, t)]
                _check_tables(cfg, changed, step.upto_ts, where=f"barrier {step.upto_ts + 1}")
        else:
            job = step.job
            if efilter.ignores_ddl(job.job_type, job.query, job.schema_name, job.table_name):
                log.info("DDL ignored by the event filter (schema storage updated, not applied)",
                         job_id=job.job_id, query=job.query)
                barriers.append({"ts": job.finished_ts, "job": job.job_type, "applied": False})
            else:
                before_id = job.old_table_id if job.old_table_id is not None else job.table_id
                before = storage.table_at(before_id, job.finished_ts - 1) if before_id is not None else None
                res = spark_engine.run_job("ddl_apply", {
                    "sink_uri": cfg.sink_uri,
                    "changefeed_id": cfg.changefeed_id,
                    "job": job.to_json(),
                    "before": before.to_json() if before else None,
                    "after": job.table_info.to_json() if job.table_info else None,
                })
                barriers.append({"ts": job.finished_ts, "job": job.job_type, "applied": True, "result": res})
                failpoint.hit("apply.ddl_applied")
            advance_checkpoint(cfg.changefeed_id, job.finished_ts)
    log.info("applied window", changefeed_id=cfg.changefeed_id, target_ts=target, steps=len(steps), tables=totals)
    return {"skipped": False, "tables": totals, "barriers": barriers, "steps": len(steps)}


def _changed(result: dict[str, Any], table: TableInfo) -> bool:
    st = result.get("tables", {}).get(table.qualified_name) or {}
    return not st.get("skipped") and bool(st.get("rows_upserted") or st.get("rows_deleted"))


def check(p: dict[str, Any]) -> dict[str, Any]:
    """Data-quality checks of every replicated table against the upstream snapshot at the window end."""
    if p["skip"]:
        log.info("check skipped", reason=p["reason"])
        return {"skipped": True, "reason": p["reason"], "passed": True, "tables": {}}
    return _guard(p["changefeed_id"], "check", _check, p)  # type: ignore[no-any-return]


def _check(p: dict[str, Any]) -> dict[str, Any]:
    cfg = load_config(p["changefeed_id"])
    ts = p["target_ts"]
    reports = _check_tables(cfg, _replicated_tables(cfg, ts), ts, where="window end")
    failpoint.hit("check.done")
    return {"skipped": False, "passed": True, "tables": reports}


def _check_tables(cfg: ChangefeedConfig, tables: list[TableInfo], ts: int, *, where: str) -> dict[str, Any]:
    """Data-quality checks of ``tables`` against the upstream snapshot at ``ts``; a failure puts the
    changefeed in error (the checkpoint stays) and raises ``DataQualityError``."""
    reports: dict[str, Any] = {}
    efilter = cfg.event_filter
    if tables:
        with _client(cfg) as c:
            for t in tables:
                # Event filters drop row changes on purpose: such a table cannot equal the upstream snapshot,
                # so its count and checksum are not compared (key uniqueness, NOT NULL and schema still are).
                filtered = efilter.drops_rows_of(t.db_name, t.name)
                expected = None
                if cfg.dq_mode != "off" and not filtered:
                    expected = c.query(f"SELECT * FROM `{t.db_name}`.`{t.name}`", at_ts=ts)
                reports[t.qualified_name] = spark_engine.run_job(
                    "data_quality",
                    {"sink_uri": cfg.sink_uri, "table": t.to_json(), "expected_rows": expected, "mode": cfg.dq_mode,
                     "ts": ts, "content": not filtered},
                )
    failed = {name: r for name, r in reports.items() if not r["passed"]}
    dq_results.append(cfg.sink_uri, cfg.changefeed_id, ts, where, cfg.dq_mode, reports)
    with locked_state(cfg.changefeed_id) as st:
        st.last_checks = {"ts": ts, "mode": cfg.dq_mode, "where": where, "tables": reports}
        if failed:
            st.state = "error"
            st.error = {"message": _dq_message(failed, ts), "step": "check", "at": time.time(), "ts": ts}
    if failed:
        raise DataQualityError(_dq_message(failed, ts))
    return reports


def _dq_message(failed: dict[str, Any], ts: int) -> str:
    parts = []
    for name, r in failed.items():
        for e in r.get("results", []):
            if not e.get("success", True):
                sample = e.get("sample_keys") or []
                parts.append(f"{name} at ts {ts}: {e.get('expectation')} failed {e.get('details', '')}"
                             + (f" (sample keys: {sample[:5]})" if sample else ""))
    return "data-quality check failed: " + "; ".join(parts or [f"{n} at ts {ts}" for n in failed])


def publish(p: dict[str, Any], applied: dict[str, Any], checked: dict[str, Any]) -> dict[str, Any]:
    """Advance the checkpoint to the window end and record the window's outcome."""
    if p["skip"]:
        log.info("publish skipped", reason=p["reason"])
        return {"skipped": True, "reason": p["reason"], "checkpoint_ts": p["checkpoint_ts"]}
    if not checked.get("passed"):
        raise ChangefeedError("refusing to publish a window whose checks did not pass")
    cid = p["changefeed_id"]
    failpoint.hit("publish.before_checkpoint")
    advance_checkpoint(cid, p["target_ts"])
    slog = SchemaLog.load(cid)
    slog.gc(p["target_ts"])  # schema versions below the checkpoint are no longer needed
    slog.save()
    with locked_state(cid) as st:
        st.last_window = {
            "checkpoint_ts": p["checkpoint_ts"],
            "target_ts": p["target_ts"],
            "tables": applied.get("tables", {}),
            "published_at": time.time(),
        }
        if load_config(cid).target_ts and st.checkpoint_ts >= (load_config(cid).target_ts or 0):
            st.state = "finished"
    log.info("published window", changefeed_id=cid, checkpoint_ts=p["target_ts"])
    return {"skipped": False, "checkpoint_ts": p["target_ts"], "tables": applied.get("tables", {})}
