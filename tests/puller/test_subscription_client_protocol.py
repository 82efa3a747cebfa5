"""The subscription client on TiKV's protocol as TiCDC speaks it: fatal errors (compatibility, cluster-id
mismatch) stop it with a clear message and no resolved-ts move; large responses, the EventFeed fallback for a
store without EventFeedV2, and transaction heartbeats' fake prewrites go through without loss."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cdc_core.puller.subscription_client import SubscriptionClient
from testkit.puller import SPAN, counter, make_table, pulling, until, until_failed


async def _sql(client: Any, stmt: str) -> int:
    return max(r.commit_ts for r in await asyncio.to_thread(client.execute, stmt))


@pytest.mark.parametrize("fault", ["compatibility", "cluster_id"])
def test_fatal_store_errors_stop_the_client_and_hold_the_resolved_ts(upstream_cluster: Any, upstream_client: Any,
                                                                     fresh_db: str, fault: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)
    start_ts = upstream_client.get_ts()
    real_id = upstream_cluster.cluster.cluster_id
    if fault == "compatibility":
        upstream_cluster.faults.require_client_version(1, "99.0.0")
        pattern = r"store .* is incompatible with this client .*: it requires version 99\.0\.0"
    else:
        upstream_cluster.faults.store_cluster_id(1, real_id + 7)
        pattern = rf"store .* belongs to cluster {real_id + 7}, but PD's cluster is {real_id}"

    async def main() -> None:
        client = SubscriptionClient(upstream_cluster.pd_addr, lambda *_: None)
        try:
            await client.subscribe(SPAN, span[0], span[1], start_ts)
            await until_failed(client, pattern)
            assert client.span_resolved_ts(SPAN) == start_ts  # the checkpoint cannot move past it
        finally:
            await client.close()

    try:
        asyncio.run(main())
    finally:
        upstream_cluster.faults.require_client_version(1, None)
        upstream_cluster.faults.store_cluster_id(1, real_id)


def test_responses_past_4_mib_arrive(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE big (a INT PRIMARY KEY, b MEDIUMTEXT)")
    tid = upstream_cluster.faults.table_id(fresh_db, "big")
    from cdc_core.codec import key as keycodec

    span = keycodec.table_span(tid)
    start_ts = upstream_client.get_ts()
    blob = "y" * 100_000
    last = 0
    for lo in range(0, 60, 20):
        last = asyncio.run(_sql(upstream_client, f"INSERT INTO {fresh_db}.big VALUES " +
                                ", ".join(f"({i}, '{blob}')" for i in range(lo + 1, lo + 21))))

    async def main() -> None:
        # Pulled from before the inserts: the scan returns 6 MB of rows, cut into responses over 4 MiB.
        async with pulling(upstream_cluster.pd_addr, span, start_ts) as (client, rec, _):
            await until(lambda: client.span_resolved_ts(SPAN) >= last, 30, "caught up", client.check)
            got = rec.changes[SPAN]
            assert len(got) == 60 and all(len(c.value or b"") > 100_000 for c in got)

    asyncio.run(main())


def test_a_store_without_event_feed_v2_is_pulled_over_event_feed(upstream_cluster: Any, upstream_client: Any,
                                                                  fresh_db: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)
    start_ts = upstream_client.get_ts()
    cdc = upstream_cluster.cluster.cdc
    upstream_cluster.call(lambda: setattr(cdc, "serves_v2", False))
    try:
        async def main() -> None:
            async with pulling(upstream_cluster.pd_addr, span, start_ts) as (client, rec, reg):
                last = await _sql(upstream_client, f"INSERT INTO {fresh_db}.t VALUES (-3, 1), (3, 1)")
                await until(lambda: client.span_resolved_ts(SPAN) >= last, 20, "caught up", client.check)
                assert sorted(c.commit_ts for c in rec.changes[SPAN]) == [last, last]
                # Resolved ts came batched per stream (request id 0), not per request id.
                assert counter(reg, "cdcflow_puller_events_received_total", kind="resolved") > 0

        asyncio.run(main())
    finally:
        upstream_cluster.call(lambda: setattr(cdc, "serves_v2", True))


def test_fake_prewrites_of_a_long_transaction_do_not_lose_its_values(multi_cluster: Any, multi_client: Any) -> None:
    multi_client.execute("CREATE DATABASE IF NOT EXISTS hb")
    _, span = make_table(multi_client, multi_cluster, "hb", "long_txn")
    multi_client.execute("INSERT INTO hb.long_txn VALUES (1, 1), (2, 2), (-1, -1)")
    start_ts = multi_client.get_ts()
    cdc_services = [n.cdc for n in multi_cluster.cluster.stores.values()]

    async def main() -> None:
        async with pulling(multi_cluster.pd_addr, span, start_ts) as (client, rec, _):
            held = await asyncio.to_thread(multi_cluster.faults.hold_lock, "hb", "long_txn", count=3)
            before = sum(c.fake_prewrites_sent for c in cdc_services)
            # The lock outlives several heartbeat intervals: fake (empty) prewrites reach the client.
            await until(lambda: sum(c.fake_prewrites_sent for c in cdc_services) >= before + 6, 20,
                        "heartbeat prewrites", client.check)
            commit_ts = await asyncio.to_thread(multi_cluster.faults.release_lock, held.start_ts)
            await until(lambda: client.span_resolved_ts(SPAN) >= commit_ts, 20, "caught up", client.check)
            got = sorted((c.key, c.value) for c in rec.changes[SPAN] if c.commit_ts == commit_ts)
            assert len(got) == 3 and all(v for _, v in got)  # the real values, not the heartbeats' empty ones
            rows = multi_client.query("SELECT a, b FROM hb.long_txn ORDER BY a")
            assert len(rows) == 3

    asyncio.run(main())


def test_congested_regions_are_re_requested_without_loss() -> None:
    # A store with a small sink memory quota and a client that reads slowly (a small event-stream quota pauses
    # its receivers): live rows congest the store's queue, TiKV-style `congested` ends the regions, and the
    # client re-requests them from their resolved ts. Every change still arrives.
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster
    from testkit.puller import ERRORS, assert_exactly_once_after_dedup, mvcc_history

    with EmbeddedCluster(ClusterConfig(min_ts_interval_ms=50, sink_memory_quota_bytes=96 * 1024)) as ec, \
            UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE cg")
        _, span = make_table(c, ec, "cg")
        start_ts = c.get_ts()

        async def main() -> None:
            async with pulling(ec.pd_addr, span, start_ts, max_pending_bytes=128 * 1024) as (client, rec, reg):
                last = 0
                for lo in range(-3000, 3000, 500):
                    last = await _sql(c, "UPDATE cg.t SET b = b + 1 WHERE a < 0; INSERT INTO cg.t VALUES " +
                                      ", ".join(f"({i}, {i})" for i in range(lo, lo + 500)))
                await until(lambda: client.span_resolved_ts(SPAN) >= last, 60, "caught up", client.check)
                assert counter(reg, ERRORS, kind="congested") >= 1
                assert ec.cluster.cdc.congested_sent >= 1
                expected = mvcc_history(ec, span[0], span[1], start_ts, last)
                assert_exactly_once_after_dedup(rec.keys(SPAN), expected, last)

        asyncio.run(main())
