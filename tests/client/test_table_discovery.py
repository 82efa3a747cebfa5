"""Table discovery (client side of seed 001): listing, matching, watching, under the client's memory limiter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cdc_core.client.table_discovery import (
    DECODED_BASE_HEAP,
    DECODED_ENTRY_HEAP,
    INITIAL_HEAP,
    DiscoveredTable,
    SyncTableDiscovery,
    TableDiscovery,
    TableDiscoveryError,
    discover_tables,
)
from cdc_core.filter.table_filter import TableFilter
from cdc_core.memory import MemoryLimitConfig, MemoryLimitExceeded
from cdc_core.schema.model import Column

COLS = (Column(1, "id", "bigint", nullable=False),)


def bulk(cluster: Any, schema: str, names: list[str]) -> None:
    catalog = cluster.cluster.catalog
    cluster.call(lambda: catalog.bulk_create_tables(schema, names, COLS))


def cfg(**limits: int) -> MemoryLimitConfig:
    return MemoryLimitConfig(**limits)


def test_list_and_match_with_filter(upstream_cluster: Any, pd_addr: str, upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE orders (a INT); CREATE TABLE tmp_x (a INT)")
    flt = TableFilter([f"{fresh_db}.*", f"!{fresh_db}.tmp*"])
    with SyncTableDiscovery(pd_addr, registry=CollectorRegistry()) as d:
        listed = d.list_tables(fresh_db)
        assert sorted(t.name for t in listed) == ["orders", "tmp_x"]
        assert all(isinstance(t, DiscoveredTable) and t.schema == fresh_db for t in listed)
        assert [t.name for t in d.matching_tables(flt)] == ["orders"]  # all schemas listed, filter applied
        assert [t.name for t in d.matching_tables(flt, schemas=[fresh_db])] == ["orders"]
        assert d.discovery.limiter.heap.used == 0 and d.discovery.limiter.direct.used == 0
    assert [t.name for t in discover_tables(pd_addr, flt)] == ["orders"]


def test_client_limits_name_the_toml_key(upstream_cluster: Any, pd_addr: str, upstream_client: Any,
                                         fresh_db: str) -> None:
    bulk(upstream_cluster, fresh_db, [f"table_{i:05d}" for i in range(2000)])
    with SyncTableDiscovery(pd_addr, cfg(direct_limit_bytes=10_000), registry=CollectorRegistry()) as d:
        with pytest.raises(MemoryLimitExceeded) as ei:
            d.list_tables(fresh_db)
        assert "table-discovery direct memory" in str(ei.value)
        assert "limit 10000 bytes ([table-discovery] direct-limit-bytes)" in str(ei.value)
        assert d.discovery.limiter.heap.used == 0 and d.discovery.limiter.direct.used == 0
        assert len(d.list_tables(fresh_db, "table_0000?")) == 10
    heap = INITIAL_HEAP + DECODED_ENTRY_HEAP * 2000 + 100_000  # decodes, but cannot materialize 2000 entries
    with SyncTableDiscovery(pd_addr, cfg(heap_limit_bytes=heap), registry=CollectorRegistry()) as d:
        with pytest.raises(MemoryLimitExceeded, match=r"\[table-discovery\] heap-limit-bytes"):
            d.list_tables(fresh_db)
        assert d.discovery.limiter.heap.used == 0 and d.discovery.limiter.direct.used == 0
        # only the kept entries are materialized: a selective filter fits
        kept = d.matching_tables(TableFilter([f"{fresh_db}.table_0001*"]), schemas=[fresh_db])
        assert len(kept) == 10


def test_upstream_refusal_is_reported(pd_addr: str) -> None:
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    small = ClusterConfig(catalog_memory=cfg(heap_limit_bytes=2000), metrics_registry=CollectorRegistry())
    with EmbeddedCluster(small) as ec:
        from cdc_core.client.upstream import UpstreamClient

        with UpstreamClient(ec.pd_addr) as up:
            up.execute("CREATE DATABASE big")
        bulk(ec, "big", [f"t{i}" for i in range(500)])
        with SyncTableDiscovery(ec.pd_addr, registry=CollectorRegistry()) as d:
            with pytest.raises(TableDiscoveryError) as ei:
                d.list_tables("big")
            assert ei.value.code is not None and ei.value.code.name == "RESOURCE_EXHAUSTED"
            assert "--catalog-heap-limit-bytes" in str(ei.value) and "limit 2000 bytes" in str(ei.value)
            assert d.discovery.limiter.heap.used == 0


def test_initial_heap_is_last_size_and_concurrency_is_bounded(upstream_cluster: Any, pd_addr: str,
                                                               fresh_db: str) -> None:
    bulk(upstream_cluster, fresh_db, [f"table_{i:05d}" for i in range(3000)])

    async def scenario() -> None:
        # Direct fits one listing (~240 KB: long schema names) at a time: five concurrent listings queue.
        d = TableDiscovery(pd_addr, cfg(direct_limit_bytes=300_000), registry=CollectorRegistry())
        peak = {"direct": 0, "heap": 0}
        inner = d.limiter.direct.observer

        class Peak:
            def on_granted(self, waited_s: float) -> None:
                peak["direct"] = max(peak["direct"], d.limiter.direct.used)
                peak["heap"] = max(peak["heap"], d.limiter.heap.used)
                inner.on_granted(waited_s)

            def on_timeout(self) -> None:
                inner.on_timeout()

            def on_rejected(self, reason: str) -> None:
                inner.on_rejected(reason)

        d.limiter.direct.observer = Peak()
        counts = []

        async def one() -> None:
            async with d.listing(fresh_db) as listing:
                counts.append(listing.count)
                assert d.limiter.direct.used >= listing.wire_size  # held while the caller looks at it

        await asyncio.gather(*(one() for _ in range(5)))
        assert counts == [3000] * 5 and 0 < peak["direct"] <= 300_000
        assert d._initial_heap((fresh_db.lower(), "")) == DECODED_BASE_HEAP + DECODED_ENTRY_HEAP * 3000
        assert (d.limiter.heap.used, d.limiter.direct.used) == (0, 0)
        await d.close()

    asyncio.run(scenario())


def test_watch_events_hold_permits_until_the_next(upstream_client: Any, pd_addr: str, fresh_db: str) -> None:
    upstream_client.execute(f"CREATE TABLE {fresh_db}.a (x INT)")

    async def scenario() -> None:
        d = TableDiscovery(pd_addr, registry=CollectorRegistry())
        events = d.watch(fresh_db)
        first = await anext(events)
        assert first.initial and [t.name for t in await first.added()] == ["a"]
        assert d.limiter.direct.used > 0 and d.limiter.heap.used > 0  # held while the consumer looks
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, upstream_client.execute, f"CREATE TABLE {fresh_db}.b (x INT)")
        second = await anext(events)
        assert not second.initial and [t.name for t in await second.added()] == ["b"]
        assert first.message.added == []  # the previous event's decoded list is gone with its permits
        await events.aclose()
        assert (d.limiter.heap.used, d.limiter.direct.used) == (0, 0)
        await d.close()

    asyncio.run(scenario())


def test_metrics_exported_as_table_discovery(pd_addr: str, fresh_db: str) -> None:
    reg = CollectorRegistry()
    with SyncTableDiscovery(pd_addr, cfg(heap_limit_bytes=12345), registry=reg) as d:
        d.list_tables(fresh_db)
    labels = {"limiter": "table-discovery", "type": "heap"}
    assert reg.get_sample_value("cdcflow_memory_limiter_limit_bytes", labels) == 12345
    assert reg.get_sample_value("cdcflow_memory_limiter_used_bytes", labels) == 0
    assert reg.get_sample_value("cdcflow_memory_limiter_wait_seconds_count", labels) >= 1
