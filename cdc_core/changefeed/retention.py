"""Retention of what rebuilds leave behind and of the bronze changelog (called by the maintenance DAG).

* :func:`list_trash` / :func:`remove_trash`: the silver tables a rebuild moved aside, kept under
  ``<sink>/_cdcflow/trash/rebuild-<C>-<UTC time>/<db>/<table>`` so that a rebuild can be undone by moving a
  directory back; removed once older than a number of days.
* :func:`prune_changelog`: bronze windows no rebuild can need any more. A rebuild replays a table from its
  latest snapshot base (or from start-ts without one), so a window is needed while it ends after the latest
  snapshot that holds a base of *every* replicated table (``_complete.json``); with no such snapshot every
  window is needed and nothing is pruned. Snapshot directories older than that snapshot go too.
* :func:`fold_changelog`: what keeps the changelog bounded by default. Once the newest complete snapshot is older
  than the retention, the windows up to the checkpoint are folded into a new one: a base of every replicated
  table written from its silver table as of the checkpoint (Delta time travel; the lake as every window's checks
  left it there), so that the windows before it become prunable. A full copy of the lake once per retention
  period, streamed table by table.

All of them need a local (``file://`` or bare path) sink, like the changelog itself.
"""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdc_core.codec import changelog
from cdc_core.codec.sink_uri import qualified_name_of
from cdc_core.log import get_logger

from .rebuild import TRASH_PREFIX, trash_root

log = get_logger("cdcflow.retention")


@dataclass(frozen=True)
class TrashEntry:
    """One rebuild's moved-aside tables."""

    name: str  # rebuild-<C>-<time>
    path: str
    checkpoint_ts: int | None  # the rebuild's checkpoint C
    created_at: float  # epoch seconds (from the name; the directory's mtime if the name has none)
    tables: list[str]  # "db.table" moved there

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _parse_trash_name(p: Path) -> tuple[int | None, float]:
    rest = p.name[len(TRASH_PREFIX):]
    ts_text, _, stamp = rest.partition("-")
    ts = int(ts_text) if ts_text.isdigit() else None
    try:
        created = datetime.strptime(stamp, "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        created = p.stat().st_mtime
    return ts, created


def list_trash(sink_uri: str) -> list[TrashEntry]:
    """Every rebuild's trash directory under ``<sink>/_cdcflow/trash``, oldest first."""
    root = trash_root(sink_uri)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        if not p.is_dir() or not p.name.startswith(TRASH_PREFIX):
            continue
        ts, created = _parse_trash_name(p)
        tables = sorted(qualified_name_of(db.name, t.name) for db in p.iterdir() if db.is_dir()
                        for t in db.iterdir() if t.is_dir())
        out.append(TrashEntry(p.name, str(p), ts, created, tables))
    return sorted(out, key=lambda e: (e.created_at, e.name))


def remove_trash(sink_uri: str, older_than_days: float, *, now: float | None = None,
                 dry_run: bool = False) -> list[TrashEntry]:
    """Delete the trash directories created more than ``older_than_days`` days ago; returns them."""
    if older_than_days < 0:
        raise ValueError(f"older_than_days must be >= 0, got {older_than_days}")
    cutoff = (now if now is not None else time.time()) - older_than_days * 86400
    removed = []
    for e in list_trash(sink_uri):
        if e.created_at >= cutoff:
            continue
        if not dry_run:
            p = Path(e.path)
            gone = p.parent / f".del-{p.name}-{uuid.uuid4().hex}"
            p.replace(gone)  # renamed first: a half-deleted directory never looks like trash to restore
            shutil.rmtree(gone)
        removed.append(e)
        log.info("removed rebuild trash" if not dry_run else "would remove rebuild trash", path=e.path,
                 tables=e.tables, created_at=e.created_at)
    return removed


def prune_changelog(sink_uri: str, changefeed_id: str, keep_after_ts: int, *,
                    dry_run: bool = False) -> dict[str, Any]:
    """Delete bronze windows ending at or before ``keep_after_ts`` that no rebuild can need.

    Returns ``{"windows": [end ts removed], "snapshots": [snapshot ts removed], "paths": [...],
    "protected_from_ts": F or None, "reason": str}``: ``F`` is the latest snapshot with a base of every
    table; windows ending after ``F`` (and the snapshot at ``F``) are always kept, and without such a
    snapshot nothing is removed. Snapshot directories older than ``F`` (and not after ``keep_after_ts``)
    are removed with the windows.
    """
    complete = changelog.complete_snapshots(sink_uri, changefeed_id)
    if not complete:
        reason = ("no snapshot holds a base of every table: a rebuild replays from start-ts, so every window is "
                  "needed")
        log.info("changelog not pruned", changefeed_id=changefeed_id, reason=reason)
        return {"windows": [], "snapshots": [], "paths": [], "protected_from_ts": None, "reason": reason}
    full = complete[-1]
    limit = min(keep_after_ts, full)
    windows = [e for e in changelog.list_windows(sink_uri, changefeed_id) if e <= limit]
    snapshots = [s for s in changelog.list_snapshots(sink_uri, changefeed_id) if s < full and s <= keep_after_ts]
    paths: list[str] = []
    for e in windows:
        paths.append(str(changelog.window_dir(sink_uri, changefeed_id, e)))
        if not dry_run:
            changelog.remove_window(sink_uri, changefeed_id, e)
    for s in snapshots:
        paths.append(str(changelog.snapshot_dir(sink_uri, changefeed_id, s)))
        if not dry_run:
            changelog.remove_snapshot(sink_uri, changefeed_id, s)
    reason = (f"windows ending at or before {limit} (keep_after_ts {keep_after_ts}, latest snapshot of every "
              f"table at {full})")
    log.info("pruned the changelog" if not dry_run else "would prune the changelog", changefeed_id=changefeed_id,
             windows=len(windows), snapshots=len(snapshots), reason=reason)
    return {"windows": windows, "snapshots": snapshots, "paths": paths, "protected_from_ts": full, "reason": reason}


def fold_changelog(changefeed_id: str, keep_after_ts: int, *, dry_run: bool = False) -> dict[str, Any]:
    """Write a complete snapshot at the newest window end at or below the checkpoint when the newest complete one
    is at or before ``keep_after_ts`` (``checkpoint - retention``), from the silver tables; a rebuild then replays
    from it and :func:`prune_changelog` can remove the windows before it. Returns ``{"folded": bool, "ts",
    "tables": {name: rows}, "reason"}``. Hold the changefeed's window lease while it runs."""
    from cdc_core.changefeed import spark_engine
    from cdc_core.changefeed.config import load_config
    from cdc_core.changefeed.ddl_puller import SchemaLog
    from cdc_core.changefeed.job_args.snapshot_load import SnapshotJobArgs
    from cdc_core.changefeed.snapshot import keep_schema, resolve_tables
    from cdc_core.changefeed.state import load_state

    cfg = load_config(changefeed_id)
    checkpoint = load_state(changefeed_id).checkpoint_ts
    complete = changelog.complete_snapshots(cfg.sink_uri, changefeed_id)
    newest = complete[-1] if complete else None
    ends = [e for e in changelog.list_windows(cfg.sink_uri, changefeed_id) if e <= checkpoint]
    if newest is not None and newest > keep_after_ts:
        return {"folded": False, "ts": None, "tables": {},
                "reason": f"the newest complete snapshot ({newest}) is within the retention (after {keep_after_ts})"}
    if not ends or (newest is not None and ends[-1] <= newest):
        return {"folded": False, "ts": None, "tables": {}, "reason": "no published window after the newest snapshot"}
    ts = ends[-1]
    slog = SchemaLog.load(changefeed_id)
    tables = resolve_tables(cfg, slog.storage(), ts, None)
    names = sorted(t.qualified_name for t in tables)
    if dry_run:
        return {"folded": False, "ts": ts, "tables": {n: None for n in names}, "reason": "dry run"}
    keep_schema(cfg, slog, ts)
    result = spark_engine.run_job(SnapshotJobArgs(phase="fold", sink_uri=cfg.sink_uri, changefeed_id=changefeed_id,
                                                  ts=ts, tables=tuple(tables)))
    changelog.mark_snapshot_complete(cfg.sink_uri, changefeed_id, ts, names)
    rows = {n: r.get("rows") for n, r in result["tables"].items()}
    log.info("folded the changelog into a snapshot", changefeed_id=changefeed_id, ts=ts, tables=rows)
    return {"folded": True, "ts": ts, "tables": rows, "reason": f"newest complete snapshot was {newest}"}
