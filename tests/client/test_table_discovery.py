"""Table discovery (client side of seed 001): listings over information_schema under the client's limiter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cdc_core.client.table_discovery import (
    BATCH_BYTES,
    DECODED_ROW_HEAP,
    INITIAL_HEAP,
    RESULT_ENTRY_HEAP,
    DiscoveredTable,
    SyncTableDiscovery,
    TableDiscovery,
    TableDiscoveryError,
    discover_tables,
)
from cdc_core.client.tidb_sql import TidbAddress
from cdc_core.client.upstream import UpstreamClient
from cdc_core.filter.table_filter import TableFilter
from cdc_core.memory import MemoryLimitConfig, MemoryLimitExceeded
from cdc_core.schema.model import Column
from testkit.listing_load import PeakObserver

COLS = (Column(1, "id", "bigint", nullable=False),)


def bulk(cluster: Any, schema: str, names: list[str]) -> None:
    catalog = cluster.cluster.catalog
    cluster.call(lambda: catalog.bulk_create_tables(schema, names, COLS))


def cfg(**limits: int) -> MemoryLimitConfig:
    return MemoryLimitConfig(**limits)


@pytest.fixture
def addresses(upstream_client: UpstreamClient) -> list[TidbAddress]:
    return upstream_client.sql_addresses()


def test_list_and_match_with_filter(addresses: list[TidbAddress], upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE orders (a INT); CREATE TABLE tmp_x (a INT)")
    flt = TableFilter([f"{fresh_db}.*", f"!{fresh_db}.tmp*"])
    with SyncTableDiscovery(addresses, registry=CollectorRegistry()) as d:
        listed = d.list_tables(fresh_db)
        assert sorted(t.name for t in listed) == ["orders", "tmp_x"]
        assert all(isinstance(t, DiscoveredTable) and t.schema == fresh_db for t in listed)
        ids = {t.name: t.table_id for t in listed}
        assert ids == {e.name: e.table_id for e in upstream_client.list_tables(fresh_db)}
        assert [t.name for t in d.matching_tables(flt)] == ["orders"]  # all schemas listed, filter applied
        assert [t.name for t in d.matching_tables(flt, schemas=[fresh_db])] == ["orders"]
        assert [t.name for t in d.list_tables(fresh_db, like="tmp\\_%")] == ["tmp_x"]
        assert d.discovery.limiter.heap.used == 0 and d.discovery.limiter.direct.used == 0
    assert [t.name for t in discover_tables(addresses, flt)] == ["orders"]


def test_direct_memory_bounds_each_batch_not_the_listing(upstream_cluster: Any, addresses: list[TidbAddress],
                                                         fresh_db: str) -> None:
    names = [f"table_{i:05d}" for i in range(3000)]
    bulk(upstream_cluster, fresh_db, names)
    with SyncTableDiscovery(addresses, cfg(direct_limit_bytes=10_000), registry=CollectorRegistry()) as d:
        peak = PeakObserver(d.discovery.limiter.direct)
        listed = d.list_tables(fresh_db)  # ~150 KB of rows through a 10 KB pool, a batch at a time
        assert sorted(t.name for t in listed) == names
        assert 0 < peak.peak <= 10_000 and peak.grants >= 15
        assert d.discovery.limiter.heap.used == 0 and d.discovery.limiter.direct.used == 0


def test_heap_limit_names_the_toml_key_and_only_kept_rows_count(upstream_cluster: Any,
                                                                 addresses: list[TidbAddress], fresh_db: str) -> None:
    bulk(upstream_cluster, fresh_db, [f"table_{i:05d}" for i in range(2000)])
    heap = INITIAL_HEAP + (RESULT_ENTRY_HEAP + 11) * 1000  # room for half of the listing's entries
    with SyncTableDiscovery(addresses, cfg(heap_limit_bytes=heap), registry=CollectorRegistry()) as d:
        with pytest.raises(MemoryLimitExceeded) as ei:
            d.list_tables(fresh_db)
        assert "table-discovery heap memory" in str(ei.value) and f"schema {fresh_db!r}" in str(ei.value)
        assert f"limit {heap} bytes ([table-discovery] heap-limit-bytes)" in str(ei.value)
        assert d.discovery.limiter.heap.used == 0 and d.discovery.limiter.direct.used == 0
        # Only the kept entries stay: a selective filter fits (the rows being decoded come and go a batch at a time).
        kept = d.matching_tables(TableFilter([f"{fresh_db}.table_0001*"]), schemas=[fresh_db])
        assert len(kept) == 10
        assert d.discovery.limiter.heap.used == 0


def test_upstream_refusal_is_reported_with_its_code() -> None:
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    small = ClusterConfig(catalog_memory=cfg(heap_limit_bytes=20_000), metrics_registry=CollectorRegistry())
    with EmbeddedCluster(small) as ec, UpstreamClient(ec.pd_addr) as up:
        up.execute("CREATE DATABASE big")
        up.execute("CREATE DATABASE small; CREATE TABLE small.t (a INT)")
        bulk(ec, "big", [f"t{i}" for i in range(5000)])  # a chunk of 5000 rows to assemble: over the limit
        with SyncTableDiscovery(up.sql_addresses(), registry=CollectorRegistry()) as d:
            assert [t.name for t in d.list_tables("small")] == ["t"]  # a small schema's listing fits
            with pytest.raises(TableDiscoveryError) as ei:
                d.list_tables("big")
            assert ei.value.code == 8175  # TiDB's "query exceeded its memory quota"
            assert "upstream-catalog heap memory" in str(ei.value)
            assert "--catalog-heap-limit-bytes" in str(ei.value) and "limit 20000 bytes" in str(ei.value)
            assert d.discovery.limiter.heap.used == 0 and d.discovery.limiter.direct.used == 0


def test_initial_heap_is_last_size_and_concurrency_is_bounded(upstream_cluster: Any, addresses: list[TidbAddress],
                                                               fresh_db: str) -> None:
    bulk(upstream_cluster, fresh_db, [f"table_{i:05d}" for i in range(3000)])
    names_heap = (RESULT_ENTRY_HEAP + len("table_00000")) * 3000

    async def scenario() -> None:
        # The heap pool fits one listing at a time (its initial permit, the peak it needed last time, is more than
        # half the pool): five concurrent listings take turns, each waiting for its permit before it asks, and
        # none grows its permit while it runs (no listing holds part of the pool while waiting for more).
        limit = 2 * names_heap - 1
        assert DECODED_ROW_HEAP * 3000 + BATCH_BYTES < limit  # one listing decoding its rows fits
        d = TableDiscovery(addresses, cfg(heap_limit_bytes=limit), registry=CollectorRegistry())
        heap = PeakObserver(d.limiter.heap)
        first = await d.list_tables(fresh_db)
        assert d._initial_heap((fresh_db.lower(), "%")) == heap.peak > names_heap  # what it needed last time
        results = await asyncio.gather(*(d.list_tables(fresh_db) for _ in range(5)))
        assert [len(r) for r in results] == [3000] * 5 and results[0] == first
        assert names_heap <= heap.peak <= limit
        assert (d.limiter.heap.used, d.limiter.direct.used) == (0, 0)

    asyncio.run(scenario())


def test_metrics_exported_as_table_discovery(addresses: list[TidbAddress], fresh_db: str) -> None:
    reg = CollectorRegistry()
    with SyncTableDiscovery(addresses, cfg(heap_limit_bytes=123_456), registry=reg) as d:
        d.list_tables(fresh_db)
    labels = {"limiter": "table-discovery", "type": "heap"}
    assert reg.get_sample_value("cdcflow_memory_limiter_limit_bytes", labels) == 123_456
    assert reg.get_sample_value("cdcflow_memory_limiter_used_bytes", labels) == 0
    assert reg.get_sample_value("cdcflow_memory_limiter_wait_seconds_count", labels) >= 1
