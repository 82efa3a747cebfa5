"""What incremental scans cost a store (``incremental_scan``): the speed limiter's clock, the concurrency permits,
what a scan reads with and without TiKV's ts filter, and the counters its status server publishes (TiKV's
``tikv_cdc_scan_tasks`` / ``tikv_cdc_captured_region_total``), read back as ``cdcflow upstream status`` reads them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from wire.eventfeed import FeedClient, T, register_all, table_id, table_regions, wait_until

from cdc_core.cli.upstream_control import store_cdc_metrics
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.store.incremental_scan import ScanCosts, ScanGate, SpeedLimiter


def test_speed_limiter_charges_bytes_on_one_clock() -> None:
    lim = SpeedLimiter(1000)  # bytes/s
    assert lim.delay_for(500, now=10.0) == pytest.approx(0.5)
    assert lim.delay_for(500, now=10.0) == pytest.approx(1.0)  # queued behind the first
    assert lim.delay_for(100, now=12.0) == pytest.approx(0.1)  # paid off meanwhile: from now
    assert SpeedLimiter(0).delay_for(10**9, now=0.0) == 0.0  # unlimited


def test_scan_costs_reject_bad_values() -> None:
    for bad in ({"concurrency": 0}, {"speed_limit_bytes": -1}, {"ts_filter_ratio": 1.5}):
        with pytest.raises(ValueError, match="incremental-scan"):
            ScanCosts(**bad)  # type: ignore[arg-type]


def test_disk_read_follows_the_ts_filter() -> None:
    gate = ScanGate(ScanCosts(ts_filter_ratio=0.2))
    assert gate.disk_read(region_bytes=1000, newer_bytes=150) == 150  # few newer versions: only their SSTs
    assert gate.disk_read(region_bytes=1000, newer_bytes=300) == 1000  # many: the whole range
    assert ScanGate(ScanCosts(ts_filter_ratio=0.0)).disk_read(1000, 10) == 1000  # filter off


def test_permits_bound_running_scans_and_pass_in_order() -> None:
    async def scenario() -> None:
        gate = ScanGate(ScanCosts(concurrency=2))
        release = [asyncio.Event() for _ in range(5)]
        entered: list[int] = []

        async def scan(i: int) -> None:
            gate.spawned()
            async with gate.permit():
                entered.append(i)
                await release[i].wait()
            gate.ended(ok=True)

        tasks = [asyncio.create_task(scan(i)) for i in range(5)]
        for _ in range(5):
            await asyncio.sleep(0)
        assert entered == [0, 1] and gate.ongoing == 2 and gate.started == 5
        release[1].set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert entered == [0, 1, 2] and gate.ongoing == 2  # the first in line, not any
        for e in release:
            e.set()
        await asyncio.gather(*tasks)
        assert gate.ongoing == 0 and entered == [0, 1, 2, 3, 4]

    asyncio.run(scenario())


@pytest.fixture(scope="module")
def costly() -> Any:
    """A cluster of its own whose one store scans slowly enough to see: one scan at a time, 2 MB/s, no ts filter
    (every scan reads its region whole)."""
    costs = ScanCosts(concurrency=1, speed_limit_bytes=2_000_000, ts_filter_ratio=0.0)
    with EmbeddedCluster(ClusterConfig(stores=1, regions_per_table=4, scan_costs=costs)) as ec:
        yield ec


def test_scans_are_counted_and_charged_for_the_whole_region(costly: Any) -> None:
    from cdc_core.client.upstream import UpstreamClient

    with UpstreamClient(costly.pd_addr) as c:
        c.execute("CREATE DATABASE sc; CREATE TABLE sc.t (id BIGINT PRIMARY KEY, pad VARCHAR(200))")
        for lo in range(0, 4000, 1000):
            c.execute("INSERT INTO sc.t VALUES " + ", ".join(f"({i - 2000}, '{'x' * 150}')"
                                                            for i in range(lo, lo + 1000)))
        checkpoint = c.get_ts()  # nothing newer: a scan from here sends no row, yet reads its region
    cdc = costly.cluster.stores[1].cdc
    status = costly.cluster.stores[1].status_addr
    before = store_cdc_metrics(status)
    regions = table_regions(costly.pd_addr, table_id(costly, "sc", "t"))
    assert len(regions) == 4
    fc = FeedClient(costly.cluster.stores[1].addr, pd_addr=costly.pd_addr)
    try:
        seen_ongoing: set[int] = set()
        ids = list(range(1, 5))
        for i, r in zip(ids, regions, strict=True):
            fc.register(r, i, checkpoint)
        wait_until(lambda: seen_ongoing.add(cdc.scan_gate.ongoing) or all(fc.initialized(i) for i in ids),
                   what="four regions scanned")
        assert seen_ongoing <= {0, 1}  # one permit: never two scans at once
        after = store_cdc_metrics(status)
        assert after["incremental_scans"] - before["incremental_scans"] == 4
        assert after["registered_regions"] - before["registered_regions"] == 4
        table_bytes = sum(costly.call(lambda r=r: costly.cluster.store.approximate_range_size(
            r.start_key, r.end_key))[1] for r in regions)
        read = after["scan_disk_read_bytes"] - before["scan_disk_read_bytes"]
        assert read == table_bytes and read > 4000 * 150  # the rows' bytes, though none was sent
        assert not [row for i in ids for row in fc.rows(i) if row.type != T.INITIALIZED]
    finally:
        fc.close()
    wait_until(lambda: store_cdc_metrics(status)["registered_regions"] == before["registered_regions"],
               what="regions deregistered when the stream closed")


def test_the_ts_filter_reads_only_the_newer_versions(upstream_cluster: Any, upstream_client: Any,
                                                     fresh_db: str) -> None:
    """The shared cluster keeps TiKV's defaults (ts filter 0.2): a registration from a recent checkpoint of a
    large region reads only what changed since."""
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id BIGINT PRIMARY KEY, pad VARCHAR(200))")
    upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES " + ", ".join(f"({i}, '{'y' * 150}')"
                                                                        for i in range(1, 2001)))
    checkpoint = upstream_client.get_ts()
    upstream_client.execute(f"UPDATE {fresh_db}.t SET pad = 'z' WHERE id = 7")
    regions = table_regions(upstream_cluster.pd_addr, table_id(upstream_cluster, fresh_db, "t"))
    stores = upstream_cluster.cluster.stores
    before = sum(n.cdc.scan_gate.bytes_read for n in stores.values())
    for n, r in enumerate(regions, start=1):  # each on its leader's store
        fc = FeedClient(stores[r.leader_store].addr, pd_addr=upstream_cluster.pd_addr)
        try:
            register_all(fc, [r], checkpoint, n)
        finally:
            fc.close()
    read = sum(n.cdc.scan_gate.bytes_read for n in stores.values()) - before
    assert 0 < read < 2000 * 150 // 10, read  # the one updated row's version, not the region's 300 KB
