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
                           starts: dict[str, int]) -> None:
    """Re-record the checkpoints below ``ts`` a rebuild replayed: the rebuilt table is a new Delta table (the old one
    went to the trash), written commit by commit with each replayed step's ts, so a recorded checkpoint ``c`` at or
    after the table's replay start (``starts``: its snapshot base's ts, or the changefeed's start-ts) is its
    version as of ``c`` now. A row is written under the name the table had at ``c`` (the rows of ``c`` with the old
    table's uuid); checkpoints below the start keep naming the old table (its copy is in the trash)."""
    from deltalake import DeltaTable

    data = versions.read(cfg.sink_uri, cfg.changefeed_id).to_pylist()
    by_ts: dict[int, list[dict[str, Any]]] = {}
    for r in data:
        by_ts.setdefault(int(r["checkpoint_ts"]), []).append(r)
    marks: dict[int, tuple[int, list[versions.TableVersion]]] = {}
    for t in tables:
        start = starts.get(t.qualified_name)
        path = table_path(cfg.sink_uri, t)
        if start is None or not DeltaTable.is_deltatable(path):
            continue
        dt = DeltaTable(path)
        uuid = str(dt.metadata().id)
        # the old table: the uuid the checkpoint's rows gave this name before the rebuild
        old = {r["table_uuid"] for r in by_ts.get(ts, []) if r["table"] == t.qualified_name} - {uuid}
        below = [c for c in sorted(by_ts) if start <= c < ts]
        for c, version in versions.versions_as_of(dt, below).items():
            if version is None:
                continue
            names = {r["table"] for r in by_ts[c] if r["table_uuid"] in old} or {t.qualified_name}
            marks.setdefault(c, (c, []))[1].extend(
                versions.TableVersion(n, versions.relative_path(t.db_name, t.name), version, uuid)
                for n in sorted(names))
    if versions.record_many(cfg.sink_uri, cfg.changefeed_id, source, marks):
        log.info("re-recorded the checkpoints a rebuild replayed", changefeed_id=cfg.changefeed_id,
                 checkpoints=len(marks), source=source)


def _record(cfg: ChangefeedConfig, ts: int, source: str, after_ts: int,
            rows: Callable[[], list[versions.TableVersion]]) -> None:
    if versions.recorded(cfg.sink_uri, cfg.changefeed_id, ts, source):
        return  # a re-run of the step: its rows are there (and the tables' versions are not read again)
    if versions.record(cfg.sink_uri, cfg.changefeed_id, ts, source, rows(), after_ts=after_ts):
        log.info("recorded the checkpoint's table versions", changefeed_id=cfg.changefeed_id, ts=ts, source=source)
