"""What a changefeed records in the versions table (:mod:`cdc_core.changefeed.versions`) when its checkpoint moves.

Called just before every checkpoint move that follows an apply (``tasks``: a sub-window's end, a DDL barrier, the
window's publish) and, at publish, for the tables a snapshot load or a rebuild replaced at the window's checkpoint.
Each call records every table the changefeed replicates at the checkpoint (those with a Delta table), at the
version :func:`~cdc_core.changefeed.versions.version_as_of` gives for the checkpoint, with its first change in the
step from the bronze changelog and the schema storage. A failure to write raises: the checkpoint does not move
without its rows (a reader must find every table at every published checkpoint), and the step's re-run records
them once (``versions.record`` skips a (changefeed, checkpoint, source) it holds).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from cdc_core.codec import changelog
from cdc_core.codec.sink_uri import table_path
from cdc_core.log import get_logger
from cdc_core.schema.model import TableInfo
from cdc_core.schema.storage import SchemaStorage

from . import versions
from .config import ChangefeedConfig
from .steps import replicated_at

log = get_logger("cdcflow.changefeed")


def first_changes(cfg: ChangefeedConfig, storage: SchemaStorage, tables: Iterable[TableInfo], after_ts: int,
                  upto_ts: int, window_end_ts: int) -> dict[str, int]:
    """Per table name, the commit ts of its first change in ``(after_ts, upto_ts]``: a row event of the bronze window
    ending at ``window_end_ts`` under one of its physical ids, or a DDL job naming it (``DDLJob.touches``). Tables
    without one are left out. Row events an event filter drops count too: a change not applied still makes a ts
    inexact to claim, never exact."""
    rows = changelog.window_first_commit_ts(cfg.sink_uri, cfg.changefeed_id, window_end_ts, after_ts, upto_ts)
    jobs = storage.jobs_between(after_ts, upto_ts)
    out: dict[str, int] = {}
    for t in tables:
        found = [rows[i] for i in {t.id, *t.physical_ids} if i in rows]
        found += [j.finished_ts for j in jobs if j.touches(t)]
        if found:
            out[t.qualified_name] = min(found)
    return out


def table_versions(cfg: ChangefeedConfig, tables: Iterable[TableInfo], ts: int,
                   first: dict[str, int] | None = None) -> list[versions.TableVersion]:
    """The rows of ``tables`` at ``ts``: each Delta table's version as of ``ts`` (tables without a Delta table, or
    without a version at ``ts``, are left out)."""
    from deltalake import DeltaTable

    out = []
    for t in tables:
        path = table_path(cfg.sink_uri, t)
        if not DeltaTable.is_deltatable(path):
            continue  # nothing written yet: the table is created by its first change
        dt = DeltaTable(path)
        version = versions.version_as_of(dt, ts)
        if version is None:
            continue
        out.append(versions.TableVersion(t.qualified_name, versions.relative_path(t.db_name, t.name), version,
                                         str(dt.metadata().id), (first or {}).get(t.qualified_name)))
    return out


def record_step(cfg: ChangefeedConfig, storage: SchemaStorage, ts: int, source: str, *, after_ts: int,
                window_end_ts: int) -> None:
    """Record checkpoint ``ts`` reached by a step ``(after_ts, ts]`` of the bronze window ending at
    ``window_end_ts`` (``source``: ``window``, ``sub-window`` or ``ddl``): every table replicated at ``ts``."""
    tables = replicated_at(cfg, storage, ts)
    _record(cfg, ts, source, after_ts,
            lambda: table_versions(cfg, tables, ts, first_changes(cfg, storage, tables, after_ts, ts, window_end_ts)))


def record_replaced(cfg: ChangefeedConfig, ts: int, source: str, tables: list[TableInfo]) -> None:
    """Record the tables a snapshot load or rebuild (``source``: ``snapshot <id>`` / ``rebuild <id>``) replaced at
    checkpoint ``ts``: their new versions, which hold the changes ``<= ts`` too and are read from now on."""
    _record(cfg, ts, source, ts, lambda: table_versions(cfg, tables, ts))


def record_rebuilt_history(cfg: ChangefeedConfig, ts: int, source: str, tables: list[TableInfo],
                           starts: dict[str, int], trash: str | None) -> None:
    """Re-record the checkpoints below ``ts`` that name a table a rebuild replaced: the rebuilt table is a new Delta
    table under the old one's path, and the old one (whose versions those rows name) is in the rebuild's ``trash``
    directory. A checkpoint ``c`` at or after the table's replay start (``starts``: its snapshot base's ts, or the
    changefeed's start-ts) is the new table's version as of ``c`` when that version holds exactly the changes
    ``<= c``: its commit is stamped ``c``, or the old table had no commit stamped in ``(stamp, c]`` (the replay
    merges the steps a DDL barrier of another table cut, so the new table may have no version at ``c``). Every other
    such checkpoint names the old table at its path in the trash (readable until the trash is removed). A row is
    written under the name the table had at ``c``."""
    from deltalake import DeltaTable

    from cdc_core.codec.sink_uri import local_path, table_path_of

    data = versions.read(cfg.sink_uri, cfg.changefeed_id).to_pylist()
    by_ts: dict[int, list[dict[str, Any]]] = {}
    for r in data:
        by_ts.setdefault(int(r["checkpoint_ts"]), []).append(r)
    marks: dict[int, tuple[int, list[versions.TableVersion]]] = {}
    sink = local_path(cfg.sink_uri)
    for t in tables:
        start = starts.get(t.qualified_name)
        path = table_path(cfg.sink_uri, t)
        if not DeltaTable.is_deltatable(path):
            continue
        dt = DeltaTable(path)
        uuid = str(dt.metadata().id)
        # the old table: the uuid the checkpoint's rows gave this name before the rebuild
        old = {r["table_uuid"] for r in by_ts.get(ts, []) if r["table"] == t.qualified_name} - {uuid}
        old_path = table_path_of(trash, t.db_name, t.name) if trash else None
        old_stamps: list[int] = []
        if old_path is not None and DeltaTable.is_deltatable(old_path):
            old_stamps = sorted(versions.commit_ts(h) for h in DeltaTable(old_path).history())
        below = [c for c in sorted(by_ts) if c < ts and any(r["table_uuid"] in old for r in by_ts[c])]
        new_history = dt.history()
        stamps = {int(h["version"]): versions.commit_ts(h) for h in new_history}
        as_of = versions.versions_as_of(dt, [c for c in below if start is not None and c >= start])
        for c in below:
            rows = [r for r in by_ts[c] if r["table_uuid"] in old]
            version = as_of.get(c)
            stamp = stamps.get(version, -1) if version is not None else -1
            served = version is not None and (stamp == c or not any(stamp < s <= c for s in old_stamps))
            for r in rows:
                if served and version is not None:
                    row = versions.TableVersion(r["table"], versions.relative_path(t.db_name, t.name), version,
                                                uuid)
                elif old_path is not None:
                    row = versions.TableVersion(r["table"], os.path.relpath(old_path, sink), int(r["version"]),
                                                r["table_uuid"])
                else:
                    continue
                marks.setdefault(c, (c, []))[1].append(row)
    if versions.record_many(cfg.sink_uri, cfg.changefeed_id, source, marks):
        log.info("re-recorded the checkpoints naming the tables a rebuild replaced", changefeed_id=cfg.changefeed_id,
                 checkpoints=len(marks), source=source)


def _record(cfg: ChangefeedConfig, ts: int, source: str, after_ts: int,
            rows: Callable[[], list[versions.TableVersion]]) -> None:
    if versions.recorded(cfg.sink_uri, cfg.changefeed_id, ts, source):
        return  # a re-run of the step: its rows are there (and the tables' versions are not read again)
    if versions.record(cfg.sink_uri, cfg.changefeed_id, ts, source, rows(), after_ts=after_ts):
        log.info("recorded the checkpoint's table versions", changefeed_id=cfg.changefeed_id, ts=ts, source=source)
