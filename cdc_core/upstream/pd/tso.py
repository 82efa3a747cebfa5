"""The timestamp oracle (PD's TSO): hands out ``(physical_ms << 18) | logical`` timestamps.

Timestamps are strictly increasing for the life of the allocator, even if the wall clock steps
backwards (the physical part then stays at the last value and the logical part counts on) or a
millisecond's logical space runs out (the physical part moves ahead by one).

As PD's, the physical part does not follow the clock on every request: PD moves it to the wall clock once per
``tso-update-physical-interval`` (50 ms by default; tikv/pd ``pkg/tso/tso.go`` ``UpdateTimestamp``, default in
``server/config``) and hands out logical values in between. So the timestamps of a busy 50 ms are consecutive,
which is what lets an async-commit transaction's ``max_ts + 1`` equal the next ts PD hands a DDL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cdc_core.codec import tso as tso_codec

PD_UPDATE_PHYSICAL_INTERVAL_MS = 50  # PD's tso-update-physical-interval default


class TsoAllocator:
    """Monotonic timestamp allocator; thread-safe (the cluster uses it from one event loop).

    ``update_physical_interval_ms``: the physical part moves to the clock only once the clock is that far past it
    (1: every millisecond)."""

    def __init__(self, clock_ms: Callable[[], int] = tso_codec.now_physical_ms, *,
                 update_physical_interval_ms: int = PD_UPDATE_PHYSICAL_INTERVAL_MS) -> None:
        if update_physical_interval_ms < 1:
            raise ValueError(f"the TSO's physical update interval must be >= 1 ms, got {update_physical_interval_ms}")
        self._clock_ms = clock_ms
        self._interval = update_physical_interval_ms
        self._lock = threading.Lock()
        self._last = 0

    def next(self, count: int = 1) -> int:
        """Allocate ``count`` consecutive timestamps; return the last (the largest) one."""
        if count < 1:
            raise ValueError(f"TSO count must be >= 1, got {count}")
        if count > tso_codec.MAX_LOGICAL:
            raise ValueError(f"TSO count must be <= {tso_codec.MAX_LOGICAL}, got {count}")
        with self._lock:
            last_phys, last_logical = tso_codec.parse(self._last)
            now = self._clock_ms()
            phys = now if self._last == 0 or now - last_phys >= self._interval else last_phys
            if phys == last_phys:
                logical = last_logical + count
                if logical > tso_codec.MAX_LOGICAL:
                    phys, logical = last_phys + 1, count - 1
            else:
                logical = count - 1
            ts = tso_codec.compose(phys, logical)
            if ts <= self._last:  # cannot happen; a guard against a logic error above
                raise AssertionError(f"TSO went backwards: {ts} <= {self._last}")
            self._last = ts
            return ts

    def last(self) -> int:
        """The last allocated timestamp (0 before the first allocation)."""
        with self._lock:
            return self._last
