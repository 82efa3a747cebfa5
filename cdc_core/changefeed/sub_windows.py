"""Where a window is cut into sub-windows: a window of more than ``[window] max-events`` events is applied in
sub-windows of at most that many, cut at commit ts (docs/architecture.md, Memory: sub-windows past a bound).

The cut is decided as the window's bronze copy is sealed (:func:`cut_window`): from a histogram of the events'
commit ts, read a part at a time, never the window at once; the bronze changelog then stores the window split there
(``changelog.WindowWriter.split_parts``: each part one sub-window's events) and records the cuts, which
:func:`window_cuts` reads back for the barrier planner (``barriers.plan_steps``: a DML range spanning a cut is
applied in two steps, the first a ``cut`` step).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow.parquet as pq

from cdc_core.codec import changelog

CUT_BUCKETS_PER_SUB_WINDOW = 16  # histogram resolution of the commit ts when cutting a window


def cut_points(counts: Sequence[int], edges: Sequence[int], max_events: int) -> list[int]:
    """Cut points ``c`` (a sub-window ends at ``c`` inclusive) so that each holds at most ``max_events`` events,
    given a histogram of commit ts (``counts[i]`` events in ``[edges[i], edges[i+1])``). A bucket is never split:
    one holding more than ``max_events`` (one huge transaction shares a commit ts) is a sub-window of its own."""
    cuts: list[int] = []
    acc = 0
    for i, n in enumerate(counts):
        if acc and acc + n > max_events:
            cuts.append(int(edges[i]) - 1)
            acc = 0
        acc += n
    return cuts


def cut_window(writer: changelog.WindowWriter, max_events: int) -> list[int]:
    """The cuts of the window ``writer`` is writing, before it is committed: none when it holds at most
    ``max_events`` events; else cut points from a histogram of its commit ts, its parts split there. Pass the result
    to ``writer.commit(cuts=...)``. Memory: one part's commit ts column at a time (and :meth:`split_parts`')."""
    if writer.rows <= max_events:
        return []
    import numpy as np

    parts = writer.finish_parts()
    after_ts, end_ts = writer.after_ts or 0, writer.end_ts
    total = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    buckets = max(1, min(end_ts - after_ts, CUT_BUCKETS_PER_SUB_WINDOW * (total // max_events + 1)))
    edges = np.linspace(after_ts + 1, end_ts + 1, buckets + 1).astype(np.int64)
    edges[-1] = end_ts + 1
    counts = np.zeros(buckets, dtype=np.int64)
    for p in parts:
        for batch in pq.ParquetFile(p).iter_batches(columns=["commit_ts"]):
            c, _ = np.histogram(batch.column(0).to_numpy(), bins=edges)
            counts += c
    cuts = cut_points(counts.tolist(), edges.tolist(), max_events)
    if cuts:
        writer.split_parts(cuts)
    return cuts


def window_cuts(sink_uri: str, changefeed_id: str, end_ts: int) -> list[int]:
    """The sub-window cut points recorded for a window (none: it is applied whole)."""
    meta = changelog.window_meta(sink_uri, changefeed_id, end_ts)
    return [int(c) for c in (meta or {}).get("cuts") or []]
