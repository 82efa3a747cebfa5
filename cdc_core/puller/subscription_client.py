"""Subscription client: turns span subscriptions into region requests on per-store EventFeed streams.

After TiCDC's ``logservice/logpuller/subscription_client.go``. For each subscribed span the client keeps one
:class:`~cdc_core.puller.range_lock.RangeLock` (which region holds which range, every region's resolved ts,
the holes), one :class:`~cdc_core.puller.ts_advancer.ResolvedTsAdvancer` (the span's throttled resolved ts,
default every 100 ms) and one path of the :class:`~cdc_core.puller.event_stream.EventStream` (the bounded
queue between the gRPC receivers and the span's handler, under the client's area: one per changefeed).

**Requests.** A *range task* loads the regions of a key range from PD (batches of 1024), cuts the range at
the regions' bounds (a gap PD leaves is retried later) and locks each part in the range lock with the
region's epoch version. A LOCKED part becomes a region request whose ``checkpoint_ts`` is the resolved ts of
the hole it took (not the span start: a re-request resumes where that range stopped); STALE parts are
re-divided from PD; CANCELLED ones (unsubscribed) are dropped. Requests go, highest priority first, to the
region's leader store over one of a few multiplexed streams per store, round-robin
(:class:`~cdc_core.puller.region_request_worker.StoreWorker`).

**Request ids** name a span, as in TiCDC: a stream's requests are keyed by (request id, region id), and the store
sends one ``ResolvedTs`` message per (request id, ts) listing every region it resolved — one message for
thousands of regions, not one per region. A pair is never live twice: a store error or a broken stream ends a
request for good, so its successor may reuse the pair; but when the *client* ends a request (``RESYNC``, a
region grown over another part, unsubscribe) the store may still be sending for it, so the region's later
requests in that span take a fresh request id. The range lock keeps each locked region's request id, and a
``ResolvedTs`` message is filtered by it vectorized: late resolved ts of an ended request never reach its
successor.

**Receiving.** A worker's receiver pushes each region's entries, each error and each ``ResolvedTs`` (one id
array per message, routed by request id to its span) into the span's path, awaiting ``wait_pushable`` first: while the
area is paused the receiver stops at the first message it cannot push, so the order is kept and the store is
held back by gRPC flow control.

**Handling** (one consumer per span, in order): entries go through the region's
:class:`~cdc_core.puller.matcher.Matcher` (:mod:`~cdc_core.puller.region_event_handler`: PREWRITE/COMMIT
matching, COMMITTED from the scan, commits held until INITIALIZED); a change at or below the region's resolved ts
breaks the store's promise and fails the subscription loudly. INITIALIZED marks the region initialized in the
lock; resolved batches go to the advancer, vectorized. Errors end the request: it is deregistered, its range is
unlocked (a hole at its last resolved ts) and re-requested, or the subscription fails, as
:mod:`~cdc_core.puller.region_failure` decides for the error's kind (TiCDC's ``region_failure_handler.go``).

**Resolved ts** come as ``ChangeDataEvent.resolved_ts`` (per request id over EventFeedV2, per stream with
request id 0 over EventFeed) or, from a store that treats the client as older than 4.0.8, as a region's
``Event.resolved_ts``; all three reach the span's advancer the same way.

**GC.** TiKV scans from any checkpoint, even one whose history GC removed. So before a span is subscribed the
client compares its start ts with PD's GC safe point and fails ("snapshot lost by GC") when it is older, as
TiCDC refuses a start ts before GC; re-requests start from a region's resolved ts, which the changefeed's
service safe point protects.

Retries of a range back off exponentially with jitter (bounded); a request that initializes resets it.
A re-requested region re-scans from its resolved ts, so changes above it can arrive twice: downstream dedup
removes exact duplicates (key, commit_ts, op). Nothing at or below an emitted resolved ts ever arrives.

Metrics (:mod:`~cdc_core.puller.client_metrics`): the blocks' (pending bytes, pause state, resolved-ts lag, regions
by state, holes) plus
``cdcflow_puller_region_errors_total{kind}``, ``cdcflow_puller_events_received_total{kind}``
(entries|rows|resolved|resolved_regions|error|stale), ``cdcflow_puller_changes_emitted_total`` and
``cdcflow_puller_region_requests_total``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Hashable

import grpc
import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry

from cdc_core import tls
from cdc_core.codec.key import min_end
from cdc_core.codec.memcomparable import encode_key
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.log import get_logger
from cdc_core.proto import cdcpb_pb2, kvrpcpb_pb2
from cdc_core.puller import change_batch, region_event_handler
from cdc_core.puller.backoff import Backoff
from cdc_core.puller.client_metrics import ClientMetrics
from cdc_core.puller.event_stream import EventKind, EventStream, RegionEvent
from cdc_core.puller.matcher import RowChange
from cdc_core.puller.options import DEFAULT_ADVANCE_INTERVAL_MS, DEFAULT_MAX_PENDING_BYTES
from cdc_core.puller.pd_client import PDClient
from cdc_core.puller.range_lock import LockedRange, LockStatus, RangeLock
from cdc_core.puller.range_ts_map import end_after
from cdc_core.puller.region_failure import (
    HIGH_PRIORITY,
    ErrorKind,
    Fail,
    StreamBroken,
    classify_error,
    decide,
)
from cdc_core.puller.region_request_worker import CHANNEL_OPTIONS, CLIENT_VERSION, StoreWorker
from cdc_core.puller.region_state import RegionState, RegionTarget
from cdc_core.puller.subscribed_span import SubscribedSpan
from cdc_core.puller.ts_advancer import ResolvedTsAdvancer

__all__ = ["OnChange", "OnResolved", "SubscriptionClient"]

log = get_logger("cdcflow.puller")

OnChange = Callable[[int, RowChange], None]
OnChanges = Callable[[int, list[RowChange]], None]
OnBatch = Callable[[int, pa.RecordBatch], None]
BATCH_ROWS = 65_536  # on_batch: at most this many rows (plus one event's) wait in the buffer
OnResolved = Callable[[int, int], None]

WATCHDOG_PERIOD_S = 1.0


class SubscriptionClient:
    """Subscribes key spans on the upstream's region feeds; see the module docstring."""

    def __init__(
        self,
        pd_addr: str,
        on_change: OnChange | None = None,
        *,
        on_changes: OnChanges | None = None,
        on_batch: OnBatch | None = None,
        on_resolved: OnResolved | None = None,
        area: Hashable = "default",
        stream: EventStream | None = None,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        workers_per_store: int = 2,
        advance_interval_ms: int = DEFAULT_ADVANCE_INTERVAL_MS,
        backoff: Backoff | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if workers_per_store < 1:
            raise ValueError("workers_per_store must be >= 1")
        self.pd = PDClient(pd_addr)
        if sum(cb is not None for cb in (on_change, on_changes, on_batch)) != 1:
            raise ValueError("give exactly one of on_change (per row), on_changes (lists) and on_batch (Arrow)")
        self._on_change = on_change
        self._on_changes = on_changes
        self._on_batch = on_batch
        self._on_resolved = on_resolved
        self.area = area
        self.stream = stream if stream is not None else EventStream(registry=registry)
        self.stream.add_area(area, max_pending_bytes)
        self.workers_per_store = workers_per_store
        self.advance_interval_ms = advance_interval_ms
        self.backoff = backoff or Backoff()
        self._registry = registry
        m = ClientMetrics.for_registry(registry)
        self._m_errors = {k: m.errors.labels(k.value) for k in ErrorKind}
        kinds = ("entries", "rows", "resolved", "resolved_regions", "error", "stale")
        self._m_events = {k: m.events.labels(k) for k in kinds}
        self._m_changes = m.changes
        self._m_requests = m.requests
        self._spans: dict[int, SubscribedSpan] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._workers: dict[str, list[StoreWorker]] = {}
        self._rr: dict[str, int] = {}
        self._store_addrs: dict[int, str] = {}
        self._request_ids = itertools.count(1)
        self._cluster_id: int | None = None
        self._gc_checked: tuple[float, int] | None = None  # (loop time, PD's GC safe point then)
        self._span_of_request: dict[int, SubscribedSpan] = {}  # request id -> its span (the span's own and fresh ones)
        self._seq = itertools.count()
        self._send_queue: asyncio.PriorityQueue[tuple[int, int, RegionState]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        self.progress = asyncio.Event()
        self.closed = False
        self.changes_emitted = 0

    # --- public -----------------------------------------------------------------------------
    async def subscribe(self, span_id: int, start: bytes, end: bytes, start_ts: int) -> None:
        """Start pulling ``[start, end)`` from ``start_ts`` (exclusive); returns once the requests are under way."""
        if span_id in self._spans:
            raise ValueError(f"span {span_id} is already subscribed")
        self._ensure_started()
        lock = RangeLock(start, end, start_ts)
        adv = ResolvedTsAdvancer(
            lock, span=str(span_id), advance_interval_ms=self.advance_interval_ms, registry=self._registry
        )
        await self._check_gc(span_id, start_ts)
        if self._cluster_id is None:
            self._cluster_id = await self.pd.cluster_id()
        path = (self.area, span_id)
        self.stream.add_path(self.area, path)
        request_id = next(self._request_ids)
        span = self._spans[span_id] = SubscribedSpan(span_id, start, end, start_ts, path, lock, adv, request_id)
        self._span_of_request[request_id] = span

        async def handle(batch: list[RegionEvent]) -> None:
            self._handle_batch(span, batch)

        span.consumer = asyncio.create_task(self.stream.run_consumer(path, handle), name=f"puller-span-{span_id}")
        if self._failure is None:
            self._schedule_range(span, start, end, attempt=0, delay=0.0)
        log.info("subscribed span", span_id=span_id, start=start.hex(), end=end.hex(), start_ts=start_ts)

    async def unsubscribe(self, span_id: int) -> None:
        """Stop a span: no new locks, every region request ended and unlocked, its path removed."""
        span = self._spans.pop(span_id, None)
        if span is None:
            return
        span.stopped = True
        span.lock.stop()
        tasks = [*span.tasks, *([span.consumer] if span.consumer is not None else [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for state in list(span.regions.values()):
            self._drop_region(span, state)
        for rid in (span.request_id, *span.region_request_ids.values()):
            self._span_of_request.pop(rid, None)
        self.stream.remove_path(span.path)
        log.info("unsubscribed span", span_id=span_id)

    async def _check_gc(self, span_id: int, start_ts: int) -> None:
        """Fail the client when ``start_ts`` is below PD's GC safe point (read at most once a second)."""
        now = asyncio.get_running_loop().time()
        if self._gc_checked is None or now - self._gc_checked[0] > 1.0:
            self._gc_checked = (now, await self.pd.gc_safe_point())
        safe_point = self._gc_checked[1]
        if start_ts < safe_point:
            self._m_errors[ErrorKind.GC_SAFE_POINT].inc()
            self._fail(ChangefeedError(
                f"snapshot lost by GC: span {span_id} starts at ts {start_ts}, earlier than PD's GC safe point "
                f"{safe_point}; the changes since then are gone upstream: recreate the changefeed from a newer ts"
            ))

    def span_resolved_ts(self, span_id: int) -> int:
        return self._spans[span_id].adv.resolved_ts

    def span_lock(self, span_id: int) -> RangeLock:
        """The span's range lock (read-only use: holes, locked regions)."""
        return self._spans[span_id].lock

    def check(self) -> None:
        """Raise the failure that stopped the client, if any."""
        if self._failure is not None:
            raise self._failure

    async def close(self) -> None:
        self.closed = True
        for span_id in list(self._spans):
            await self.unsubscribe(span_id)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for workers in self._workers.values():
            for w in workers:
                await w.close()
        self._workers.clear()
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
        await self.pd.close()

    # --- background tasks ---------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._send_queue is not None:
            return
        self._send_queue = asyncio.PriorityQueue()
        self._tasks = [
            asyncio.create_task(self._guarded(self._run_sender()), name="puller-sender"),
            asyncio.create_task(self._guarded(self._run_ticker()), name="puller-ticker"),
            asyncio.create_task(self._guarded(self.stream.run_watchdog(WATCHDOG_PERIOD_S)), name="puller-watchdog"),
        ]

    async def _guarded(self, coro: object) -> None:
        try:
            await coro  # type: ignore[misc]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    async def _run_ticker(self) -> None:
        period = max(self.advance_interval_ms, 20) / 1000.0
        while True:
            await asyncio.sleep(period)
            for span in list(self._spans.values()):
                ts = span.adv.tick()
                if ts is not None:
                    self._advanced(span, ts)

    async def _run_sender(self) -> None:
        assert self._send_queue is not None
        while True:
            _, _, state = await self._send_queue.get()
            span = self._spans.get(state.span_id)
            if span is None or state.stale:
                continue
            t = state.target
            try:
                addr = await self._store_addr(t.leader_store_id)
            except UpstreamError as exc:
                self._end_region(span, state, ErrorKind.STORE, StreamBroken(str(exc), ErrorKind.STORE))
                continue
            if state.stale:
                continue
            state.store_addr = addr
            req = cdcpb_pb2.ChangeDataRequest(
                header=cdcpb_pb2.Header(cluster_id=self._cluster_id or 0, ticdc_version=CLIENT_VERSION),
                region_id=t.region_id, region_epoch=t.epoch(), checkpoint_ts=state.locked.resolved_ts,
                # TiKV takes the range memcomparable-encoded; a raw one would not decode and it would observe
                # the whole region instead.
                start_key=encode_key(t.start_key), end_key=encode_key(t.end_key), request_id=state.request_id,
                extra_op=kvrpcpb_pb2.ReadOldValue, register=cdcpb_pb2.ChangeDataRequest.Register(),
            )
            self._pick_worker(addr).register(state, req)
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
                StoreWorker(addr, i, ch, self._dispatch, self._on_stream_broken) for i in range(self.workers_per_store)
            ]
        i = self._rr.get(addr, 0)
        self._rr[addr] = i + 1
        return workers[i % len(workers)]

    # --- scheduling ---------------------------------------------------------------------------
    def _spawn(self, span: SubscribedSpan, coro: object, name: str) -> None:
        task = asyncio.create_task(self._guarded(coro), name=name)
        span.tasks.add(task)
        task.add_done_callback(span.tasks.discard)

    def _schedule_range(self, span: SubscribedSpan, start: bytes, end: bytes, *, attempt: int, delay: float) -> None:
        self._spawn(span, self._range_task(span, start, end, attempt, delay), f"puller-range-{span.id}")

    def _schedule_region(self, span: SubscribedSpan, target: RegionTarget, *, attempt: int, priority: int,
                         delay: float) -> None:
        name = f"puller-region-{target.region_id}"
        self._spawn(span, self._region_task(span, target, attempt, priority, delay), name)

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
            self._schedule_range(span, start, end, attempt=attempt + 1, delay=self.backoff.delay_s(attempt + 1))
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
        self._schedule_range(span, start, end, attempt=attempt + 1, delay=self.backoff.delay_s(attempt + 1))

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
        assert self._send_queue is not None
        self._send_queue.put_nowait((priority, next(self._seq), state))

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
                    self._drop_region(span, st)
            log.info("region grew over a part of the span it does not hold: requesting it whole", span_id=span.id,
                     region_id=t.region_id, version=t.version, start=lo.hex(), end=hi.hex())
            self._schedule_range(span, lo, hi, attempt=attempt, delay=0.0)
            return
        for s, e in retry:
            self._schedule_range(span, s, e, attempt=attempt + 1, delay=self.backoff.delay_s(attempt + 1))

    def _drop_region(self, span: SubscribedSpan, state: RegionState) -> int | None:
        """End a request: deregister it, forget it, unlock its range (a hole at its resolved ts, returned)."""
        state.stale = True
        if state.worker is not None and state.worker.deregister(state):
            # The store may still send for this (request id, region) pair: the region's next request must
            # not share it.
            fresh = span.region_request_ids[state.region_id] = next(self._request_ids)
            self._span_of_request[fresh] = span
        if span.regions.get(state.region_id) is state:
            del span.regions[state.region_id]
        if state.locked.locked:
            return span.lock.unlock(state.locked)
        return None

    def _end_region(
        self, span: SubscribedSpan, state: RegionState, kind: ErrorKind, err: cdcpb_pb2.Error | StreamBroken
    ) -> None:
        """A request ended with ``err``: make its range a hole and re-request it as the error kind says."""
        if state.stale or span.regions.get(state.region_id) is not state:
            return
        self._m_errors[kind].inc()
        decision = decide(span.id, state, kind, err, self.backoff)
        if isinstance(decision, Fail):
            self._fail(ChangefeedError(decision.message))
            return
        hole_ts = self._drop_region(span, state)
        if span.stopped:
            return
        t = state.target
        log.info("region request ended", span_id=span.id, region_id=t.region_id, request_id=state.request_id,
                 kind=kind.value, hole_ts=hole_ts, attempt=decision.attempt)
        if decision.region is not None:
            self._schedule_region(span, decision.region, attempt=decision.attempt, priority=decision.priority,
                                  delay=decision.delay_s)
        else:
            self._schedule_range(span, t.start_key, t.end_key, attempt=decision.attempt, delay=decision.delay_s)

    # --- receiving (per worker) ---------------------------------------------------------------
    async def _dispatch(self, worker: StoreWorker, resp: cdcpb_pb2.ChangeDataEvent, size: int) -> None:
        try:
            await self._dispatch_message(worker, resp, size)
        except Exception as exc:  # a bug must stop the client visibly, not kill a receiver silently
            self._fail(exc)
            raise

    async def _dispatch_message(self, worker: StoreWorker, resp: cdcpb_pb2.ChangeDataEvent, size: int) -> None:
        stream, area = self.stream, self.area
        m_ev = self._m_events
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
                span = self._spans.get(state.span_id)
                if span is None:
                    continue
                m_ev["entries"].inc()
                m_ev["rows"].inc(len(ev.entries.entries))
                stream.push_entries(span.path, ev.region_id, ev, event_size)
            elif kind == "resolved_ts":  # a store that takes the client for one older than 4.0.8
                m_ev["resolved"].inc()
                m_ev["resolved_regions"].inc()
                span = self._spans.get(state.span_id)
                if span is not None:
                    await stream.wait_pushable(area, EventKind.RESOLVED)
                    stream.push_resolved(span.path, np.array([ev.region_id], dtype=np.uint64), ev.resolved_ts)
            elif kind == "error":
                worker.take(ev.request_id, ev.region_id)
                m_ev["error"].inc()
                await stream.wait_pushable(area, EventKind.ERROR)
                span = self._spans.get(state.span_id)
                if span is not None:
                    stream.push_error(span.path, ev.region_id, (state.request_id, ev.error))
        if resp.HasField("resolved_ts"):
            rts = resp.resolved_ts
            m_ev["resolved"].inc()
            m_ev["resolved_regions"].inc(len(rts.regions))
            if rts.request_id:
                span = self._span_of_request.get(rts.request_id)
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
                span = self._spans.get(span_id)
                if span is not None:
                    await stream.wait_pushable(area, EventKind.RESOLVED)
                    stream.push_resolved(span.path, np.array(region_ids, dtype=np.uint64), rts.ts)

    async def _on_stream_broken(self, worker: StoreWorker, states: list[RegionState], why: str) -> None:
        try:
            await self._fail_stream_regions(worker, states, why)
        except Exception as exc:
            self._fail(exc)
            raise

    async def _fail_stream_regions(self, worker: StoreWorker, states: list[RegionState], why: str) -> None:
        for sid, addr in list(self._store_addrs.items()):
            if addr == worker.addr:
                del self._store_addrs[sid]  # look the store up again: it may have moved
        err = StreamBroken(f"stream to store {worker.addr} broke: {why}")
        for st in states:
            if st.stale:
                continue
            span = self._spans.get(st.span_id)
            if span is None:
                continue
            await self.stream.wait_pushable(self.area, EventKind.ERROR)
            self.stream.push_error(span.path, st.region_id, (st.request_id, err))

    # --- handling (per span, in order) --------------------------------------------------------
    def _handle_batch(self, span: SubscribedSpan, batch: list[RegionEvent]) -> None:
        if self._failure is not None or span.stopped:
            return
        # With on_batch, the changes of the whole batch of events become one record batch (Arrow's cost is per
        # call): handed on before any resolved ts moves, and at the end.
        buf = change_batch.ChangeBuffer() if self._on_batch is not None else None
        try:
            for ev in batch:
                k = ev.kind
                if k is EventKind.DATA:
                    self._on_entries(span, ev, buf)
                elif k is EventKind.RESOLVED:
                    assert ev.region_ids is not None
                    if buf:
                        self._hand_on(span, buf)
                    ts = span.adv.on_resolved_batch(ev.region_ids, ev.ts)
                    if ts is not None:
                        self._advanced(span, ts)
                elif k is EventKind.ERROR:
                    request_id, err = ev.payload
                    state = span.regions.get(ev.region_id)
                    if state is not None and state.request_id == request_id:
                        self._end_region(span, state, classify_error(err), err)
                elif k is EventKind.RESYNC:
                    assert ev.region_ids is not None
                    for rid in ev.region_ids.tolist():
                        state = span.regions.get(rid)
                        if state is not None:
                            self._end_region(span, state, ErrorKind.RESYNC, StreamBroken("resync", ErrorKind.RESYNC))
                if self._failure is not None:
                    return
                if buf is not None and len(buf) >= BATCH_ROWS:
                    self._hand_on(span, buf)
            if buf:
                self._hand_on(span, buf)
        except Exception as exc:
            self._fail(exc)

    def _hand_on(self, span: SubscribedSpan, buf: change_batch.ChangeBuffer) -> None:
        n = len(buf)
        assert self._on_batch is not None
        self._on_batch(span.id, buf.take())
        self.changes_emitted += n
        self._m_changes.inc(n)

    def _on_entries(self, span: SubscribedSpan, ev: RegionEvent, buf: change_batch.ChangeBuffer | None) -> None:
        out = region_event_handler.handle_entries(span, ev, buf)
        if not out:
            return
        if buf is not None:
            buf.add_changes(out)
            return
        if self._on_changes is not None:
            self._on_changes(span.id, out)
        else:
            on_change, span_id = self._on_change, span.id
            assert on_change is not None
            for ch in out:
                on_change(span_id, ch)
        self.changes_emitted += len(out)
        self._m_changes.inc(len(out))

    def _advanced(self, span: SubscribedSpan, ts: int) -> None:
        self.progress.set()
        if self._on_resolved is not None:
            self._on_resolved(span.id, ts)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
            log.error("subscription failed", error=str(exc))
        self.progress.set()
