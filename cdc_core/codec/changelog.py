"""The bronze changelog: every pulled row event, undecoded, as Parquet, one directory per window.

Layout: ``<sink>/_cdcflow/changelog/changefeed=<id>/window=<end_ts:020d>/part-*.parquet``. A
window directory holds every row event with ``checkpoint_ts < commit_ts <= end_ts`` of the
changefeed's tables and of the DDL history table; it is written completely (to a temporary name,
then renamed) before anything is applied, so a directory that exists is whole. It is the replay
source for rebuilds and backfills and the audit trail. Next to the parts, ``_window.json``
(``{"after_ts", "end_ts", "cuts"}``) records the window's lower bound (the checkpoint it was pulled from);
windows written before it existed lack it, and replay then assumes the previous window's end. A window
cut into sub-windows (where: the window planner's ``cdc_core.changefeed.sub_windows``) records the
cut points as ``cuts``, and each of its parts then holds the events of one sub-window.

Snapshot bases (``snapshot`` mode and ``initial-snapshot``): the rows of some tables read from the
upstream at a checkpoint ``C``, the start of a rebuild's replay::

    <root>/snapshot=<C:020d>/_schema.json                    the DDL jobs that define the schema at C
    <root>/snapshot=<C:020d>/<db>.<table>/part-*.parquet     the table's rows at C, silver schema
    <root>/snapshot=<C:020d>/<db>.<table>/_table.json        {"table_id", "ts", "rows", "table", ...}
    <root>/snapshot=<C:020d>/_complete.json                  present when every replicated table has a base

Each table directory is written whole under a temporary name and renamed, like a window. A
snapshot directory may hold ``_schema.json`` alone: the schema at the changefeed's start-ts is kept
that way (written at create time) so that a table without any base can be replayed from start-ts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_core import durable
from cdc_core.codec.sink_uri import local_path, snapshot_component

SCHEMA = pa.schema(
    [
        pa.field("region_id", pa.int64(), nullable=False),
        pa.field("table_id", pa.int64(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("op", pa.string(), nullable=False),  # "put" | "delete"
        pa.field("start_ts", pa.int64(), nullable=False),
        pa.field("commit_ts", pa.int64(), nullable=False),
        pa.field("value", pa.binary(), nullable=True),
        pa.field("old_value", pa.binary(), nullable=True),
    ]
)

OP_PUT = "put"
OP_DELETE = "delete"
_WINDOW_RE = re.compile(r"^window=(\d{20})$")
_SNAPSHOT_RE = re.compile(r"^snapshot=(\d{20})$")
WINDOW_META = "_window.json"
SCHEMA_FILE = "_schema.json"
TABLE_META = "_table.json"
COMPLETE_FILE = "_complete.json"


def changelog_root(sink_uri: str, changefeed_id: str) -> Path:
    return local_path(sink_uri) / "_cdcflow" / "changelog" / f"changefeed={changefeed_id}"


def window_dir(sink_uri: str, changefeed_id: str, end_ts: int) -> Path:
    return changelog_root(sink_uri, changefeed_id) / f"window={end_ts:020d}"


def write_window(
    sink_uri: str, changefeed_id: str, end_ts: int, table: pa.Table, *, after_ts: int | None = None
) -> Path:
    """Write one window atomically; an existing window directory is replaced whole.

    ``after_ts``: the window's exclusive lower bound (the checkpoint it was pulled from), recorded in
    ``_window.json`` for replays.
    """
    with WindowWriter(sink_uri, changefeed_id, end_ts, after_ts=after_ts, part_rows=max(1, table.num_rows)) as w:
        w.add(table)
        return w.commit()


PART_ROWS = 262_144  # events per Parquet part of a window written as it arrives


class WindowWriter:
    """A window written as its events arrive: parts of ``PART_ROWS`` events each (so a pull holds one part's
    events, not the window), under a temporary name renamed to the window's on :meth:`commit`; a writer closed
    without it leaves nothing behind. ``after_ts`` as :func:`write_window`'s."""

    def __init__(self, sink_uri: str, changefeed_id: str, end_ts: int, *, after_ts: int | None = None,
                 part_rows: int = PART_ROWS) -> None:
        self.final = window_dir(sink_uri, changefeed_id, end_ts)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.final.parent / f".tmp-{self.final.name}-{uuid.uuid4().hex}"
        self.tmp.mkdir()
        self.end_ts, self.after_ts, self.part_rows = end_ts, after_ts, part_rows
        self.rows = 0
        self.parts = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Queue events (no I/O: an event loop's callbacks call this; :meth:`take_part` and :meth:`write_part`
        write them)."""
        for b in (batch.to_batches() if isinstance(batch, pa.Table) else [batch]):
            if b.num_rows:
                self._pending.append(b)
                self._pending_rows += b.num_rows
                self.rows += b.num_rows

    @property
    def full(self) -> bool:
        return self._pending_rows >= self.part_rows

    def take_part(self) -> tuple[Path, list[pa.RecordBatch]]:
        """The queued events and the part file they go to (the queue starts over)."""
        taken, self._pending, self._pending_rows = self._pending, [], 0
        path = self.tmp / f"part-{self.parts:05d}.parquet"
        self.parts += 1
        return path, taken

    @staticmethod
    def write_part(path: Path, batches: list[pa.RecordBatch]) -> None:
        batches = [b if b.schema.equals(SCHEMA) else b.cast(SCHEMA) for b in batches]
        pq.write_table(pa.Table.from_batches(batches, schema=SCHEMA) if batches else SCHEMA.empty_table(), path,
                       compression="zstd")

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """:meth:`add`, then write a part once one is full."""
        self.add(batch)
        if self.full:
            self.write_part(*self.take_part())

    def finish_parts(self) -> list[Path]:
        """Write what is still queued as a last part (an empty window still gets its empty part: readers take its
        schema); the window's part files, in order."""
        if self._pending or self.parts == 0:
            self.write_part(*self.take_part())
        return sorted(self.tmp.glob("part-*.parquet"))

    def split_parts(self, cuts: Sequence[int], part_rows: int = PART_ROWS // 4) -> None:
        """Rewrite the finished parts so that each holds the events of one sub-window, the ranges of commit ts that
        the ascending ``cuts`` end (a sub-window ends at its cut, inclusive; the last at the window's end): a reader
        of one sub-window skips the others' parts by their Parquet statistics. Memory: a part being read, and up to
        ``part_rows`` events per sub-window waiting to be written."""
        import numpy as np

        bounds = np.asarray(cuts, dtype=np.int64)
        pending: dict[int, list[pa.RecordBatch]] = {}
        pending_rows: dict[int, int] = {}
        written: dict[int, int] = {}

        def flush(i: int) -> None:
            pending_rows.pop(i, None)
            batches = pending.pop(i, [])
            if batches:
                n = written.get(i, 0)
                pq.write_table(pa.Table.from_batches(batches, schema=SCHEMA), self.tmp / f"cut-{i:05d}-{n:05d}.parquet",
                               compression="zstd")
                written[i] = n + 1

        for p in self.finish_parts():
            for batch in pq.ParquetFile(p).iter_batches(batch_size=65_536):
                which = np.searchsorted(bounds, batch.column("commit_ts").to_numpy(), side="left")
                for i in np.unique(which).tolist():
                    part = batch.filter(pa.array(which == i)).cast(SCHEMA)
                    pending.setdefault(i, []).append(part)
                    pending_rows[i] = pending_rows.get(i, 0) + part.num_rows
                    if pending_rows[i] >= part_rows:
                        flush(i)
            p.unlink()
        for i in list(pending):
            flush(i)
        for i, f in enumerate(sorted(self.tmp.glob("cut-*.parquet"))):
            f.rename(self.tmp / f"part-{i:05d}.parquet")

    def commit(self, cuts: Sequence[int] = ()) -> Path:
        """Rename the window into place. ``cuts``: the ends of the sub-windows its parts were split into
        (:meth:`split_parts`), recorded in ``_window.json`` with the window's bounds."""
        self.finish_parts()
        if self.after_ts is not None:
            (self.tmp / WINDOW_META).write_text(json.dumps({"after_ts": self.after_ts, "end_ts": self.end_ts,
                                                            "cuts": list(cuts)}))
        # Synced, then swapped in: a window pulled again replaces the old copy with no moment without one.
        durable.replace_dir(self.tmp, self.final)
        return self.final

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> WindowWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if self.tmp.exists():
            self.abort()


def read_window(sink_uri: str, changefeed_id: str, end_ts: int) -> pa.Table:
    d = window_dir(sink_uri, changefeed_id, end_ts)
    if not d.is_dir():
        raise FileNotFoundError(f"no bronze window at {d}")
    files = sorted(d.glob("*.parquet"))
    if not files:
        return SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(f, schema=SCHEMA) for f in files])


def _window_events(sink_uri: str, changefeed_id: str, end_ts: int, after_ts: int, upto_ts: int) -> pa.Table:
    import pyarrow.dataset as pads

    files = sorted(str(f) for f in window_dir(sink_uri, changefeed_id, end_ts).glob("*.parquet"))
    if not files:
        return pa.table({"table_id": pa.array([], pa.int64())})
    ts = pads.field("commit_ts")
    return pads.dataset(files, schema=SCHEMA, format="parquet").to_table(
        columns=["table_id"], filter=(ts > after_ts) & (ts <= upto_ts))


def window_table_ids(sink_uri: str, changefeed_id: str, end_ts: int, after_ts: int, upto_ts: int) -> set[int]:
    """The physical table ids with row events in ``(after_ts, upto_ts]`` of a window (two columns read)."""
    import pyarrow.compute as pc

    data = _window_events(sink_uri, changefeed_id, end_ts, after_ts, upto_ts)
    return {int(v) for v in pc.unique(data.column("table_id")).to_pylist()}


def window_table_ids_at(sink_uri: str, changefeed_id: str, end_ts: int, commit_ts: Collection[int]
                        ) -> dict[int, set[int]]:
    """The physical table ids with events at each of ``commit_ts`` in a window, by ts (one read of two columns)."""
    import pyarrow.dataset as pads

    files = sorted(str(f) for f in window_dir(sink_uri, changefeed_id, end_ts).glob("*.parquet"))
    if not files or not commit_ts:
        return {}
    data = pads.dataset(files, schema=SCHEMA, format="parquet").to_table(
        columns=["commit_ts", "table_id"], filter=pads.field("commit_ts").isin(sorted(commit_ts)))
    pairs = data.group_by(["commit_ts", "table_id"]).aggregate([])
    out: dict[int, set[int]] = {}
    for ts, tid in zip(pairs.column("commit_ts").to_pylist(), pairs.column("table_id").to_pylist(), strict=True):
        out.setdefault(int(ts), set()).add(int(tid))
    return out


def window_first_commit_ts(sink_uri: str, changefeed_id: str, end_ts: int, after_ts: int, upto_ts: int
                           ) -> dict[int, int]:
    """The smallest commit ts of each physical table id's row events in ``(after_ts, upto_ts]`` of a window (two
    columns read); a window that is gone (pruned) gives ``{}``."""
    import pyarrow.dataset as pads

    d = window_dir(sink_uri, changefeed_id, end_ts)
    files = sorted(str(f) for f in d.glob("*.parquet")) if d.is_dir() else []
    if not files:
        return {}
    ts = pads.field("commit_ts")
    data = pads.dataset(files, schema=SCHEMA, format="parquet").to_table(
        columns=["table_id", "commit_ts"], filter=(ts > after_ts) & (ts <= upto_ts))
    first = data.group_by("table_id").aggregate([("commit_ts", "min")])
    return dict(zip(first.column("table_id").to_pylist(), first.column("commit_ts_min").to_pylist(), strict=True))


def window_event_count(sink_uri: str, changefeed_id: str, end_ts: int, after_ts: int, upto_ts: int) -> int:
    """How many events of a window lie in ``(after_ts, upto_ts]`` (row events and DDL job rows)."""
    return _window_events(sink_uri, changefeed_id, end_ts, after_ts, upto_ts).num_rows


def list_windows(sink_uri: str, changefeed_id: str) -> list[int]:
    """End ts of every complete window, ascending."""
    root = changelog_root(sink_uri, changefeed_id)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _WINDOW_RE.match(p.name)
        if m and p.is_dir():
            out.append(int(m.group(1)))
    return sorted(out)


def window_meta(sink_uri: str, changefeed_id: str, end_ts: int) -> dict[str, Any] | None:
    """A window's ``_window.json``: ``{"after_ts", "end_ts", "cuts"}`` (None: not recorded, a window written before
    it was)."""
    try:
        data: dict[str, Any] = json.loads((window_dir(sink_uri, changefeed_id, end_ts) / WINDOW_META).read_text())
    except FileNotFoundError:
        return None
    return data


def window_after_ts(sink_uri: str, changefeed_id: str, end_ts: int) -> int | None:
    """The recorded lower bound of a window (None: not recorded, a window written before it was)."""
    data = window_meta(sink_uri, changefeed_id, end_ts)
    return None if data is None else int(data["after_ts"])


def remove_window(sink_uri: str, changefeed_id: str, end_ts: int) -> Path | None:
    """Delete a window directory (renamed away first, so a reader never sees half of it)."""
    d = window_dir(sink_uri, changefeed_id, end_ts)
    return _remove_dir(d)


def _remove_dir(d: Path) -> Path | None:
    if not d.is_dir():
        return None
    gone = d.parent / f".del-{d.name}-{uuid.uuid4().hex}"
    os.replace(d, gone)
    durable.fsync_dir(d.parent)  # the removal is durable before the copy's files go
    shutil.rmtree(gone)
    return d


# --- snapshot bases -------------------------------------------------------------------------------


def snapshot_dir(sink_uri: str, changefeed_id: str, ts: int) -> Path:
    return changelog_root(sink_uri, changefeed_id) / f"snapshot={ts:020d}"


def snapshot_table_dir(sink_uri: str, changefeed_id: str, ts: int, db: str, table: str) -> Path:
    """``snapshot=<ts>/<db>.<table>``: one table's rows at ``ts`` (the names encoded: ``snapshot_component``)."""
    return snapshot_dir(sink_uri, changefeed_id, ts) / snapshot_component(db, table)


def list_snapshots(sink_uri: str, changefeed_id: str) -> list[int]:
    """The ts of every snapshot directory (with or without table bases), ascending."""
    root = changelog_root(sink_uri, changefeed_id)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _SNAPSHOT_RE.match(p.name)
        if m and p.is_dir():
            out.append(int(m.group(1)))
    return sorted(out)


def snapshot_tables(sink_uri: str, changefeed_id: str, ts: int) -> dict[str, dict[str, Any]]:
    """The complete table bases of the snapshot at ``ts``: ``{"db.table": its _table.json}`` (by the qualified name
    its ``_table.json`` holds: a directory's name is an encoding of it, not read back)."""
    d = snapshot_dir(sink_uri, changefeed_id, ts)
    if not d.is_dir():
        return {}
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(d.iterdir()):
        meta = p / TABLE_META
        if p.is_dir() and not p.name.startswith((".", "_")) and meta.is_file():
            data = json.loads(meta.read_text())
            out[str(data.get("qualified_name") or p.name)] = data
    return out


def snapshot_part_files(table_dir: Path) -> list[Path]:
    """The Parquet parts of one table base (Spark's ``part-*`` files; markers and CRCs left out)."""
    return sorted(p for p in table_dir.glob("*.parquet") if not p.name.startswith((".", "_")))


def publish_snapshot_table(tmp: Path, final: Path, meta: dict[str, Any]) -> Path:
    """Complete a table base written into ``tmp``: add ``_table.json`` and rename it to ``final`` (replacing
    an older base of the same table and ts)."""
    (tmp / TABLE_META).write_text(json.dumps(meta, sort_keys=True))
    durable.replace_dir(tmp, final)
    return final


def write_schema_snapshot(sink_uri: str, changefeed_id: str, ts: int, jobs: list[dict[str, Any]]) -> Path:
    """Keep the DDL jobs (``DDLJob.to_row()`` dicts) that define the schema at ``ts``, atomically."""
    d = snapshot_dir(sink_uri, changefeed_id, ts)
    d.mkdir(parents=True, exist_ok=True)
    p = d / SCHEMA_FILE
    durable.write_file(p, json.dumps({"ts": ts, "jobs": jobs}, default=str))
    return p


def read_schema_snapshot(sink_uri: str, changefeed_id: str, ts: int) -> list[dict[str, Any]] | None:
    """The jobs written by :func:`write_schema_snapshot` (None: no schema kept at ``ts``)."""
    try:
        data = json.loads((snapshot_dir(sink_uri, changefeed_id, ts) / SCHEMA_FILE).read_text())
    except FileNotFoundError:
        return None
    jobs: list[dict[str, Any]] = data["jobs"]
    return jobs


def mark_snapshot_complete(sink_uri: str, changefeed_id: str, ts: int, tables: list[str]) -> Path:
    """Record that the snapshot at ``ts`` holds a base of every table replicated at ``ts`` (``_complete.json``):
    a rebuild of any table then never needs a window ending at or before ``ts``."""
    d = snapshot_dir(sink_uri, changefeed_id, ts)
    d.mkdir(parents=True, exist_ok=True)
    p = d / COMPLETE_FILE
    durable.write_file(p, json.dumps({"ts": ts, "tables": sorted(tables)}))
    return p


def complete_snapshots(sink_uri: str, changefeed_id: str) -> list[int]:
    """The ts of every snapshot with a base of every table (see :func:`mark_snapshot_complete`), ascending."""
    return [ts for ts in list_snapshots(sink_uri, changefeed_id)
            if (snapshot_dir(sink_uri, changefeed_id, ts) / COMPLETE_FILE).is_file()]


def remove_snapshot(sink_uri: str, changefeed_id: str, ts: int) -> Path | None:
    """Delete a whole snapshot directory (bases and schema)."""
    return _remove_dir(snapshot_dir(sink_uri, changefeed_id, ts))
