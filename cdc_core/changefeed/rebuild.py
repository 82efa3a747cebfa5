"""Rebuild windows: rebuild silver tables from the bronze changelog up to the checkpoint, then run the window.

A window in mode ``rebuild`` first rebuilds the selected tables (default: every replicated table) as of the
checkpoint ``C`` without reading a row from the upstream:

1. Each table's current Delta directory moves aside to ``<sink>/_cdcflow/trash/rebuild-<C>-<time>/<db>/<table>``
   (kept for recovery; ``cdc_core.changefeed.retention`` removes old trash).
2. The table starts from its latest snapshot base at or below ``C`` (``cdc_core.codec.changelog``: rows at
   ``S`` written by a snapshot window), loaded in one commit recording version ``S``; without a base it
   starts empty at the changefeed's start-ts, as the changefeed itself did.
3. Every bronze window after that start is replayed, in order, up to ``C``, through the same apply code as a
   window (``steps.apply_steps``: barrier by barrier, DDL included). Windows record the checkpoint they were
   pulled from (``_window.json``), so overlapping windows (a re-pulled window after a crash) are cut into
   consecutive ranges; a range that no window covers is an error (the changelog was pruned too far).

Then the window's checks (at ``C``, or ``T`` when the window is not empty) compare the tables with the
upstream as usual, and the incremental part ``(C, T]`` runs.

**Tables are rebuilt by identity, not by name.** A table is its table id at ``C`` plus the ids it had
before (TRUNCATE gives a new id, ``old_table_id`` links them). Every version of it is written to the path it
has at ``C`` (the table infos are renamed: a RENAME TABLE becomes a no-op), so tables that had its former
name, or that have it now, are never touched. Move records of DROP/RENAME are ignored for the same reason.

**Schema history.** ``SchemaLog.gc`` drops DDL jobs below the checkpoint, and a replay needs the schema of
every ts since its start. The rebuild does not keep the log's jobs alive (the log would grow forever);
instead the schema at a replay's possible starts is kept in the bronze changelog next to the rows -- the
jobs defining the schema at the changefeed's start-ts (written at create time / the first pull) and at every
snapshot base's ts (written by the snapshot's pull) -- and the DDL jobs after it are decoded from the bronze
windows themselves, which hold the DDL history table's row events of their range (the DDL puller's span).
So the changelog alone (bases + windows) is enough to rebuild; the upstream is not read.

**Crash safety.** The rebuild is recorded in the changefeed state (``st.rebuild``: ts, tag, tables, trash
directory, tables moved, done) before anything moves; each table is marked moved right after its move (a
table whose trash copy exists counts as moved), and nothing is replayed into a table before it is marked.
A re-run after a crash (any mode: ``tasks.plan`` turns the next window into a rebuild while one is
unfinished) therefore never moves a half-rebuilt table aside again; it resumes the replay, which is
idempotent through the app-transaction versions (a step at or below a table's recorded version is skipped;
a base load is skipped when its load id is in the table's history).

**Backfills.** A rebuild with a ``run_tag`` (the Airflow backfill id) is done once per tag: a later run
with the same tag, whose tables were all rebuilt by that tag's completed rebuild, skips the rebuild ("already
rebuilt by this backfill"), whatever the checkpoint is now (windows published since continued from the
rebuilt tables, so they need no second rebuild).
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_core import failpoint
from cdc_core.codec import changelog
from cdc_core.codec.sink_uri import HISTORY_SUFFIX, local_path, table_path, table_path_of
from cdc_core.errors import ChangefeedError
from cdc_core.log import get_logger
from cdc_core.schema import ddl_history
from cdc_core.schema.ddl_job import DDLJob, sort_key
from cdc_core.schema.model import TableInfo
from cdc_core.schema.storage import SchemaStorage

from . import dq_results, spark_engine
from .barriers import applies, plan_steps, relevant
from .config import ChangefeedConfig
from .ddl_puller import SchemaLog, decode_jobs
from .job_args.snapshot_load import BaseLoad, SnapshotJobArgs
from .state import ChangefeedState, locked_state
from .steps import StepsResult, apply_steps, replicated_at, shared_commit_ts
from .sub_windows import window_cuts
from .window_plan import RebuildPlan

log = get_logger("cdcflow.changefeed")

TRASH_DIR = "trash"
TRASH_PREFIX = "rebuild-"


def trash_root(sink_uri: str) -> Path:
    """``<sink>/_cdcflow/trash``."""
    return local_path(sink_uri) / "_cdcflow" / TRASH_DIR


def trash_name(ts: int, now: float | None = None) -> str:
    """``rebuild-<C>-<UTC time, to the microsecond>``."""
    stamp = datetime.fromtimestamp(now if now is not None else time.time(), UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{TRASH_PREFIX}{ts}-{stamp}"


def already_rebuilt(st: ChangefeedState, run_tag: str | None, names: list[str], checkpoint_ts: int) -> str | None:
    """Why a rebuild of ``names`` tagged ``run_tag`` at ``checkpoint_ts`` is already done (backfill
    de-duplication), or None. Only a rebuild made at the same checkpoint counts: nothing was applied since, so
    it would rebuild the same tables (and a backfill tag that is a hash of the run's conf may repeat later)."""
    last = st.rebuild
    if not run_tag or not last or not last.get("done") or last.get("tag") != run_tag:
        return None
    if last.get("ts") != checkpoint_ts:
        return None
    if not {n.lower() for n in names} <= {n.lower() for n in last.get("tables") or []}:
        return None
    return f"already rebuilt by this backfill (tag {run_tag}) at checkpoint {last.get('ts')}"


def unfinished(st: ChangefeedState) -> dict[str, Any] | None:
    """The state's rebuild record when a rebuild started and did not finish."""
    rb = st.rebuild
    return rb if rb and not rb.get("done") else None


# --- the changelog as a replay source -----------------------------------------------------------


def window_ranges(sink_uri: str, changefeed_id: str, start_ts: int, upto_ts: int) -> list[tuple[int, int, int]]:
    """``(window end, after, upto)`` ranges that cover ``(start_ts, upto_ts]`` with bronze windows, in order.

    A window covers ``(after, end]`` (``after`` from its ``_window.json``; older windows without one are taken
    to start at the previous window's end). At each point the covering window that reaches furthest is used,
    cut at ``upto_ts``.
    """
    ends = changelog.list_windows(sink_uri, changefeed_id)
    after: dict[int, int] = {}
    prev = 0
    for e in ends:
        a = changelog.window_after_ts(sink_uri, changefeed_id, e)
        after[e] = a if a is not None else prev
        prev = e
    return cover(after, start_ts, upto_ts, changefeed_id)


def cover(after: dict[int, int], start_ts: int, upto_ts: int, changefeed_id: str = "") -> list[tuple[int, int, int]]:
    """:func:`window_ranges` of windows ``{end: after}``: at each point the covering window reaching furthest."""
    out: list[tuple[int, int, int]] = []
    cur = start_ts
    # A sweep in O(W log W): windows enter a max-heap of ends once ``cur`` reaches their start, and leave it once
    # ``cur`` passes their end (``cur`` only grows, so a window that stopped covering never covers again).
    by_after = sorted(after, key=lambda e: after[e])
    reaching: list[int] = []  # -end
    i = 0
    while cur < upto_ts:
        while i < len(by_after) and after[by_after[i]] <= cur:
            heapq.heappush(reaching, -by_after[i])
            i += 1
        while reaching and -reaching[0] <= cur:
            heapq.heappop(reaching)
        if not reaching:
            raise ChangefeedError(
                f"changefeed {changefeed_id!r}: no bronze window covers ts {cur} (needed to rebuild up to {upto_ts}); "
                "the changelog was pruned past the latest snapshot base, or a window is missing"
            )
        end = -reaching[0]
        upto = min(end, upto_ts)
        out.append((end, cur, upto))
        cur = upto
    return out


def window_jobs(sink_uri: str, changefeed_id: str, ends: list[int],
                replicated: Callable[[str, str], bool] | None = None) -> list[DDLJob]:
    """The DDL jobs recorded in bronze windows (the ``tidb_ddl_job`` rows in them); ``replicated`` as
    ``ddl_puller.decode_jobs`` takes it."""
    jobs: dict[tuple[int, int], DDLJob] = {}
    for e in ends:
        d = changelog.window_dir(sink_uri, changefeed_id, e)
        files = sorted(p for p in d.glob("*.parquet") if not p.name.startswith((".", "_")))
        if not files:
            continue
        parts = [pq.read_table(f, schema=changelog.SCHEMA, filters=[("table_id", "=", ddl_history.JOB_TABLE_ID)])
                 for f in files]
        for j in decode_jobs(pa.concat_tables(parts), replicated):
            jobs[j.key] = j
    return sorted(jobs.values(), key=sort_key)


def storage_from(sink_uri: str, changefeed_id: str, start_ts: int, jobs_after: list[DDLJob]) -> SchemaStorage | None:
    """The schema storage for reads at and after ``start_ts``: the schema kept at ``start_ts`` plus the later
    jobs (None: no schema kept at ``start_ts``)."""
    rows = changelog.read_schema_snapshot(sink_uri, changefeed_id, start_ts)
    if rows is None:
        return None
    base = [DDLJob.from_row(r) for r in rows]
    known = {j.key for j in base}
    later = [j for j in jobs_after if j.finished_ts > start_ts and j.key not in known]
    return SchemaStorage.from_jobs([*base, *later])


def lineage(storage: SchemaStorage, table_id: int, after_ts: int, upto_ts: int) -> set[int]:
    """The ids a table had in ``(after_ts, upto_ts]``: its id at ``upto_ts`` and, through TRUNCATE, earlier ones."""
    ids = {table_id}
    for j in reversed(storage.jobs_between(after_ts, upto_ts)):
        if j.job_type == "truncate table" and j.table_info is not None and j.table_info.id in ids:
            if j.old_table_id is not None:
                ids.add(j.old_table_id)
    return ids


def concerns(job: DDLJob, ids: set[int]) -> bool:
    # EXCHANGE PARTITION: the normal table is old_table_id before the job and partition_id after it.
    tids = {job.table_id, job.old_table_id, job.partition_id, job.table_info.id if job.table_info else None}
    return bool(tids & ids)


# --- the rebuild --------------------------------------------------------------------------------


class _Start:
    """Where one table's replay starts: a snapshot base at ``ts`` or nothing (empty at start-ts)."""

    def __init__(self, ts: int, base: Path | None, base_info: TableInfo | None, ids: set[int]) -> None:
        self.ts = ts
        self.base = base
        self.base_info = base_info
        self.ids = ids


def _find_start(
    cfg: ChangefeedConfig, table: TableInfo, upto_ts: int, jobs: list[DDLJob], storages: dict[int, SchemaStorage]
) -> _Start:
    """The latest snapshot base of ``table`` (by its lineage ids) at or below ``upto_ts``; else start-ts."""
    sink, cid = cfg.sink_uri, cfg.changefeed_id
    for s in reversed([s for s in changelog.list_snapshots(sink, cid) if s <= upto_ts]):
        bases = changelog.snapshot_tables(sink, cid, s)
        if not bases:
            continue
        storage = storages.get(s) or storage_from(sink, cid, s, jobs)
        if storage is None:
            continue  # bases without the schema at their ts cannot be replayed from
        storages[s] = storage
        ids = lineage(storage, table.id, s, upto_ts)
        for meta in bases.values():
            if int(meta["table_id"]) in ids:
                info = TableInfo.from_dict(meta["table"])
                return _Start(s, changelog.snapshot_table_dir(sink, cid, s, info.db_name, info.name), info, ids)
    start = cfg.start_ts
    storage = storages.get(start) or storage_from(sink, cid, start, jobs)
    if storage is None:
        raise ChangefeedError(
            f"cannot rebuild {table.qualified_name}: it has no snapshot base at or below {upto_ts} and the schema at "
            f"the changefeed's start-ts {start} was not kept in the changelog (changefeeds created before rebuilds "
            "existed); run a `snapshot` window first, which gives every table a base to rebuild from"
        )
    storages[start] = storage
    return _Start(start, None, None, lineage(storage, table.id, start, upto_ts))


def _renamer(targets: dict[int, TableInfo]) -> Callable[[TableInfo], TableInfo]:
    def target_of(info: TableInfo) -> TableInfo:
        t = targets.get(info.id)
        return info if t is None else replace(info, db_name=t.db_name, name=t.name)

    return target_of


def rebuild(cfg: ChangefeedConfig, rb: RebuildPlan, ts: int) -> dict[str, Any]:
    """``apply`` of a rebuild window at its checkpoint ``ts``, before its steps; returns what was done per table."""
    cid, sink = cfg.changefeed_id, cfg.sink_uri
    if rb.noop:
        log.info(rb.reason, changefeed_id=cid, run_tag=rb.tag)
        return {"skipped": True, "reason": rb.reason, "tables": {}}
    started = time.monotonic()
    # 1. Record the rebuild (or resume the unfinished one) before anything moves.
    with locked_state(cid) as st:
        cur = unfinished(st)
        done = already_rebuilt(st, rb.tag, list(rb.tables), ts) if cur is None else None
        if cur is None and st.rebuild is not None and st.rebuild.get("done") and st.rebuild.get("id") == rb.id:
            done = f"already rebuilt by this plan (rebuild {rb.id}) at checkpoint {st.rebuild.get('ts')}"
        if done is not None:  # a retry of this window, or another run of the backfill, rebuilt them already
            log.info(done, changefeed_id=cid, run_tag=rb.tag)
            return {"skipped": True, "reason": done, "tables": {}}
        if cur is not None:
            names = sorted({*cur["tables"], *rb.tables})
            cur.update(tables=names, tag=rb.tag or cur.get("tag"), ts=ts)
            log.info("resuming an unfinished rebuild", changefeed_id=cid, trash=cur["trash"], moved=cur["moved"])
        else:
            names = sorted(rb.tables)
            cur = st.rebuild = {"id": rb.id, "ts": ts, "tag": rb.tag, "tables": names,
                                "trash": trash_name(ts), "moved": [], "done": False, "replayed_to": None,
                                "started_at": time.time(), "finished_at": None}
        trash = trash_root(sink) / str(cur["trash"])
        moved = list(cur["moved"])
    slog = SchemaLog.load(cid)
    by_name = {t.qualified_name: t for t in replicated_at(cfg, slog.storage(), ts)}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ChangefeedError(f"rebuild at {ts}: table(s) {missing} are not replicated at the checkpoint")
    tables = [by_name[n] for n in names]
    # 2. Move the tables aside (a table whose trash copy exists was moved before a crash).
    for t in tables:
        name = t.qualified_name
        if name in moved:
            continue
        src, dst = Path(table_path(sink, t)), Path(table_path_of(str(trash), t.db_name, t.name))  # names encoded
        if not dst.exists() and src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
            log.info("moved a table aside for its rebuild", table=name, to=str(dst))
        # its history table too: the replay rebuilds it from the base and the windows (spark_jobs.load.history)
        hsrc, hdst = Path(str(src) + HISTORY_SUFFIX), Path(str(dst) + HISTORY_SUFFIX)
        if not hdst.exists() and hsrc.exists():
            hdst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(hsrc, hdst)
        with locked_state(cid) as st:
            if st.rebuild is not None:
                st.rebuild["moved"] = sorted({*st.rebuild.get("moved", []), name})
        moved.append(name)
    failpoint.hit("rebuild.tables_moved")
    # 3. Replay: the schema history from the changelog, each table from its start.
    jobs = window_jobs(sink, cid, changelog.list_windows(sink, cid), cfg.table_filter.match)
    storages: dict[int, SchemaStorage] = {}
    starts = {t.qualified_name: _find_start(cfg, t, ts, jobs, storages) for t in tables}
    results: dict[str, dict[str, Any]] = {n: {"start_ts": s.ts, "base": str(s.base) if s.base else None,
                                               "windows": 0, "rows_upserted": 0, "rows_deleted": 0}
                                           for n, s in starts.items()}
    for start_ts in sorted({s.ts for s in starts.values()}):
        group = [t for t in tables if starts[t.qualified_name].ts == start_ts]
        _replay_group(cfg, group, starts, start_ts, ts, storages[start_ts], str(cur["trash"]), results)
    with locked_state(cid) as st:
        if st.rebuild is not None:
            st.rebuild.update(done=True, replayed_to=ts, finished_at=time.time())
    out = {"skipped": False, "ts": ts, "trash": str(trash), "tables": results,
           "seconds": round(time.monotonic() - started, 3)}
    log.info("rebuilt tables", changefeed_id=cid, ts=ts, tables=sorted(results), trash=str(trash))
    return out


def _replay_group(
    cfg: ChangefeedConfig, group: list[TableInfo], starts: dict[str, _Start], start_ts: int, upto_ts: int,
    storage: SchemaStorage, load_id: str, results: dict[str, dict[str, Any]],
) -> None:
    """Load the bases of ``group`` (tables starting at ``start_ts``) and replay the windows after it."""
    cid, sink = cfg.changefeed_id, cfg.sink_uri
    mapped: dict[str, dict[str, int]] = {}
    targets: dict[int, TableInfo] = {}
    for t in group:
        for i in starts[t.qualified_name].ids:
            targets[i] = t
    target_of = _renamer(targets)
    loads = tuple(BaseLoad(target_of(s.base_info), str(s.base), start_ts, f"rebuild/{load_id}",
                           history=cfg.keeps_history(t))
                  for t in group if (s := starts[t.qualified_name]).base is not None and s.base_info is not None)
    if loads:
        loaded = spark_engine.run_job(SnapshotJobArgs(phase="load", sink_uri=sink, changefeed_id=cid, loads=loads,
                                                      change_data_feed=cfg.change_data_feed))
        for name, r in loaded.get("tables", {}).items():
            results[name]["base_rows"] = r.get("rows")
        # values Delta cannot hold, written as NULL, are counted in a rebuild as in the windows it replays
        dq_results.record_mapped(sink, cid, cfg.dq_mode, start_ts, "rebuild base", loaded.get("tables", {}), mapped)
    ids = set(targets)
    flt = cfg.table_filter
    for end, after, upto in window_ranges(sink, cid, start_ts, upto_ts):
        jobs = [j for j in storage.jobs_between(after, upto)
                if concerns(j, ids) and relevant(j, storage, flt) and applies(j, storage)]
        res: StepsResult = apply_steps(
            # A window cut into sub-windows replays one at a time, as it was applied.
            cfg, storage, plan_steps(after, upto, jobs, window_cuts(sink, cid, end),
                                     shared_commit_ts(cfg, storage, end, jobs)), window_end_ts=end,
            tables_at=lambda at: [t for t in replicated_at(cfg, storage, at) if t.id in ids],
            target_of=target_of, ignore_moves=True,
            after_dml=lambda step, _tables, result: dq_results.record_mapped(
                sink, cid, cfg.dq_mode, step.upto_ts, f"rebuild apply ({step.after_ts}, {step.upto_ts}]",
                result.get("tables", {}), mapped),
            after_ddl=lambda job, result: dq_results.record_mapped(
                sink, cid, cfg.dq_mode, job.finished_ts, f"rebuild DDL {job.job_type} (job {job.job_id}) at "
                f"{job.finished_ts}", dq_results.ddl_tables(result), mapped),
        )
        for name, agg in res.tables.items():
            r = results.get(name)
            if r is not None:
                r["rows_upserted"] += agg["rows_upserted"]
                r["rows_deleted"] += agg["rows_deleted"]
                r["windows"] += 1
                r["delta_version"] = agg.get("delta_version")
        with locked_state(cid) as st:
            if st.rebuild is not None:
                st.rebuild["replayed_to"] = upto
        log.info("rebuild replayed a window", changefeed_id=cid, window=end, after=after, upto=upto,
                 steps=res.steps, tables=sorted(res.tables))
        failpoint.hit("rebuild.window_replayed")
    for name, by_column in mapped.items():
        if name in results:
            results[name]["mapped"] = by_column
