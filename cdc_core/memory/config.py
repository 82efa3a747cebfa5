"""Configuration of an :class:`~cdc_core.memory.AsyncDualMemoryLimiter`, with the seed's defaults.

Defaults (Pulsar's ``maxTopicListInFlight*``): 100 MiB heap, 100 MiB direct, 25 s acquire timeout and a
queue of 1000 requests, each for heap and direct. In every field **0 disables** the bound: no limit, no
timeout, no queue bound.

TOML / flag keys accepted by :meth:`MemoryLimitConfig.from_mapping` (all integers >= 0)::

    heap-limit-bytes          direct-limit-bytes
    heap-acquire-timeout-ms   direct-acquire-timeout-ms
    heap-max-queue            direct-max-queue
    acquire-timeout-ms        max-queue          # shorthand for both; a heap-/direct- key overrides it
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from cdc_core.errors import ConfigError

__all__ = ["MIB", "MemoryLimitConfig"]

MIB: Final = 1024 * 1024

# TOML key -> dataclass fields it sets. Shared keys come first so that specific keys override them.
_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "acquire-timeout-ms": ("heap_acquire_timeout_ms", "direct_acquire_timeout_ms"),
    "max-queue": ("heap_max_queue", "direct_max_queue"),
    "heap-limit-bytes": ("heap_limit_bytes",),
    "direct-limit-bytes": ("direct_limit_bytes",),
    "heap-acquire-timeout-ms": ("heap_acquire_timeout_ms",),
    "direct-acquire-timeout-ms": ("direct_acquire_timeout_ms",),
    "heap-max-queue": ("heap_max_queue",),
    "direct-max-queue": ("direct_max_queue",),
}


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, slots=True)
class MemoryLimitConfig:
    """Limits of the HEAP and DIRECT pools of one limiter. Immutable; validated on construction."""

    heap_limit_bytes: int = 100 * MIB
    direct_limit_bytes: int = 100 * MIB
    heap_acquire_timeout_ms: int = 25_000
    direct_acquire_timeout_ms: int = 25_000
    heap_max_queue: int = 1000
    direct_max_queue: int = 1000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _is_count(value):
                raise ConfigError(f"MemoryLimitConfig.{f.name} must be an integer >= 0 (0 disables), got {value!r}")

    @classmethod
    def disabled(cls) -> MemoryLimitConfig:
        """No limits at all: every request is served at once."""
        return cls(0, 0, 0, 0, 0, 0)

    @classmethod
    def from_mapping(cls, d: Mapping[str, object], where: str = "memory") -> MemoryLimitConfig:
        """Build from TOML-style keys (see the module docstring); missing keys keep their defaults.

        :param where: names the source in errors, e.g. ``"changefeed.toml [memory]"``.
        :raises ConfigError: for an unknown key or a value that is not an integer >= 0, naming the key.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where}: expected a table of memory limits, got {type(d).__name__}")
        for key in d:
            if key not in _KEYS:
                close = difflib.get_close_matches(str(key), _KEYS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(sorted(_KEYS))}"
                raise ConfigError(f"{where}: unknown key {key!r}{hint}")
        values: dict[str, int] = {}
        for key, fields in _KEYS.items():
            if key not in d:
                continue
            value = d[key]
            if not _is_count(value):
                raise ConfigError(f"{where}: {key!r} must be an integer >= 0 (0 disables), got {value!r}")
            assert isinstance(value, int)
            for name in fields:
                values[name] = value
        return cls(**values)

    def to_mapping(self) -> dict[str, int]:
        """The TOML-style keys of every field (the inverse of :meth:`from_mapping`)."""
        return {key: getattr(self, fields[0]) for key, fields in _KEYS.items() if len(fields) == 1}
