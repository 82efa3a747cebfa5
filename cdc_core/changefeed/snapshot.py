"""Snapshot windows: reload tables from the upstream at the checkpoint, then run the window as usual.

A window in mode ``snapshot`` (or a changefeed's first window with ``initial-snapshot = true``) covers
``(C, T]`` like any other, ``C`` being the checkpoint. Before the incremental part, each selected table
(default: every replicated table) is loaded with every row the upstream had at ``C`` (an MVCC snapshot
read) and its Delta contents replaced in one commit recording version ``C`` -- loading at the checkpoint,
not at ``T``, keeps the one checkpoint true and skips no change. The rows also stay in the bronze changelog
as the table's snapshot base at ``C`` (``cdc_core.codec.changelog``), where a rebuild starts from.

* ``pull`` fetches the bases (``spark_jobs.snapshot_load`` phase ``fetch``: parallel chunks by region) and
  keeps the schema at ``C`` next to them (``_schema.json``: a rebuild decodes the bases with it);
* ``apply`` replaces each table from its base (phase ``load``) before the window's DML and DDL steps.

Crash safety: a base that exists is whole and never fetched twice (rows at a ts do not change); a load is
one Delta commit marked with the snapshot's id (``cdcflow.load_id``), skipped when already committed, and
recorded in the state's ``snapshot["loaded"]``. A re-run of the same plan (an Airflow retry) or a new plan
at the same checkpoint for the same tables (a CLI re-run: ``plan`` resumes the unfinished snapshot's id)
therefore reloads nothing that is done; reloading would be harmless anyway (same rows, version ``C``, and
the window's steps after ``C`` re-apply on top).
"""

from __future__ import annotations

import time
from typing import Any

from cdc_core import failpoint
from cdc_core.client.upstream import resolve_pd_addr
from cdc_core.codec import changelog
from cdc_core.errors import ChangefeedError, ConfigError
from cdc_core.log import get_logger
from cdc_core.schema.model import TableInfo
from cdc_core.schema.storage import SchemaStorage

from . import spark_engine
from .config import ChangefeedConfig
from .ddl_puller import SchemaLog
from .job_args.snapshot_load import BaseLoad, SnapshotJobArgs
from .state import locked_state
from .steps import replicated_at
from .window_plan import SnapshotPlan

log = get_logger("cdcflow.changefeed")


def resolve_tables(
    cfg: ChangefeedConfig, storage: SchemaStorage, ts: int, tables: list[str] | None
) -> list[TableInfo]:
    """The replicated tables at ``ts`` named by ``tables`` ("db.table", case-insensitive; None = all of them).

    ``ConfigError`` naming the table and listing what is replicated when a name is not replicated.
    """
    replicated = replicated_at(cfg, storage, ts)
    if tables is None:
        return replicated
    by_name = {t.qualified_name.lower(): t for t in replicated}
    out: list[TableInfo] = []
    unknown: list[str] = []
    for name in tables:
        t = by_name.get(name.strip().lower())
        if t is None:
            unknown.append(name)
        elif t not in out:
            out.append(t)
    if unknown:
        shown = ", ".join(t.qualified_name for t in replicated) or "none"
        raise ConfigError(
            f"table(s) {', '.join(repr(u) for u in unknown)} not replicated by changefeed {cfg.changefeed_id!r} "
            f"at its checkpoint {ts}; replicated tables: {shown}"
        )
    return out


def tables_at(cfg: ChangefeedConfig, ts: int, names: list[str]) -> list[TableInfo]:
    """The named tables as the schema log has them at ``ts`` (the plan's checkpoint)."""
    return resolve_tables(cfg, SchemaLog.load(cfg.changefeed_id).storage(), ts, names)


def schema_rows_at(slog: SchemaLog, ts: int) -> list[dict[str, Any]]:
    """The schema log's jobs that define the schema at ``ts`` (the log is GC-ed at or below ``ts``)."""
    return [j.to_row() for j in slog.jobs if j.finished_ts <= ts]


def keep_schema(cfg: ChangefeedConfig, slog: SchemaLog, ts: int) -> None:
    """Keep the schema at ``ts`` in the bronze changelog (once): the start of a replay from ``ts``."""
    if changelog.read_schema_snapshot(cfg.sink_uri, cfg.changefeed_id, ts) is None:
        changelog.write_schema_snapshot(cfg.sink_uri, cfg.changefeed_id, ts, schema_rows_at(slog, ts))


def fetch(cfg: ChangefeedConfig, sn: SnapshotPlan) -> dict[str, Any]:
    """``pull`` of a snapshot window: the bases of the plan's tables at its checkpoint."""
    ts = sn.ts
    slog = SchemaLog.load(cfg.changefeed_id)
    keep_schema(cfg, slog, ts)
    tables = resolve_tables(cfg, slog.storage(), ts, list(sn.tables))
    started = time.monotonic()
    result = spark_engine.run_job(SnapshotJobArgs(
        phase="fetch",
        sink_uri=cfg.sink_uri,
        changefeed_id=cfg.changefeed_id,
        pd_addr=resolve_pd_addr(cfg.upstream),
        tidb=cfg.tidb,
        ts=ts,
        tables=tuple(tables),
    ))
    out = {"ts": ts, "id": sn.id, "tables": result.get("tables", {}),
           "seconds": round(time.monotonic() - started, 3)}
    log.info("fetched snapshot bases", changefeed_id=cfg.changefeed_id, ts=ts,
             tables={n: r.get("rows") for n, r in out["tables"].items()})
    return out


def load(cfg: ChangefeedConfig, sn: SnapshotPlan) -> dict[str, Any]:
    """``apply`` of a snapshot window, before its steps: replace each table's Delta contents from its base."""
    sid, ts, names = sn.id, sn.ts, list(sn.tables)
    with locked_state(cfg.changefeed_id) as st:
        if st.snapshot is None or st.snapshot.get("id") != sid:
            st.snapshot = {"id": sid, "ts": ts, "tables": names, "initial": sn.initial,
                           "all_tables": sn.all_tables, "loaded": {}, "done": False,
                           "started_at": time.time(), "finished_at": None}
        loaded = dict(st.snapshot.get("loaded") or {})
    results: dict[str, dict[str, Any]] = {}
    for t in tables_at(cfg, ts, names):
        name = t.qualified_name
        if name in loaded:
            results[name] = {**loaded[name], "skipped": True, "reason": "already loaded by this snapshot"}
            continue
        base = changelog.snapshot_table_dir(cfg.sink_uri, cfg.changefeed_id, ts, t.db_name, t.name)
        if not (base / changelog.TABLE_META).is_file():
            raise ChangefeedError(f"snapshot of {name} at {ts}: no base at {base}; run the window's pull first")
        res = spark_engine.run_job(SnapshotJobArgs(
            phase="load",
            sink_uri=cfg.sink_uri,
            changefeed_id=cfg.changefeed_id,
            loads=(BaseLoad(t, str(base), ts, f"snapshot/{sid}", history=cfg.keeps_history(t)),),
            change_data_feed=cfg.change_data_feed,
        ))["tables"][name]
        results[name] = res
        with locked_state(cfg.changefeed_id) as st:
            if st.snapshot is not None and st.snapshot.get("id") == sid:
                st.snapshot.setdefault("loaded", {})[name] = {"rows": res.get("rows"),
                                                              "delta_version": res.get("delta_version")}
        failpoint.hit("snapshot.table_loaded")
    if sn.all_tables:
        changelog.mark_snapshot_complete(cfg.sink_uri, cfg.changefeed_id, ts, names)
    with locked_state(cfg.changefeed_id) as st:
        if st.snapshot is not None and st.snapshot.get("id") == sid:
            st.snapshot.update(done=True, finished_at=time.time())
        if sn.initial or sn.all_tables:
            st.initial_snapshot_done = True
    log.info("loaded snapshot", changefeed_id=cfg.changefeed_id, ts=ts, snapshot_id=sid,
             tables={n: r.get("rows") for n, r in results.items()})
    return {"id": sid, "ts": ts, "tables": results}
