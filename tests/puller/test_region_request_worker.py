"""One store's multiplexed EventFeed stream (``cdc_core.puller.region_request_worker.StoreWorker``) against a mock
``ChangeData`` service in this process: what it opens and sends, what it hands on, and how a stream ends -- the
store closing it, an error, a store without ``EventFeedV2``, a corrupt message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.range_lock import RangeLock
from cdc_core.puller.region_request_worker import CHANNEL_OPTIONS, CLIENT_VERSION, StoreWorker
from cdc_core.puller.region_state import RegionState, RegionTarget

Reply = Callable[[cdcpb_pb2.ChangeDataRequest], list[bytes]]


@dataclass
class MockStore:
    """A ``ChangeData`` service: each request it reads is recorded with the call's metadata, and answered with
    what ``reply`` returns (raw bytes: a message, or garbage); ``end`` ends the call after a request (None: keeps
    it open), ``fail`` with that status instead; ``v2`` False answers ``EventFeedV2`` with UNIMPLEMENTED."""

    reply: Reply = lambda req: []
    v2: bool = True
    end_after: int | None = None
    fail: grpc.StatusCode | None = None
    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    requests: list[cdcpb_pb2.ChangeDataRequest] = field(default_factory=list)
    notify: asyncio.Event | None = None  # set on each request read (the owner's: one event to wait on)

    def handler(self, method: str) -> grpc.RpcMethodHandler:
        async def feed(requests: AsyncIterator[cdcpb_pb2.ChangeDataRequest],
                       context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            self.calls.append((method, {k: v for k, v in context.invocation_metadata() or ()}))
            if method == "EventFeedV2" and not self.v2:
                # The status is set and the call returns, not aborted: aborting an async-generator handler before its
                # first message raced grpc's core, which then ended the call INTERNAL ("Internal error from Core")
                # instead of with the status a store without EventFeedV2 gives.
                context.set_code(grpc.StatusCode.UNIMPLEMENTED)
                context.set_details("unknown method EventFeedV2")
                return
            n = 0
            async for req in requests:
                self.requests.append(req)
                if self.notify is not None:
                    self.notify.set()
                for raw in self.reply(req):
                    yield raw
                n += 1
                if self.end_after is not None and n >= self.end_after:
                    if self.fail is not None:
                        context.set_code(self.fail)
                        context.set_details("store is shutting down")
                    return

        return grpc.stream_stream_rpc_method_handler(
            feed, request_deserializer=cdcpb_pb2.ChangeDataRequest.FromString, response_serializer=None)


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
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "cdcpb.ChangeData", {m: store.handler(m) for m in ("EventFeed", "EventFeedV2")})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    owner = Owner()
    store.notify = owner.changed
    worker = StoreWorker(f"127.0.0.1:{port}", 0, channel, owner.dispatch, owner.on_broken)
    try:
        await body(worker, owner, store)
    finally:
        await worker.close()
        await channel.close()
        await server.stop(None)


def _region(request_id: int, region_id: int) -> tuple[RegionState, cdcpb_pb2.ChangeDataRequest]:
    start, end = bytes([region_id]), bytes([region_id + 1])
    target = RegionTarget(region_id=region_id, version=1, conf_ver=1, leader_store_id=1, start_key=start, end_key=end)
    locked = RangeLock(start, end, 100).try_lock(start, end, region_id, 1, tag=request_id).state
    assert locked is not None
    req = cdcpb_pb2.ChangeDataRequest(header=cdcpb_pb2.Header(cluster_id=7, ticdc_version=CLIENT_VERSION),
                                      region_id=region_id, request_id=request_id, checkpoint_ts=100,
                                      start_key=start, end_key=end)
    return RegionState(request_id, 1, target, locked), req


def _initialized(req: cdcpb_pb2.ChangeDataRequest) -> list[bytes]:
    if req.WhichOneof("request") == "deregister":
        return []
    entry = cdcpb_pb2.Event.Row(type=cdcpb_pb2.Event.INITIALIZED)
    ev = cdcpb_pb2.Event(region_id=req.region_id, request_id=req.request_id,
                         entries=cdcpb_pb2.Event.Entries(entries=[entry]))
    return [cdcpb_pb2.ChangeDataEvent(events=[ev]).SerializeToString()]


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

    asyncio.run(_served(MockStore(reply=_initialized), body))


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

    asyncio.run(_served(MockStore(reply=_initialized, end_after=2, fail=grpc.StatusCode.UNAVAILABLE), body))


def test_a_store_closing_the_stream_breaks_it_too() -> None:
    async def body(worker: StoreWorker, owner: Owner, store: MockStore) -> None:
        a = _region(11, 2)
        worker.register(*a)
        await owner.until(lambda: len(owner.broken) == 1)
        assert owner.broken[0] == ([a[0]], "the store closed the stream") and len(owner.events) == 1

    asyncio.run(_served(MockStore(reply=_initialized, end_after=1), body))


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

    asyncio.run(_served(MockStore(reply=_initialized, v2=False), body))


def test_a_corrupt_message_is_a_broken_stream_said_plainly() -> None:
    async def body(worker: StoreWorker, owner: Owner, store: MockStore) -> None:
        worker.register(*_region(11, 2))
        await owner.until(lambda: len(owner.broken) == 1)
        why = owner.broken[0][1]
        assert why.startswith("DATA_LOSS: corrupt ChangeDataEvent (4 bytes)"), why
        assert not owner.events

    asyncio.run(_served(MockStore(reply=lambda req: [b"\xff\xff\xff\xff"]), body))
