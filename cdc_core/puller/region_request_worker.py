"""One multiplexed EventFeed stream to a store (TiCDC's ``regionRequestWorker``).

The call is ``ChangeData.EventFeedV2`` with the metadata ``features: stream-multiplexing``, as TiCDC opens it
(``logservice/logpuller/grpc_conn.go``): the store then groups resolved ts by request id. A store without
``EventFeedV2`` (UNIMPLEMENTED) is asked again over ``EventFeed``, where resolved ts come per stream (request id
0) or, from stores that take the client for one older than 4.0.8, per region. Every request carries
``Header{cluster_id, ticdc_version}``; the channel takes messages up to 256 MiB (TiCDC's
``grpcMaxCallRecvMsgSize``: TiKV sends responses up to 6 MB, and a single large row can pass that).

A worker owns the region requests it sent (by request id and region id: a request id names a subscribed span,
as in TiCDC, so that the store can batch the ``ResolvedTs`` of all its regions) and one ``ChangeData.EventFeed``
call at a time: it opens the call when it has requests, writes registrations and deregistrations from a queue, and hands
every received ``ChangeDataEvent`` to its owner's ``dispatch`` (awaited, so the receiver stops while the
owner cannot take more: backpressure reaches the store through gRPC flow control). When the call breaks,
every request the worker holds is handed to ``on_stream_broken`` in one go and forgotten: the owner turns
them into holes and re-requests them after a backoff. The next registration opens a new call.

``take(request_id, region_id)`` removes a request when its region error arrives (TiCDC's ``takeRegionState``),
so anything the store still sends for it is ignored; ``deregister`` does the same and tells the store.

**The receive loop's routing** (TiCDC's ``receiveAndDispatchChangeEvents``: ``dispatchRegionChangeEvents`` and
``dispatchResolvedTsEvent``) is :class:`RegionEventDispatcher`, the ``dispatch`` a client gives its workers: each
region's entries, each error and each ``ResolvedTs`` (one id array per message, routed by request id to its span)
go into the span's path of the event stream, after ``wait_pushable``: while the area is paused the receiver stops at
the first message it cannot push, so the order is kept and the store is held back by gRPC flow control. A region
request is what :func:`region_request` builds (TiCDC's ``createRegionRequest``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from prometheus_client import Counter

from cdc_core.codec.memcomparable import encode_key
from cdc_core.log import get_logger
from cdc_core.proto import cdcpb_pb2, kvrpcpb_pb2
from cdc_core.puller.event_stream import EventKind, EventStream
from cdc_core.puller.region_state import RegionState
from cdc_core.puller.subscribed_span import SubscribedSpan

log = get_logger("cdcflow.puller.worker")

# The TiCDC version whose client behaviour cdcflow implements; TiKV gates features on it (batched resolved ts
# from 4.0.8, the cluster-id check from 5.3.0).
CLIENT_VERSION = "8.5.0"
MAX_RECEIVE_BYTES = 1 << 28
FEATURES_METADATA = (("features", "stream-multiplexing"),)
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]

RECEIVED_KINDS = ("entries", "rows", "resolved", "resolved_regions", "error", "stale")

# (worker, message, its size on the wire)
Dispatch = Callable[["StoreWorker", cdcpb_pb2.ChangeDataEvent, int], Awaitable[None]]
OnBroken = Callable[["StoreWorker", list[RegionState], str], Awaitable[None]]


class StoreWorker:
    def __init__(
        self, addr: str, index: int, channel: grpc.aio.Channel, dispatch: Dispatch, on_broken: OnBroken
    ) -> None:
        self.addr = addr
        self.index = index
        self.states: dict[tuple[int, int], RegionState] = {}  # (request id, region id) -> the request's state
        self.streams_opened = 0
        self.v2 = True  # EventFeedV2 until the store says it lacks it
        # Raw bytes in, decoded here: the message's wire size comes for free (the memory quota's measure).
        self._v2_call = channel.stream_stream("/cdcpb.ChangeData/EventFeedV2",
                                              request_serializer=cdcpb_pb2.ChangeDataRequest.SerializeToString,
                                              response_deserializer=None)
        self._v1_call = channel.stream_stream("/cdcpb.ChangeData/EventFeed",
                                              request_serializer=cdcpb_pb2.ChangeDataRequest.SerializeToString,
                                              response_deserializer=None)
        self._dispatch = dispatch
        self._on_broken = on_broken
        self._outbox: asyncio.Queue[cdcpb_pb2.ChangeDataRequest] = asyncio.Queue()
        self._work = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"eventfeed-{addr}-{index}")

    # --- requests ----------------------------------------------------------------------------
    def register(self, state: RegionState, req: cdcpb_pb2.ChangeDataRequest) -> None:
        self.states[(state.request_id, state.region_id)] = state
        state.worker = self
        self._outbox.put_nowait(req)
        self._work.set()

    def take(self, request_id: int, region_id: int) -> RegionState | None:
        """Forget a request whose region error arrived (its late events are then ignored)."""
        return self.states.pop((request_id, region_id), None)

    def deregister(self, state: RegionState) -> bool:
        """Forget a request and ask the store to stop it; False (nothing sent) when it already ended."""
        if self.states.get((state.request_id, state.region_id)) is not state:
            return False
        del self.states[(state.request_id, state.region_id)]
        self._outbox.put_nowait(
            cdcpb_pb2.ChangeDataRequest(
                region_id=state.region_id, request_id=state.request_id,
                deregister=cdcpb_pb2.ChangeDataRequest.Deregister(),
            )
        )
        self._work.set()
        return True

    # --- the stream --------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            while not self.states:
                # Nothing registered: pending deregistrations are moot; wait for a registration.
                _drain(self._outbox)
                self._work.clear()
                await self._work.wait()
            call = self._v2_call(metadata=FEATURES_METADATA) if self.v2 else self._v1_call()
            self.streams_opened += 1
            sender = asyncio.create_task(self._send(call), name=f"eventfeed-send-{self.addr}-{self.index}")
            why = "the store closed the stream"
            try:
                while True:
                    raw = await call.read()
                    if raw is grpc.aio.EOF:
                        break
                    await self._dispatch(self, _decode(raw), len(raw))
            except grpc.aio.AioRpcError as exc:
                why = f"{exc.code().name}: {exc.details()}"
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED and self.v2:
                    # An older TiKV (or one refusing the feature): the regions go back and come again over v1.
                    log.warning("store lacks EventFeedV2 stream-multiplexing: using EventFeed", store=self.addr,
                                why=why)
                    self.v2 = False
            finally:
                sender.cancel()
                call.cancel()
            # Everything this stream carried is gone; queued requests go with it (their states are failed).
            broken = list(self.states.values())
            self.states.clear()
            _drain(self._outbox)
            log.info("event feed stream broken", store=self.addr, worker=self.index, regions=len(broken), why=why)
            await self._on_broken(self, broken, why)

    async def _send(self, call: grpc.aio.StreamStreamCall) -> None:
        try:
            while True:
                req = await self._outbox.get()
                await call.write(req)
        except asyncio.CancelledError:
            raise
        except Exception:  # the call ended (AioRpcError, InvalidStateError...)
            return  # the receiver sees the failure and handles it

    async def close(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


def _decode(raw: bytes) -> cdcpb_pb2.ChangeDataEvent:
    try:
        return cdcpb_pb2.ChangeDataEvent.FromString(raw)
    except Exception as exc:  # protobuf's DecodeError: a corrupt message is a broken stream, said plainly
        raise grpc.aio.AioRpcError(grpc.StatusCode.DATA_LOSS, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   details=f"corrupt ChangeDataEvent ({len(raw)} bytes): {exc}") from exc


def _drain(q: asyncio.Queue[cdcpb_pb2.ChangeDataRequest]) -> None:
    while not q.empty():
        q.get_nowait()


def region_request(cluster_id: int, state: RegionState) -> cdcpb_pb2.ChangeDataRequest:
    """The registration of ``state``'s region: its epoch, its part of the span and the resolved ts of the hole it
    locked (a re-request resumes where that range stopped), old values asked for (TiCDC's ``createRegionRequest``)."""
    t = state.target
    return cdcpb_pb2.ChangeDataRequest(
        header=cdcpb_pb2.Header(cluster_id=cluster_id, ticdc_version=CLIENT_VERSION),
        region_id=t.region_id, region_epoch=t.epoch(), checkpoint_ts=state.locked.resolved_ts,
        # TiKV takes the range memcomparable-encoded; a raw one would not decode and it would observe the whole
        # region instead.
        start_key=encode_key(t.start_key), end_key=encode_key(t.end_key), request_id=state.request_id,
        extra_op=kvrpcpb_pb2.ReadOldValue, register=cdcpb_pb2.ChangeDataRequest.Register(),
    )


@dataclass
class RegionEventDispatcher:
    """Where the workers' received messages go: into the paths of ``stream`` under ``area``, one per subscribed span
    (``spans`` by span id, ``span_of_request`` by request id: the client's, read live). ``received`` counts them by
    kind (``RECEIVED_KINDS``); ``fail`` stops the client on a bug (a receiver must not die silently)."""

    stream: EventStream
    area: Hashable
    spans: Mapping[int, SubscribedSpan]
    span_of_request: Mapping[int, SubscribedSpan]
    received: Mapping[str, Counter]
    fail: Callable[[BaseException], None]

    async def dispatch(self, worker: StoreWorker, resp: cdcpb_pb2.ChangeDataEvent, size: int) -> None:
        """Route one message a worker received (its wire size is the memory quota's measure of its events)."""
        try:
            await self._dispatch(worker, resp, size)
        except Exception as exc:
            self.fail(exc)
            raise

    async def push_errors(self, states: list[RegionState], err: Any) -> None:
        """Hand ``err`` to the span of each live request in ``states`` (their stream broke), in order."""
        try:
            for st in states:
                if st.stale:
                    continue
                span = self.spans.get(st.span_id)
                if span is None:
                    continue
                await self.stream.wait_pushable(self.area, EventKind.ERROR)
                self.stream.push_error(span.path, st.region_id, (st.request_id, err))
        except Exception as exc:
            self.fail(exc)
            raise

    async def _dispatch(self, worker: StoreWorker, resp: cdcpb_pb2.ChangeDataEvent, size: int) -> None:
        stream, area = self.stream, self.area
        m_ev = self.received
        # The memory quota's measure of an event: its share of the message's wire size (no per-event ByteSize).
        event_size = size // max(1, len(resp.events))
        states = worker.states
        for ev in resp.events:
            state = states.get((ev.request_id, ev.region_id))
            if state is None:
                m_ev["stale"].inc()
                continue
            kind = ev.WhichOneof("event")
            if kind == "entries":
                if stream.is_paused(area):
                    await stream.wait_pushable(area, EventKind.DATA)
                    if states.get((ev.request_id, ev.region_id)) is not state:
                        continue  # ended while we waited
                span = self.spans.get(state.span_id)
                if span is None:
                    continue
                m_ev["entries"].inc()
                m_ev["rows"].inc(len(ev.entries.entries))
                stream.push_entries(span.path, ev.region_id, ev, event_size)
            elif kind == "resolved_ts":  # a store that takes the client for one older than 4.0.8
                m_ev["resolved"].inc()
                m_ev["resolved_regions"].inc()
                span = self.spans.get(state.span_id)
                if span is not None:
                    await stream.wait_pushable(area, EventKind.RESOLVED)
                    stream.push_resolved(span.path, np.array([ev.region_id], dtype=np.uint64), ev.resolved_ts)
            elif kind == "error":
                worker.take(ev.request_id, ev.region_id)
                m_ev["error"].inc()
                await stream.wait_pushable(area, EventKind.ERROR)
                span = self.spans.get(state.span_id)
                if span is not None:
                    stream.push_error(span.path, ev.region_id, (state.request_id, ev.error))
        if resp.HasField("resolved_ts"):
            await self._dispatch_resolved(worker, resp.resolved_ts)

    async def _dispatch_resolved(self, worker: StoreWorker, rts: cdcpb_pb2.ResolvedTs) -> None:
        stream, area = self.stream, self.area
        self.received["resolved"].inc()
        self.received["resolved_regions"].inc(len(rts.regions))
        if rts.request_id:
            span = self.span_of_request.get(rts.request_id)
            if span is None or span.stopped:
                return
            # Only the regions whose live request has this id: vectorized against the lock's tags.
            ids = span.lock.select_tagged(np.array(rts.regions, dtype=np.uint64), rts.request_id)
            if ids.size:
                await stream.wait_pushable(area, EventKind.RESOLVED)
                stream.push_resolved(span.path, ids, rts.ts)
            return
        # No request id: every region of the message this worker serves, grouped by span.
        wanted = set(rts.regions)
        by_span: dict[int, list[int]] = {}
        for st in worker.states.values():
            if st.region_id in wanted:
                by_span.setdefault(st.span_id, []).append(st.region_id)
        for span_id, region_ids in by_span.items():
            span = self.spans.get(span_id)
            if span is not None:
                await stream.wait_pushable(area, EventKind.RESOLVED)
                stream.push_resolved(span.path, np.array(region_ids, dtype=np.uint64), rts.ts)
