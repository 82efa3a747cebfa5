"""Collects every row change of a window ``(checkpoint_ts, target_ts]`` for a set of table spans.

Subscribes each span from the checkpoint, gathers changes until every span's resolved ts has
reached the target (so nothing at or below it can still arrive), and hands them to a bronze window writer as they
arrive (``stream_window``: a part of ``changelog.PART_ROWS`` events at a time is held, whatever the window's size)
or returns them as one Arrow table (``collect_window``: small windows, the DDL job table). Changes arrive as Arrow
record batches (``change_batch``), never as Python objects per row. Changes above the target are dropped: the next
window pulls them again from the new checkpoint.

The pull gives up (``ChangefeedError``) only when it stops making progress -- no span's resolved ts moves and no
change arrives for ``pull-timeout-s`` -- so a catch-up of any backlog finishes without a deadline to raise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.codec import changelog
from cdc_core.errors import ChangefeedError
from cdc_core.puller.change_batch import from_changes
from cdc_core.puller.matcher import RowChange
from cdc_core.puller.options import PullerOptions
from cdc_core.puller.subscription_client import SubscriptionClient


async def collect_window(
    pd_addr: str,
    spans: dict[int, tuple[bytes, bytes]],
    checkpoint_ts: int,
    target_ts: int,
    *,
    options: PullerOptions | None = None,
    timeout_s: float | None = None,
) -> tuple[pa.Table, dict[int, int]]:
    """Return the window's changes (bronze schema) and each span's resolved ts when it closed."""
    batches: list[pa.RecordBatch] = []
    resolved = await stream_window(pd_addr, spans, checkpoint_ts, target_ts, batches.append, options=options,
                                   timeout_s=timeout_s)
    return pa.Table.from_batches(batches, schema=changelog.SCHEMA), resolved


async def stream_window(
    pd_addr: str,
    spans: dict[int, tuple[bytes, bytes]],
    checkpoint_ts: int,
    target_ts: int,
    on_changes: Callable[[pa.RecordBatch], object],
    *,
    writer: changelog.WindowWriter | None = None,
    options: PullerOptions | None = None,
    timeout_s: float | None = None,
) -> dict[int, int]:
    """Hand the window's changes to ``on_changes`` as they arrive (a cheap, non-blocking callback); with
    ``writer`` (whose ``add`` that callback is), its full parts are written off the event loop as they fill.
    Returns each span's resolved ts when it closed. ``timeout_s`` (default ``options.pull_timeout_s``): how long
    the pull may go without progress."""
    opts = options or PullerOptions()
    timeout_s = opts.pull_timeout_s if timeout_s is None else timeout_s
    if target_ts <= checkpoint_ts:
        return {sid: checkpoint_ts for sid in spans}
    last_progress = time.monotonic()

    def on_batch(span_id: int, batch: pa.RecordBatch) -> None:
        nonlocal last_progress
        last_progress = time.monotonic()
        ts = batch.column(changelog.SCHEMA.get_field_index("commit_ts"))
        lo, hi = pc.min_max(ts).values()
        if not (checkpoint_ts < lo.as_py() and hi.as_py() <= target_ts):
            batch = batch.filter(pc.and_(pc.greater(ts, checkpoint_ts), pc.less_equal(ts, target_ts)))
        if batch.num_rows:
            on_changes(batch)

    client = SubscriptionClient(pd_addr, on_batch=on_batch, **opts.client_kwargs())
    seen: dict[int, int] = {}
    try:
        for span_id, (start, end) in spans.items():
            await client.subscribe(span_id, start, end, checkpoint_ts)
        while True:
            client.check()
            if writer is not None and writer.full:
                await asyncio.to_thread(writer.write_part, *writer.take_part())
            now_resolved = {sid: client.span_resolved_ts(sid) for sid in spans}
            lagging = {sid: r for sid, r in now_resolved.items() if r < target_ts}
            if not lagging:
                break
            if now_resolved != seen:
                seen, last_progress = now_resolved, time.monotonic()
            idle = time.monotonic() - last_progress
            if idle >= timeout_s:
                raise ChangefeedError(
                    f"the pull made no progress for {timeout_s:.0f}s: resolved ts short of the window end "
                    f"{target_ts} (lagging spans and their resolved ts: {lagging})"
                )
            client.progress.clear()
            try:
                await asyncio.wait_for(client.progress.wait(), timeout=min(timeout_s - idle, 1.0))
            except TimeoutError:
                pass
        return {sid: client.span_resolved_ts(sid) for sid in spans}
    finally:
        await client.close()


def to_arrow(changes: list[RowChange]) -> pa.Table:
    """Matched changes as a bronze changelog table."""
    return pa.Table.from_batches([from_changes(changes)], schema=changelog.SCHEMA)
