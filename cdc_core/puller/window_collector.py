"""Collects every row change of a window ``(checkpoint_ts, target_ts]`` for a set of table spans.

Subscribes each span from the checkpoint, gathers changes until every span's resolved ts has
reached the target (so nothing at or below it can still arrive), and returns them as a bronze
changelog Arrow table. Changes above the target are dropped: the next window pulls them again
from the new checkpoint.
"""

from __future__ import annotations

import asyncio
import time

import pyarrow as pa

from cdc_core.codec import changelog
from cdc_core.codec.key import table_id_of
from cdc_core.errors import ChangefeedError
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
    changes: list[RowChange] = []

    def on_change(span_id: int, ch: RowChange) -> None:
        if checkpoint_ts < ch.commit_ts <= target_ts:
            changes.append(ch)

    client = SubscriptionClient(pd_addr, on_change, **opts.client_kwargs())
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
    return to_arrow(changes), resolved


def to_arrow(changes: list[RowChange]) -> pa.Table:
    cols = {
        "region_id": [c.region_id for c in changes],
        "table_id": [table_id_of(c.key) for c in changes],
        "key": [c.key for c in changes],
        "op": [c.op for c in changes],
        "start_ts": [c.start_ts for c in changes],
        "commit_ts": [c.commit_ts for c in changes],
        "value": [c.value for c in changes],
        "old_value": [c.old_value for c in changes],
    }
    return pa.table(cols, schema=changelog.SCHEMA)
