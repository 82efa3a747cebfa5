"""The capture's durable changelog: contiguous parts of row events, ``(from_ts, to_ts]`` each.

Layout: ``<sink>/_cdcflow/capture/changefeed=<id>/part-<from_ts:020d>-<to_ts:020d>.parquet``, bronze schema
(:data:`cdc_core.codec.changelog.SCHEMA`), every row event of the captured spans (the DDL job table's included)
with ``from_ts < commit_ts <= to_ts``. A part is written under a temporary name, fsynced and renamed, the
directory fsynced (:mod:`cdc_core.durable`): a part that is listed is whole, and the capture's resolved ts *is* the
last part's ``to_ts``. Parts are contiguous: each starts where the previous one ends. As TiCDC's log service
persists the puller's events before it advances the resolved ts it publishes (``logservice/eventstore``).

An interval with no event still moves the resolved ts: its empty part replaces the previous part when that one is
empty too (the wider part is renamed in, then the narrower removed), so an idle capture leaves one empty part, not
one per flush. Between the two steps both are listed; :func:`list_parts` keeps the wider.

Complexity: :func:`list_parts` is one directory listing, O(parts); :func:`read_events` reads only the parts that
overlap the interval, a record batch at a time (never a whole backlog in memory).
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_core import durable
from cdc_core.codec import changelog
from cdc_core.codec.sink_uri import local_path
from cdc_core.errors import ChangefeedError

_PART_RE = re.compile(r"^part-(\d{20})-(\d{20})\.parquet$")
READ_BATCH_ROWS = 65_536


@dataclass(frozen=True, order=True)
class Part:
    """One durable part: the events with ``from_ts < commit_ts <= to_ts``."""

    from_ts: int
    to_ts: int
    path: Path

    @property
    def rows(self) -> int:
        return int(pq.ParquetFile(self.path).metadata.num_rows)


def capture_root(sink_uri: str, changefeed_id: str) -> Path:
    return local_path(sink_uri) / "_cdcflow" / "capture" / f"changefeed={changefeed_id}"


def part_name(from_ts: int, to_ts: int) -> str:
    return f"part-{from_ts:020d}-{to_ts:020d}.parquet"


def list_parts(sink_uri: str, changefeed_id: str) -> list[Part]:
    """Every durable part, in ts order; of two parts starting at one ts (an empty part being widened) the wider."""
    root = capture_root(sink_uri, changefeed_id)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    by_from: dict[int, Part] = {}
    for name in names:
        m = _PART_RE.match(name)
        if m is None:
            continue
        p = Part(int(m.group(1)), int(m.group(2)), root / name)
        if p.from_ts not in by_from or by_from[p.from_ts].to_ts < p.to_ts:
            by_from[p.from_ts] = p
    return sorted(by_from.values())


def contiguous_from(parts: Sequence[Part], ts: int) -> list[Part]:
    """The parts that cover ``(ts, ...]`` without a gap: from the part holding ``ts + 1`` (or starting at ``ts``) on,
    up to the first gap; [] when no part starts at or below ``ts``."""
    out: list[Part] = []
    for p in parts:
        if out:
            if p.from_ts != out[-1].to_ts:
                break
            out.append(p)
        elif p.from_ts <= ts < p.to_ts or (p.from_ts == ts and p.to_ts == ts):
            out.append(p)
    return out


def covered_upto(sink_uri: str, changefeed_id: str, after_ts: int) -> int | None:
    """How far the parts cover ``(after_ts, ...]`` without a gap (the capture's resolved ts as a window from
    ``after_ts`` sees it), or None when they do not start at or below ``after_ts``."""
    parts = list_parts(sink_uri, changefeed_id)
    if parts and parts[-1].to_ts == after_ts:
        return after_ts
    run = contiguous_from(parts, after_ts)
    return run[-1].to_ts if run else None


def resolved_ts(sink_uri: str, changefeed_id: str) -> int | None:
    """The capture's resolved ts: the last durable part's ``to_ts`` (None before the first part)."""
    parts = list_parts(sink_uri, changefeed_id)
    return parts[-1].to_ts if parts else None


def write_part(sink_uri: str, changefeed_id: str, from_ts: int, to_ts: int,
               batches: Sequence[pa.RecordBatch],
               fence: Callable[[], contextlib.AbstractContextManager[object]] | None = None) -> Part:
    """Write the part ``(from_ts, to_ts]`` durably. It must start at the last part's ``to_ts`` (or be the first);
    every event must lie in the interval. Raises ``ChangefeedError`` otherwise.

    ``fence``: entered around the contiguity check and the rename that publishes the part, and only around them
    (the Parquet write and its fsync come before, outside): the capture's lease check
    (:func:`cdc_core.capture.lease.fenced`), held for a directory listing and a rename, so that a writer stalled in
    a slow write never holds the lease's lock, and one that lost the lease learns that before anything else."""
    if to_ts < from_ts:
        raise ChangefeedError(f"capture part ({from_ts}, {to_ts}] ends before it starts")
    parts = list_parts(sink_uri, changefeed_id)
    last = parts[-1] if parts else None
    table = pa.Table.from_batches([b if b.schema.equals(changelog.SCHEMA) else b.cast(changelog.SCHEMA)
                                   for b in batches], schema=changelog.SCHEMA)
    if table.num_rows:
        lo, hi = pc.min_max(table["commit_ts"]).values()
        if lo.as_py() <= from_ts or hi.as_py() > to_ts:
            raise ChangefeedError(f"capture part ({from_ts}, {to_ts}] given events with commit ts "
                                  f"{lo.as_py()}..{hi.as_py()}")
        table = table.sort_by([("commit_ts", "ascending")])  # readers skip row groups by their statistics
    # An empty part after an empty part: one wider part instead of two (module docstring).
    widen = last if (last is not None and table.num_rows == 0 and last.rows == 0) else None
    start = widen.from_ts if widen is not None else from_ts
    root = capture_root(sink_uri, changefeed_id)
    root.mkdir(parents=True, exist_ok=True)
    final = root / part_name(start, to_ts)
    tmp = root / f".tmp-{final.name}-{uuid.uuid4().hex}"
    try:
        pq.write_table(table, tmp, compression="zstd")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        with fence() if fence is not None else contextlib.nullcontext():
            # Checked after the fence (a writer that lost the lease hears that first), with the rename: the part
            # follows the last part, the one its name was chosen after.
            now = list_parts(sink_uri, changefeed_id)
            end = now[-1] if now else None
            if end != last or (end is not None and end.to_ts != from_ts):
                raise ChangefeedError(f"capture part ({from_ts}, {to_ts}] does not start at the last part's end "
                                      f"{end.to_ts if end else None}: parts must be contiguous")
            os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    durable.fsync_dir(root)
    if widen is not None and widen.path != final:
        widen.path.unlink(missing_ok=True)
        durable.fsync_dir(root)
    return Part(start, to_ts, final)


DEDUPE_COLUMNS = ["table_id", "key", "op", "start_ts", "commit_ts", "value", "old_value"]


def dedupe(batches: Sequence[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The events of ``batches`` with exact duplicates removed, the first of each kept, in order.

    TiKV re-sends a region's changes above its resolved ts when the region is re-requested (TiCDC's kv client
    re-registers a region from its resolved ts after a split, a leader move or a store failure, and its sorter
    dedups), so a capture's buffer can hold one change twice, from two regions (``region_id`` is not compared: a
    split re-delivers the change from the new region). Everything else of the event is: one change of a key at
    a commit ts is one event. O(events) with a hash group-by."""
    table = pa.Table.from_batches([b if b.schema.equals(changelog.SCHEMA) else b.cast(changelog.SCHEMA)
                                   for b in batches], schema=changelog.SCHEMA)
    if table.num_rows < 2:
        return table.to_batches()
    indexed = table.append_column("_i", pa.array(range(table.num_rows), pa.int64()))
    first = indexed.group_by(DEDUPE_COLUMNS, use_threads=False).aggregate([("_i", "min")])["_i_min"]
    if len(first) == table.num_rows:
        return table.to_batches()
    return table.take(pc.take(first, pc.sort_indices(first))).to_batches()


def read_events(sink_uri: str, changefeed_id: str, after_ts: int, upto_ts: int,
                table_ids: Collection[int] | None = None) -> Iterator[pa.RecordBatch]:
    """The events with ``after_ts < commit_ts <= upto_ts`` (of ``table_ids``; None: all), as record batches, in
    part order. Raises ``ChangefeedError`` when the parts do not cover the interval without a gap."""
    if upto_ts <= after_ts:
        return
    parts = contiguous_from(list_parts(sink_uri, changefeed_id), after_ts)
    if not parts or parts[-1].to_ts < upto_ts:
        have = f"up to {parts[-1].to_ts}" if parts else "none from there"
        raise ChangefeedError(f"the capture's parts do not cover ({after_ts}, {upto_ts}] ({have})")
    ids = None if table_ids is None else pa.array(sorted(table_ids), pa.int64())
    for p in parts:
        if p.from_ts >= upto_ts:
            break
        for batch in pq.ParquetFile(p.path).iter_batches(batch_size=READ_BATCH_ROWS):
            ts = batch.column("commit_ts")
            mask = pc.and_(pc.greater(ts, after_ts), pc.less_equal(ts, upto_ts))
            if ids is not None:
                mask = pc.and_(mask, pc.is_in(batch.column("table_id"), value_set=ids))
            out = batch.filter(mask)
            if out.num_rows:
                yield out.cast(changelog.SCHEMA)


def remove_temporaries(sink_uri: str, changefeed_id: str) -> int:
    """Remove the temporary files of parts a writer never renamed in (it was killed between its write and its
    rename, or fenced off); how many. Called by a capture that holds the lease: no other writer publishes, and a
    fenced-off one that still writes a temporary never renames it."""
    root = capture_root(sink_uri, changefeed_id)
    try:
        names = [n for n in os.listdir(root) if n.startswith(".tmp-")]
    except FileNotFoundError:
        return 0
    for name in names:
        (root / name).unlink(missing_ok=True)
    return len(names)


def remove_upto(sink_uri: str, changefeed_id: str, ts: int) -> list[Part]:
    """Remove the parts wholly at or below ``ts`` (``to_ts <= ts``), except the last part (it carries the
    resolved ts); the parts removed."""
    parts = list_parts(sink_uri, changefeed_id)
    gone = [p for p in parts[:-1] if p.to_ts <= ts]
    for p in gone:
        p.path.unlink(missing_ok=True)
    if gone:
        durable.fsync_dir(gone[0].path.parent)
    return gone
