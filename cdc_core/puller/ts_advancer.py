"""The throttled resolved-ts advancer of one subscribed span (TiCDC ``kv-client.advance-interval-in-ms``, PR #4088).

It owns the span's resolved ts — the minimum over the span's locked ranges and holes, which never goes
backwards — and decides *when* that minimum is computed. Recording region resolved ts is delegated to the
:class:`~cdc_core.puller.range_lock.RangeLock` (an O(1) store, or one vectorized store per ``ResolvedTs``
batch). With ``advance_interval_ms > 0`` the minimum is computed at most once per interval; with ``0`` it is
computed after every batch (and every single-region update). Both give the same answer once the last update
has been seen: callers with an interval call :meth:`ResolvedTsAdvancer.tick` from a timer so that a quiet span
still catches up. A computation is skipped when nothing changed since the previous one (the lock's
``mutations`` counter), so neither mode burns CPU on an idle span.

Seed 000's stall came from doing the full minimum (a B-tree walk over holes) once per *region* per batch. Here a
batch is one vectorized store, and a computation is ``np.min`` over region slots plus an O(1) hole minimum.

Complexity (b = regions in the batch, n = locked regions, s = slot capacity):

============================ ===================================== =====================================
operation                    cost                                  note
============================ ===================================== =====================================
``on_resolved_batch``        O(b log n) + (one min, if due)        min = O(s) vectorized + O(1)
``on_region_resolved``       O(1) + (one min, if due)
``tick`` / ``advance_now``   one min if due/changed, else O(1)
============================ ===================================== =====================================

Metrics (labels ``span``): ``cdcflow_puller_resolved_ts_lag_seconds`` (wall clock minus the span resolved ts's
physical time), ``cdcflow_puller_span_resolved_ts``, ``cdcflow_puller_regions{state=locked|initialized|unlocked}``
(``locked`` = locked and not yet initialized; ``unlocked`` = unlocked ranges), ``cdcflow_puller_holes``,
``cdcflow_puller_min_ts_computations_total``. Log: ``subscription client holes exist`` with the hole count and
the oldest hole, at most once per ``holes_log_interval_s`` and not before the span has been subscribed that long:
holes at the start are the regions not locked yet, not a fault (TiCDC logs it from a 30 s ticker,
``logservice/logpuller/subscription_client.go`` ``logSlowRegions``, whose first tick comes 30 s in).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from prometheus_client import CollectorRegistry, Counter, Gauge

from cdc_core.log import get_logger
from cdc_core.metric_families import PerRegistry
from cdc_core.puller.options import DEFAULT_ADVANCE_INTERVAL_MS
from cdc_core.puller.range_lock import LockedRange, RangeLock

__all__ = ["AdvancerMetrics", "ResolvedTsAdvancer", "wall_clock_ms"]

log = get_logger("cdcflow.puller.ts_advancer")

PHYSICAL_SHIFT: Final = 18  # ts = (physical_ms << 18) | logical


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AdvancerMetrics(PerRegistry):
    """The advancer's metric families in one registry (shared by all spans, labelled ``span``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.lag = Gauge(
            "cdcflow_puller_resolved_ts_lag_seconds",
            "Wall clock minus the physical time of the span's resolved ts.",
            ("span",),
            registry=registry,
        )
        self.resolved_ts = Gauge(
            "cdcflow_puller_span_resolved_ts", "The span's resolved ts (TSO).", ("span",), registry=registry
        )
        self.regions = Gauge(
            "cdcflow_puller_regions",
            "Regions of the span by state: locked (not yet initialized), initialized, unlocked (ranges).",
            ("span", "state"),
            registry=registry,
        )
        self.holes = Gauge("cdcflow_puller_holes", "Unlocked ranges of the span.", ("span",), registry=registry)
        self.computations = Counter(
            "cdcflow_puller_min_ts_computations",
            "Computations of the span minimum resolved ts.",
            ("span",),
            registry=registry,
        )


class ResolvedTsAdvancer:
    """Advances one span's resolved ts from its :class:`RangeLock`, at most once per ``advance_interval_ms``."""

    def __init__(
        self,
        lock: RangeLock,
        *,
        span: str,
        advance_interval_ms: int = DEFAULT_ADVANCE_INTERVAL_MS,
        clock_ms: Callable[[], int] = wall_clock_ms,
        registry: CollectorRegistry | None = None,
        holes_log_interval_s: float = 10.0,
    ) -> None:
        if advance_interval_ms < 0:
            raise ValueError("advance_interval_ms must be >= 0")
        self.lock = lock
        self.span = span
        self.advance_interval_ms = advance_interval_ms
        self._clock = clock_ms
        self._holes_log_interval_ms = int(holes_log_interval_s * 1000)
        self.resolved_ts = lock.start_ts
        self.min_computations = 0
        self._last_compute_ms: int | None = None
        self._seen_mutations = -1  # forces the first computation
        self._last_holes_log_ms = clock_ms()  # the first log, if holes last, one interval after the subscription
        m = AdvancerMetrics.for_registry(registry)
        self._m_lag = m.lag.labels(span)
        self._m_ts = m.resolved_ts.labels(span)
        self._m_locked = m.regions.labels(span, "locked")
        self._m_initialized = m.regions.labels(span, "initialized")
        self._m_unlocked = m.regions.labels(span, "unlocked")
        self._m_holes = m.holes.labels(span)
        self._m_computations = m.computations.labels(span)

    # --- inputs ----------------------------------------------------------------------------------
    def on_resolved_batch(
        self,
        region_ids: NDArray[Any] | Sequence[int],
        ts: int | NDArray[np.uint64],
        now_ms: int | None = None,
    ) -> int | None:
        """Record a ``ResolvedTs`` batch (regions not locked here or not initialized are ignored), then advance
        if due. Returns the new span resolved ts when it advanced, else ``None``."""
        self.lock.update_resolved_batch(region_ids, ts)
        return self._maybe_advance(now_ms)

    def on_region_resolved(self, state: LockedRange, ts: int, now_ms: int | None = None) -> int | None:
        """Record one region's resolved ts (O(1)), then advance if due."""
        if state.initialized:
            self.lock.update_resolved_ts(state, ts)
        return self._maybe_advance(now_ms)

    def tick(self, now_ms: int | None = None) -> int | None:
        """Timer hook: advance if the interval has elapsed and something changed."""
        return self._maybe_advance(now_ms)

    def advance_now(self, now_ms: int | None = None) -> int | None:
        """Compute the minimum now regardless of the interval (still skipped when nothing changed)."""
        return self._advance(self._clock() if now_ms is None else now_ms)

    # --- internals -------------------------------------------------------------------------------
    def _maybe_advance(self, now_ms: int | None) -> int | None:
        now = self._clock() if now_ms is None else now_ms
        if (
            self.advance_interval_ms > 0
            and self._last_compute_ms is not None
            and now - self._last_compute_ms < self.advance_interval_ms
        ):
            return None
        return self._advance(now)

    def _advance(self, now: int) -> int | None:
        lock = self.lock
        if lock.mutations == self._seen_mutations:
            return None
        self._seen_mutations = lock.mutations
        self._last_compute_ms = now
        self.min_computations += 1
        self._m_computations.inc()
        ts = lock.min_resolved_ts()
        advanced = ts > self.resolved_ts
        if advanced:  # never backwards: a hole unlocked at an older ts must not pull the span back
            self.resolved_ts = ts
        self._export(now)
        return self.resolved_ts if advanced else None

    def _export(self, now: int) -> None:
        lock = self.lock
        self._m_ts.set(self.resolved_ts)
        self._m_lag.set(max(0, now - (self.resolved_ts >> PHYSICAL_SHIFT)) / 1000.0)
        self._m_locked.set(lock.locked_count - lock.initialized_count)
        self._m_initialized.set(lock.initialized_count)
        holes = lock.holes
        self._m_unlocked.set(holes)
        self._m_holes.set(holes)
        if holes and now - self._last_holes_log_ms >= self._holes_log_interval_ms:
            self._last_holes_log_ms = now
            oldest = lock.oldest_hole()
            assert oldest is not None
            log.warning(
                "subscription client holes exist",
                span=self.span,
                holes=holes,
                oldest_hole_ts=oldest[2],
                oldest_hole_start=oldest[0].hex(),
                oldest_hole_end=oldest[1].hex(),
                resolved_ts=self.resolved_ts,
            )
