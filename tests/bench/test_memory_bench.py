"""Throughput of AsyncSemaphore under contention, next to a bare asyncio.Semaphore in the same run.

200 tasks each do ROUNDS acquire → yield → release cycles over a limit that fits 10 at a time, so
almost every acquire queues. Prints pairs per second and the ratio; asserts nothing about speed.
Run with ``make bench``.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry

from cdc_core.memory import AsyncDualMemoryLimiter, AsyncSemaphore, LimitType, MemoryLimitConfig

TASKS = 200
FITS = 10
ROUNDS = 100
REPEATS = 3
PAIRS = TASKS * ROUNDS


async def _bare_asyncio() -> None:
    sem = asyncio.Semaphore(FITS)

    async def worker() -> None:
        for _ in range(ROUNDS):
            async with sem:
                await asyncio.sleep(0)

    await asyncio.gather(*(worker() for _ in range(TASKS)))


async def _async_semaphore() -> None:
    sem = AsyncSemaphore(FITS * 1024, max_queue=0, acquire_timeout=None)

    async def worker() -> None:
        for _ in range(ROUNDS):
            permit = await sem.acquire(1024)
            await asyncio.sleep(0)
            sem.release(permit)

    await asyncio.gather(*(worker() for _ in range(TASKS)))
    assert sem.used == 0


async def _dual_limiter_with_metrics_and_timeouts() -> None:
    cfg = MemoryLimitConfig(heap_limit_bytes=FITS * 1024, heap_max_queue=0, heap_acquire_timeout_ms=25_000)
    limiter = AsyncDualMemoryLimiter(cfg, name="bench", registry=CollectorRegistry())

    async def worker() -> None:
        for _ in range(ROUNDS):
            async with limiter.hold(1024, LimitType.HEAP):
                await asyncio.sleep(0)

    await asyncio.gather(*(worker() for _ in range(TASKS)))
    assert limiter.heap.used == 0


async def _uncontended_fast_path() -> None:
    sem = AsyncSemaphore(1 << 40, acquire_timeout=None)
    for _ in range(PAIRS):
        sem.release(await sem.acquire(1024))


async def _uncontended_bare_asyncio() -> None:
    sem = asyncio.Semaphore(FITS)
    for _ in range(PAIRS):
        await sem.acquire()
        sem.release()


def _rate(fn: Callable[[], Awaitable[None]]) -> float:
    """Best of REPEATS, in acquire+release pairs per second."""
    best = float("inf")
    for _ in range(REPEATS):
        gc.collect()
        start = time.perf_counter()
        asyncio.run(fn())  # type: ignore[arg-type]
        best = min(best, time.perf_counter() - start)
    return PAIRS / best


def test_contended_acquire_release_rate() -> None:
    bare = _rate(_bare_asyncio)
    ours = _rate(_async_semaphore)
    dual = _rate(_dual_limiter_with_metrics_and_timeouts)
    fast = _rate(_uncontended_fast_path)
    fast_bare = _rate(_uncontended_bare_asyncio)
    print()
    print(f"contended: {TASKS} tasks, {FITS} fit at a time, {PAIRS} acquire+release pairs, best of {REPEATS}")
    print(f"  asyncio.Semaphore                        {bare:>12,.0f} pairs/s")
    print(f"  AsyncSemaphore                           {ours:>12,.0f} pairs/s   ratio {ours / bare:.2f}")
    print(f"  AsyncDualMemoryLimiter.hold (+metrics)   {dual:>12,.0f} pairs/s   ratio {dual / bare:.2f}")
    print("uncontended (no waiting, no yield):")
    print(f"  asyncio.Semaphore                        {fast_bare:>12,.0f} pairs/s")
    print(f"  AsyncSemaphore fast path                 {fast:>12,.0f} pairs/s   ratio {fast / fast_bare:.2f}")
    for ratio in (ours / bare, dual / bare, fast / fast_bare):
        assert 0 < ratio < float("inf")
