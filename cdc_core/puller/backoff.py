"""Bounded exponential backoff with jitter for region re-requests (TiCDC's ``tikv.Backoffer`` role).

``delay_s(attempt)`` is 0 for the first attempt, then ``base · 2^(attempt-1)`` capped at ``max``, shortened by
a random share of at most ``jitter`` so that the regions of a broken stream do not come back in lockstep.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    base_ms: int = 50
    max_ms: int = 2_000
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.base_ms < 0 or self.max_ms < self.base_ms or not 0 <= self.jitter <= 1:
            raise ValueError("need 0 <= base_ms <= max_ms and 0 <= jitter <= 1")

    def delay_s(self, attempt: int, at_least_ms: int = 0) -> float:
        """Seconds to wait before attempt number ``attempt`` (0 = first: no wait), never below ``at_least_ms``."""
        if attempt <= 0:
            return at_least_ms / 1000.0
        capped = min(self.max_ms, self.base_ms * (1 << min(attempt - 1, 30)))
        ms = capped * (1.0 - self.jitter * self.rng.random())
        return max(ms, at_least_ms) / 1000.0
