"""The subscription client against the embedded cluster: changes arrive exactly as committed, the span's
resolved ts advances and never regresses, nothing arrives at or below an emitted resolved ts, and every
region error kind is recovered from (or, for GC, fails the subscription clearly)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cdc_core.codec import tso
from cdc_core.puller.subscription_client import SubscriptionClient
from testkit.puller import (
    ERRORS,
    SPAN,
    Recorder,
    assert_exactly_once_after_dedup,
    counter,
    make_table,
    mvcc_history,
    pulling,
    until,
    until_failed,
)


async def sql(client: Any, stmt: str) -> int:
    """Run statements off the loop; the last commit ts."""
    res = await asyncio.to_thread(client.execute, stmt)
    return max(r.commit_ts for r in res)


async def caught_up(client: SubscriptionClient, rec: Recorder, ts: int, timeout: float = 20.0) -> None:
    await until(lambda: client.span_resolved_ts(SPAN) >= ts, timeout, f"resolved ts >= {ts}", client.check)


async def writes(client: Any, db: str, lo: int, hi: int) -> int:
    """Insert handles [lo, hi), update half of them, delete a quarter: the last commit ts."""
    vals = ", ".join(f"({h}, {h})" for h in range(lo, hi))
    await sql(client, f"INSERT INTO {db}.t VALUES {vals}")
    await sql(client, f"UPDATE {db}.t SET b = b + 1 WHERE a >= {lo} AND a < {lo + (hi - lo) // 2}")
    return await sql(client, f"DELETE FROM {db}.t WHERE a >= {lo} AND a < {lo + (hi - lo) // 4}")


def check_history(ec: Any, span: tuple[bytes, bytes], rec: Recorder, start_ts: int, upto: int) -> int:
    expected = mvcc_history(ec, span[0], span[1], start_ts, upto)
    assert expected, "the test wrote nothing"
    return assert_exactly_once_after_dedup(rec.keys(SPAN), expected, upto)


def test_changes_arrive_and_resolved_ts_advances(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)
    before = asyncio.run(sql(upstream_client, f"INSERT INTO {fresh_db}.t VALUES (-500, 1), (500, 1)"))
    start_ts = upstream_client.get_ts()

    async def main() -> None:
        async with pulling(upstream_cluster.pd_addr, span, start_ts) as (client, rec, reg):
            last = await writes(upstream_client, fresh_db, -50, 50)
            await caught_up(client, rec, last)
            # The change before the start ts is not pulled; everything after it is, exactly once.
            assert all(c.commit_ts > start_ts for c in rec.changes[SPAN])
            # <=: an async-commit or 1PC commit ts is max_ts + 1, the very ts PD may hand out next
            assert before <= start_ts
            assert check_history(upstream_cluster, span, rec, start_ts, last) == 0
            lock = client.span_lock(SPAN)
            assert lock.locked_count == 2 and lock.initialized_count == 2 and lock.holes == 0
            first = client.span_resolved_ts(SPAN)
            # A quiet span keeps advancing (the ticker), and the exported metrics follow it.
            await until(lambda: client.span_resolved_ts(SPAN) > first, 5, "a quiet span to advance")
            assert rec.resolved[SPAN] == sorted(set(rec.resolved[SPAN]))
            assert counter(reg, "cdcflow_puller_changes_emitted_total") == len(rec.changes[SPAN])
            assert counter(reg, "cdcflow_puller_regions", span=str(SPAN), state="initialized") == 2
            assert counter(reg, "cdcflow_puller_holes", span=str(SPAN)) == 0
            assert counter(reg, "cdcflow_puller_stream_paused", area="default") == 0
            assert counter(reg, "cdcflow_puller_events_received_total", kind="rows") >= len(rec.changes[SPAN])

    asyncio.run(main())


def test_resolved_ts_of_a_span_come_batched(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    """The span's regions share one request id, so the store resolves them in one message per round, not one
    message per region (what 500,000 regions need)."""
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)
    upstream_client.execute(f"SPLIT TABLE {fresh_db}.t BETWEEN (0) AND (100000) REGIONS 200")
    start_ts = upstream_client.get_ts()

    async def main() -> None:
        async with pulling(upstream_cluster.pd_addr, span, start_ts) as (client, rec, reg):
            last = await writes(upstream_client, fresh_db, 0, 2000)
            await caught_up(client, rec, last)
            lock = client.span_lock(SPAN)
            assert lock.locked_count >= 200 and lock.initialized_count == lock.locked_count
            first = client.span_resolved_ts(SPAN)
            await until(lambda: client.span_resolved_ts(SPAN) > first, 5, "the span to advance again")
            check_history(upstream_cluster, span, rec, start_ts, last)
            messages = counter(reg, "cdcflow_puller_events_received_total", kind="resolved")
            regions = counter(reg, "cdcflow_puller_events_received_total", kind="resolved_regions")
            # Regions initialize at different moments, so early rounds split by ts; on average a message
            # still carries a large share of the span's regions.
            print(f"resolved messages {messages:.0f}, regions in them {regions:.0f}")
            assert messages > 0 and regions / messages >= 20, (messages, regions)

    asyncio.run(main())


def test_scan_from_an_old_checkpoint_then_unsubscribe(upstream_cluster: Any, upstream_client: Any,
                                                       fresh_db: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)
    start_ts = upstream_client.get_ts()
    last = asyncio.run(writes(upstream_client, fresh_db, -20, 20))

    async def main() -> None:
        async with pulling(upstream_cluster.pd_addr, span, start_ts) as (client, rec, _):
            await caught_up(client, rec, last)
            check_history(upstream_cluster, span, rec, start_ts, last)
            await client.unsubscribe(SPAN)
            with pytest.raises(KeyError):
                client.span_resolved_ts(SPAN)
            count = upstream_cluster.cluster.cdc.subscription_count
            await until(lambda: upstream_cluster.call(count) == 0, 10, "the store to drop the deregistered regions")

    asyncio.run(main())


async def _fault_under_feed(
    ec: Any, upstream_client: Any, db: str, span: tuple[bytes, bytes], fault: Callable[[], Awaitable[None]],
    kinds: dict[str, int], **kw: Any,
) -> tuple[Recorder, CollectorRegistry, SubscriptionClient]:
    """Write, inject ``fault`` under the open feed, write again; everything arrives and the errors were seen."""
    start_ts = upstream_client.get_ts()
    async with pulling(ec.pd_addr, span, start_ts, **kw) as (client, rec, reg):
        first = await writes(upstream_client, db, -100, 0)
        await caught_up(client, rec, first)
        await fault()
        mid = await writes(upstream_client, db, 0, 100)
        await until(lambda: all(counter(reg, ERRORS, kind=k) >= n for k, n in kinds.items()), 20,
                    f"region errors {kinds}", client.check)
        last = await writes(upstream_client, db, 100, 200)
        await caught_up(client, rec, max(mid, last))
        check_history(ec, span, rec, start_ts, last)
        assert client.span_lock(SPAN).holes == 0 or await until(lambda: client.span_lock(SPAN).holes == 0, 10)
    return rec, reg, client


def test_split_under_an_open_feed_is_redivided(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)

    async def split() -> None:
        await asyncio.to_thread(upstream_cluster.faults.split_table, fresh_db, "t", handles=[-50, 50, 150])

    async def main() -> None:
        _, reg, _ = await _fault_under_feed(
            upstream_cluster, upstream_client, fresh_db, span, split, {"epoch_not_match": 2})
        assert counter(reg, "cdcflow_puller_regions", span=str(SPAN), state="initialized") == 5

    asyncio.run(main())


def test_merge_under_an_open_feed(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)
    upstream_cluster.faults.split_table(fresh_db, "t", handles=[-50, 50])

    async def merge() -> None:
        await asyncio.to_thread(upstream_cluster.faults.merge_table, fresh_db, "t")

    asyncio.run(_fault_under_feed(upstream_cluster, upstream_client, fresh_db, span, merge,
                                  {"region_not_found": 1, "epoch_not_match": 1}))


def test_server_is_busy_is_retried_later(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)

    async def busy_then_split() -> None:
        # Busy only refuses new registrations: the split makes the client register again.
        for store in list(upstream_cluster.cluster.stores):
            await asyncio.to_thread(upstream_cluster.faults.busy, store, 0.5)
        await asyncio.to_thread(upstream_cluster.faults.split_table, fresh_db, "t", handles=[50])

    asyncio.run(_fault_under_feed(upstream_cluster, upstream_client, fresh_db, span, busy_then_split,
                                  {"epoch_not_match": 1, "server_is_busy": 1}))


def test_dropped_streams_become_holes_and_are_rerequested(upstream_cluster: Any, upstream_client: Any,
                                                          fresh_db: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)

    async def drop() -> None:
        assert await asyncio.to_thread(upstream_cluster.faults.drop_streams, 0) >= 1

    asyncio.run(_fault_under_feed(upstream_cluster, upstream_client, fresh_db, span, drop, {"stream_broken": 2}))


def test_stopped_store_is_retried_with_backoff_until_it_starts(upstream_cluster: Any, upstream_client: Any,
                                                               fresh_db: str) -> None:
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)

    async def main() -> None:
        start_ts = upstream_client.get_ts()
        async with pulling(upstream_cluster.pd_addr, span, start_ts) as (client, rec, reg):
            first = await writes(upstream_client, fresh_db, -100, 0)
            await caught_up(client, rec, first)
            victim = upstream_cluster.faults.table_regions(fresh_db, "t")[0].leader_store_id
            await asyncio.to_thread(upstream_cluster.faults.stop_store, victim)
            try:
                last = await writes(upstream_client, fresh_db, 0, 100)
                # Several failed attempts while the store is down: the range stays a hole, the span's ts holds.
                await until(lambda: counter(reg, ERRORS, kind="stream_broken") >= 4, 20, "retries", client.check)
                held = client.span_resolved_ts(SPAN)
                assert held < last
                assert client.span_lock(SPAN).holes >= 1
            finally:
                await asyncio.to_thread(upstream_cluster.faults.start_store, victim)
            await caught_up(client, rec, last)
            check_history(upstream_cluster, span, rec, start_ts, last)

    asyncio.run(main())


def test_start_ts_below_the_gc_safe_point_fails_the_subscription() -> None:
    # TiKV serves any checkpoint (GC'd history is just absent): the client must check PD's GC safe point.
    # A GC pass moves the safe point for good: it gets a cluster of its own so that the shared
    # session cluster keeps serving reads from old timestamps to the other tests.
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    with EmbeddedCluster(ClusterConfig(min_ts_interval_ms=50)) as upstream_cluster, \
            UpstreamClient(upstream_cluster.pd_addr) as upstream_client:
        upstream_client.execute("CREATE DATABASE gcdb")
        _, span = make_table(upstream_client, upstream_cluster, "gcdb")
        upstream_cluster.faults.gc()  # safe point: now - GC life time (10 min)
        too_old = tso.compose(tso.physical_ms(upstream_client.get_ts()) - 3_600_000, 0)
        _expect_gc_failure(upstream_cluster.pd_addr, span, too_old)


def _expect_gc_failure(pd_addr: str, span: tuple[bytes, bytes], too_old: int) -> None:
    async def main() -> None:
        rec = Recorder()
        reg = CollectorRegistry()
        client = SubscriptionClient(pd_addr, rec.on_change, registry=reg)
        try:
            await client.subscribe(SPAN, span[0], span[1], too_old)
            await until_failed(client, r"^snapshot lost by GC: span 1 starts at ts \d+, earlier than PD")
            assert client.span_resolved_ts(SPAN) == too_old
            assert not rec.changes
            assert counter(reg, ERRORS, kind="snapshot_lost_by_gc") >= 1
        finally:
            await client.close()

    asyncio.run(main())


def test_memory_pause_and_released_path_resync(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    """A tiny area quota pauses the receivers; releasing the span's path (as the watchdog does for a blocked
    consumer) drops its pending events, and the RESYNC re-requests the regions that lost data: nothing is lost."""
    _, span = make_table(upstream_client, upstream_cluster, fresh_db)
    start_ts = upstream_client.get_ts()
    last = 0
    for lo in range(-1500, 1500, 500):
        last = asyncio.run(writes(upstream_client, fresh_db, lo, lo + 500))

    async def main() -> None:
        async with pulling(upstream_cluster.pd_addr, span, start_ts, max_pending_bytes=64 << 10) as (
            client, rec, reg,
        ):
            # The consumer stalls, as behind a blocked downstream, until the area has paused: polling for a
            # pause while the consumer runs could miss every one (each lasts milliseconds).
            stream, gate = client.stream, asyncio.Event()
            consume = stream.next_batch

            async def stalled(path_id: Any, max_events: int = 64) -> Any:
                await gate.wait()
                return await consume(path_id, max_events)

            stream.next_batch = stalled  # type: ignore[method-assign]
            deadline = time.monotonic() + 60
            released = 0
            while client.span_resolved_ts(SPAN) < last:
                client.check()
                if not gate.is_set() and stream.is_paused("default"):
                    stream.tick(now_ms=1 << 62)  # every non-empty path counts as blocked
                    released = int(counter(reg, "cdcflow_puller_stream_paths_released_total", area="default"))
                    gate.set()
                assert gate.is_set() or time.monotonic() < deadline, "the area never paused"
                await asyncio.sleep(0.001)
            assert released >= 1
            assert counter(reg, ERRORS, kind="resync") >= 1
            # The client ended those requests while the store was still sending: each region re-requested
            # after it took a fresh request id, so late events of the ended request cannot reach the new one.
            span_state = client._spans[SPAN]
            assert span_state.region_request_ids
            assert span_state.request_id not in span_state.region_request_ids.values()
            assert counter(reg, "cdcflow_puller_stream_events_dropped_total", area="default", kind="data") >= 1
            check_history(upstream_cluster, span, rec, start_ts, last)

    asyncio.run(main())
