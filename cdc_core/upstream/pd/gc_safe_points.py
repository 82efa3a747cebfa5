"""PD's service GC safe points: how far back each service (a TiCDC changefeed, BR, ...) still needs history.

``UpdateServiceGCSafePoint`` (pd ``server/grpc_service.go``, ``pkg/gc/safepoint.go``) sets a service's safe point
with a TTL; an expired one no longer counts, and the minimum of the live ones holds the cluster's GC back (the GC
worker reads it: ``store.gc_worker``).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class GcSafePoints:
    """Service GC safe points (``service_id -> (safe_point, expires_at)``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._points: dict[str, tuple[int, float]] = {}

    def update(self, service_id: str, ttl: float, safe_point: int) -> int:
        """Set (ttl > 0) or remove (ttl <= 0) a service's safe point; returns the minimum in force.

        Like PD, a new service may not set a safe point below the current minimum (GC may already
        have passed it); a service already registered may move its own point either way.
        """
        now = self._clock()
        self._points = {k: v for k, v in self._points.items() if v[1] > now}
        if ttl <= 0:
            self._points.pop(service_id, None)
        elif safe_point >= self.min_safe_point() or service_id in self._points:
            self._points[service_id] = (safe_point, now + ttl)
        return self.min_safe_point()

    def min_safe_point(self) -> int:
        """The smallest live service safe point (0 when none is set)."""
        live = self.live()
        return min(live.values()) if live else 0

    def live(self) -> dict[str, int]:
        now = self._clock()
        return {k: sp for k, (sp, exp) in self._points.items() if exp > now}
