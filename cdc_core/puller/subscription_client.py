"""Subscription client: turns span subscriptions into region requests on per-store EventFeed streams.

For each subscribed span it loads the regions from PD (batches of 1024), sends one register
request per region to the leader's store over a multiplexed stream (one per store), matches
prewrites and commits per region, tracks each region's resolved ts and the span's resolved ts
(the minimum over its regions), and hands committed row changes to ``on_change``.

This is the walking-skeleton client: any region error fails the subscription with a clear
message (re-division, retries, holes and the throttled advancer come with the puller issue).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable

import grpc

from cdc_core.codec.key import min_end
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.log import get_logger
from cdc_core.proto import cdcpb_pb2, cdcpb_pb2_grpc
from cdc_core.puller.matcher import LogType, RowChange
from cdc_core.puller.pd_client import PDClient, RegionInfo
from cdc_core.puller.region_state import RegionState

log = get_logger("cdcflow.puller")

OnChange = Callable[[int, RowChange], None]


class _StoreStream:
    """One bidirectional EventFeed stream to a store; requests are queued, events dispatched."""

    def __init__(self, addr: str, client: SubscriptionClient) -> None:
        self.addr = addr
        self._client = client
        self._requests: asyncio.Queue[cdcpb_pb2.ChangeDataRequest | None] = asyncio.Queue()
        self._channel = grpc.aio.insecure_channel(addr)
        self._stub = cdcpb_pb2_grpc.ChangeDataStub(self._channel)
        self._task = asyncio.create_task(self._run(), name=f"eventfeed-{addr}")

    async def _request_iter(self) -> AsyncIterator[cdcpb_pb2.ChangeDataRequest]:
        while True:
            req = await self._requests.get()
            if req is None:
                return
            yield req

    def send(self, req: cdcpb_pb2.ChangeDataRequest) -> None:
        self._requests.put_nowait(req)

    async def _run(self) -> None:
        try:
            call = self._stub.EventFeed(self._request_iter())
            async for resp in call:
                self._client._dispatch(self.addr, resp)
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as exc:
            if not self._client.closed:
                self._client._fail(UpstreamError(f"EventFeed stream to store {self.addr} broke: {exc.details()}"))
        except Exception as exc:
            self._client._fail(exc)

    async def close(self) -> None:
        self._requests.put_nowait(None)
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
        await self._channel.close()


class SubscriptionClient:
    def __init__(self, pd_addr: str, on_change: OnChange) -> None:
        self.pd = PDClient(pd_addr)
        self._on_change = on_change
        self._streams: dict[str, _StoreStream] = {}
        self._regions: dict[int, RegionState] = {}  # by request id
        self._spans: dict[int, list[RegionState]] = {}
        self._span_ts: dict[int, int] = {}
        self._request_ids = itertools.count(1)
        self._failure: BaseException | None = None
        self.progress = asyncio.Event()
        self.closed = False

    # --- public -----------------------------------------------------------------------------
    async def subscribe(self, span_id: int, start: bytes, end: bytes, start_ts: int) -> None:
        regions = await self.pd.scan_regions(start, end)
        _check_coverage(regions, start, end)
        states = []
        for r in regions:
            addr = await self.pd.store_address(r.leader_store_id)
            state = RegionState(
                request_id=next(self._request_ids), span_id=span_id, region_id=r.id,
                start_key=max(start, r.start_key), end_key=min_end(end, r.end_key), store_addr=addr,
                resolved_ts=start_ts,
            )
            states.append(state)
            self._regions[state.request_id] = state
            self._stream(addr).send(self._register_request(state, r, start_ts))
        self._spans[span_id] = states
        self._span_ts[span_id] = start_ts
        log.info("subscribed span", span_id=span_id, regions=len(states), start_ts=start_ts)

    def span_resolved_ts(self, span_id: int) -> int:
        return self._span_ts[span_id]

    def check(self) -> None:
        """Raise the failure that stopped the client, if any."""
        if self._failure is not None:
            raise self._failure

    async def close(self) -> None:
        self.closed = True
        for s in self._streams.values():
            await s.close()
        self._streams.clear()
        await self.pd.close()

    # --- internals --------------------------------------------------------------------------
    def _stream(self, addr: str) -> _StoreStream:
        s = self._streams.get(addr)
        if s is None:
            s = self._streams[addr] = _StoreStream(addr, self)
        return s

    @staticmethod
    def _register_request(state: RegionState, r: RegionInfo, start_ts: int) -> cdcpb_pb2.ChangeDataRequest:
        return cdcpb_pb2.ChangeDataRequest(
            region_id=r.id, region_epoch=r.epoch(), checkpoint_ts=start_ts, start_key=state.start_key,
            end_key=state.end_key, request_id=state.request_id, extra_op=cdcpb_pb2.ReadOldValue,
            register=cdcpb_pb2.Register(),
        )

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
            log.error("subscription failed", error=str(exc))
        self.progress.set()

    def _dispatch(self, addr: str, resp: cdcpb_pb2.ChangeDataEvent) -> None:
        try:
            for ev in resp.events:
                self._handle_event(ev)
            if resp.HasField("resolved_ts"):
                self._handle_resolved(resp.resolved_ts)
        except Exception as exc:
            self._fail(exc)

    def _handle_event(self, ev: cdcpb_pb2.Event) -> None:
        state = self._regions.get(ev.request_id)
        if state is None or state.region_id != ev.region_id:
            return  # a late event of a request we no longer track
        kind = ev.WhichOneof("event")
        if kind == "error":
            raise ChangefeedError(f"region {ev.region_id} on store {state.store_addr}: {_describe(ev.error)}")
        if kind != "entries":
            return
        m = state.matcher
        for row in ev.entries.entries:
            t = row.type
            if t == LogType.COMMITTED:
                self._emit(state, m.committed(row))
            elif t == LogType.PREWRITE:
                m.prewrite(row)
            elif t == LogType.COMMIT:
                ch = m.commit(row, state.initialized)
                if ch is not None:
                    self._emit(state, ch)
            elif t == LogType.ROLLBACK:
                m.rollback(row)
            elif t == LogType.INITIALIZED:
                state.initialized = True
                for ch in m.initialized():
                    self._emit(state, ch)
            else:
                raise ChangefeedError(f"region {state.region_id}: corrupt event: unknown log type {t}")

    def _emit(self, state: RegionState, ch: RowChange) -> None:
        if state.initialized and ch.commit_ts <= state.resolved_ts:
            raise ChangefeedError(
                f"region {state.region_id}: commit ts {ch.commit_ts} arrived at or below the region's "
                f"resolved ts {state.resolved_ts} (key {ch.key.hex()}); the upstream broke its resolved-ts promise"
            )
        self._on_change(state.span_id, ch)

    def _handle_resolved(self, rts: cdcpb_pb2.ResolvedTs) -> None:
        touched: set[int] = set()
        regions = set(rts.regions)
        for state in self._regions.values():
            if state.region_id in regions and state.initialized and rts.ts > state.resolved_ts:
                if rts.request_id and rts.request_id != state.request_id:
                    continue
                state.resolved_ts = rts.ts
                touched.add(state.span_id)
        for span_id in touched:
            ts = min(s.resolved_ts for s in self._spans[span_id])
            if ts > self._span_ts[span_id]:
                self._span_ts[span_id] = ts
                self.progress.set()


def _check_coverage(regions: list[RegionInfo], start: bytes, end: bytes) -> None:
    if not regions:
        raise UpstreamError(f"PD returned no region for span [{start.hex()}, {end.hex()})")
    pos = start
    for r in regions:
        if r.start_key > pos:
            raise UpstreamError(f"PD regions leave a gap at {pos.hex()} in span [{start.hex()}, {end.hex()})")
        pos = r.end_key if r.end_key else b"\xff" * 32
        if end and pos >= end:
            return
    if end and pos < end:
        raise UpstreamError(f"PD regions end at {pos.hex()} before the span end {end.hex()}")


def _describe(err: cdcpb_pb2.Error) -> str:
    for name in ("not_leader", "region_not_found", "epoch_not_match", "duplicate_request", "server_is_busy"):
        if err.HasField(name):
            return f"{name} ({str(getattr(err, name)).strip() or 'no details'})"
    if err.gc_safe_point_passed:
        return f"GC safe point passed: {err.gc_safe_point_passed}"
    return "unknown region error"
