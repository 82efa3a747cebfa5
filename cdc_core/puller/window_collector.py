"""Collects every row change of a window ``(checkpoint_ts, target_ts]`` for a set of table spans.

Subscribes each span from the checkpoint, gathers changes until every span's resolved ts has
reached the target (so nothing at or below it can still arrive), and returns them as a bronze
changelog Arrow table. Changes above the target are dropped: the next window pulls them again
from the new checkpoint.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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

    def on_changes(span_id: int, batch: list[RowChange]) -> None:
        changes.extend(ch for ch in batch if checkpoint_ts < ch.commit_ts <= target_ts)

    client = SubscriptionClient(pd_addr, on_changes=on_changes, **opts.client_kwargs())
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
    """The changes as a bronze changelog table; columns are transposed at C speed, table ids vectorized."""
    schema = changelog.SCHEMA
    if not changes:
        return schema.empty_table()
    region_id, keys, op, start_ts, commit_ts, value, old_value = zip(*changes, strict=True)
    key_arr = pa.array(keys, pa.binary())
    cols = {
        "region_id": pa.array(region_id, schema.field("region_id").type),
        "table_id": pa.array(table_ids(key_arr), schema.field("table_id").type),
        "key": key_arr,
        "op": pa.array(op, schema.field("op").type),
        "start_ts": pa.array(start_ts, schema.field("start_ts").type),
        "commit_ts": pa.array(commit_ts, schema.field("commit_ts").type),
        "value": pa.array(value, schema.field("value").type),
        "old_value": pa.array(old_value, schema.field("old_value").type),
    }
    return pa.Table.from_pydict(cols, schema=schema)


def table_ids(keys: pa.Array) -> np.ndarray:
    """The table id of each row key (``t`` + 8-byte sign-flipped big-endian id + ...), vectorized."""
    ok = pc.and_(pc.starts_with(keys, pattern="t"), pc.greater_equal(pc.binary_length(keys), 9))
    if not pc.all(ok).as_py():
        bad = keys.filter(pc.invert(ok))[0].as_py()
        table_id_of(bad)  # raises ValueError naming the key
    ids = pc.binary_slice(keys, 1, 9).cast(pa.binary(8))
    raw = np.frombuffer(ids.buffers()[1], dtype=">u8", count=len(ids), offset=ids.offset * 8)
    return (raw ^ np.uint64(1 << 63)).astype(np.int64)
