"""Subscription client: turns span subscriptions into region requests on per-store EventFeed streams.

After TiCDC's ``logservice/logpuller/subscription_client.go``: the client wires the parts together and starts their
loops in one place, :meth:`SubscriptionClient._run`, in the order data flows. For each subscribed span it keeps one
:class:`~cdc_core.puller.range_lock.RangeLock` (which region holds which range, every region's resolved ts,
the holes), one :class:`~cdc_core.puller.ts_advancer.ResolvedTsAdvancer` (the span's throttled resolved ts,
default every 100 ms) and one path of the :class:`~cdc_core.puller.event_stream.EventStream` (the bounded
queue between the gRPC receivers and the span's handler, under the client's area: one per changefeed). The parts:

1. **Scheduling** (:mod:`~cdc_core.puller.region_request_scheduler`): a span's ranges are divided at PD's regions and
   locked; the locked regions are sent, highest priority first, to their leader store over one of a few multiplexed
   streams per store, round-robin; an ended request is re-requested as :mod:`~cdc_core.puller.region_failure`
   decides for the error's kind (TiCDC's ``region_failure_handler.go``), or the subscription fails.
2. **Receiving** (:mod:`~cdc_core.puller.region_request_worker`): a worker's stream pushes each region's entries, each
   error and each ``ResolvedTs`` (one id array per message, routed by request id to its span) into the span's path,
   awaiting ``wait_pushable`` first: while the area is paused the receiver stops at the first message it cannot
   push, so the order is kept and the store is held back by gRPC flow control.
3. **Handling** (:mod:`~cdc_core.puller.region_event_handler`, one consumer per span, in order): entries go through
   the region's :class:`~cdc_core.puller.matcher.Matcher` (PREWRITE/COMMIT matching, COMMITTED from the scan, commits
   held until INITIALIZED); a change at or below the region's resolved ts breaks the store's promise and fails the
   subscription loudly. INITIALIZED marks the region initialized in the lock; resolved batches go to the advancer,
   vectorized. Errors end the request: it is deregistered, its range is unlocked (a hole at its last resolved ts)
   and re-requested.
4. **Advancing**: a ticker hands each span's throttled resolved ts on; a watchdog releases blocked paths of a paused
   area (the event stream's).

**Request ids** name a span, as in TiCDC: a stream's requests are keyed by (request id, region id), and the store
sends one ``ResolvedTs`` message per (request id, ts) listing every region it resolved — one message for
thousands of regions, not one per region. A pair is never live twice: a store error or a broken stream ends a
request for good, so its successor may reuse the pair; but when the *client* ends a request (``RESYNC``, a
region grown over another part, unsubscribe) the store may still be sending for it, so the region's later
requests in that span take a fresh request id. The range lock keeps each locked region's request id, and a
``ResolvedTs`` message is filtered by it vectorized: late resolved ts of an ended request never reach its
successor.

**Resolved ts** come as ``ChangeDataEvent.resolved_ts`` (per request id over EventFeedV2, per stream with
request id 0 over EventFeed) or, from a store that treats the client as older than 4.0.8, as a region's
``Event.resolved_ts``; all three reach the span's advancer the same way.

**GC.** TiKV scans from any checkpoint, even one whose history GC removed. So before a span is subscribed the
client compares its start ts with PD's GC safe point and fails ("snapshot lost by GC") when it is older, as
TiCDC refuses a start ts before GC; re-requests start from a region's resolved ts, which the changefeed's
service safe point protects.

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

from prometheus_client import CollectorRegistry

from cdc_core.errors import ChangefeedError
from cdc_core.log import get_logger
from cdc_core.puller.backoff import Backoff
from cdc_core.puller.client_metrics import ClientMetrics
from cdc_core.puller.event_stream import EventStream, RegionEvent
from cdc_core.puller.options import DEFAULT_ADVANCE_INTERVAL_MS, DEFAULT_MAX_PENDING_BYTES
from cdc_core.puller.pd_client import PDClient
from cdc_core.puller.range_lock import RangeLock
from cdc_core.puller.region_event_handler import OnBatch, OnChange, OnChanges, RegionEventHandler
from cdc_core.puller.region_failure import ErrorKind
from cdc_core.puller.region_request_scheduler import RegionRequestScheduler, guarded
from cdc_core.puller.region_request_worker import RECEIVED_KINDS, RegionEventDispatcher
from cdc_core.puller.subscribed_span import SubscribedSpan
from cdc_core.puller.ts_advancer import ResolvedTsAdvancer

__all__ = ["OnChange", "OnResolved", "SubscriptionClient"]

log = get_logger("cdcflow.puller")

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
        if sum(cb is not None for cb in (on_change, on_changes, on_batch)) != 1:
            raise ValueError("give exactly one of on_change (per row), on_changes (lists) and on_batch (Arrow)")
        self.pd = PDClient(pd_addr)
        self._on_resolved = on_resolved
        self.area = area
        self.stream = stream if stream is not None else EventStream(registry=registry)
        self.stream.add_area(area, max_pending_bytes)
        self.advance_interval_ms = advance_interval_ms
        self._registry = registry
        m = ClientMetrics.for_registry(registry)
        self._m_errors = {k: m.errors.labels(k.value) for k in ErrorKind}
        self._spans: dict[int, SubscribedSpan] = {}
        self._span_of_request: dict[int, SubscribedSpan] = {}  # request id -> its span (the span's own and fresh ones)
        self._request_ids = itertools.count(1)
        self._gc_checked: tuple[float, int] | None = None  # (loop time, PD's GC safe point then)
        self._failure: BaseException | None = None
        self._run_task: asyncio.Task[None] | None = None
        self.progress = asyncio.Event()
        self.closed = False
        # The parts, in the order data flows: requests out, events in, events handled.
        self.scheduler = RegionRequestScheduler(
            self.pd,
            RegionEventDispatcher(self.stream, area, self._spans, self._span_of_request,
                                  {k: m.events.labels(k) for k in RECEIVED_KINDS}, self._fail),
            spans=self._spans, span_of_request=self._span_of_request, request_ids=self._request_ids,
            workers_per_store=workers_per_store, backoff=backoff or Backoff(), errors=self._m_errors,
            requests=m.requests, fail=self._fail,
        )
        self.handler = RegionEventHandler(
            on_change=on_change, on_changes=on_changes, on_batch=on_batch, advanced=self._advanced,
            end_region=self.scheduler.end_region, failed=lambda: self._failure is not None, fail=self._fail,
            changes=m.changes,
        )

    @property
    def changes_emitted(self) -> int:
        """Row changes handed on so far."""
        return self.handler.changes_emitted

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
        if self.scheduler.cluster_id is None:
            self.scheduler.cluster_id = await self.pd.cluster_id()
        path = (self.area, span_id)
        self.stream.add_path(self.area, path)
        request_id = next(self._request_ids)
        span = self._spans[span_id] = SubscribedSpan(span_id, start, end, start_ts, path, lock, adv, request_id)
        self._span_of_request[request_id] = span

        async def handle(batch: list[RegionEvent]) -> None:
            self.handler.handle(span, batch)

        span.consumer = asyncio.create_task(self.stream.run_consumer(path, handle), name=f"puller-span-{span_id}")
        if self._failure is None:
            self.scheduler.schedule_range(span, start, end, attempt=0, delay=0.0)
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
            self.scheduler.drop_region(span, state)
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
        if self._run_task is not None:
            self._run_task.cancel()
            await asyncio.gather(self._run_task, return_exceptions=True)
        await self.scheduler.close()
        await self.pd.close()

    # --- the loops ----------------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._run_task is None:
            self._run_task = asyncio.create_task(self._run(), name="puller-run")

    async def _run(self) -> None:
        """The client's loops, in the order data flows (TiCDC's ``Run``): requests to the stores, whose streams feed
        the spans' paths (their workers start with a store's first request, the spans' consumers at subscribe), then
        the resolved ts handed on, and the watchdog of the area. A loop's failure stops the client (``check``), not
        the others."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(guarded(self.scheduler.run(), self._fail), name="puller-scheduler")
            tg.create_task(guarded(self._run_ticker(), self._fail), name="puller-ticker")
            tg.create_task(guarded(self.stream.run_watchdog(WATCHDOG_PERIOD_S), self._fail), name="puller-watchdog")

    async def _run_ticker(self) -> None:
        period = max(self.advance_interval_ms, 20) / 1000.0
        while True:
            await asyncio.sleep(period)
            for span in list(self._spans.values()):
                ts = span.adv.tick()
                if ts is not None:
                    self._advanced(span, ts)

    def _advanced(self, span: SubscribedSpan, ts: int) -> None:
        self.progress.set()
        if self._on_resolved is not None:
            self._on_resolved(span.id, ts)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
            log.error("subscription failed", error=str(exc))
        self.progress.set()
