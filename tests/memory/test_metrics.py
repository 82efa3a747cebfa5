from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from cdc_core.memory import (
    AcquireTimeout,
    AsyncDualMemoryLimiter,
    AsyncSemaphore,
    InvalidPermitRequest,
    LimitType,
    MemoryLimitConfig,
    MemoryLimiterMetrics,
    QueueFull,
)

P = "cdcflow_memory_limiter"


def value(reg: CollectorRegistry, name: str, limiter: str, kind: str, **extra: str) -> float | None:
    return reg.get_sample_value(f"{P}_{name}", {"limiter": limiter, "type": kind, **extra})


def test_gauges_counters_and_histogram() -> None:
    reg = CollectorRegistry()
    cfg = MemoryLimitConfig(100, 50, 5, 0, 1, 7)
    lim = AsyncDualMemoryLimiter(cfg, name="catalog", registry=reg)

    async def scenario() -> None:
        held = await lim.acquire(60, LimitType.HEAP)
        assert value(reg, "used_bytes", "catalog", "heap") == 60
        waiting = asyncio.create_task(lim.acquire(50, LimitType.HEAP, timeout=None))
        for _ in range(5):
            await asyncio.sleep(0)
        assert value(reg, "queue_size", "catalog", "heap") == 1
        with pytest.raises(QueueFull):
            await lim.acquire(50, LimitType.HEAP)
        with pytest.raises(InvalidPermitRequest):
            await lim.acquire(101, LimitType.HEAP)
        lim.release(held)
        lim.release(await waiting)
        held = await lim.acquire(100, LimitType.HEAP)
        with pytest.raises(AcquireTimeout):
            await lim.acquire(1, LimitType.HEAP)  # 5 ms default timeout
        lim.release(held)

    asyncio.run(scenario())
    assert value(reg, "used_bytes", "catalog", "heap") == 0
    assert value(reg, "limit_bytes", "catalog", "heap") == 100
    assert value(reg, "limit_bytes", "catalog", "direct") == 50
    assert value(reg, "queue_size", "catalog", "heap") == 0
    assert value(reg, "queue_max_size", "catalog", "heap") == 1
    assert value(reg, "queue_max_size", "catalog", "direct") == 7
    assert value(reg, "timeouts_total", "catalog", "heap") == 1
    assert value(reg, "timeouts_total", "catalog", "direct") == 0
    assert value(reg, "rejections_total", "catalog", "heap", reason="queue_full") == 1
    assert value(reg, "rejections_total", "catalog", "heap", reason="too_large") == 1
    # 3 successful acquisitions: two on the fast path (0 s), one after waiting (> 0 s)
    assert value(reg, "wait_seconds_count", "catalog", "heap") == 3
    assert value(reg, "wait_seconds_bucket", "catalog", "heap", le="0.0") == 2
    assert value(reg, "wait_seconds_count", "catalog", "direct") == 0


def test_several_limiters_coexist_in_one_registry() -> None:
    reg = CollectorRegistry()
    up = AsyncDualMemoryLimiter(MemoryLimitConfig(heap_limit_bytes=10), name="upstream-catalog", registry=reg)
    cl = AsyncDualMemoryLimiter(MemoryLimitConfig(heap_limit_bytes=20), name="client-discovery", registry=reg)
    assert MemoryLimiterMetrics.for_registry(reg) is MemoryLimiterMetrics.for_registry(reg)

    async def scenario() -> None:
        await up.acquire(3, LimitType.HEAP)
        await cl.acquire(4, LimitType.HEAP)

    asyncio.run(scenario())
    assert value(reg, "used_bytes", "upstream-catalog", "heap") == 3
    assert value(reg, "used_bytes", "client-discovery", "heap") == 4
    assert value(reg, "limit_bytes", "client-discovery", "heap") == 20
    MemoryLimiterMetrics.for_registry(reg).detach(limiter="upstream-catalog", kind="heap")
    assert value(reg, "used_bytes", "upstream-catalog", "heap") is None
    assert value(reg, "used_bytes", "client-discovery", "heap") == 4


def test_a_standalone_semaphore_can_be_attached_and_unbounded_limit_reads_zero() -> None:
    reg = CollectorRegistry()
    s = AsyncSemaphore(0, max_queue=0)
    MemoryLimiterMetrics.for_registry(reg).attach(s, limiter="puller", kind="heap")

    async def scenario() -> None:
        await s.acquire(123)

    asyncio.run(scenario())
    assert value(reg, "used_bytes", "puller", "heap") == 123
    assert value(reg, "limit_bytes", "puller", "heap") == 0
    assert value(reg, "queue_max_size", "puller", "heap") == 0
