"""Region scheduling (``cdc_core.puller.region_request_scheduler``) against a PD stand-in and a mock ``ChangeData``
store in this process: a span's range cut at PD's regions and locked, the requests sent highest priority first and in
submission order within one, gaps and unknown stores retried, a broken stream's store looked up again, and an ended
request re-requested as ``region_failure`` decides -- or the client stopped."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
from prometheus_client import CollectorRegistry

from cdc_core.codec.memcomparable import decode_key
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.backoff import Backoff
from cdc_core.puller.client_metrics import ClientMetrics
from cdc_core.puller.event_stream import EventKind, EventStream
from cdc_core.puller.pd_client import RegionInfo
from cdc_core.puller.range_lock import RangeLock
from cdc_core.puller.region_failure import HIGH_PRIORITY, LOW_PRIORITY, ErrorKind, StreamBroken
from cdc_core.puller.region_request_scheduler import RegionRequestScheduler
from cdc_core.puller.region_request_worker import RECEIVED_KINDS, RegionEventDispatcher
from cdc_core.puller.region_state import RegionTarget
from cdc_core.puller.subscribed_span import SubscribedSpan
from cdc_core.puller.ts_advancer import ResolvedTsAdvancer
from testkit.mock_store import MockStore, initialized, serving

START, END = b"t\x00", b"t\xff"
START_TS = 100


@dataclass
class FakePD:
    """PD as the scheduler asks it: ``scan_regions`` answers each call with the next of ``layouts`` (the last one
    again once they run out), ``store_address`` from ``stores`` or, ``unknown`` times first, as unknown."""

    layouts: list[list[RegionInfo]]
    stores: dict[int, str]
    unknown: int = 0
    scans: list[tuple[bytes, bytes]] = field(default_factory=list)
    lookups: list[int] = field(default_factory=list)

    async def scan_regions(self, start: bytes, end: bytes) -> list[RegionInfo]:
        self.scans.append((start, end))
        layout = self.layouts[min(len(self.scans), len(self.layouts)) - 1]
        return [r for r in layout if (not r.end_key or r.end_key > start) and (not end or r.start_key < end)]

    async def store_address(self, store_id: int) -> str:
        self.lookups.append(store_id)
        if self.unknown:
            self.unknown -= 1
            raise UpstreamError(f"store {store_id} not found")
        return self.stores[store_id]


def _region(rid: int, start: bytes, end: bytes, version: int = 1, leader: int = 1) -> RegionInfo:
    return RegionInfo(rid, start, end, conf_ver=1, version=version, leader_store_id=leader)


@dataclass
class Setup:
    scheduler: RegionRequestScheduler
    span: SubscribedSpan
    stream: EventStream
    failures: list[BaseException]
    registry: CollectorRegistry
    pd: FakePD

    def errors(self, kind: ErrorKind) -> float:
        return self.registry.get_sample_value("cdcflow_puller_region_errors_total", {"kind": kind.value}) or 0.0


async def _scheduling(pd: FakePD, body: Callable[[Setup], Awaitable[None]], *, start_sending: bool = True) -> None:
    reg = CollectorRegistry()
    m = ClientMetrics.for_registry(reg)
    stream = EventStream(registry=reg)
    stream.add_area("a")
    spans: dict[int, SubscribedSpan] = {}
    span_of_request: dict[int, SubscribedSpan] = {}
    failures: list[BaseException] = []
    ids = itertools.count(1)
    dispatcher = RegionEventDispatcher(stream, "a", spans, span_of_request,
                                       {k: m.events.labels(k) for k in RECEIVED_KINDS}, failures.append)
    scheduler = RegionRequestScheduler(
        pd, dispatcher, spans=spans, span_of_request=span_of_request, request_ids=ids,  # type: ignore[arg-type]
        workers_per_store=1, backoff=Backoff(base_ms=1, max_ms=2),
        errors={k: m.errors.labels(k.value) for k in ErrorKind}, requests=m.requests, fail=failures.append)
    scheduler.cluster_id = 7
    lock = RangeLock(START, END, START_TS)
    request_id = next(ids)
    span = SubscribedSpan(1, START, END, START_TS, ("a", 1), lock,
                          ResolvedTsAdvancer(lock, span="1", registry=CollectorRegistry()), request_id)
    spans[1] = span_of_request[request_id] = span
    stream.add_path("a", span.path)
    sender = asyncio.create_task(scheduler.run()) if start_sending else None
    try:
        await body(Setup(scheduler, span, stream, failures, reg, pd))
    finally:
        if sender is not None:
            sender.cancel()
        for t in span.tasks:
            t.cancel()
        await scheduler.close()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def test_a_range_is_cut_at_pd_regions_locked_and_each_part_requested_from_its_leader() -> None:
    store = MockStore(reply=initialized)

    async def main() -> None:
        async with serving(store) as addr:
            pd = FakePD([[_region(2, b"", b"t\x40"), _region(3, b"t\x40", b"t\x80", version=5),
                          _region(4, b"t\x80", b"")]], {1: addr})

            async def body(s: Setup) -> None:
                s.scheduler.schedule_range(s.span, START, END, attempt=0, delay=0.0)
                await until(lambda: len(store.requests) == 3)
                got = [(r.region_id, decode_key(r.start_key), decode_key(r.end_key), r.region_epoch.version,
                        r.checkpoint_ts, r.request_id, r.header.cluster_id) for r in store.requests]
                assert got == [(2, START, b"t\x40", 1, START_TS, 1, 7), (3, b"t\x40", b"t\x80", 5, START_TS, 1, 7),
                               (4, b"t\x80", END, 1, START_TS, 1, 7)]  # cut to the span, in key order
                assert sorted(s.span.regions) == [2, 3, 4] and s.span.lock.holes == 0
                assert all(st.store_addr == addr for st in s.span.regions.values())
                assert s.registry.get_sample_value("cdcflow_puller_region_requests_total") == 3
                assert pd.lookups == [1]  # the store's address is looked up once
                assert not s.failures

            await _scheduling(pd, body)

    asyncio.run(main())


def test_requests_go_highest_priority_first_and_in_submission_order_within_one() -> None:
    store = MockStore(reply=initialized)

    async def main() -> None:
        async with serving(store) as addr:
            pd = FakePD([[_region(r, bytes([0x74, 0x20 * (r - 2)]) if r > 2 else b"",
                                  bytes([0x74, 0x20 * (r - 1)]) if r < 8 else b"") for r in range(2, 9)]], {1: addr})

            async def body(s: Setup) -> None:
                def target(r: int) -> RegionTarget:
                    info = next(i for i in pd.layouts[0] if i.id == r)
                    return RegionTarget(r, 1, 1, 1, max(info.start_key, START), info.end_key or END)

                for r, priority in ((2, LOW_PRIORITY), (3, HIGH_PRIORITY), (4, LOW_PRIORITY), (5, HIGH_PRIORITY)):
                    s.scheduler.schedule_region(s.span, target(r), attempt=0, priority=priority, delay=0.0)
                await until(lambda: len(s.span.regions) == 4)  # all four locked and queued before any is sent
                sender = asyncio.create_task(s.scheduler.run())
                try:
                    await until(lambda: len(store.requests) == 4)
                finally:
                    sender.cancel()
                assert [r.region_id for r in store.requests] == [3, 5, 2, 4]

            await _scheduling(pd, body, start_sending=False)

    asyncio.run(main())


def test_a_gap_pd_leaves_is_loaded_again_until_it_is_covered() -> None:
    store = MockStore(reply=initialized)

    async def main() -> None:
        async with serving(store) as addr:
            first = [_region(2, b"", b"t\x40"), _region(4, b"t\x80", b"")]  # (t\x40, t\x80) not in PD yet
            later = [_region(2, b"", b"t\x40"), _region(3, b"t\x40", b"t\x80"), _region(4, b"t\x80", b"")]
            pd = FakePD([first, later], {1: addr})

            async def body(s: Setup) -> None:
                s.scheduler.schedule_range(s.span, START, END, attempt=0, delay=0.0)
                await until(lambda: len(store.requests) == 3)
                assert pd.scans == [(START, END), (b"t\x40", b"t\x80")]
                assert sorted(r.region_id for r in store.requests) == [2, 3, 4] and s.span.lock.holes == 0

            await _scheduling(pd, body)

    asyncio.run(main())


def test_a_store_pd_cannot_name_ends_the_request_and_its_range_is_requested_again() -> None:
    store = MockStore(reply=initialized)

    async def main() -> None:
        async with serving(store) as addr:
            pd = FakePD([[_region(2, b"", b"")]], {1: addr}, unknown=1)

            async def body(s: Setup) -> None:
                s.scheduler.schedule_range(s.span, START, END, attempt=0, delay=0.0)
                await until(lambda: len(store.requests) == 1)
                assert s.errors(ErrorKind.STORE) == 1 and pd.lookups == [1, 1] and len(pd.scans) == 2
                assert store.requests[0].checkpoint_ts == START_TS  # the hole it left, at the span's start

            await _scheduling(pd, body)

    asyncio.run(main())


def test_a_broken_stream_hands_errors_to_the_span_and_the_store_is_looked_up_again() -> None:
    store = MockStore(reply=initialized, end_after=1, fail=grpc.StatusCode.UNAVAILABLE)

    async def main() -> None:
        async with serving(store) as addr:
            pd = FakePD([[_region(2, b"", b"")]], {1: addr})

            async def body(s: Setup) -> None:
                s.scheduler.schedule_range(s.span, START, END, attempt=0, delay=0.0)
                events: list[Any] = []
                await until(lambda: bool(events.extend(s.stream.pop_batch(s.span.path)))
                            or any(e.kind is EventKind.ERROR for e in events))
                err = next(e for e in events if e.kind is EventKind.ERROR)
                request_id, broken = err.payload
                assert request_id == 1 and isinstance(broken, StreamBroken) and broken.kind is ErrorKind.STREAM
                assert broken.why.startswith(f"stream to store {addr} broke: UNAVAILABLE")
                # What the span's handler does with it: the request ends, its range comes back from PD.
                store.end_after = store.fail = None
                s.scheduler.end_region(s.span, s.span.regions[2], ErrorKind.STREAM, broken)
                await until(lambda: len(store.requests) == 2)
                assert pd.lookups == [1, 1] and s.errors(ErrorKind.STREAM) == 1

            await _scheduling(pd, body)

    asyncio.run(main())


def test_an_ended_request_is_re_requested_as_decided_or_the_client_stops() -> None:
    store = MockStore(reply=initialized)

    async def main() -> None:
        async with serving(store) as addr:
            pd = FakePD([[_region(2, b"", b"")]], {1: addr, 2: addr})

            async def body(s: Setup) -> None:
                s.scheduler.schedule_range(s.span, START, END, attempt=0, delay=0.0)
                await until(lambda: len(store.requests) == 1)
                state = s.span.regions[2]
                s.span.lock.set_initialized(state.locked)
                s.span.adv.on_resolved_batch(np.array([2], dtype=np.uint64), 180)
                # not_leader naming store 2: the same region, to its new leader, from its resolved ts; no PD scan
                err = cdcpb_pb2.Error(not_leader={"region_id": 2, "leader": {"store_id": 2}})
                s.scheduler.end_region(s.span, state, ErrorKind.NOT_LEADER, err)
                await until(lambda: len(store.requests) >= 2 and 2 in s.span.regions)
                again = s.span.regions[2]
                assert again is not state and state.stale and again.target.leader_store_id == 2
                assert store.requests[-1].checkpoint_ts == 180 and len(pd.scans) == 1
                s.scheduler.end_region(s.span, state, ErrorKind.NOT_LEADER, err)  # the ended one again: ignored
                assert s.errors(ErrorKind.NOT_LEADER) == 1
                # a store of another cluster: the subscription cannot go on, nothing is re-requested
                bad = cdcpb_pb2.Error(cluster_id_mismatch={"current": 1, "request": 7})
                s.scheduler.end_region(s.span, again, ErrorKind.CLUSTER_ID_MISMATCH, bad)
                assert len(s.failures) == 1 and isinstance(s.failures[0], ChangefeedError)
                assert "belongs to cluster 1" in str(s.failures[0]) and s.span.regions[2] is again

            await _scheduling(pd, body)

    asyncio.run(main())


def test_a_request_the_client_ends_gives_the_region_a_fresh_request_id() -> None:
    store = MockStore(reply=initialized)

    async def main() -> None:
        async with serving(store) as addr:
            pd = FakePD([[_region(2, b"", b"")]], {1: addr})

            async def body(s: Setup) -> None:
                s.scheduler.schedule_range(s.span, START, END, attempt=0, delay=0.0)
                await until(lambda: len(store.requests) == 1)
                state = s.span.regions[2]
                s.scheduler.end_region(s.span, state, ErrorKind.RESYNC, StreamBroken("resync", ErrorKind.RESYNC))
                # the store may still send for (1, 2): the region's next request takes a fresh id
                await until(lambda: len(store.requests) == 3)
                dereg, again = store.requests[1], store.requests[2]
                assert dereg.WhichOneof("request") == "deregister" and (dereg.request_id, dereg.region_id) == (1, 2)
                assert again.request_id == 2 and s.span.region_request_ids == {2: 2}
                assert s.scheduler.span_of_request[2] is s.span

            await _scheduling(pd, body)

    asyncio.run(main())
