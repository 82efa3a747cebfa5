"""A store's ``ChangeData`` service in this process, for the puller's workers and scheduler to talk to: what each
call and request was, answered as the test says (TiCDC tests its workers against a mock upstream the same way)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc

from cdc_core.proto import cdcpb_pb2

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


@asynccontextmanager
async def serving(store: MockStore) -> AsyncIterator[str]:
    """``store`` served on a loopback port for the block; yields its address."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "cdcpb.ChangeData", {m: store.handler(m) for m in ("EventFeed", "EventFeedV2")})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def initialized(req: cdcpb_pb2.ChangeDataRequest) -> list[bytes]:
    """A store's answer to a registration: the region's INITIALIZED (nothing to a deregistration)."""
    if req.WhichOneof("request") == "deregister":
        return []
    entry = cdcpb_pb2.Event.Row(type=cdcpb_pb2.Event.INITIALIZED)
    ev = cdcpb_pb2.Event(region_id=req.region_id, request_id=req.request_id,
                         entries=cdcpb_pb2.Event.Entries(entries=[entry]))
    return [cdcpb_pb2.ChangeDataEvent(events=[ev]).SerializeToString()]
