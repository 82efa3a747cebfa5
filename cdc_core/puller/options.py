"""The puller's tunables, as a changefeed config's ``[puller]`` table sets them.

```toml
[puller]
advance-interval-in-ms = 100       # TiCDC kv-client.advance-interval-in-ms: 0 = advance on every batch
workers-per-store = 2              # multiplexed EventFeed streams per store
max-pending-bytes = 1073741824     # the changefeed's event-stream area (pause >= 80 %, resume < 50 %)
backoff-base-ms = 50               # region re-request backoff: base, doubled per attempt ...
backoff-max-ms = 2000              # ... up to this, with jitter
pull-timeout-s = 120               # a window's pull fails (changefeed in error) if the span lags this long
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from cdc_core.errors import ConfigError
from cdc_core.puller.backoff import Backoff

__all__ = ["DEFAULT_ADVANCE_INTERVAL_MS", "DEFAULT_MAX_PENDING_BYTES", "PullerOptions"]

# The defaults live here, not in the event stream and the advancer that use them: every config load imports
# this module, and those two import numpy and prometheus_client.
DEFAULT_ADVANCE_INTERVAL_MS: Final = 100  # TiCDC's default since PR #4088 (was 0)
DEFAULT_MAX_PENDING_BYTES: Final = 1 << 30

# TOML key -> (attribute, lowest allowed value)
_KEYS: dict[str, tuple[str, float]] = {
    "advance-interval-in-ms": ("advance_interval_ms", 0),
    "workers-per-store": ("workers_per_store", 1),
    "max-pending-bytes": ("max_pending_bytes", 1 << 20),
    "backoff-base-ms": ("backoff_base_ms", 1),
    "backoff-max-ms": ("backoff_max_ms", 1),
    "pull-timeout-s": ("pull_timeout_s", 1),
}


@dataclass(frozen=True)
class PullerOptions:
    advance_interval_ms: int = DEFAULT_ADVANCE_INTERVAL_MS
    workers_per_store: int = 2
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES
    backoff_base_ms: int = 50
    backoff_max_ms: int = 2_000
    pull_timeout_s: float = 120.0

    def backoff(self) -> Backoff:
        return Backoff(base_ms=self.backoff_base_ms, max_ms=self.backoff_max_ms)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~cdc_core.puller.subscription_client.SubscriptionClient`."""
        return {
            "advance_interval_ms": self.advance_interval_ms,
            "workers_per_store": self.workers_per_store,
            "max_pending_bytes": self.max_pending_bytes,
            "backoff": self.backoff(),
        }

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str) -> PullerOptions:
        unknown = set(data) - set(_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(_KEYS)}")
        values: dict[str, Any] = {}
        for key, (attr, low) in _KEYS.items():
            if key not in data:
                continue
            v = data[key]
            numeric = (int, float) if attr == "pull_timeout_s" else (int,)
            if isinstance(v, bool) or not isinstance(v, numeric) or v < low:
                raise ConfigError(f"{where}: `{key}` must be {'a number' if attr == 'pull_timeout_s' else 'an integer'}"
                                  f" >= {low:g}, got {v!r}")
            values[attr] = v
        opts = cls(**values)
        if opts.backoff_max_ms < opts.backoff_base_ms:
            raise ConfigError(f"{where}: `backoff-max-ms` ({opts.backoff_max_ms}) must be >= `backoff-base-ms` "
                              f"({opts.backoff_base_ms})")
        return opts

    def to_mapping(self) -> dict[str, Any]:
        return {key: getattr(self, attr) for key, (attr, _) in _KEYS.items()}
