"""Table listing at 1,000,000 tables (issue 5's scale, on TiDB's interface), next to a bare driver read.

Part 1: the load scenario of ``tests/testkit/listing_load.py`` at 1M tables and 4 concurrent listings, default
limits on both sides: peaks of the server's ``upstream-catalog`` and the client's ``table-discovery`` pools, RSS.
Part 2: one listing through ``TableDiscovery`` (limiter, batches, worker threads) next to the same query read
with a bare PyMySQL unbuffered cursor in the same run: rows per second of each and the ratio. Prints the figures;
asserts only correctness and the pools' bounds. Run with ``make bench``.
"""

from __future__ import annotations

import asyncio
import time

import pymysql
import pymysql.cursors
from prometheus_client import CollectorRegistry

from cdc_core.client.table_discovery import TableDiscovery
from cdc_core.client.tidb_sql import connect, connection_literal
from cdc_core.client.upstream import UpstreamClient, listing_sql
from cdc_core.schema.model import Column
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from testkit.listing_load import MIB, run_listing_load

N = 1_000_000


def test_bench_listing_load_1m() -> None:
    res = run_listing_load(N, n_lists=4)
    print("\nlisting load:", res.summary())
    assert res.wrong == [] and res.lists_ok == 4
    for pool in ("heap", "direct"):
        assert 0 < res.server_peak[pool] <= res.limits[pool]
        assert 0 < res.client_peak[pool] <= 100 * MIB


def test_bench_discovery_vs_bare_cursor() -> None:
    with EmbeddedCluster(ClusterConfig(metrics_registry=CollectorRegistry())) as ec, UpstreamClient(ec.pd_addr) as up:
        assert ec.cluster is not None
        up.execute("CREATE DATABASE bench")
        ec.call(lambda: ec.cluster.catalog.bulk_create_tables(  # type: ignore[union-attr]
            "bench", (f"table_{i:07d}" for i in range(N // 4)), (Column(1, "id", "bigint", nullable=False),)),
            timeout=600)
        addresses = up.sql_addresses()

        def bare() -> int:
            conn, _ = connect(addresses)
            try:
                with conn.cursor(pymysql.cursors.SSCursor) as cur:
                    cur.execute(listing_sql("bench", literal=connection_literal(conn)))
                    return sum(1 for _, _, name in cur.fetchall_unbuffered() if name.endswith("0"))
            finally:
                conn.close()

        async def limited() -> int:
            d = TableDiscovery(addresses, registry=CollectorRegistry())
            return len(await d.list_tables("bench", keep=lambda s, n: n.endswith("0")))

        timings: dict[str, float] = {}
        for _ in range(2):
            for name, fn in (("bare", bare), ("discovery", lambda: asyncio.run(limited()))):
                started = time.perf_counter()
                assert fn() == N // 40
                timings[name] = min(timings.get(name, 1e9), time.perf_counter() - started)
    rows = N // 4
    print(f"\nlisting {rows} tables: bare PyMySQL {rows / timings['bare']:,.0f} rows/s, "
          f"TableDiscovery {rows / timings['discovery']:,.0f} rows/s, "
          f"ratio {timings['bare'] / timings['discovery']:.2f}x")
