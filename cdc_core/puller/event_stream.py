"""The bounded stream of region events between the gRPC receivers and the span handlers (after TiCDC's dynstream).

It owns the pending region events of every subscribed span and their memory accounting. Events are grouped in
**paths** (one per subscribed span, each with its own queue and its own consumer, so a slow span never delays
another's events) and paths in **areas** (one per changefeed, each with a quota of pending bytes, default 1 GiB).

**Pause / resume.** An area pauses its producers when its pending bytes reach ``pause_ratio`` (80 %) of the
quota and resumes them below ``resume_ratio`` (50 %), logging ``subscription client pause push region event`` /
``subscription client resume push region event``. Pushing never blocks: a receiver checks :meth:`is_paused` or
awaits :meth:`wait_pushable` before it pushes (TiCDC's ``pushRegionEventToDS``).

Seed 000's stall cannot happen here, for two reasons:

1. **Resolved-ts coalescing.** Pending resolved-ts batches of a path are merged per region (a newer ts replaces
   an older one), so their memory is bounded by the number of regions (at most two entries per region), not by
   the backlog. A region's ts may only be delivered after that region's earlier data events, so a path keeps
   at most two pending resolved events: *head*, at a fixed queue position, takes the new ts of every region
   that has had no data event (or error) since that position; *tail*, moved to the end of the queue on every
   push, takes the others. When the head is delivered the tail becomes the head. The head never moves, so a
   slow consumer cannot starve resolved ts (moving a single merged event to the tail on every push would),
   and delivering a region's ts early is safe because each region's ordering is kept.
   With coalescing on, resolved events may be pushed while the area is paused (``wait_pushable`` does not
   wait for them): their memory is bounded anyway, and they are what lets resolved ts keep advancing.
2. **Blocked paths are released.** A path is *blocked* when it has pending events and its consumer has made no
   progress (no pop, no :meth:`done`) for ``blocked_after_ms``. While an area is paused, every blocked path
   holding more than ``path_share`` of the quota is released, then more blocked paths (largest first) until the
   blocked paths together hold less than the resume threshold — so once the healthy paths drain, the area
   always resumes. (TiCDC's event collector does the same with its ``ReleasePath`` feedback for blocking
   paths; its puller relies on throttling alone, which is what seed 000 shows is not enough.) Releasing drops
   the path's pending data and resolved events — **never silently**: every region whose data was dropped is
   recorded, events pushed while the path stays released are dropped and recorded the same way, and the
   consumer's next batch starts with one ``RESYNC`` event listing those regions. The subscription client must
   then re-request them from their resolved ts (unlock at the last resolved ts, lock again, register with a new
   request id, ignore late events of the old request). Error events are never dropped.

Single-threaded: all calls come from one asyncio loop.

Complexity (b = regions in a resolved batch, m = region entries of the pending resolved event it merges into,
d = regions with data since the head resolved event, p = paths in the area):

=============================== ================================ ==========================================
operation                       cost                             note
=============================== ================================ ==========================================
``push_entries``/``push_error`` O(1) amortised                   + pause check O(1)
``push_resolved``               O(b) / merge O(m + b log b + d)  merge: sorted insert, one entry per region
``pop_batch``                   O(events returned)
``done`` / ``is_paused``        O(1)
``tick``                        O(p log p) while paused          finds and releases blocked paths
=============================== ================================ ==========================================

Metrics (label ``area``; ``kind`` = data|resolved|error|resync): ``cdcflow_puller_stream_pending_bytes``,
``cdcflow_puller_stream_max_pending_bytes``, ``cdcflow_puller_stream_paused``,
``cdcflow_puller_stream_events_pushed_total``, ``cdcflow_puller_stream_events_popped_total``,
``cdcflow_puller_stream_events_dropped_total``, ``cdcflow_puller_stream_resolved_coalesced_total``,
``cdcflow_puller_stream_paths_released_total``.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from prometheus_client import CollectorRegistry, Counter, Gauge

from cdc_core.log import get_logger
from cdc_core.metric_families import PerRegistry
from cdc_core.puller.options import DEFAULT_MAX_PENDING_BYTES

__all__ = [
    "EVENT_OVERHEAD_BYTES",
    "Area",
    "EventKind",
    "EventStream",
    "Path",
    "RegionEvent",
    "StreamMetrics",
]

log = get_logger("cdcflow.puller.event_stream")

EVENT_OVERHEAD_BYTES: Final = 64  # what an event costs beyond its payload (object, queue slot)


class EventKind(enum.Enum):
    DATA = "data"  # row entries of one region
    RESOLVED = "resolved"  # resolved ts of a batch of regions
    ERROR = "error"  # a region error: never dropped
    RESYNC = "resync"  # synthesized: these regions lost data and must be re-requested


@dataclass(slots=True)
class RegionEvent:
    kind: EventKind
    region_id: int = 0  # DATA, ERROR
    payload: Any = None  # DATA: the entries; ERROR: the error
    region_ids: NDArray[np.uint64] | None = None  # RESOLVED, RESYNC
    ts: int | NDArray[np.uint64] = 0  # RESOLVED: one ts, or one per region (coalesced)
    size: int = 0
    seq: int = 0


@dataclass(eq=False)
class Path:
    """One subscribed span's queue in the stream."""

    id: Hashable
    area: Area
    queue: deque[RegionEvent] = field(default_factory=deque)
    pending_bytes: int = 0
    head: RegionEvent | None = None  # coalesced resolved event at a fixed position
    tail: RegionEvent | None = None  # coalesced resolved event at the end of the queue
    dirty_since_head: set[int] = field(default_factory=set)  # regions with data/error after head
    dirty_since_tail: set[int] = field(default_factory=set)
    last_progress_ms: int = 0
    busy: bool = False  # a popped batch is being handled
    released: bool = False  # pending events were dropped; the consumer gets RESYNC next
    resync: set[int] = field(default_factory=set)
    dropped_events: int = 0
    _wakeup: asyncio.Future[None] | None = None

    @property
    def empty(self) -> bool:
        return not self.queue and self.head is None

    @property
    def pending_resolved_regions(self) -> int:
        """Region entries held by pending resolved events (coalesced: at most 2 per region)."""
        n = sum(ev.region_ids.size for ev in (self.head, self.tail) if ev is not None and ev.region_ids is not None)
        return n + sum(
            ev.region_ids.size for ev in self.queue if ev.kind is EventKind.RESOLVED and ev.region_ids is not None
        )


@dataclass(eq=False)
class Area:
    """One changefeed's paths and quota."""

    id: Hashable
    max_pending_bytes: int
    pending_bytes: int = 0
    paused: bool = False
    paths: dict[Hashable, Path] = field(default_factory=dict)
    _resume_waiters: list[asyncio.Future[None]] = field(default_factory=list)


class StreamMetrics(PerRegistry):
    """The stream's metric families in one registry, labelled ``area``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        p = "cdcflow_puller_stream"
        self.pending = Gauge(f"{p}_pending_bytes", "Pending region event bytes.", ("area",), registry=registry)
        self.max_pending = Gauge(f"{p}_max_pending_bytes", "Quota of pending bytes.", ("area",), registry=registry)
        self.paused = Gauge(f"{p}_paused", "1 while the area's producers are paused.", ("area",), registry=registry)
        self.pushed = Counter(f"{p}_events_pushed", "Events pushed.", ("area", "kind"), registry=registry)
        self.popped = Counter(f"{p}_events_popped", "Events handed to consumers.", ("area", "kind"), registry=registry)
        self.dropped = Counter(
            f"{p}_events_dropped", "Events dropped by released paths.", ("area", "kind"), registry=registry
        )
        self.coalesced = Counter(
            f"{p}_resolved_coalesced", "Resolved-ts batches merged into a pending one.", ("area",), registry=registry
        )
        self.released = Counter(
            f"{p}_paths_released", "Blocked paths whose pending events were released.", ("area",), registry=registry
        )


class _AreaMetrics:
    """Children of :class:`StreamMetrics` bound to one area (label lookups are too slow per event)."""

    def __init__(self, m: StreamMetrics, area: Area) -> None:
        label = str(area.id)
        m.pending.labels(label).set_function(lambda: area.pending_bytes)
        m.max_pending.labels(label).set_function(lambda: area.max_pending_bytes)
        m.paused.labels(label).set_function(lambda: 1 if area.paused else 0)
        self.pushed = {k: m.pushed.labels(label, k.value) for k in EventKind}
        self.popped = {k: m.popped.labels(label, k.value) for k in EventKind}
        self.dropped = {k: m.dropped.labels(label, k.value) for k in EventKind}
        self.coalesced = m.coalesced.labels(label)
        self.released = m.released.labels(label)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class EventStream:
    """Areas and paths of region events with memory control; see the module docstring."""

    def __init__(
        self,
        *,
        pause_ratio: float = 0.8,
        resume_ratio: float = 0.5,
        coalesce_resolved: bool = True,
        release_blocked_paths: bool = True,
        blocked_after_ms: int = 5_000,
        path_share: float | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if not 0 < resume_ratio < pause_ratio:
            raise ValueError("need 0 < resume_ratio < pause_ratio")
        self.pause_ratio = pause_ratio
        self.resume_ratio = resume_ratio
        self.coalesce_resolved = coalesce_resolved
        self.release_blocked_paths = release_blocked_paths
        self.blocked_after_ms = blocked_after_ms
        # A blocked path may keep at most this share of the quota (default: half the resume threshold).
        self.path_share = resume_ratio / 2 if path_share is None else path_share
        self._clock = clock_ms
        self._metrics = StreamMetrics.for_registry(registry)
        self._areas: dict[Hashable, Area] = {}
        self._area_metrics: dict[Hashable, _AreaMetrics] = {}
        self._paths: dict[Hashable, Path] = {}
        self._seq = 0

    # --- topology --------------------------------------------------------------------------------
    def add_area(self, area_id: Hashable, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES) -> Area:
        if area_id in self._areas:
            raise ValueError(f"area {area_id!r} exists")
        area = self._areas[area_id] = Area(area_id, max_pending_bytes)
        self._area_metrics[area_id] = _AreaMetrics(self._metrics, area)
        return area

    def add_path(self, area_id: Hashable, path_id: Hashable) -> Path:
        if path_id in self._paths:
            raise ValueError(f"path {path_id!r} exists")
        area = self._areas[area_id]
        path = self._paths[path_id] = area.paths[path_id] = Path(path_id, area, last_progress_ms=self._clock())
        return path

    def remove_path(self, path_id: Hashable) -> None:
        """Forget a path (unsubscribed span) and release its pending bytes."""
        path = self._paths.pop(path_id)
        del path.area.paths[path_id]
        self._account(path, -path.pending_bytes)
        path.queue.clear()
        path.head = path.tail = None
        self._update_pause(path.area)

    def area(self, area_id: Hashable) -> Area:
        return self._areas[area_id]

    def path(self, path_id: Hashable) -> Path:
        return self._paths[path_id]

    # --- producer side ---------------------------------------------------------------------------
    def is_paused(self, area_id: Hashable) -> bool:
        return self._areas[area_id].paused

    async def wait_pushable(self, area_id: Hashable, kind: EventKind = EventKind.DATA) -> None:
        """Return once the area accepts ``kind`` events (resolved ones always, when coalescing)."""
        area = self._areas[area_id]
        if kind is EventKind.RESOLVED and self.coalesce_resolved:
            return
        while area.paused:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            area._resume_waiters.append(fut)
            await fut

    def push_entries(self, path_id: Hashable, region_id: int, entries: Any, size: int) -> bool:
        """Queue one region's row entries (``size``: their bytes). False when the path dropped them (it is
        released; the region is recorded for resync)."""
        path = self._paths[path_id]
        ev = RegionEvent(EventKind.DATA, region_id=region_id, payload=entries, size=size + EVENT_OVERHEAD_BYTES)
        return self._push_ordered(path, ev)

    def push_error(self, path_id: Hashable, region_id: int, error: Any) -> None:
        """Queue a region error notification (never dropped)."""
        path = self._paths[path_id]
        self._push_ordered(
            path, RegionEvent(EventKind.ERROR, region_id=region_id, payload=error, size=EVENT_OVERHEAD_BYTES)
        )

    def push_resolved(
        self, path_id: Hashable, region_ids: NDArray[Any] | Sequence[int], ts: int | NDArray[np.uint64]
    ) -> bool:
        """Queue a resolved-ts batch (one ts for all regions, or one per region). False when dropped."""
        path = self._paths[path_id]
        area = path.area
        am = self._area_metrics[area.id]
        am.pushed[EventKind.RESOLVED].inc()
        if path.released:
            # Not needed: the regions that lost data are re-requested, the others get a newer ts soon.
            path.dropped_events += 1
            am.dropped[EventKind.RESOLVED].inc()
            return False
        ids = np.asarray(region_ids, dtype=np.uint64)
        if ids.size == 0:
            return True
        self._touch(path)
        self._seq += 1
        if not self.coalesce_resolved:
            ev = _resolved_event(ids, ts, self._seq)
            path.queue.append(ev)
            self._account(path, ev.size)
        elif path.head is None:
            path.head = _resolved_event(ids, ts, self._seq)
            path.dirty_since_head.clear()
            self._account(path, path.head.size)
        else:
            am.coalesced.inc()
            clean = ids
            clean_ts = ts
            if path.dirty_since_head:
                dirty = np.isin(ids, np.fromiter(path.dirty_since_head, np.uint64, len(path.dirty_since_head)))
                if dirty.any():
                    tts = ts if np.ndim(ts) == 0 else np.asarray(ts, np.uint64)[dirty]
                    self._merge_tail(path, ids[dirty], tts)
                    clean = ids[~dirty]
                    clean_ts = ts if np.ndim(ts) == 0 else np.asarray(ts, np.uint64)[~dirty]
            if clean.size:
                old = path.head.size
                _merge_into(path.head, clean, clean_ts)
                self._account(path, path.head.size - old)
        self._after_push(area)
        return True

    # --- consumer side ---------------------------------------------------------------------------
    def pop_batch(self, path_id: Hashable, max_events: int = 64) -> list[RegionEvent]:
        """Hand the next events of a path to its consumer, in order; the path is busy until :meth:`done`.

        A released path's next batch starts with a ``RESYNC`` event naming the regions that lost data.
        """
        path = self._paths[path_id]
        am = self._area_metrics[path.area.id]
        batch: list[RegionEvent] = []
        if path.released:
            ids = np.fromiter(sorted(path.resync), dtype=np.uint64, count=len(path.resync))
            batch.append(RegionEvent(EventKind.RESYNC, region_ids=ids))
            am.popped[EventKind.RESYNC].inc()
            path.released = False
            path.resync = set()
        queue = path.queue
        freed = 0
        while len(batch) < max_events:
            head = path.head
            if head is not None and (not queue or queue[0].seq > head.seq):
                batch.append(head)
                freed += head.size
                # The tail becomes the head: it stays at its position from now on.
                path.head, path.tail = path.tail, None
                path.dirty_since_head, path.dirty_since_tail = path.dirty_since_tail, set()
                continue
            if not queue:
                break
            ev = queue.popleft()
            batch.append(ev)
            freed += ev.size
        for ev in batch:
            am.popped[ev.kind].inc()
        if batch:
            path.busy = True
            path.last_progress_ms = self._clock()
        if freed:
            self._account(path, -freed)
            self._update_pause(path.area)
        return batch

    def done(self, path_id: Hashable) -> None:
        """The consumer finished handling the batch it popped."""
        path = self._paths.get(path_id)
        if path is not None:
            path.busy = False
            path.last_progress_ms = self._clock()

    async def next_batch(self, path_id: Hashable, max_events: int = 64) -> list[RegionEvent]:
        """Wait for and pop the next non-empty batch of a path."""
        path = self._paths[path_id]
        while path.empty and not path.released:
            path._wakeup = asyncio.get_running_loop().create_future()
            await path._wakeup
        return self.pop_batch(path_id, max_events)

    async def run_consumer(
        self, path_id: Hashable, handler: Callable[[list[RegionEvent]], Awaitable[None]], max_events: int = 64
    ) -> None:
        """Feed a path's batches to ``handler`` until cancelled (one consumer task per path)."""
        while True:
            batch = await self.next_batch(path_id, max_events)
            try:
                await handler(batch)
            finally:
                self.done(path_id)

    # --- memory control --------------------------------------------------------------------------
    def tick(self, now_ms: int | None = None) -> None:
        """Periodic check (call it from a timer): release blocked paths of paused areas."""
        now = self._clock() if now_ms is None else now_ms
        for area in self._areas.values():
            if area.paused:
                self._relieve(area, now)

    async def run_watchdog(self, period_s: float = 1.0) -> None:
        """Call :meth:`tick` every ``period_s`` until cancelled."""
        while True:
            await asyncio.sleep(period_s)
            self.tick()

    def is_blocked(self, path: Path, now_ms: int | None = None) -> bool:
        now = self._clock() if now_ms is None else now_ms
        return not path.empty and now - path.last_progress_ms >= self.blocked_after_ms

    # --- internals -------------------------------------------------------------------------------
    def _check(self) -> None:
        """Assert the structure's invariants (as sortedcontainers' ``_check``; the seed-000 simulation and the
        coalescing property test call it after every step). O(pending events + paths).

        - every path is filed under its area and its id, and an area's pending bytes are its paths';
        - a path's pending bytes are its events' sizes (queue, head, tail); its queue is in push order;
        - a tail only follows a head, and only a tail's regions can have data after it;
        - a released path holds errors only (its data and resolved events were dropped) and regions to resync,
          and one that is not released has none;
        - an area that is not paused is below its pause threshold (a push that crosses it pauses the area).
        """
        assert set(self._paths) == {pid for a in self._areas.values() for pid in a.paths}
        for area in self._areas.values():
            total = 0
            for pid, path in area.paths.items():
                assert self._paths[pid] is path and path.area is area and path.id == pid, path.id
                events = [*path.queue, *(ev for ev in (path.head, path.tail) if ev is not None)]
                assert path.pending_bytes == sum(ev.size for ev in events), (path.id, path.pending_bytes)
                seqs = [ev.seq for ev in path.queue]
                assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"path {path.id!r} out of order"
                assert path.tail is None or path.head is not None, f"path {path.id!r}: a tail without a head"
                assert path.tail is not None or not path.dirty_since_tail, path.id
                assert path.dirty_since_tail <= path.dirty_since_head, path.id
                if path.released:
                    assert path.head is None and all(ev.kind is EventKind.ERROR for ev in path.queue), path.id
                else:
                    assert not path.resync, f"path {path.id!r}: regions to resync, but not released"
                total += path.pending_bytes
            assert area.pending_bytes == total, (area.id, area.pending_bytes, total)
            assert area.paused or area.pending_bytes < self.pause_ratio * area.max_pending_bytes, area.id

    def _push_ordered(self, path: Path, ev: RegionEvent) -> bool:
        area = path.area
        am = self._area_metrics[area.id]
        am.pushed[ev.kind].inc()
        if path.released and ev.kind is EventKind.DATA:
            path.resync.add(ev.region_id)
            path.dropped_events += 1
            am.dropped[EventKind.DATA].inc()
            return False
        self._touch(path)
        self._seq += 1
        ev.seq = self._seq
        path.queue.append(ev)
        if path.head is not None:
            # This region's next resolved ts must come after this event.
            path.dirty_since_head.add(ev.region_id)
            if path.tail is not None:
                path.dirty_since_tail.add(ev.region_id)
        self._account(path, ev.size)
        self._after_push(area)
        return True

    def _merge_tail(self, path: Path, ids: NDArray[np.uint64], ts: int | NDArray[np.uint64]) -> None:
        if path.tail is None:
            path.tail = _resolved_event(ids, ts, self._seq)
            self._account(path, path.tail.size)
        else:
            old = path.tail.size
            _merge_into(path.tail, ids, ts)
            path.tail.seq = self._seq  # delaying a resolved ts is always safe
            self._account(path, path.tail.size - old)
        path.dirty_since_tail.clear()

    def _touch(self, path: Path) -> None:
        """A push: an idle path starts its blocked-clock now, and its consumer is woken."""
        if path.empty:
            path.last_progress_ms = self._clock()
        if path._wakeup is not None and not path._wakeup.done():
            path._wakeup.set_result(None)

    def _account(self, path: Path, delta: int) -> None:
        path.pending_bytes += delta
        path.area.pending_bytes += delta

    def _after_push(self, area: Area) -> None:
        if not area.paused:
            self._update_pause(area)

    def _update_pause(self, area: Area) -> None:
        ratio = area.pending_bytes / area.max_pending_bytes
        if not area.paused and ratio >= self.pause_ratio:
            area.paused = True
            _log_pause(area, ratio)
            self._relieve(area, self._clock())
        elif area.paused and ratio < self.resume_ratio:
            area.paused = False
            _log_pause(area, ratio)
            waiters, area._resume_waiters = area._resume_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def _relieve(self, area: Area, now: int) -> None:
        if not self.release_blocked_paths:
            return
        blocked = [p for p in area.paths.values() if not p.released and self.is_blocked(p, now)]
        if not blocked:
            return
        blocked.sort(key=lambda p: p.pending_bytes, reverse=True)
        share = self.path_share * area.max_pending_bytes
        resume_at = self.resume_ratio * area.max_pending_bytes
        kept = sum(p.pending_bytes for p in blocked)
        for p in blocked:
            if p.pending_bytes > share or kept >= resume_at:
                kept -= p.pending_bytes
                self._release(p)
        self._update_pause(area)

    def _release(self, path: Path) -> None:
        """Drop a blocked path's pending data and resolved events; record the regions that lost data."""
        am = self._area_metrics[path.area.id]
        kept: deque[RegionEvent] = deque()
        freed = 0
        for ev in path.queue:
            if ev.kind is EventKind.ERROR:
                kept.append(ev)
                continue
            if ev.kind is EventKind.DATA:
                path.resync.add(ev.region_id)
            freed += ev.size
            path.dropped_events += 1
            am.dropped[ev.kind].inc()
        for ev_ in (path.head, path.tail):
            if ev_ is not None:
                freed += ev_.size
                path.dropped_events += 1
                am.dropped[EventKind.RESOLVED].inc()
        path.queue = kept
        path.head = path.tail = None
        path.dirty_since_head = set()
        path.dirty_since_tail = set()
        path.released = True
        self._account(path, -freed)
        am.released.inc()
        log.warning(
            "subscription client release blocked path",
            area=str(path.area.id),
            path=str(path.id),
            freed_bytes=freed,
            resync_regions=len(path.resync),
        )


def _log_pause(area: Area, ratio: float) -> None:
    """The operator's signal (seed 000): ``subscription client pause|resume push region event``."""
    log.info(
        f"subscription client {'pause' if area.paused else 'resume'} push region event",
        area=str(area.id),
        pending_bytes=area.pending_bytes,
        max_pending_bytes=area.max_pending_bytes,
        ratio=round(ratio, 3),
    )


def _resolved_event(ids: NDArray[np.uint64], ts: int | NDArray[np.uint64], seq: int) -> RegionEvent:
    ev = RegionEvent(
        EventKind.RESOLVED, region_ids=ids, ts=ts if np.ndim(ts) == 0 else np.asarray(ts, np.uint64), seq=seq
    )
    ev.size = _resolved_size(ev)
    return ev


def _resolved_size(ev: RegionEvent) -> int:
    assert ev.region_ids is not None
    ts_bytes = ev.ts.nbytes if isinstance(ev.ts, np.ndarray) else 8
    return int(ev.region_ids.nbytes) + int(ts_bytes) + EVENT_OVERHEAD_BYTES


def _normalized(ids: NDArray[np.uint64], ts: int | NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """``ids`` sorted and unique (the largest ts kept per id) with a writable ts array aligned to them."""
    ts_arr = np.broadcast_to(np.asarray(ts, dtype=np.uint64), ids.shape)
    if ids.size < 2 or bool(np.all(ids[1:] > ids[:-1])):
        return ids, np.array(ts_arr)  # already normalized: an O(n) check and a copy
    order = np.lexsort((ts_arr, ids))  # by id, then ts: the last of each id has the largest ts
    ids, ts_arr = ids[order], ts_arr[order]
    last = np.ones(ids.size, dtype=np.bool_)
    last[:-1] = ids[1:] != ids[:-1]
    return ids[last], ts_arr[last]


def _merge_into(ev: RegionEvent, ids: NDArray[np.uint64], ts: int | NDArray[np.uint64]) -> None:
    """Merge a batch into a pending resolved event: one entry per region, the largest ts wins.

    O(m + b log m) for m pending and b new entries once the pending ones are sorted (they stay sorted).
    """
    assert ev.region_ids is not None
    if ev.region_ids.size == ids.size and np.array_equal(ev.region_ids, ids):
        # The common case: the same store reports the same regions again.
        ev.ts = np.maximum(ev.ts, ts) if (np.ndim(ev.ts) or np.ndim(ts)) else max(int(ev.ts), int(ts))
        ev.size = _resolved_size(ev)
        return
    old_ids, old_ts = _normalized(ev.region_ids, ev.ts)
    new_ids, new_ts = _normalized(ids, ts)
    pos = np.searchsorted(old_ids, new_ids)
    dup = np.zeros(new_ids.size, dtype=np.bool_)
    inside = pos < old_ids.size
    dup[inside] = old_ids[pos[inside]] == new_ids[inside]
    if dup.any():
        at = pos[dup]
        old_ts[at] = np.maximum(old_ts[at], new_ts[dup])
    fresh = ~dup
    ev.region_ids = np.insert(old_ids, pos[fresh], new_ids[fresh])
    ev.ts = np.insert(old_ts, pos[fresh], new_ts[fresh])
    ev.size = _resolved_size(ev)
