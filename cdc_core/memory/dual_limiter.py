"""Pulsar's ``AsyncDualMemoryLimiter`` (seed 001): two independent FIFO semaphores, HEAP and DIRECT.

HEAP bounds memory assembled in process (e.g. a table listing being built); DIRECT bounds buffers
waiting to be written (e.g. a serialized response). Each pool has its own limit, queue and timeout
(:class:`~cdc_core.memory.config.MemoryLimitConfig`) and its own metrics
(:mod:`cdc_core.memory.metrics`, labels ``limiter=<name>``, ``type=heap|direct``).

The typical flow, when the size is only known after the work::

    async with limiter.hold(INITIAL_SIZE, LimitType.HEAP) as lease:   # released on every path
        topics = await list_topics()
        await lease.update(estimated_size(topics))                     # grow/shrink in the same FIFO
        async with limiter.hold(serialized_size, LimitType.DIRECT):
            await write(response)

Every operation has the complexity of the underlying :class:`~cdc_core.memory.AsyncSemaphore` operation
(O(1) fast paths; see that module).
"""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry

from cdc_core.memory.async_semaphore import DEFAULT_TIMEOUT, AsyncSemaphore, Permit, PermitLease, Timeout
from cdc_core.memory.config import MemoryLimitConfig
from cdc_core.memory.errors import InvalidPermit
from cdc_core.memory.metrics import MemoryLimiterMetrics

__all__ = ["AsyncDualMemoryLimiter", "LimitType"]


class LimitType(enum.Enum):
    """The memory pool a request is counted against; the value is the ``type`` metric label."""

    HEAP = "heap"
    DIRECT = "direct"


def _seconds(ms: int) -> float | None:
    return ms / 1000 if ms > 0 else None


class AsyncDualMemoryLimiter:
    """Independent HEAP and DIRECT memory semaphores behind one object.

    :param config: limits, timeouts and queue bounds (default: the seed's defaults).
    :param name: the ``limiter`` metric label and error prefix (e.g. ``"upstream-catalog"``).
    :param registry: where to export metrics (default ``prometheus_client.REGISTRY``).
    :param metrics: ``False`` to export nothing.
    """

    __slots__ = ("_config", "_name", "_semaphores")

    def __init__(
        self,
        config: MemoryLimitConfig | None = None,
        *,
        name: str = "default",
        registry: CollectorRegistry | None = None,
        metrics: bool = True,
    ) -> None:
        self._config = cfg = config if config is not None else MemoryLimitConfig()
        self._name = name
        self._semaphores = {
            LimitType.HEAP: AsyncSemaphore(
                cfg.heap_limit_bytes,
                max_queue=cfg.heap_max_queue,
                acquire_timeout=_seconds(cfg.heap_acquire_timeout_ms),
                name=f"{name}/heap",
            ),
            LimitType.DIRECT: AsyncSemaphore(
                cfg.direct_limit_bytes,
                max_queue=cfg.direct_max_queue,
                acquire_timeout=_seconds(cfg.direct_acquire_timeout_ms),
                name=f"{name}/direct",
            ),
        }
        if metrics:
            family = MemoryLimiterMetrics.for_registry(registry)
            for limit_type, semaphore in self._semaphores.items():
                family.attach(semaphore, limiter=name, kind=limit_type.value)

    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> MemoryLimitConfig:
        return self._config

    @property
    def heap(self) -> AsyncSemaphore:
        return self._semaphores[LimitType.HEAP]

    @property
    def direct(self) -> AsyncSemaphore:
        return self._semaphores[LimitType.DIRECT]

    def semaphore(self, limit_type: LimitType) -> AsyncSemaphore:
        """The semaphore of one pool. O(1)."""
        return self._semaphores[limit_type]

    async def acquire(self, size: int, limit_type: LimitType, *, timeout: Timeout = DEFAULT_TIMEOUT) -> Permit:
        """Wait for ``size`` bytes of ``limit_type`` memory; see :meth:`AsyncSemaphore.acquire`."""
        return await self._semaphores[limit_type].acquire(size, timeout=timeout)

    async def update(self, permit: Permit, new_size: int, *, timeout: Timeout = DEFAULT_TIMEOUT) -> Permit:
        """Resize ``permit`` in its own pool; see :meth:`AsyncSemaphore.update`."""
        self.limit_type_of(permit)
        return await permit.semaphore.update(permit, new_size, timeout=timeout)

    def release(self, permit: Permit) -> None:
        """Return ``permit`` to its pool; releasing twice does nothing. See :meth:`AsyncSemaphore.release`."""
        self.limit_type_of(permit)
        permit.semaphore.release(permit)

    def limit_type_of(self, permit: Permit) -> LimitType:
        """The pool ``permit`` came from. :raises InvalidPermit: if it is from another limiter."""
        if permit.semaphore is self._semaphores[LimitType.HEAP]:
            return LimitType.HEAP
        if permit.semaphore is self._semaphores[LimitType.DIRECT]:
            return LimitType.DIRECT
        raise InvalidPermit(f"{self._name}: {permit!r} does not belong to this limiter")

    def hold(self, size: int, limit_type: LimitType, *, timeout: Timeout = DEFAULT_TIMEOUT) -> PermitLease:
        """Async context manager: acquire on entry, release on success, exception and cancellation."""
        return PermitLease(self._semaphores[limit_type], size, timeout)

    def close(self) -> None:
        """Close both pools: pending requests fail with ``SemaphoreClosed``, later ones at once."""
        for semaphore in self._semaphores.values():
            semaphore.close()

    def __repr__(self) -> str:
        return f"<AsyncDualMemoryLimiter {self._name!r} heap={self.heap!r} direct={self.direct!r}>"
