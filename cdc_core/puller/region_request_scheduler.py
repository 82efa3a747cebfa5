"""Region scheduling: a span's key ranges become locked region requests, sent highest priority first to the
region's leader store over one of a few multiplexed streams per store, and re-requested when a request ends.

After TiCDC's ``logservice/logpuller/region_request_scheduler.go`` (the priority queue of locked regions, routed to
a store's workers: ``Submit``, ``Run``, ``getOrCreateStore``) and ``priority_task.go`` (high priority first, then
submission order), with the range tasks that feed it, which TiCDC keeps in ``subscription_client.go``
(``divideSpanAndScheduleRegionRequests``, ``scheduleRegionRequest``, ``scheduleRangeRequest``), and the carrying
out of ``region_failure``'s decisions (TiCDC's ``region_failure_handler.go``).

**Range tasks.** A *range task* loads the regions of a key range from PD (batches of 1024), cuts the range at the
regions' bounds (a gap PD leaves is retried later) and locks each part in the span's range lock with the region's
epoch version. A LOCKED part becomes a region request whose ``checkpoint_ts`` is the resolved ts of the hole it took
(not the span start: a re-request resumes where that range stopped); STALE parts are re-divided from PD; CANCELLED
ones (unsubscribed) are dropped. Retries of a range back off exponentially with jitter (bounded); a request that
initializes resets it.

**Sending** (:meth:`RegionRequestScheduler.run`): requests wait in one priority queue; each goes to the region's
leader store (its address from PD, cached until a stream to it breaks), to the store's workers round-robin
(:class:`~cdc_core.puller.region_request_worker.StoreWorker`, ``workers_per_store`` of them, started with the first
request to the store). A store PD cannot name ends the request as an unknown store.

**Request ids** name a span, as in TiCDC; when the *client* ends a request (``RESYNC``, a region grown over another
part, unsubscribe) the store may still be sending for it, so the region's later requests in that span take a fresh
request id (:meth:`RegionRequestScheduler.drop_region`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine, Iterator, Mapping, MutableMapping
from typing import Any

import grpc
from prometheus_client import Counter

from cdc_core import tls
from cdc_core.codec.key import min_end
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.log import get_logger
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.backoff import Backoff
from cdc_core.puller.pd_client import PDClient
from cdc_core.puller.range_lock import LockedRange, LockStatus
from cdc_core.puller.range_ts_map import end_after
from cdc_core.puller.region_failure import HIGH_PRIORITY, ErrorKind, Fail, StreamBroken, decide
from cdc_core.puller.region_request_worker import (
    CHANNEL_OPTIONS,
    RegionEventDispatcher,
    StoreWorker,
    region_request,
)
from cdc_core.puller.region_state import RegionState, RegionTarget
from cdc_core.puller.subscribed_span import SubscribedSpan

__all__ = ["RegionRequestScheduler", "guarded"]

log = get_logger("cdcflow.puller")


async def guarded(coro: Coroutine[Any, Any, None], fail: Callable[[BaseException], None]) -> None:
    """Run ``coro``; an exception (not a cancellation) stops the client through ``fail`` instead of dying with the
    task."""
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        fail(exc)


class RegionRequestScheduler:
    """Region requests of the client's spans, from PD's regions to the stores' streams; see the module docstring.

    ``spans`` (span id -> span) and ``span_of_request`` (request id -> span) are the client's, shared: the scheduler
    adds a span's fresh request ids; ``request_ids`` hands out new ones; ``dispatcher`` takes what the workers
    receive; ``errors`` counts ended requests by kind and ``requests`` the requests sent; ``fail`` stops the client.
    """

    def __init__(
        self,
        pd: PDClient,
        dispatcher: RegionEventDispatcher,
        *,
        spans: Mapping[int, SubscribedSpan],
        span_of_request: MutableMapping[int, SubscribedSpan],
        request_ids: Iterator[int],
        workers_per_store: int,
        backoff: Backoff,
        errors: Mapping[ErrorKind, Counter],
        requests: Counter,
        fail: Callable[[BaseException], None],
    ) -> None:
        self.pd = pd
        self.dispatcher = dispatcher
        self.spans = spans
        self.span_of_request = span_of_request
        self.request_ids = request_ids
        self.workers_per_store = workers_per_store
        self.backoff = backoff
        self.cluster_id: int | None = None  # PD's, set by the client before its first request
        self._m_errors = errors
        self._m_requests = requests
        self._fail = fail
        self._queue: asyncio.PriorityQueue[tuple[int, int, RegionState]] = asyncio.PriorityQueue()
        self._seq = itertools.count()  # FIFO within a priority (TiCDC's sequence tie-breaker)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._workers: dict[str, list[StoreWorker]] = {}
        self._rr: dict[str, int] = {}
        self._store_addrs: dict[int, str] = {}

    # --- range tasks ---------------------------------------------------------------------------------------------
    def schedule_range(self, span: SubscribedSpan, start: bytes, end: bytes, *, attempt: int, delay: float) -> None:
        """Request ``[start, end)`` of ``span`` after ``delay`` seconds: its regions loaded from PD and locked."""
        self._spawn(span, self._range_task(span, start, end, attempt, delay), f"puller-range-{span.id}")

    def schedule_region(self, span: SubscribedSpan, target: RegionTarget, *, attempt: int, priority: int,
                        delay: float) -> None:
        """Request the region ``target`` again after ``delay`` seconds, as it is (no PD lookup)."""
        name = f"puller-region-{target.region_id}"
        self._spawn(span, self._region_task(span, target, attempt, priority, delay), name)

    def _spawn(self, span: SubscribedSpan, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(guarded(coro, self._fail), name=name)
        span.tasks.add(task)
        task.add_done_callback(span.tasks.discard)

    async def _range_task(self, span: SubscribedSpan, start: bytes, end: bytes, attempt: int, delay: float) -> None:
        """Load ``[start, end)``'s regions from PD and lock each part; gaps and failures are retried later."""
        if delay > 0:
            await asyncio.sleep(delay)
        if span.stopped:
            return
        try:
            regions = await self.pd.scan_regions(start, end)
        except UpstreamError as exc:
            log.warning("region scan failed, retrying", span_id=span.id, error=str(exc), attempt=attempt + 1)
            self.schedule_range(span, start, end, attempt=attempt + 1, delay=self.backoff.delay_s(attempt + 1))
            return
        pos: bytes | None = start  # None: reached +inf
        for r in regions:
            if pos is None:
                break
            lo = max(r.start_key, start)
            hi = min_end(r.end_key, end)
            if lo > pos:
                self._retry_gap(span, pos, lo, attempt)
            if hi and hi <= lo:
                continue
            target = RegionTarget(r.id, r.version, r.conf_ver, r.leader_store_id, lo, hi)
            await self._lock_region(span, target, attempt, HIGH_PRIORITY)
            if span.stopped:
                return
            pos = hi or None
        if pos is not None and end_after(end, pos):
            self._retry_gap(span, pos, end, attempt)

    def _retry_gap(self, span: SubscribedSpan, start: bytes, end: bytes, attempt: int) -> None:
        log.warning("PD regions leave a gap, retrying", span_id=span.id, start=start.hex(), end=end.hex())
        self.schedule_range(span, start, end, attempt=attempt + 1, delay=self.backoff.delay_s(attempt + 1))

    async def _region_task(self, span: SubscribedSpan, target: RegionTarget, attempt: int, priority: int,
                           delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        if not span.stopped:
            await self._lock_region(span, target, attempt, priority)

    async def _lock_region(self, span: SubscribedSpan, t: RegionTarget, attempt: int, priority: int) -> None:
        request_id = span.region_request_ids.get(t.region_id, span.request_id)
        res = await span.lock.lock(t.start_key, t.end_key, t.region_id, t.version, request_id)
        if res.status is LockStatus.CANCELLED:
            return
        if res.status is LockStatus.STALE:
            self._on_stale(span, t, res.blockers, res.retry_ranges, attempt)
            return
        locked = res.state
        assert locked is not None
        state = RegionState(request_id, span.id, t, locked, attempt=attempt)
        span.regions[t.region_id] = state
        self._queue.put_nowait((priority, next(self._seq), state))

    def _on_stale(
        self, span: SubscribedSpan, t: RegionTarget, blockers: list[LockedRange], retry: list[tuple[bytes, bytes]],
        attempt: int,
    ) -> None:
        # The same region, same epoch, holding another part of the span: it grew (a merge) while a part of it
        # stayed locked. Request it whole: end the part's request and re-divide the union.
        same = [b for b in blockers if b.region_id == t.region_id and b.version == t.version]
        if same:
            lo, hi = t.start_key, t.end_key
            for b in same:
                lo = min(lo, b.start)
                hi = b.end if end_after(b.end, hi) and hi else hi
                st = span.regions.get(b.region_id)
                if st is not None and st.locked is b:
                    self.drop_region(span, st)
            log.info("region grew over a part of the span it does not hold: requesting it whole", span_id=span.id,
                     region_id=t.region_id, version=t.version, start=lo.hex(), end=hi.hex())
            self.schedule_range(span, lo, hi, attempt=attempt, delay=0.0)
            return
        for s, e in retry:
            self.schedule_range(span, s, e, attempt=attempt + 1, delay=self.backoff.delay_s(attempt + 1))

    # --- the end of a request ------------------------------------------------------------------------------------
    def drop_region(self, span: SubscribedSpan, state: RegionState) -> int | None:
        """End a request: deregister it, forget it, unlock its range (a hole at its resolved ts, returned)."""
        state.stale = True
        if state.worker is not None and state.worker.deregister(state):
            # The store may still send for this (request id, region) pair: the region's next request must
            # not share it.
            fresh = span.region_request_ids[state.region_id] = next(self.request_ids)
            self.span_of_request[fresh] = span
        if span.regions.get(state.region_id) is state:
            del span.regions[state.region_id]
        if state.locked.locked:
            return span.lock.unlock(state.locked)
        return None

    def end_region(
        self, span: SubscribedSpan, state: RegionState, kind: ErrorKind, err: cdcpb_pb2.Error | StreamBroken
    ) -> None:
        """A request ended with ``err``: make its range a hole and re-request it as the error kind says
        (``region_failure.decide``), or stop the client when the subscription cannot go on."""
        if state.stale or span.regions.get(state.region_id) is not state:
            return
        self._m_errors[kind].inc()
        decision = decide(span.id, state, kind, err, self.backoff)
        if isinstance(decision, Fail):
            self._fail(ChangefeedError(decision.message))
            return
        hole_ts = self.drop_region(span, state)
        if span.stopped:
            return
        t = state.target
        log.info("region request ended", span_id=span.id, region_id=t.region_id, request_id=state.request_id,
                 kind=kind.value, hole_ts=hole_ts, attempt=decision.attempt)
        if decision.region is not None:
            self.schedule_region(span, decision.region, attempt=decision.attempt, priority=decision.priority,
                                 delay=decision.delay_s)
        else:
            self.schedule_range(span, t.start_key, t.end_key, attempt=decision.attempt, delay=decision.delay_s)

    # --- sending -------------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Send the queued requests, highest priority first, each to a worker of its region's leader store."""
        while True:
            _, _, state = await self._queue.get()
            span = self.spans.get(state.span_id)
            if span is None or state.stale:
                continue
            t = state.target
            try:
                addr = await self._store_addr(t.leader_store_id)
            except UpstreamError as exc:
                self.end_region(span, state, ErrorKind.STORE, StreamBroken(str(exc), ErrorKind.STORE))
                continue
            if state.stale:
                continue
            state.store_addr = addr
            self._pick_worker(addr).register(state, region_request(self.cluster_id or 0, state))
            self._m_requests.inc()

    async def _store_addr(self, store_id: int) -> str:
        addr = self._store_addrs.get(store_id)
        if addr is None:
            addr = self._store_addrs[store_id] = await self.pd.store_address(store_id)
        return addr

    def _pick_worker(self, addr: str) -> StoreWorker:
        workers = self._workers.get(addr)
        if workers is None:
            ch = self._channels[addr] = tls.aio_grpc_channel(addr, options=CHANNEL_OPTIONS)
            workers = self._workers[addr] = [
                StoreWorker(addr, i, ch, self.dispatcher.dispatch, self._on_stream_broken)
                for i in range(self.workers_per_store)
            ]
        i = self._rr.get(addr, 0)
        self._rr[addr] = i + 1
        return workers[i % len(workers)]

    async def _on_stream_broken(self, worker: StoreWorker, states: list[RegionState], why: str) -> None:
        for sid, addr in list(self._store_addrs.items()):
            if addr == worker.addr:
                del self._store_addrs[sid]  # look the store up again: it may have moved
        await self.dispatcher.push_errors(states, StreamBroken(f"stream to store {worker.addr} broke: {why}"))

    async def close(self) -> None:
        """Stop every worker and close the stores' channels."""
        for workers in self._workers.values():
            for w in workers:
                await w.close()
        self._workers.clear()
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
