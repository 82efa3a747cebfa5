from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import wraps

import pytest
from prometheus_client import CollectorRegistry

from cdc_core.memory import (
    AcquireTimeout,
    AsyncDualMemoryLimiter,
    InvalidPermit,
    LimitType,
    MemoryLimitConfig,
    SemaphoreClosed,
)


def run(fn: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    @wraps(fn)
    def wrapper() -> None:
        asyncio.run(asyncio.wait_for(fn(), 10))

    return wrapper


async def settle(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def limiter(**kw: int) -> AsyncDualMemoryLimiter:
    cfg = MemoryLimitConfig(**{"heap_limit_bytes": 100, "direct_limit_bytes": 50, **kw})
    return AsyncDualMemoryLimiter(cfg, name="t", registry=CollectorRegistry())


def test_config_maps_onto_the_two_semaphores() -> None:
    lim = AsyncDualMemoryLimiter(MemoryLimitConfig(1, 2, 3, 0, 5, 0), registry=CollectorRegistry(), name="up")
    assert (lim.heap.limit, lim.heap.acquire_timeout, lim.heap.max_queue) == (1, 0.003, 5)
    assert (lim.direct.limit, lim.direct.acquire_timeout, lim.direct.max_queue) == (2, None, 0)
    assert lim.semaphore(LimitType.HEAP) is lim.heap and lim.heap.name == "up/heap"
    defaults = AsyncDualMemoryLimiter(metrics=False)
    assert defaults.config == MemoryLimitConfig() and defaults.heap.acquire_timeout == 25.0


@run
async def test_pools_are_independent() -> None:
    lim = limiter()
    heap = await lim.acquire(100, LimitType.HEAP)
    direct = await lim.acquire(50, LimitType.DIRECT)  # the full heap does not block direct memory
    assert (lim.heap.used, lim.direct.used) == (100, 50)
    assert lim.limit_type_of(heap) is LimitType.HEAP and lim.limit_type_of(direct) is LimitType.DIRECT
    bigger = await lim.update(direct, 10)
    lim.release(heap)
    lim.release(bigger)
    lim.release(direct)  # replaced: no-op
    assert (lim.heap.used, lim.direct.used) == (0, 0)


@run
async def test_foreign_permits_are_refused() -> None:
    a, b = limiter(), limiter()
    p = await a.acquire(1, LimitType.HEAP)
    with pytest.raises(InvalidPermit, match="does not belong"):
        b.release(p)
    with pytest.raises(InvalidPermit):
        await b.update(p, 2)
    a.release(p)


@run
async def test_hold_releases_on_success_exception_and_cancellation() -> None:
    lim = limiter()
    async with lim.hold(10, LimitType.HEAP) as lease:
        await lease.update(30)
        async with lim.hold(20, LimitType.DIRECT):
            assert (lim.heap.used, lim.direct.used) == (30, 20)
    assert (lim.heap.used, lim.direct.used) == (0, 0)

    with pytest.raises(KeyError):
        async with lim.hold(10, LimitType.HEAP), lim.hold(5, LimitType.DIRECT):
            raise KeyError("x")
    assert (lim.heap.used, lim.direct.used) == (0, 0)

    inside = asyncio.Event()

    async def body() -> None:
        async with lim.hold(10, LimitType.HEAP), lim.hold(5, LimitType.DIRECT):
            inside.set()
            await asyncio.Event().wait()

    t = asyncio.create_task(body())
    await inside.wait()
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert (lim.heap.used, lim.direct.used) == (0, 0)


@run
async def test_timeout_from_config_in_milliseconds() -> None:
    lim = limiter(heap_acquire_timeout_ms=5)
    held = await lim.acquire(100, LimitType.HEAP)
    with pytest.raises(AcquireTimeout):
        await lim.acquire(1, LimitType.HEAP)
    lim.release(held)
    assert lim.heap.used == 0


@run
async def test_close_closes_both_pools() -> None:
    lim = limiter()
    held = await lim.acquire(50, LimitType.DIRECT)
    waiting = asyncio.create_task(lim.acquire(1, LimitType.DIRECT))
    await settle()
    lim.close()
    with pytest.raises(SemaphoreClosed):
        await waiting
    with pytest.raises(SemaphoreClosed):
        await lim.acquire(1, LimitType.HEAP)
    lim.release(held)
    assert lim.direct.used == 0 and "t" in repr(lim)
