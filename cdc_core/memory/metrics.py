"""Prometheus metrics of memory limiters, labelled ``limiter`` (name) and ``type`` (``heap``/``direct``).

One :class:`MemoryLimiterMetrics` owns the metric families of one :class:`~prometheus_client.CollectorRegistry`
(:meth:`MemoryLimiterMetrics.for_registry` returns the shared instance), so any number of limiters
(upstream catalog, client discovery, ...) coexist in one process as different label values.

========================================= ========= ===================================================
metric                                    kind      meaning
========================================= ========= ===================================================
``cdcflow_memory_limiter_used_bytes``     gauge     permits (bytes) held
``cdcflow_memory_limiter_limit_bytes``    gauge     configured limit (0 = unbounded)
``cdcflow_memory_limiter_queue_size``     gauge     requests waiting
``cdcflow_memory_limiter_queue_max_size`` gauge     queue bound (0 = unbounded)
``cdcflow_memory_limiter_wait_seconds``   histogram wait of successful acquisitions (0 on the fast path)
``cdcflow_memory_limiter_timeouts_total`` counter   requests that timed out in the queue
``cdcflow_memory_limiter_rejections_total`` counter rejected at once; extra label ``reason``:
                                                    ``queue_full`` or ``too_large``
========================================= ========= ===================================================

Gauges are read from the semaphore when scraped (no cost per operation); the histogram and counters
are fed through the semaphore's :class:`~cdc_core.memory.async_semaphore.SemaphoreObserver` hook.
"""

from __future__ import annotations

import weakref
from typing import Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from cdc_core.memory.async_semaphore import AsyncSemaphore

__all__ = ["WAIT_BUCKETS", "MemoryLimiterMetrics", "SemaphoreMetrics"]

PREFIX: Final = "cdcflow_memory_limiter"
WAIT_BUCKETS: Final = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0)
REJECTION_REASONS: Final = ("queue_full", "too_large")

_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, MemoryLimiterMetrics] = weakref.WeakKeyDictionary()


class SemaphoreMetrics:
    """The observer attached to one semaphore: its histogram and counters, already labelled."""

    __slots__ = ("_rejections", "_timeouts", "_wait")

    def __init__(self, wait: Histogram, timeouts: Counter, rejections: dict[str, Counter]) -> None:
        self._wait = wait
        self._timeouts = timeouts
        self._rejections = rejections

    def on_granted(self, waited_s: float) -> None:
        self._wait.observe(waited_s)

    def on_timeout(self) -> None:
        self._timeouts.inc()

    def on_rejected(self, reason: str) -> None:
        self._rejections[reason].inc()


class MemoryLimiterMetrics:
    """The metric families of memory limiters in one registry; see the module docstring for names."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = REGISTRY if registry is None else registry
        labels = ("limiter", "type")
        self.used_bytes = Gauge(f"{PREFIX}_used_bytes", "Memory (bytes) held by permits.", labels, registry=reg)
        self.limit_bytes = Gauge(
            f"{PREFIX}_limit_bytes", "Configured memory limit in bytes (0 = unbounded).", labels, registry=reg
        )
        self.queue_size = Gauge(f"{PREFIX}_queue_size", "Requests waiting for memory permits.", labels, registry=reg)
        self.queue_max_size = Gauge(
            f"{PREFIX}_queue_max_size", "Most requests allowed to wait (0 = unbounded).", labels, registry=reg
        )
        self.wait_seconds = Histogram(
            f"{PREFIX}_wait_seconds",
            "Seconds a successful acquisition waited for memory permits (0 on the fast path).",
            labels,
            buckets=WAIT_BUCKETS,
            registry=reg,
        )
        self.timeouts = Counter(
            f"{PREFIX}_timeouts", "Requests that timed out waiting for memory permits.", labels, registry=reg
        )
        self.rejections = Counter(
            f"{PREFIX}_rejections",
            "Requests rejected at once (queue full, or larger than the limit).",
            (*labels, "reason"),
            registry=reg,
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> MemoryLimiterMetrics:
        """The shared instance for ``registry`` (default: the process-wide ``prometheus_client.REGISTRY``)."""
        reg = REGISTRY if registry is None else registry
        metrics = _BY_REGISTRY.get(reg)
        if metrics is None:
            metrics = _BY_REGISTRY[reg] = cls(reg)
        return metrics

    def attach(self, semaphore: AsyncSemaphore, *, limiter: str, kind: str) -> SemaphoreMetrics:
        """Export ``semaphore`` under labels ``limiter=<limiter>, type=<kind>`` and set it as its observer.

        Attaching another semaphore under the same labels takes the labels over. O(1).
        """
        self.used_bytes.labels(limiter, kind).set_function(lambda: semaphore.used)
        self.limit_bytes.labels(limiter, kind).set_function(lambda: semaphore.limit)
        self.queue_size.labels(limiter, kind).set_function(lambda: semaphore.queue_size)
        self.queue_max_size.labels(limiter, kind).set_function(lambda: semaphore.max_queue)
        observer = SemaphoreMetrics(
            self.wait_seconds.labels(limiter, kind),
            self.timeouts.labels(limiter, kind),
            {reason: self.rejections.labels(limiter, kind, reason) for reason in REJECTION_REASONS},
        )
        semaphore.observer = observer
        return observer

    def detach(self, *, limiter: str, kind: str) -> None:
        """Stop exporting the labels ``limiter=<limiter>, type=<kind>`` (e.g. when a limiter is discarded)."""
        for family in (self.used_bytes, self.limit_bytes, self.queue_size, self.queue_max_size):
            family.remove(limiter, kind)
        self.wait_seconds.remove(limiter, kind)
        self.timeouts.remove(limiter, kind)
        for reason in REJECTION_REASONS:
            self.rejections.remove(limiter, kind, reason)
