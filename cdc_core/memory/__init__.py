"""Memory primitives (seed 001): a FIFO memory semaphore and the HEAP/DIRECT dual memory limiter.

``AsyncSemaphore`` counts permits (bytes) with strict FIFO ordering, a bounded queue, per-request
timeouts and updatable permits; ``AsyncDualMemoryLimiter`` pairs two of them (HEAP, DIRECT) with
metrics; ``MemoryLimitConfig`` carries the limits; ``MemoryGuard`` turns limiter failures into errors that
name the limit that was hit. This package imports nothing else from ``cdc_core``
except ``cdc_core.errors``.
"""

from cdc_core.memory.async_semaphore import (
    DEFAULT_TIMEOUT,
    AsyncSemaphore,
    Permit,
    PermitLease,
    SemaphoreObserver,
    Timeout,
)
from cdc_core.memory.config import MIB, MemoryLimitConfig
from cdc_core.memory.dual_limiter import AsyncDualMemoryLimiter, LimitType
from cdc_core.memory.errors import (
    AcquireTimeout,
    InvalidPermit,
    InvalidPermitRequest,
    MemoryLimitError,
    PermitReleased,
    QueueFull,
    SemaphoreClosed,
)
from cdc_core.memory.guard import MemoryGuard, MemoryLimitExceeded, PermitSet, SettingNamer, toml_setting
from cdc_core.memory.metrics import MemoryLimiterMetrics, SemaphoreMetrics

__all__ = [
    "DEFAULT_TIMEOUT",
    "MIB",
    "AcquireTimeout",
    "AsyncDualMemoryLimiter",
    "AsyncSemaphore",
    "InvalidPermit",
    "InvalidPermitRequest",
    "LimitType",
    "MemoryGuard",
    "MemoryLimitConfig",
    "MemoryLimitError",
    "MemoryLimitExceeded",
    "MemoryLimiterMetrics",
    "Permit",
    "PermitLease",
    "PermitReleased",
    "PermitSet",
    "QueueFull",
    "SemaphoreClosed",
    "SemaphoreMetrics",
    "SemaphoreObserver",
    "SettingNamer",
    "Timeout",
    "toml_setting",
]
