"""The timestamp oracle (PD's TSO): hands out ``(physical_ms << 18) | logical`` timestamps.

Timestamps are strictly increasing for the life of the allocator, even if the wall clock steps
backwards (the physical part then stays at the last value and the logical part counts on) or a
millisecond's logical space runs out (the physical part moves ahead by one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cdc_core.codec import tso as tso_codec


class TsoAllocator:
    """Monotonic timestamp allocator; thread-safe (the cluster uses it from one event loop)."""

    def __init__(self, clock_ms: Callable[[], int] = tso_codec.now_physical_ms) -> None:
        self._clock_ms = clock_ms
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
            phys = max(self._clock_ms(), last_phys)
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
