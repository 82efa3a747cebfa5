"""Memory permits for one operation, with failures explained in terms an operator can act on.

A :class:`MemoryGuard` wraps an :class:`~cdc_core.memory.AsyncDualMemoryLimiter` for a service that
must tell its *caller* why it was refused (the catalog service's RESOURCE_EXHAUSTED status, the table
discovery client's error): every limiter failure becomes a :class:`MemoryLimitExceeded` whose message
names the limiter, the pool (heap/direct), the pool's size, what was hit (the request is larger than the
limit, the wait queue is full, or the acquire timeout passed) and the setting that controls it.

A :class:`PermitSet` collects the permits of one operation so that a single ``release_all`` - from a
``finally`` or from gRPC's RPC-done callback - returns every one of them exactly once.
"""

from __future__ import annotations

from collections.abc import Callable

from cdc_core.memory.async_semaphore import Permit
from cdc_core.memory.dual_limiter import AsyncDualMemoryLimiter, LimitType
from cdc_core.memory.errors import AcquireTimeout, InvalidPermitRequest, MemoryLimitError, QueueFull

__all__ = ["MemoryGuard", "MemoryLimitExceeded", "PermitSet", "SettingNamer", "toml_setting"]

SettingNamer = Callable[[LimitType, str], str]
"""``(pool, "limit" | "queue" | "timeout") -> the setting's name`` (a flag or a TOML key), for messages."""


def toml_setting(section: str) -> SettingNamer:
    """Names settings as TOML keys of ``[section]`` (the keys of ``MemoryLimitConfig.from_mapping``)."""
    suffix = {"limit": "limit-bytes", "queue": "max-queue", "timeout": "acquire-timeout-ms"}
    return lambda pool, what: f"[{section}] {pool.value}-{suffix[what]}"


class MemoryLimitExceeded(MemoryLimitError):
    """Permits could not be had; the message is meant for the operator and the remote caller.

    :attr retryable: ``True`` when trying again later can succeed (full queue, timeout); ``False``
        when the request is larger than the pool or the limiter is closed.
    """

    def __init__(self, message: str, *, pool: LimitType, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.pool = pool
        self.retryable = retryable


class MemoryGuard:
    """Acquire/update/release on a limiter, raising :class:`MemoryLimitExceeded` with a clear message.

    :param setting: names the settings in messages (default: ``[<limiter name>] heap-limit-bytes`` ...).
    """

    def __init__(self, limiter: AsyncDualMemoryLimiter, setting: SettingNamer | None = None) -> None:
        self.limiter = limiter
        self._setting = setting or toml_setting(limiter.name)

    async def acquire(self, size: int, pool: LimitType, what: str) -> Permit:
        """``size`` bytes of ``pool`` for ``what`` (e.g. ``"listing of schema 'db'"``)."""
        try:
            return await self.limiter.acquire(size, pool)
        except MemoryLimitError as exc:
            raise self._explain(exc, size, pool, what) from exc

    async def update(self, permit: Permit, size: int, what: str) -> Permit:
        """Resize ``permit`` to ``size``; on failure the old permit stays valid (and held)."""
        pool = self.limiter.limit_type_of(permit)
        try:
            return await self.limiter.update(permit, size)
        except MemoryLimitError as exc:
            raise self._explain(exc, size, pool, what) from exc

    def release(self, permit: Permit) -> None:
        self.limiter.release(permit)

    def _explain(self, exc: MemoryLimitError, size: int, pool: LimitType, what: str) -> MemoryLimitExceeded:
        sem = self.limiter.semaphore(pool)
        name = f"{self.limiter.name} {pool.value} memory"
        limit = f"limit {sem.limit} bytes ({self._setting(pool, 'limit')})"
        if isinstance(exc, InvalidPermitRequest):
            msg = f"{name}: {what} needs {size} bytes, more than the {limit}; it can never be served"
            return MemoryLimitExceeded(msg, pool=pool, retryable=False)
        if isinstance(exc, QueueFull):
            msg = (f"{name}: {what} needs {size} bytes; {sem.used} of the {limit} are in use and the wait "
                   f"queue is full (max {sem.max_queue} waiting, {self._setting(pool, 'queue')})")
            return MemoryLimitExceeded(msg, pool=pool, retryable=True)
        if isinstance(exc, AcquireTimeout):
            timeout_ms = round((sem.acquire_timeout or 0) * 1000)
            msg = (f"{name}: {what} waited {timeout_ms} ms for {size} bytes without getting them "
                   f"(acquire timeout {self._setting(pool, 'timeout')}; {limit}, {sem.used} in use, "
                   f"{sem.queue_size} waiting)")
            return MemoryLimitExceeded(msg, pool=pool, retryable=True)
        return MemoryLimitExceeded(f"{name}: {what}: {exc}", pool=pool, retryable=False)


class PermitSet:
    """The permits one operation holds; :meth:`release_all` returns each exactly once. O(permits)."""

    __slots__ = ("_guard", "_permits")

    def __init__(self, guard: MemoryGuard) -> None:
        self._guard = guard
        self._permits: list[Permit] = []

    def add(self, permit: Permit) -> Permit:
        self._permits.append(permit)
        return permit

    def replace(self, old: Permit, new: Permit) -> Permit:
        """``old`` was updated into ``new`` (releasing a replaced permit would do nothing anyway)."""
        self._permits = [new if p is old else p for p in self._permits]
        return new

    @property
    def held(self) -> int:
        """Bytes held by the still-active permits."""
        return sum(p.permits for p in self._permits if p.active)

    def release_all(self) -> None:
        permits, self._permits = self._permits, []
        for permit in permits:
            self._guard.release(permit)
