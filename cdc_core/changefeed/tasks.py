"""The five steps of one window — plan, pull, apply, check, publish — as plain functions.

Both ``cdcflow changefeed run`` and the Airflow DAG tasks call exactly these. The plan is a
:class:`~cdc_core.changefeed.window_plan.WindowPlan` (XCom carries its ``to_xcom()``); the steps' results are
JSON-serializable dicts. Any failure that is not transient puts the changefeed in error, and the checkpoint only
moves in ``publish``.

A window has a mode (``plan(mode=...)``; the other steps dispatch on ``plan.mode``):

* ``incremental`` -- the row changes and DDL of ``(checkpoint, T]``;
* ``snapshot`` -- first reload the selected tables from the upstream at the checkpoint
  (:mod:`cdc_core.changefeed.snapshot`), then the incremental part;
* ``rebuild`` -- first rebuild the selected tables from the bronze changelog up to the checkpoint
  (:mod:`cdc_core.changefeed.rebuild`), then the incremental part.

In the last two the incremental part may be empty (``T <= checkpoint``, e.g. a backfill's past interval):
the window then only reloads or rebuilds, and checks at the checkpoint.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from typing import Any, cast

import pyarrow as pa

from cdc_core import failpoint
from cdc_core.capture import lease as capture_lease
from cdc_core.capture import parts as capture_parts
from cdc_core.capture.window_source import wait_for_capture
from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec import changelog, key, tso
from cdc_core.errors import ChangefeedError, ConfigError, DataQualityError
from cdc_core.log import get_logger
from cdc_core.puller.window_collector import collect_window, stream_window
from cdc_core.schema import ddl_history
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import TableInfo
from cdc_core.schema.storage import SchemaStorage

from . import checkpoint_versions, dq_results, gc_safepoint, metrics_history, spark_engine
from . import rebuild as rebuildmod
from . import snapshot as snapshotmod
from .barriers import DmlStep, applies, plan_steps, relevant
from .config import ChangefeedConfig, load_config
from .ddl_puller import SchemaLog, decode_jobs
from .job_args.data_quality import ReconcileArgs
from .job_args.rollback import RollbackArgs
from .job_args.window_checks import ReadAheadArgs, WindowChecksArgs
from .reconcile import table_entry
from .schema_loader import load_schema_jobs
from .state import ChangefeedState, advance_checkpoint, load_state, locked_state, set_error
from .steps import apply_steps, changed, replicated_at, shared_commit_ts, window_tables
from .sub_windows import cut_window, window_cuts
from .window_plan import MODES, RebuildPlan, SnapshotPlan, WindowMode, WindowPlan

log = get_logger("cdcflow.changefeed")


def _client(cfg: ChangefeedConfig) -> UpstreamClient:
    return UpstreamClient(resolve_pd_addr(cfg.upstream), tidb=cfg.tidb)


def _check_mode(mode: str, tables: list[str] | None) -> list[str] | None:
    """Validate ``mode`` / ``tables`` (no I/O); the table names stripped, None for "every table"."""
    if mode not in MODES:  # a name the CLI or a DAG param gives
        raise ConfigError(f"unknown mode {mode!r}: the mode of a window is one of {', '.join(MODES)}")
    if isinstance(tables, str):
        raise ConfigError(f"tables must be a list of \"db.table\" names, got the string {tables!r}")
    names = [t.strip() for t in tables or [] if t and t.strip()] or None
    if names is not None and mode == "incremental":
        raise ConfigError(
            "tables applies to snapshot and rebuild modes only: an incremental window always covers every table "
            f"so that one checkpoint stays true (got tables {names})"
        )
    bad = [n for n in names or [] if n.count(".") != 1 or n.startswith(".") or n.endswith(".")]
    if bad:
        raise ConfigError(f"tables must be \"db.table\" names, got {bad}")
    return names


def plan(
    changefeed_id: str,
    *,
    interval_end_ts: int | None,
    target_ts: int | None = None,
    mode: str = "incremental",
    tables: list[str] | None = None,
    run_tag: str | None = None,
    full_check: bool = False,
) -> WindowPlan:
    """Fix the window ``(checkpoint, T]`` with ``T = min(interval end, changefeed target-ts, target_ts)``.

    With no bound at all, ``T`` is the upstream's current TSO ("now"). ``mode``: ``incremental`` (default),
    ``snapshot`` or ``rebuild``; ``tables`` ("db.table" names, None = every replicated table) selects what a
    snapshot or rebuild covers; ``run_tag`` (an Airflow backfill id, else None) makes a rebuild happen once
    per tag. Bad input raises ``ConfigError`` naming the value.

    :class:`WindowPlan` says what each field of the plan means.
    """
    names = _check_mode(mode, tables)
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
    requested = cast(WindowMode, mode)
    out = WindowPlan(changefeed_id=changefeed_id, sink_uri=cfg.sink_uri, checkpoint_ts=st.checkpoint_ts,
                     target_ts=target, mode=requested, requested_mode=requested,
                     tables=None if names is None else tuple(names), run_tag=run_tag,
                     has_window=target > st.checkpoint_ts, full_check=full_check)
    if st.state not in ("paused", "finished", "removed"):
        out = _plan_mode(cfg, st, out)
    covered = (f"window already covered by checkpoint {st.checkpoint_ts} "
               f"({tso.to_datetime(st.checkpoint_ts).isoformat()}) >= target {target}")
    rb = out.rebuild
    if st.state in ("paused", "finished", "removed"):
        out = replace(out, skip=True, reason=f"changefeed is {st.state}")
    elif out.mode == "incremental" and target <= st.checkpoint_ts:
        out = replace(out, skip=True, reason=covered)
    elif rb is not None and rb.noop and target <= st.checkpoint_ts:
        out = replace(out, skip=True, reason=f"{rb.reason}; {covered}")
    elif target <= st.checkpoint_ts:
        out = replace(out, target_ts=st.checkpoint_ts)  # only the snapshot / rebuild, checked at the checkpoint
    log.info("planned window", **out.to_xcom())
    return out


def _plan_mode(cfg: ChangefeedConfig, st: ChangefeedState, out: WindowPlan) -> WindowPlan:
    """Decide what a snapshot / rebuild window covers (validating ``tables``): ``out`` with its mode, snapshot
    and rebuild."""
    ckpt, mode, names = st.checkpoint_ts, out.mode, None if out.tables is None else list(out.tables)
    pending = rebuildmod.unfinished(st)
    if pending is not None and mode == "snapshot":
        raise ChangefeedError(
            f"changefeed {cfg.changefeed_id!r} has an unfinished rebuild of {pending['tables']} (its tables are "
            "half rebuilt); run a rebuild or incremental window first, which finishes it"
        )
    if pending is not None and mode == "incremental":
        log.warning("resuming an unfinished rebuild before the window", tables=pending["tables"], tag=pending["tag"])
        mode = "rebuild"
    elif mode == "incremental" and cfg.initial_snapshot and not st.initial_snapshot_done:
        log.info("initial-snapshot: the changefeed's first window loads every table at its start", ts=ckpt)
        mode = "snapshot"
    out = replace(out, mode=mode)
    if mode == "incremental":
        return out
    storage = _schema_log(cfg, ckpt).storage()
    resolved = sorted(t.qualified_name for t in snapshotmod.resolve_tables(cfg, storage, ckpt, names))
    if mode == "snapshot":
        prev = st.snapshot
        same = (prev is not None and not prev.get("done") and prev.get("ts") == ckpt
                and sorted(prev.get("tables") or []) == sorted(resolved))
        return replace(out, snapshot=SnapshotPlan(
            id=prev["id"] if same and prev is not None else uuid.uuid4().hex[:12],
            ts=ckpt, tables=tuple(resolved), all_tables=names is None,
            initial=out.requested_mode == "incremental",
        ))
    noop_reason = rebuildmod.already_rebuilt(st, out.run_tag, resolved, ckpt) if pending is None else None
    if pending is not None:
        resolved = sorted({*pending["tables"], *(resolved if out.requested_mode == "rebuild" else [])})
    return replace(out, rebuild=RebuildPlan(
        id=str((pending or {}).get("id") or uuid.uuid4().hex[:12]),  # a resumed rebuild keeps its id
        ts=ckpt, tag=out.run_tag or (pending or {}).get("tag"), tables=tuple(resolved),
        all_tables=names is None and pending is None,
        noop=noop_reason is not None, reason=noop_reason or "", resume=pending is not None,
    ))


def _schema_log(cfg: ChangefeedConfig, checkpoint_ts: int) -> SchemaLog:
    """The changefeed's schema log; on first use, TiDB's meta snapshot at the checkpoint (its replicated tables)."""
    if SchemaLog.exists(cfg.changefeed_id):
        return SchemaLog.load(cfg.changefeed_id)
    with _client(cfg) as c:
        jobs = load_schema_jobs(c, checkpoint_ts, cfg.table_filter)
    slog = SchemaLog(cfg.changefeed_id, jobs, checkpoint_ts)
    slog.save()
    return slog


def _replicated_at(cfg: ChangefeedConfig, storage: SchemaStorage, ts: int) -> list[TableInfo]:
    return replicated_at(cfg, storage, ts)


def _replicated_tables(cfg: ChangefeedConfig, ts: int) -> list[TableInfo]:
    """The replicated tables at ``ts`` (at or below the schema log's resolved ts)."""
    slog = SchemaLog.load(cfg.changefeed_id)
    if ts > slog.resolved_ts:
        raise ChangefeedError(f"schema storage is resolved to {slog.resolved_ts}, below ts {ts}: pull the window first")
    return _replicated_at(cfg, slog.storage(), ts)


def wait_spec(p: WindowPlan) -> dict[str, Any]:
    """What the deferrable wait needs: the upstream, the spans the window pulls (hex keys) and the window end.

    ``already_resolved`` is true when a pull already saw every span's resolved ts at or past the window end
    (``state.resolved_ts``), or a running capture's parts already cover it: nothing to wait for. With a capture
    running (``capture_resolved_ts``: how far its parts cover the window), ``spans`` is empty: the capture holds the
    streams, so the wait only waits for the TSO to pass the window end and the pull waits on the capture's parts.
    """
    cfg = load_config(p.changefeed_id)
    target = p.target_ts
    captured = (capture_parts.covered_upto(cfg.sink_uri, cfg.changefeed_id, p.checkpoint_ts)
                if capture_lease.live_holder(cfg.changefeed_id) is not None else None)
    spans: list[tuple[bytes, bytes]] = []
    if captured is None:
        tables = _replicated_tables(cfg, p.checkpoint_ts)
        spans = [key.table_span(ddl_history.JOB_TABLE_ID),
                 *(key.table_span(pid) for t in tables for pid in t.physical_ids)]
    return {
        "pd_addr": resolve_pd_addr(cfg.upstream),
        "spans": [[s.hex(), e.hex()] for s, e in spans],
        "target_ts": target,
        "already_resolved": (load_state(cfg.changefeed_id).resolved_ts >= target
                             or (captured is not None and captured >= target)),
        "capture_resolved_ts": captured,
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


@metrics_history.records_duration("pull")
def pull(p: WindowPlan) -> dict[str, Any]:
    """Pull every row change of the window into the bronze changelog (written whole, then renamed).

    A snapshot window first fetches its tables' snapshot bases at the checkpoint (``snapshot.fetch``).
    """
    if p.skip:
        log.info("pull skipped", reason=p.reason)
        return {"skipped": True, "reason": p.reason}
    return _guard(p.changefeed_id, "pull", _pull, p)  # type: ignore[no-any-return]


@metrics_history.records_pull_memory
def _pull(p: WindowPlan) -> dict[str, Any]:
    cfg = load_config(p.changefeed_id)
    checkpoint, target = p.checkpoint_ts, p.target_ts
    started = time.monotonic()
    fetched = None
    if checkpoint == cfg.start_ts or p.snapshot:
        slog = _schema_log(cfg, checkpoint)
        if checkpoint == cfg.start_ts:  # a rebuild of a table without a snapshot base replays from start-ts
            snapshotmod.keep_schema(cfg, slog, checkpoint)
        if p.snapshot:
            fetched = snapshotmod.fetch(cfg, p.snapshot)
    if not p.has_window:
        empty: dict[str, Any] = {"skipped": False, "bronze_path": None, "events": 0, "ddl_jobs": 0, "tables": [],
                                 "snapshot": fetched, "seconds": round(time.monotonic() - started, 3)}
        log.info("pulled no window (the plan only snapshots / rebuilds)", changefeed_id=cfg.changefeed_id, **empty)
        return empty
    reused = _reusable_window(cfg, checkpoint, target)
    if reused is not None:
        reused.update(snapshot=fetched, seconds=round(time.monotonic() - started, 3))
        log.info("window already pulled: applying the bronze window in place", changefeed_id=cfg.changefeed_id,
                 target_ts=target, **reused)
        return reused
    pd_addr = resolve_pd_addr(cfg.upstream)
    gc_safepoint.check_not_lost_by_gc(pd_addr, cfg.changefeed_id, checkpoint)
    # 1. The DDL puller: the DDL job table's span first, so that the schema storage knows every
    #    table that exists at any moment of the window (tables created in it included).
    ddl_span = {ddl_history.JOB_TABLE_ID: key.table_span(ddl_history.JOB_TABLE_ID)}
    from_capture = wait_for_capture(cfg, checkpoint, target)
    if from_capture:  # the capture's subscriptions already hold the window: no stream opened here
        ddl_events = pa.Table.from_batches(list(capture_parts.read_events(
            cfg.sink_uri, cfg.changefeed_id, checkpoint, target, ddl_span)), schema=changelog.SCHEMA)
    else:
        ddl_events, _ = asyncio.run(collect_window(pd_addr, ddl_span, checkpoint, target, options=cfg.puller))
    slog = _schema_log(cfg, checkpoint)
    known = {i for t in _replicated_at(cfg, slog.storage(), checkpoint) for i in (t.id, *t.physical_ids)}
    jobs = decode_jobs(ddl_events, cfg.table_filter.match, known)
    slog.advance(jobs, target)
    slog.save()
    storage = slog.storage()
    versions = window_tables(cfg, storage, checkpoint, target)
    ids = {t.id for t in versions}
    # 2. The row changes of every table replicated at some point of the window, a partitioned table's under the id
    #    of every partition it had in the window (TiKV keys its rows by them; ADD / DROP PARTITION change them).
    spans = {pid: key.table_span(pid) for pid in sorted({p for t in versions for p in t.physical_ids})}
    #    They go to the bronze window as they arrive, a part at a time: the pull holds a part, not the window.
    with changelog.WindowWriter(cfg.sink_uri, cfg.changefeed_id, target, after_ts=checkpoint) as writer:
        writer.add(ddl_events)
        if from_capture:
            for batch in capture_parts.read_events(cfg.sink_uri, cfg.changefeed_id, checkpoint, target, spans):
                writer.write(batch)
            resolved = {sid: target for sid in spans}
        else:
            resolved = asyncio.run(stream_window(pd_addr, spans, checkpoint, target, writer.add, writer=writer,
                                                 options=cfg.puller))
        path = writer.commit(cuts=cut_window(writer, cfg.window_max_events))
        events_pulled = writer.rows
    failpoint.hit("pull.bronze_written")
    with locked_state(cfg.changefeed_id) as st:
        st.resolved_ts = max(st.resolved_ts, min(resolved.values(), default=target))
    names = sorted({t.qualified_name for tid in ids for t in [storage.table_at(tid, target) or _last(storage, tid)]
                    if t is not None})
    out: dict[str, Any] = {
        "skipped": False,
        "bronze_path": str(path),
        "events": events_pulled,
        "sub_windows": _sub_windows(window_cuts(cfg.sink_uri, cfg.changefeed_id, target), checkpoint,
                                    target),
        "ddl_jobs": len(jobs),
        "source": "capture" if from_capture else "pull",
        "tables": names,
        "snapshot": fetched,
        "seconds": round(time.monotonic() - started, 3),
    }
    log.info("pulled window", changefeed_id=cfg.changefeed_id, target_ts=target, **out)
    return out


def _prune_capture(cfg: ChangefeedConfig, checkpoint_ts: int) -> None:
    """Remove the capture's parts wholly at or below the checkpoint: no window reads below it, and the bronze
    windows cut from them hold their events. Never fails publish."""
    try:
        gone = capture_parts.remove_upto(cfg.sink_uri, cfg.changefeed_id, checkpoint_ts)
    except OSError:
        log.warning("could not remove the capture's parts below the checkpoint", changefeed_id=cfg.changefeed_id,
                    exc_info=True)
        return
    if gone:
        log.info("removed the capture's parts below the checkpoint", changefeed_id=cfg.changefeed_id,
                 checkpoint_ts=checkpoint_ts, parts=len(gone))


def _reusable_window(cfg: ChangefeedConfig, checkpoint: int, target: int) -> dict[str, Any] | None:
    """The pull's result when the bronze window ending at ``target`` is already whole and covers ``(checkpoint,
    target]`` (a re-run after a failure past the pull, e.g. in a later sub-window, whose checkpoint moved inside
    the window): it is applied as it is, not pulled again (a catch-up keeps what it pulled, and the changelog keeps
    the part before the checkpoint)."""
    after = changelog.window_after_ts(cfg.sink_uri, cfg.changefeed_id, target)
    if after is None or after > checkpoint:
        return None
    try:
        slog = SchemaLog.load(cfg.changefeed_id)
    except ChangefeedError:
        return None
    if slog.resolved_ts < target:
        return None
    path = changelog.window_dir(cfg.sink_uri, cfg.changefeed_id, target)
    storage = slog.storage()
    ids = changelog.window_table_ids(cfg.sink_uri, cfg.changefeed_id, target, checkpoint, target)
    names = sorted({t.qualified_name for t in _replicated_at(cfg, storage, target) if ids.intersection(t.physical_ids)})
    events = changelog.window_event_count(cfg.sink_uri, cfg.changefeed_id, target, checkpoint, target)
    return {"skipped": False, "reused": True, "bronze_path": str(path), "events": events,
            "sub_windows": _sub_windows(window_cuts(cfg.sink_uri, cfg.changefeed_id, target), checkpoint,
                                        target),
            "ddl_jobs": len(storage.jobs_between(checkpoint, target)), "tables": names}


def applied_jobs(cfg: ChangefeedConfig, storage: SchemaStorage, after_ts: int, upto_ts: int) -> list[DDLJob]:
    """The DDL jobs in ``(after_ts, upto_ts]`` the window applies at their barriers: those of replicated tables
    that change the silver tables (``barriers.applies``); the others only updated the schema storage."""
    out = []
    for j in storage.jobs_between(after_ts, upto_ts):
        if not relevant(j, storage, cfg.table_filter):
            continue
        if applies(j, storage):
            out.append(j)
        else:
            log.info("DDL not applied: off the whitelist and the silver table does not change (schema storage "
                     "updated)", changefeed_id=cfg.changefeed_id, job_id=j.job_id, job_type=j.job_type,
                     query=j.query)
    return out


def _record_mapped(cfg: ChangefeedConfig, ts: int, where: str, tables: dict[str, Any], out: dict[str, Any]) -> None:
    """``dq_results.record_mapped`` of a load's or a step's per-table results, into the apply's ``out["mapped"]``."""
    total = out.get("mapped", {})
    mapped = dq_results.record_mapped(cfg.sink_uri, cfg.changefeed_id, cfg.dq_mode, ts, where, tables, total)
    if mapped:
        out["mapped"] = total
        log.warning("values Delta cannot hold were written as NULL", changefeed_id=cfg.changefeed_id, ts=ts,
                    where=where, mapped=mapped)


def _last(storage: SchemaStorage, table_id: int) -> TableInfo | None:
    """A table's last known schema (for naming tables dropped within the window)."""
    return next((t for t in reversed(storage.versions(table_id)) if t is not None), None)


@metrics_history.records_duration("apply")
def apply(p: WindowPlan) -> dict[str, Any]:
    """Apply the bronze window to the silver Delta tables (exactly once per table and window).

    A snapshot window first replaces its tables from their bases (``snapshot.load``), a rebuild window first
    rebuilds its tables from the changelog (``rebuild.rebuild``); the window's steps follow.
    """
    if p.skip:
        log.info("apply skipped", reason=p.reason)
        return {"skipped": True, "reason": p.reason, "tables": {}}
    return _guard(p.changefeed_id, "apply", _apply, p)  # type: ignore[no-any-return]


def _apply(p: WindowPlan) -> dict[str, Any]:
    """The snapshot load or rebuild of the plan, then the window barrier by barrier: DML < b, checks at
    b - 1, the DDL at b, checkpoint := b."""
    cfg = load_config(p.changefeed_id)
    checkpoint, target = p.checkpoint_ts, p.target_ts
    totals: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {"skipped": False, "mode": p.mode, "tables": totals,
                           "barriers": [], "steps": 0}
    if p.snapshot:
        out["snapshot"] = loaded = snapshotmod.load(cfg, p.snapshot)
        _record_mapped(cfg, int(loaded["ts"]), "snapshot", loaded["tables"], out)
        for name, r in loaded["tables"].items():
            if not r.get("skipped"):
                totals[name] = {"rows_upserted": int(r.get("rows") or 0), "rows_deleted": 0, "skipped": False,
                                "delta_version": r.get("delta_version"), "snapshot_rows": r.get("rows")}
    if p.rebuild:
        out["rebuild"] = rebuilt = rebuildmod.rebuild(cfg, p.rebuild, p.checkpoint_ts)
        for name, r in rebuilt["tables"].items():
            totals[name] = {"rows_upserted": int(r.get("rows_upserted") or 0) + int(r.get("base_rows") or 0),
                            "rows_deleted": int(r.get("rows_deleted") or 0), "skipped": False,
                            "delta_version": r.get("delta_version"), "rebuilt": True}
    if not p.has_window:
        log.info("applied no window (the plan only snapshots / rebuilds)", changefeed_id=cfg.changefeed_id,
                 tables=totals)
        return out
    slog = SchemaLog.load(cfg.changefeed_id)
    storage = slog.storage()
    jobs = applied_jobs(cfg, storage, checkpoint, target)
    cuts = window_cuts(cfg.sink_uri, cfg.changefeed_id, target)
    steps = plan_steps(checkpoint, target, jobs, cuts, shared_commit_ts(cfg, storage, target, jobs))

    def after_dml(step: DmlStep, tables: list[TableInfo], result: dict[str, Any]) -> None:
        _record_mapped(cfg, step.upto_ts, f"window apply ({step.after_ts}, {step.upto_ts}]", result.get("tables", {}),
                       out)
        if step.at_barrier:  # checked at the next barrier or the window end (barriers.py)
            return
        if step.upto_ts < target:  # a barrier or a sub-window's end: check the tables this step changed
            where = f"sub-window end {step.upto_ts}" if step.cut else f"barrier {step.upto_ts + 1}"
            _check_tables(cfg, [t for t in tables if changed(result, t)], step.upto_ts, where=where, plan=p,
                          full=set(), after_ts=_sub_window_start(p, cuts, step.upto_ts))
            if step.cut:  # no DDL follows: the sub-window is done
                checkpoint_versions.record_step(cfg, storage, step.upto_ts, "sub-window", window_end_ts=target,
                                                after_ts=load_state(cfg.changefeed_id).checkpoint_ts)
                advance_checkpoint(cfg.changefeed_id, step.upto_ts)
                failpoint.hit("apply.sub_window_done")

    def after_ddl(job: DDLJob, result: dict[str, Any] | None) -> None:
        # a re-key by _tidb_rowid reloads the table from the upstream and counts what it maps, as a snapshot does
        _record_mapped(cfg, job.finished_ts, f"DDL {job.job_type} (job {job.job_id}) at {job.finished_ts}",
                       dq_results.ddl_tables(result), out)
        checkpoint_versions.record_step(cfg, storage, job.finished_ts, "ddl", window_end_ts=target,
                                        after_ts=load_state(cfg.changefeed_id).checkpoint_ts)
        advance_checkpoint(cfg.changefeed_id, job.finished_ts)

    _read_checks_ahead(cfg, p)
    res = apply_steps(
        cfg, storage, steps, window_end_ts=target, tables_at=lambda ts: _replicated_at(cfg, storage, ts),
        after_dml=after_dml, after_ddl=after_ddl,
    )
    for name, agg in res.tables.items():
        prev = totals.get(name)
        if prev is None:
            totals[name] = agg
        else:
            prev["rows_upserted"] += agg["rows_upserted"]
            prev["rows_deleted"] += agg["rows_deleted"]
            if agg.get("delta_version") is not None:
                prev["delta_version"] = agg["delta_version"]
    out.update(barriers=res.barriers, steps=res.steps,
               sub_windows=_sub_windows(cuts, checkpoint, target))
    log.info("applied window", changefeed_id=cfg.changefeed_id, target_ts=target, steps=res.steps, tables=totals)
    return out


@metrics_history.records_duration("check")
def check(p: WindowPlan) -> dict[str, Any]:
    """Data-quality checks at the window end: the changed-key checks of every table the window changed, and the full
    reconciliation of the tables a snapshot or rebuild replaced (of every table with the plan's ``full_check``)."""
    if p.skip:
        log.info("check skipped", reason=p.reason)
        return {"skipped": True, "reason": p.reason, "passed": True, "tables": {}}
    return _guard(p.changefeed_id, "check", _check, p)  # type: ignore[no-any-return]


def _sub_windows(cuts: list[int], checkpoint: int, target: int) -> int:
    """How many sub-windows ``(checkpoint, target]`` is cut into."""
    return 1 + sum(1 for c in cuts if checkpoint < c < target)


def _sub_window_start(p: WindowPlan, cuts: list[int], ts: int) -> int:
    """Where the sub-window holding ``ts`` starts: the last cut below it, or the window's checkpoint (the checks
    at a sub-window's end or barrier read the keys changed since; earlier sub-windows were checked at their ends)."""
    return max([p.checkpoint_ts, *(c for c in cuts if c < ts)])


def _check(p: WindowPlan) -> dict[str, Any]:
    cfg = load_config(p.changefeed_id)
    ts = p.target_ts
    tables, checked, full, since = _window_end_tables(cfg, p)
    reports = _check_tables(cfg, checked, ts, where="window end", plan=p, full=full, after_ts=since)
    failpoint.hit("check.done")
    return {"skipped": False, "passed": True, "tables": reports,
            "unchanged": sorted(t.qualified_name for t in tables if t not in checked)}


def _window_end_tables(cfg: ChangefeedConfig, p: WindowPlan
                       ) -> tuple[list[TableInfo], list[TableInfo], set[str], int]:
    """What the checks at the window end cover: the replicated tables, those checked (changed since the last
    sub-window's start, or reconciled whole), the names reconciled whole, and that start."""
    ts = p.target_ts
    tables = _replicated_tables(cfg, ts)
    full = _fully_checked(p, tables)
    cuts = window_cuts(cfg.sink_uri, cfg.changefeed_id, ts) if p.has_window else []
    since = _sub_window_start(p, cuts, ts)
    touched = _changed_tables(cfg, p, tables, ts, since)
    return tables, [t for t in tables if t.qualified_name in full or t.qualified_name in touched], full, since


def _read_checks_ahead(cfg: ChangefeedConfig, p: WindowPlan) -> None:
    """Start reading the upstream side of the window-end checks by changed keys while the window applies
    (``spark_jobs.checks.check_read_ahead``), when the checks' job will run in this process. Best effort: the checks
    read it themselves when this fails."""
    if cfg.dq_mode == "off" or not spark_engine.shares_process():
        return
    try:
        _, checked, full, since = _window_end_tables(cfg, p)
        args = _window_checks_args(cfg, checked, p.target_ts, plan=p, full=full, after_ts=since)
        if args is not None:
            spark_engine.run_job(ReadAheadArgs.ahead_of(args))
    except Exception:
        log.warning("could not read the checks' upstream side ahead; the checks will read it",
                    changefeed_id=cfg.changefeed_id, exc_info=True)


def _fully_checked(p: WindowPlan, tables: list[TableInfo]) -> set[str]:
    """The tables reconciled whole at the window end: those a snapshot or rebuild replaced (what they hold is new
    as a whole), or all of them when the plan asks."""
    if p.full_check:
        return {t.qualified_name for t in tables}
    out: set[str] = set(p.snapshot.tables if p.snapshot else ())
    if p.rebuild is not None and not p.rebuild.noop:
        out.update(p.rebuild.tables)
    return out


def _changed_tables(cfg: ChangefeedConfig, p: WindowPlan, tables: list[TableInfo], upto_ts: int,
                    after_ts: int) -> set[str]:
    """The tables with row events in ``(after_ts, upto_ts]`` of the window's bronze changelog, or touched by one of
    its DDL jobs."""
    if not p.has_window:
        return set()
    ids = changelog.window_table_ids(cfg.sink_uri, cfg.changefeed_id, p.target_ts, after_ts, upto_ts)
    storage = SchemaLog.load(cfg.changefeed_id).storage()
    for j in storage.jobs_between(after_ts, upto_ts):
        ids.update(i for i in (j.table_info.id if j.table_info else None, j.partition_id, j.old_table_id)
                   if i is not None)
    return {t.qualified_name for t in tables if t.id in ids or ids.intersection(t.physical_ids)}


def _check_tables(cfg: ChangefeedConfig, tables: list[TableInfo], ts: int, *, where: str, plan: WindowPlan,
                  full: set[str], after_ts: int) -> dict[str, Any]:
    """Data-quality checks of ``tables`` against the upstream at ``ts``: whole (``data_quality``) for the names in
    ``full``, by the keys the window changed (``window_checks``) for the others. A failure puts the changefeed in
    error (the checkpoint stays) and raises ``DataQualityError``."""
    reports: dict[str, Any] = {}
    whole = [table_entry(cfg, t) for t in tables if _whole(t, full, plan)]
    if whole:  # one job reconciles them; it reads the upstream at ts itself, chunk by chunk (never one list here)
        reports.update(spark_engine.run_job(ReconcileArgs(
            sink_uri=cfg.sink_uri, pd_addr=resolve_pd_addr(cfg.upstream), tidb=cfg.tidb, mode=cfg.dq_mode, ts=ts,
            tables=tuple(whole), history=tuple(t.qualified_name for t, _ in whole if cfg.keeps_history(t))))["tables"])
    by_keys = _window_checks_args(cfg, tables, ts, plan=plan, full=full, after_ts=after_ts)
    if by_keys is not None:  # one job for every table checked by its changed keys
        reports.update(spark_engine.run_job(by_keys)["tables"])
    reports = {t.qualified_name: reports[t.qualified_name] for t in tables}  # in the tables' order
    failed = {name: r for name, r in reports.items() if not r["passed"]}
    dq_results.append(cfg.sink_uri, cfg.changefeed_id, ts, where, cfg.dq_mode, reports)
    message, rolled = "", dict[str, Any]()
    if failed:
        message = dq_results.failure_message(failed, ts)
        rolled, note = _roll_back(cfg, tables, message)
        message = f"{message}; {note}"
    with locked_state(cfg.changefeed_id) as st:
        st.last_checks = {"ts": ts, "mode": cfg.dq_mode, "where": where, "tables": reports}
        if failed:
            st.state = "error"
            st.error = {"message": message, "step": "check", "at": time.time(), "ts": ts, "rolled_back": rolled}
    if failed:
        raise DataQualityError(message)
    return reports


def _whole(t: TableInfo, full: set[str], plan: WindowPlan) -> bool:
    return t.qualified_name in full or not plan.has_window


def _window_checks_args(cfg: ChangefeedConfig, tables: list[TableInfo], ts: int, *, plan: WindowPlan,
                        full: set[str], after_ts: int) -> WindowChecksArgs | None:
    """The ``window_checks`` job of ``tables`` at ``ts`` (those not reconciled whole), or None when there is none."""
    by_keys = [table_entry(cfg, t) for t in tables if not _whole(t, full, plan)]
    if not by_keys:
        return None
    return WindowChecksArgs(sink_uri=cfg.sink_uri, changefeed_id=cfg.changefeed_id, window_end_ts=plan.target_ts,
                            tables=tuple(by_keys), after_ts=after_ts, ts=ts, mode=cfg.dq_mode,
                            pd_addr=resolve_pd_addr(cfg.upstream), tidb=cfg.tidb,
                            derive_counts=_untouched_by_ddl(cfg, [t for t, _ in by_keys], after_ts, ts),
                            history=tuple(t.qualified_name for t, _ in by_keys if cfg.keeps_history(t)))


def _untouched_by_ddl(cfg: ChangefeedConfig, tables: list[TableInfo], after_ts: int, ts: int) -> tuple[str, ...]:
    """The names of ``tables`` no DDL job in ``(after_ts, ts]`` touched (:meth:`DDLJob.touches`): their row count at
    ``ts`` is the count checked at ``after_ts`` plus what their changed keys gained and lost
    (``WindowChecksArgs.derive_counts``); the others are counted."""
    jobs = SchemaLog.load(cfg.changefeed_id).storage().jobs_between(after_ts, ts)
    return tuple(t.qualified_name for t in tables if not any(j.touches(t) for j in jobs))


def _roll_back(cfg: ChangefeedConfig, tables: list[TableInfo], why: str) -> tuple[dict[str, Any], str]:
    """Restore the checked tables to their state at the checkpoint (``spark_jobs.rollback``): the latest Delta
    version never holds data that failed its checks, and the app transaction goes back with it so the steps re-run
    after ``changefeed resume``. A failed rollback is reported, never raised over the check's failure."""
    checkpoint = load_state(cfg.changefeed_id).checkpoint_ts
    try:
        out = spark_engine.run_job(RollbackArgs(cfg.sink_uri, cfg.changefeed_id, tuple(tables), checkpoint,
                                                why))["tables"]
    except Exception as exc:
        log.exception("rollback after a failed check failed", changefeed_id=cfg.changefeed_id)
        return {"error": str(exc)}, (f"rolling the tables back to the checkpoint {checkpoint} FAILED ({exc}): the "
                                     "latest Delta versions may hold the data that failed")
    restored = sorted(n for n, r in out.items() if r.get("restored"))
    note = (f"rolled back to their state at the checkpoint {checkpoint}: {', '.join(restored)}" if restored
            else f"no table had changed since the checkpoint {checkpoint}")
    return out, note


def _record_versions(cfg: ChangefeedConfig, p: WindowPlan, applied: dict[str, Any], storage: SchemaStorage) -> None:
    """Record the window in the versions table before the checkpoint moves: the tables a snapshot or rebuild
    replaced at the window's checkpoint (a rebuild's replayed checkpoints too), then every table at the window end
    (unless a step already recorded it: a DDL barrier at the window end)."""
    if p.snapshot is not None:
        checkpoint_versions.record_replaced(cfg, p.snapshot.ts, f"snapshot {p.snapshot.id}",
                                            snapshotmod.tables_at(cfg, p.snapshot.ts, list(p.snapshot.tables)))
    rb = p.rebuild
    rebuilt = applied.get("rebuild") or {}
    if rb is not None and not rb.noop and not rebuilt.get("skipped"):
        tables = snapshotmod.tables_at(cfg, rb.ts, list(rb.tables))
        checkpoint_versions.record_replaced(cfg, rb.ts, f"rebuild {rb.id}", tables)
        starts = {n: int(r["start_ts"]) for n, r in (rebuilt.get("tables") or {}).items()
                  if r.get("start_ts") is not None}
        checkpoint_versions.record_rebuilt_history(cfg, rb.ts, f"rebuild {rb.id}", tables, starts,
                                                   rebuilt.get("trash"))
    after = load_state(cfg.changefeed_id).checkpoint_ts
    if p.has_window and after < p.target_ts:
        checkpoint_versions.record_step(cfg, storage, p.target_ts, "window", after_ts=after,
                                        window_end_ts=p.target_ts)


@metrics_history.records_duration("publish")
def publish(p: WindowPlan, applied: dict[str, Any], checked: dict[str, Any]) -> dict[str, Any]:
    """Advance the checkpoint to the window end and record the window's outcome."""
    if p.skip:
        log.info("publish skipped", reason=p.reason)
        return {"skipped": True, "reason": p.reason, "checkpoint_ts": p.checkpoint_ts}
    if not checked.get("passed"):
        raise ChangefeedError("refusing to publish a window whose checks did not pass")
    cid = p.changefeed_id
    cfg = load_config(cid)
    slog = SchemaLog.load(cid)
    _record_versions(cfg, p, applied, slog.storage())
    failpoint.hit("publish.before_checkpoint")
    advance_checkpoint(cid, p.target_ts)
    slog.gc(p.target_ts)  # schema versions below the checkpoint are no longer needed
    slog.save()
    with locked_state(cid) as st:
        st.last_window = {
            "mode": p.mode,
            "checkpoint_ts": p.checkpoint_ts,
            "target_ts": p.target_ts,
            "tables": applied.get("tables", {}),
            "published_at": time.time(),
        }
        if cfg.target_ts and st.checkpoint_ts >= cfg.target_ts:
            st.state = "finished"
    metrics_history.record_publish(cid)
    _prune_capture(cfg, p.target_ts)
    # Holds the upstream's MVCC history at the checkpoint (the next window reads from it); never fails publish.
    gc_safepoint.refresh_for_changefeed(cid, p.target_ts, cfg=cfg)
    log.info("published window", changefeed_id=cid, checkpoint_ts=p.target_ts)
    return {"skipped": False, "checkpoint_ts": p.target_ts, "tables": applied.get("tables", {})}
