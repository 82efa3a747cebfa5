"""One store's multiplexed EventFeed stream (``cdc_core.puller.region_request_worker.StoreWorker``) against a mock
``ChangeData`` service in this process: what it opens and sends, what it hands on, and how a stream ends -- the
store closing it, an error, a store without ``EventFeedV2``, a corrupt message; and where the receive loop routes
what it received (``RegionEventDispatcher``): into the paths of the spans whose live requests it names."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from cdc_core.codec.memcomparable import decode_key
from cdc_core.proto import cdcpb_pb2, kvrpcpb_pb2
from cdc_core.puller.client_metrics import ClientMetrics
from cdc_core.puller.event_stream import EVENT_OVERHEAD_BYTES, EventKind, EventStream
from cdc_core.puller.range_lock import RangeLock
from cdc_core.puller.region_request_worker import (
    CHANNEL_OPTIONS,
    CLIENT_VERSION,
    RECEIVED_KINDS,
    RegionEventDispatcher,
    StoreWorker,
    region_request,
)
from cdc_core.puller.region_state import RegionState, RegionTarget
from cdc_core.puller.subscribed_span import SubscribedSpan
from cdc_core.puller.ts_advancer import ResolvedTsAdvancer
from testkit.mock_store import MockStore, initialized, serving


class Owner:
    """What a subscription client gives a worker: ``dispatch`` and ``on_stream_broken``, recorded; ``until`` waits
    for a condition on what it and the store recorded."""

    def __init__(self) -> None:
        self.events: list[tuple[cdcpb_pb2.ChangeDataEvent, int]] = []
        self.broken: list[tuple[list[RegionState], str]] = []
        self.changed = asyncio.Event()

    async def dispatch(self, worker: StoreWorker, resp: cdcpb_pb2.ChangeDataEvent, size: int) -> None:
        self.events.append((resp, size))
        self.changed.set()

    async def on_broken(self, worker: StoreWorker, states: list[RegionState], why: str) -> None:
        self.broken.append((states, why))
        self.changed.set()

    async def until(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


async def _served(store: MockStore, body: Callable[[StoreWorker, Owner, MockStore], Any]) -> None:
    async with serving(store) as addr:
        channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
        owner = Owner()
        store.notify = owner.changed
        worker = StoreWorker(addr, 0, channel, owner.dispatch, owner.on_broken)
        try:
            await body(worker, owner, store)
        finally:
            await worker.close()
            await channel.close()


def _region(request_id: int, region_id: int) -> tuple[RegionState, cdcpb_pb2.ChangeDataRequest]:
    start, end = bytes([region_id]), bytes([region_id + 1])
    target = RegionTarget(region_id=region_id, version=1, conf_ver=1, leader_store_id=1, start_key=start, end_key=end)
    locked = RangeLock(start, end, 100).try_lock(start, end, region_id, 1, tag=request_id).state
    assert locked is not None
    req = cdcpb_pb2.ChangeDataRequest(header=cdcpb_pb2.Header(cluster_id=7, ticdc_version=CLIENT_VERSION),
                                      region_id=region_id, request_id=request_id, checkpoint_ts=100,
                                      start_key=start, end_key=end)
    return RegionState(request_id, 1, target, locked), req


def test_it_opens_one_multiplexed_stream_and_hands_on_each_message_with_its_wire_size() -> None:
    async def body(worker: StoreWorker, owner: Owner, store: MockStore) -> None:
        states = [_region(11, r) for r in (2, 3)]
        for state, req in states:
            worker.register(state, req)
        await owner.until(lambda: len(owner.events) == 2)
        assert store.calls == [("EventFeedV2", store.calls[0][1])]
        assert store.calls[0][1]["features"] == "stream-multiplexing"
        assert [(r.region_id, r.request_id, r.header.ticdc_version) for r in store.requests] == [
            (2, 11, CLIENT_VERSION), (3, 11, CLIENT_VERSION)]
        for (resp, size), region in zip(owner.events, (2, 3), strict=True):
            assert resp.events[0].region_id == region and size == resp.ByteSize()
        assert worker.states == {(11, 2): states[0][0], (11, 3): states[1][0]} and states[0][0].worker is worker
        # a region error's request is taken: forgotten, nothing sent; a deregistration is sent to the store
        assert worker.take(11, 2) is states[0][0] and worker.take(11, 2) is None
        assert worker.deregister(states[1][0]) and not worker.deregister(states[1][0])
        await owner.until(lambda: len(store.requests) == 3)
        last = store.requests[-1]
        assert last.WhichOneof("request") == "deregister" and (last.region_id, last.request_id) == (3, 11)
        assert worker.states == {} and worker.streams_opened == 1 and not owner.broken

    asyncio.run(_served(MockStore(reply=initialized), body))


def test_a_broken_stream_hands_back_every_request_and_the_next_one_opens_another() -> None:
    async def body(worker: StoreWorker, owner: Owner, store: MockStore) -> None:
        a, b = _region(11, 2), _region(12, 3)
        worker.register(*a)
        worker.register(*b)
        await owner.until(lambda: len(owner.broken) == 1)
        states, why = owner.broken[0]
        assert set(states) == {a[0], b[0]} and worker.states == {}
        assert why == "UNAVAILABLE: store is shutting down"
        store.end_after, store.fail = None, None
        seen = len(owner.events)  # what the first stream carried before it broke
        c = _region(13, 4)
        worker.register(*c)
        await owner.until(lambda: len(owner.events) == seen + 1)
        assert owner.events[-1][0].events[0].region_id == 4
        assert worker.streams_opened == 2 and worker.states == {(13, 4): c[0]}

    asyncio.run(_served(MockStore(reply=initialized, end_after=2, fail=grpc.StatusCode.UNAVAILABLE), body))


def test_a_store_closing_the_stream_breaks_it_too() -> None:
    async def body(worker: StoreWorker, owner: Owner, store: MockStore) -> None:
        a = _region(11, 2)
        worker.register(*a)
        await owner.until(lambda: len(owner.broken) == 1)
        assert owner.broken[0] == ([a[0]], "the store closed the stream") and len(owner.events) == 1

    asyncio.run(_served(MockStore(reply=initialized, end_after=1), body))


def test_a_store_without_event_feed_v2_is_asked_again_over_event_feed() -> None:
    async def body(worker: StoreWorker, owner: Owner, store: MockStore) -> None:
        a = _region(11, 2)
        worker.register(*a)
        await owner.until(lambda: len(owner.broken) == 1)
        assert owner.broken[0][0] == [a[0]] and owner.broken[0][1].startswith("UNIMPLEMENTED")
        assert worker.v2 is False
        worker.register(*a)  # the owner re-requests what came back
        await owner.until(lambda: len(owner.events) == 1)
        assert [m for m, _ in store.calls] == ["EventFeedV2", "EventFeed"]
        assert "features" not in store.calls[1][1]

    asyncio.run(_served(MockStore(reply=initialized, v2=False), body))


def test_a_corrupt_message_is_a_broken_stream_said_plainly() -> None:
    async def body(worker: StoreWorker, owner: Owner, store: MockStore) -> None:
        worker.register(*_region(11, 2))
        await owner.until(lambda: len(owner.broken) == 1)
        why = owner.broken[0][1]
        assert why.startswith("DATA_LOSS: corrupt ChangeDataEvent (4 bytes)"), why
        assert not owner.events

    asyncio.run(_served(MockStore(reply=lambda req: [b"\xff\xff\xff\xff"]), body))


def test_a_region_request_names_its_part_of_the_span_encoded_and_resumes_at_its_hole() -> None:
    lock = RangeLock(b"t\x00", b"t\xff", 100)
    first = lock.try_lock(b"t\x00", b"t\x80", 5, 3, tag=9).state
    assert first is not None
    lock.unlock(first, 150)  # the range stopped at 150: a re-request resumes there
    locked = lock.try_lock(b"t\x00", b"t\x80", 5, 4, tag=9).state
    assert locked is not None
    state = RegionState(9, 1, RegionTarget(5, 4, 2, 1, b"t\x00", b"t\x80"), locked)
    req = region_request(77, state)
    assert (req.header.cluster_id, req.header.ticdc_version) == (77, CLIENT_VERSION)
    assert (req.region_id, req.request_id, req.checkpoint_ts) == (5, 9, 150)
    assert (req.region_epoch.version, req.region_epoch.conf_ver) == (4, 2)
    assert (decode_key(req.start_key), decode_key(req.end_key)) == (b"t\x00", b"t\x80")
    assert req.extra_op == kvrpcpb_pb2.ReadOldValue and req.WhichOneof("request") == "register"


class _Worker:
    """What the dispatcher reads of a worker: its live requests, and ``take`` for a region's error."""

    def __init__(self, *states: RegionState) -> None:
        self.states = {(st.request_id, st.region_id): st for st in states}

    def take(self, request_id: int, region_id: int) -> RegionState | None:
        return self.states.pop((request_id, region_id), None)


def _dispatching(max_pending_bytes: int = 1 << 20) -> tuple[RegionEventDispatcher, dict[int, SubscribedSpan],
                                                            list[BaseException], CollectorRegistry]:
    reg = CollectorRegistry()
    stream = EventStream(registry=reg)
    stream.add_area("a", max_pending_bytes)
    spans: dict[int, SubscribedSpan] = {}
    failures: list[BaseException] = []
    m = ClientMetrics.for_registry(reg)
    d = RegionEventDispatcher(stream, "a", spans, {}, {k: m.events.labels(k) for k in RECEIVED_KINDS}, failures.append)
    return d, spans, failures, reg


def _span(d: RegionEventDispatcher, span_id: int, request_id: int, regions: list[int]) -> tuple[SubscribedSpan,
                                                                                              list[RegionState]]:
    lo, hi = bytes([span_id, 0]), bytes([span_id, 255])
    lock = RangeLock(lo, hi, 100)
    span = SubscribedSpan(span_id, lo, hi, 100, ("a", span_id), lock,
                          ResolvedTsAdvancer(lock, span=str(span_id), registry=CollectorRegistry()), request_id)
    d.stream.add_path("a", span.path)
    states = []
    for r in regions:
        start, end = bytes([span_id, r]), bytes([span_id, r + 1])
        locked = lock.try_lock(start, end, r, 1, tag=request_id).state
        assert locked is not None
        states.append(span.regions.setdefault(r, RegionState(request_id, span_id, RegionTarget(r, 1, 1, 1, start, end),
                                                             locked)))
    d.spans[span_id] = span  # type: ignore[index]
    d.span_of_request[request_id] = span  # type: ignore[index]
    return span, states


def _received(reg: CollectorRegistry, kind: str) -> float:
    return reg.get_sample_value("cdcflow_puller_events_received_total", {"kind": kind}) or 0.0


def test_entries_and_errors_go_to_the_span_of_their_live_request_and_the_rest_is_counted_stale() -> None:
    async def main() -> None:
        d, _, failures, reg = _dispatching()
        span, (a, b) = _span(d, 1, 11, [2, 3])
        worker = _Worker(a, b)
        row = cdcpb_pb2.Event.Row(type=cdcpb_pb2.Event.COMMITTED, key=b"\x01\x02k", start_ts=101, commit_ts=102)
        msg = cdcpb_pb2.ChangeDataEvent(events=[
            cdcpb_pb2.Event(region_id=2, request_id=11, entries=cdcpb_pb2.Event.Entries(entries=[row, row])),
            cdcpb_pb2.Event(region_id=2, request_id=99, entries=cdcpb_pb2.Event.Entries(entries=[row])),  # ended
            cdcpb_pb2.Event(region_id=3, request_id=11, error=cdcpb_pb2.Error(epoch_not_match={})),
        ])
        await d.dispatch(worker, msg, 300)  # type: ignore[arg-type]
        got = d.stream.pop_batch(span.path)
        assert [(e.kind, e.region_id) for e in got] == [(EventKind.DATA, 2), (EventKind.ERROR, 3)]
        assert got[0].size == 100 + EVENT_OVERHEAD_BYTES  # its third of the message's wire size, and the event's cost
        assert got[0].payload.request_id == 11
        request_id, err = got[1].payload
        assert request_id == 11 and err.HasField("epoch_not_match")
        assert worker.states == {(11, 2): a}  # the errored request is taken: its late events are stale
        assert (_received(reg, "entries"), _received(reg, "rows"), _received(reg, "error"),
                _received(reg, "stale")) == (1, 2, 1, 1)
        assert not failures

    asyncio.run(main())


def test_batched_resolved_ts_reach_only_the_regions_whose_live_request_has_the_id() -> None:
    async def main() -> None:
        d, _, _, reg = _dispatching()
        span, (a, b, c) = _span(d, 1, 11, [2, 3, 4])
        other, (x,) = _span(d, 2, 12, [5])
        # region 4's request was ended and re-requested under a fresh id: late resolved ts of id 11 must not reach it
        span.lock.unlock(c.locked)
        fresh = span.lock.try_lock(c.start_key, c.end_key, 4, 2, tag=13).state
        assert fresh is not None
        worker = _Worker(a, b, x)
        await d.dispatch(worker, cdcpb_pb2.ChangeDataEvent(  # type: ignore[arg-type]
            resolved_ts=cdcpb_pb2.ResolvedTs(regions=[2, 3, 4, 5], ts=150, request_id=11)), 40)
        (ev,) = d.stream.pop_batch(span.path)
        assert ev.kind is EventKind.RESOLVED and ev.region_ids is not None and ev.region_ids.tolist() == [2, 3]
        assert d.stream.pop_batch(other.path) == []
        # Without a request id (EventFeed v1): every region of the message this worker serves, by span.
        await d.dispatch(worker, cdcpb_pb2.ChangeDataEvent(  # type: ignore[arg-type]
            resolved_ts=cdcpb_pb2.ResolvedTs(regions=[3, 5, 6], ts=160)), 40)
        (mine,), (theirs,) = d.stream.pop_batch(span.path), d.stream.pop_batch(other.path)
        assert mine.region_ids is not None and mine.region_ids.tolist() == [3]
        assert theirs.region_ids is not None and theirs.region_ids.tolist() == [5]
        assert np.asarray(theirs.ts).max() == 160
        assert (_received(reg, "resolved"), _received(reg, "resolved_regions")) == (2, 7)

    asyncio.run(main())


def test_a_receiver_waits_while_the_area_is_paused_and_keeps_the_order() -> None:
    async def main() -> None:
        d, _, _, _ = _dispatching(max_pending_bytes=1000)
        span, (a,) = _span(d, 1, 11, [2])
        worker = _Worker(a)
        row = cdcpb_pb2.Event.Row(type=cdcpb_pb2.Event.COMMITTED, key=b"\x01\x02k", start_ts=101, commit_ts=102)

        def entries(n: int) -> cdcpb_pb2.ChangeDataEvent:
            return cdcpb_pb2.ChangeDataEvent(events=[cdcpb_pb2.Event(
                region_id=2, request_id=11, entries=cdcpb_pb2.Event.Entries(entries=[row] * n))])

        await d.dispatch(worker, entries(1), 900)  # type: ignore[arg-type]  # 90 % of the quota: paused
        assert d.stream.is_paused("a")
        second = asyncio.create_task(d.dispatch(worker, entries(2), 100))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert not second.done()  # held back: the store waits on gRPC flow control
        first = d.stream.pop_batch(span.path)
        d.stream.done(span.path)
        await asyncio.wait_for(second, 5)
        later = d.stream.pop_batch(span.path)
        assert [len(e.payload.entries.entries) for e in (*first, *later)] == [1, 2]

    asyncio.run(main())


def test_a_broken_stream_hands_its_live_requests_errors_to_their_spans() -> None:
    async def main() -> None:
        d, _, failures, _ = _dispatching()
        span, (a, b) = _span(d, 1, 11, [2, 3])
        b.stale = True  # ended by the client already: nothing to hand on
        await d.push_errors([a, b], "broken")
        (ev,) = d.stream.pop_batch(span.path)
        assert (ev.kind, ev.region_id, ev.payload) == (EventKind.ERROR, 2, (11, "broken"))
        assert not failures

    asyncio.run(main())


def test_a_bug_in_routing_stops_the_client_visibly() -> None:
    async def main() -> None:
        d, spans, failures, _ = _dispatching()
        _, (a,) = _span(d, 1, 11, [2])
        d.stream.remove_path(spans[1].path)  # a path gone under a live request: a bug
        msg = cdcpb_pb2.ChangeDataEvent(events=[cdcpb_pb2.Event(region_id=2, request_id=11,
                                                                error=cdcpb_pb2.Error(epoch_not_match={}))])
        with pytest.raises(KeyError):
            await d.dispatch(_Worker(a), msg, 10)  # type: ignore[arg-type]
        assert len(failures) == 1 and isinstance(failures[0], KeyError)

    asyncio.run(main())
