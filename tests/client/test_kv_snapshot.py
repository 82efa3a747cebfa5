"""The snapshot reader over TiKV's KV RPCs against the embedded upstream: paged scans across regions, a region that
splits or whose leader moves between reads, a store that goes down, locks waited out (and a read that did not wait
would have read the wrong value), and reads below the GC safe point refused. The session's upstream serves the
cases that leave it as it was; leader moves, a stopped store and GC get a cluster of their own."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cdc_core.client.kv_snapshot import KvSnapshot, SnapshotLostByGC
from cdc_core.codec import meta_key
from cdc_core.codec import tso as tso_codec
from cdc_core.errors import UpstreamError
from cdc_core.puller.pd_client import PDClient
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.sql.txn import Transaction
from cdc_core.upstream.store.mvcc import Mutation, Op


def now(ec: Any) -> int:
    return ec.call(lambda: ec.cluster.tso.next())  # type: ignore[no-any-return]


def write(ec: Any, pairs: dict[bytes, bytes]) -> int:
    def run() -> int:
        txn = Transaction(ec.cluster.store, ec.cluster.tso)
        for k, v in pairs.items():
            txn.put(k, v)
        return txn.commit_now()

    return ec.call(run)  # type: ignore[no-any-return]


def a_hash(n: int) -> tuple[bytes, list[bytes]]:
    name = f"snaptest-{uuid.uuid4().hex}".encode()
    return name, [meta_key.hash_field_key(name, f"f{i:03d}".encode()) for i in range(n)]


async def scan_all(pd_addr: str, ts: int, start: bytes, end: bytes, **kw: Any) -> tuple[list[tuple[bytes, bytes]],
                                                                                        int]:
    pd = PDClient(pd_addr)
    try:
        async with KvSnapshot(pd, ts, **kw) as snap:
            return [kv async for kv in snap.scan(start, end)], snap.retries
    finally:
        await pd.close()


def test_a_paged_scan_crosses_a_split_made_between_two_reads(upstream_cluster: Any) -> None:
    ec = upstream_cluster
    name, keys = a_hash(9)
    ts = write(ec, {k: f"v{i}".encode() for i, k in enumerate(keys)})
    start, end = meta_key.hash_range(name)
    want = [(k, f"v{i}".encode()) for i, k in enumerate(keys)]

    async def main() -> tuple[list[tuple[bytes, bytes]], int]:
        pd = PDClient(ec.pd_addr)
        try:
            async with KvSnapshot(pd, ts, page=2) as snap:
                first = [kv async for kv in snap.scan(start, end)]  # caches the region
                assert first == want and snap.retries == 0
                region = ec.call(lambda: ec.cluster.regions.locate(keys[4]))
                ec.faults.split_region(region.id, [keys[4]])  # the cached epoch is stale now
                again = [kv async for kv in snap.scan(start, end)]
                return again, snap.retries
        finally:
            await pd.close()

    got, retries = asyncio.run(main())
    assert got == want
    assert retries >= 1  # the stale region was answered epoch_not_match and read again
    assert ec.call(lambda: ec.cluster.regions.locate(keys[3]).id) != ec.call(
        lambda: ec.cluster.regions.locate(keys[4]).id)


def test_a_lock_is_waited_out_and_its_commit_below_the_read_is_seen(upstream_cluster: Any) -> None:
    ec = upstream_cluster
    name, (k0, locked, k2) = a_hash(3)
    write(ec, {k0: b"a", locked: b"old", k2: b"c"})
    store = ec.cluster.store
    lock_ts = now(ec)
    ec.call(lambda: store.prewrite([Mutation(locked, Op.PUT, b"new")], locked, lock_ts))
    read_ts = now(ec)

    def commit_later() -> None:
        time.sleep(0.3)
        # The transaction commits at a ts below the read's: only a read that waited for the lock sees it.
        ec.call(lambda: store.commit([locked], lock_ts, lock_ts + 1))

    threading.Thread(target=commit_later).start()
    start, end = meta_key.hash_range(name)
    got, retries = asyncio.run(scan_all(ec.pd_addr, read_ts, start, end))
    assert got == [(k0, b"a"), (locked, b"new"), (k2, b"c")]
    assert retries >= 1


def test_a_lock_that_stays_fails_the_read_naming_it(upstream_cluster: Any) -> None:
    ec = upstream_cluster
    _, (locked,) = a_hash(1)
    write(ec, {locked: b"old"})
    store = ec.cluster.store
    lock_ts = now(ec)
    ec.call(lambda: store.prewrite([Mutation(locked, Op.PUT, b"new")], locked, lock_ts))
    read_ts = now(ec)

    async def main() -> None:
        pd = PDClient(ec.pd_addr)
        try:
            async with KvSnapshot(pd, read_ts, lock_wait_s=0.3) as snap:
                await snap.get(locked)
        finally:
            await pd.close()

    try:
        with pytest.raises(UpstreamError, match=rf"key {locked.hex()} .* still locked .* started at ts {lock_ts}"):
            asyncio.run(main())
    finally:
        ec.call(lambda: store.rollback([locked], lock_ts))


@pytest.fixture(scope="module")
def two_stores() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(ClusterConfig(stores=2, control_addr="")) as ec:
        yield ec


def test_leader_moves_and_a_stopped_store_are_followed(two_stores: EmbeddedCluster) -> None:
    ec = two_stores
    name, keys = a_hash(4)
    ts = write(ec, {k: b"v" for k in keys})
    start, end = meta_key.hash_range(name)

    async def main() -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]], int]:
        pd = PDClient(ec.pd_addr)
        try:
            async with KvSnapshot(pd, ts) as snap:
                first = [kv async for kv in snap.scan(start, end)]
                region = ec.call(lambda: ec.cluster.regions.locate(keys[0]))  # type: ignore[union-attr]
                other = 2 if region.leader_store_id == 1 else 1
                ec.faults.transfer_leader(region.id, other)  # not_leader names the new one
                moved = [kv async for kv in snap.scan(start, end)]
                # Its store goes down and the leaders move away: UNAVAILABLE, then PD routes to the new leader.
                ec.faults.stop_store(other, move_leaders=True)
                try:
                    down = [kv async for kv in snap.scan(start, end)]
                finally:
                    ec.faults.start_store(other)
                assert first == moved
                return first, down, snap.retries
        finally:
            await pd.close()

    first, down, retries = asyncio.run(main())
    assert first == down == [(k, b"v") for k in keys]
    assert retries >= 2


def test_a_read_below_the_gc_safe_point_is_lost_by_gc(two_stores: EmbeddedCluster) -> None:
    ec = two_stores
    name, keys = a_hash(1)
    write(ec, {keys[0]: b"v"})
    stats = ec.faults.gc()  # PD's GC safe point: now - GC life time
    too_old = tso_codec.compose(tso_codec.physical_ms(stats.safe_point) - 60_000, 0)
    start, end = meta_key.hash_range(name)
    with pytest.raises(SnapshotLostByGC, match=rf"ts {too_old} .* below PD's GC safe point"):
        asyncio.run(scan_all(ec.pd_addr, too_old, start, end))
    got, _ = asyncio.run(scan_all(ec.pd_addr, now(ec), start, end))
    assert got == [(keys[0], b"v")]
