"""Collects every row change of a window ``(checkpoint_ts, target_ts]`` for a set of table spans.

Subscribes each span from the checkpoint, gathers changes until every span's resolved ts has
reached the target (so nothing at or below it can still arrive), and returns them as a bronze
changelog Arrow table. Changes arrive as Arrow record batches (``change_batch``), so a window is held in Arrow
buffers, not as Python objects per row. Changes above the target are dropped: the next window pulls them again
from the new checkpoint.
"""

from __future__ import annotations

import asyncio
import time

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
    """Return the window's changes (bronze schema) and each span's resolved ts when it closed.

    ``timeout_s`` (default ``options.pull_timeout_s``) bounds the wait for every span to pass ``target_ts``.
    """
    opts = options or PullerOptions()
    timeout_s = opts.pull_timeout_s if timeout_s is None else timeout_s
    if target_ts <= checkpoint_ts:
        return changelog.SCHEMA.empty_table(), {sid: checkpoint_ts for sid in spans}
    batches: list[pa.RecordBatch] = []

    def on_batch(span_id: int, batch: pa.RecordBatch) -> None:
        ts = batch.column(changelog.SCHEMA.get_field_index("commit_ts"))
        lo, hi = pc.min_max(ts).values()
        if not (checkpoint_ts < lo.as_py() and hi.as_py() <= target_ts):
            batch = batch.filter(pc.and_(pc.greater(ts, checkpoint_ts), pc.less_equal(ts, target_ts)))
        if batch.num_rows:
            batches.append(batch)

    client = SubscriptionClient(pd_addr, on_batch=on_batch, **opts.client_kwargs())
    deadline = time.monotonic() + timeout_s
    try:
        for span_id, (start, end) in spans.items():
            await client.subscribe(span_id, start, end, checkpoint_ts)
        while True:
            client.check()
            lagging = {sid: client.span_resolved_ts(sid) for sid in spans if client.span_resolved_ts(sid) < target_ts}
            if not lagging:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChangefeedError(
                    f"resolved ts did not reach the window end {target_ts} within {timeout_s:.0f}s "
                    f"(lagging spans and their resolved ts: {lagging})"
                )
            client.progress.clear()
            try:
                await asyncio.wait_for(client.progress.wait(), timeout=min(remaining, 1.0))
            except TimeoutError:
                pass
        resolved = {sid: client.span_resolved_ts(sid) for sid in spans}
    finally:
        await client.close()
    return pa.Table.from_batches(batches, schema=changelog.SCHEMA), resolved


def to_arrow(changes: list[RowChange]) -> pa.Table:
    """Matched changes as a bronze changelog table."""
    return pa.Table.from_batches([from_changes(changes)], schema=changelog.SCHEMA)
