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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc

from cdc_core.log import get_logger
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.region_state import RegionState

log = get_logger("cdcflow.puller.worker")

# The TiCDC version whose client behaviour cdcflow implements; TiKV gates features on it (batched resolved ts
# from 4.0.8, the cluster-id check from 5.3.0).
CLIENT_VERSION = "8.5.0"
MAX_RECEIVE_BYTES = 1 << 28
FEATURES_METADATA = (("features", "stream-multiplexing"),)
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]

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
