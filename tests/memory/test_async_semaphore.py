"""One test per behaviour of AsyncSemaphore (seed 001). The loop is driven by ``asyncio.sleep(0)`` yields
and by awaiting outcomes; timeouts are a few milliseconds and asserted by their outcome only."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import wraps

import pytest

from cdc_core.memory import (
    AcquireTimeout,
    AsyncSemaphore,
    InvalidPermit,
    InvalidPermitRequest,
    MemoryLimitError,
    Permit,
    PermitReleased,
    QueueFull,
    SemaphoreClosed,
)

TINY = 0.01  # seconds: a timeout that must fire


def run(fn: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    @wraps(fn)
    def wrapper() -> None:
        asyncio.run(asyncio.wait_for(fn(), 10))

    return wrapper


async def settle(n: int = 10) -> None:
    """Let every ready callback run (grants wake tasks, cancellations run their handlers)."""
    for _ in range(n):
        await asyncio.sleep(0)


def sem(limit: int = 10, **kw: object) -> AsyncSemaphore:
    kw.setdefault("acquire_timeout", None)
    return AsyncSemaphore(limit, **kw)  # type: ignore[arg-type]


# -- basics ------------------------------------------------------------------------------------------------


@run
async def test_fast_path_acquire_and_release_account_permits() -> None:
    s = sem(10)
    p = await s.acquire(4)
    assert (p.permits, p.active, s.used, s.available, s.queue_size) == (4, True, 4, 6, 0)
    s.release(p)
    assert (p.released, p.active, s.used) == (True, False, 0)


@run
async def test_strict_fifo_a_blocked_request_blocks_smaller_ones_behind_it() -> None:
    s = sem(10)
    held = await s.acquire(6)
    order: list[str] = []

    async def req(name: str, n: int) -> Permit:
        p = await s.acquire(n)
        order.append(name)
        return p

    big = asyncio.create_task(req("big", 8))
    await settle()
    small = asyncio.create_task(req("small", 1))  # would fit (4 free) but must wait behind "big"
    await settle()
    assert order == [] and s.queue_size == 2 and s.used == 6
    s.release(held)
    await settle()
    assert order == ["big", "small"] and s.used == 9
    s.release(await big)
    s.release(await small)
    assert s.used == 0


@run
async def test_grants_follow_arrival_order() -> None:
    s = sem(3)
    held = await s.acquire(3)
    order: list[int] = []

    async def req(i: int) -> None:
        p = await s.acquire(3)
        order.append(i)
        await settle(2)
        s.release(p)

    tasks = [asyncio.create_task(req(i)) for i in range(6)]
    await settle()
    s.release(held)
    await asyncio.gather(*tasks)
    assert order == list(range(6)) and s.used == 0


@run
async def test_zero_permits_still_respect_fifo() -> None:
    s = sem(10)
    held = await s.acquire(5)
    blocked = asyncio.create_task(s.acquire(8))
    await settle()
    zero = asyncio.create_task(s.acquire(0))
    await settle()
    assert not zero.done()
    s.release(held)
    await settle()
    assert (await zero).permits == 0 and (await blocked).permits == 8


# -- rejections ----------------------------------------------------------------------------------------------


@run
async def test_queue_full_rejects_at_once() -> None:
    s = sem(10, max_queue=2)
    held = await s.acquire(10)
    waiting = [asyncio.create_task(s.acquire(1)) for _ in range(2)]
    await settle()
    with pytest.raises(QueueFull, match="max queue 2"):
        await s.acquire(1)  # raises without waiting
    assert s.queue_size == 2
    s.release(held)
    for t in waiting:
        s.release(await t)
    assert s.used == 0


@run
async def test_oversize_request_is_rejected_at_once_not_capped_or_queued() -> None:
    s = sem(10)
    with pytest.raises(InvalidPermitRequest, match="exceeds the limit of 10"):
        await s.acquire(11)
    assert (s.used, s.queue_size) == (0, 0)


@run
async def test_negative_request_is_rejected_at_once() -> None:
    s = sem(10)
    with pytest.raises(InvalidPermitRequest, match="negative"):
        await s.acquire(-1)
    with pytest.raises(ValueError):  # InvalidPermitRequest is a ValueError
        await s.acquire(-5)
    with pytest.raises(TypeError):
        await s.acquire(1.5)  # type: ignore[arg-type]
    assert s.used == 0


# -- timeouts and cancellation --------------------------------------------------------------------------------


@run
async def test_timeout_fails_the_request_and_unblocks_smaller_ones_behind_it() -> None:
    s = sem(10)
    held = await s.acquire(5)
    big = asyncio.create_task(s.acquire(8, timeout=TINY))
    await settle()
    small = asyncio.create_task(s.acquire(3))  # no timeout; fits, but is behind "big"
    await settle()
    assert not small.done()
    with pytest.raises(AcquireTimeout, match="timed out"):
        await big
    p = await small  # the queue was reprocessed when "big" left it
    assert s.used == 8 and s.queue_size == 0
    s.release(p)
    s.release(held)
    assert s.used == 0


@run
async def test_default_timeout_comes_from_the_semaphore() -> None:
    s = AsyncSemaphore(1, acquire_timeout=TINY)
    held = await s.acquire(1)
    with pytest.raises(AcquireTimeout):
        await s.acquire(1)
    with pytest.raises(ValueError, match="timeout"):
        await s.acquire(1, timeout=0)
    s.release(held)
    assert s.used == 0 and s.queue_size == 0


@run
async def test_cancelling_a_waiter_removes_it_and_unblocks_the_next() -> None:
    s = sem(10)
    held = await s.acquire(5)
    big = asyncio.create_task(s.acquire(8))
    await settle()
    small = asyncio.create_task(s.acquire(3))
    await settle()
    big.cancel()
    with pytest.raises(asyncio.CancelledError):
        await big
    p = await small
    assert s.used == 8 and s.queue_size == 0
    s.release(p)
    s.release(held)
    assert s.used == 0


@run
async def test_cancellation_after_grant_before_resume_leaks_nothing() -> None:
    s = sem(10)
    held = await s.acquire(10)
    t = asyncio.create_task(s.acquire(4))
    await settle()
    s.release(held)  # grants the 4 permits to t, which has not resumed yet
    assert s.used == 4
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert s.used == 0 and s.queue_size == 0


@run
async def test_cancellation_through_wait_for_leaks_nothing() -> None:
    s = sem(1)
    held = await s.acquire(1)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(s.acquire(1), TINY)
    s.release(held)
    assert s.used == 0 and s.queue_size == 0


@run
async def test_abandoned_entries_are_compacted_so_the_queue_stays_bounded() -> None:
    s = sem(1)
    held = await s.acquire(1)
    for _ in range(20):
        tasks = [asyncio.create_task(s.acquire(1)) for _ in range(50)]
        await settle()
        for t in tasks:
            t.cancel()
        await settle()
        assert s.queue_size == 0
        assert len(s._queue) <= 2 * 50 + 1  # dead entries are reclaimed, memory is O(live requests)
    s.release(held)
    assert s.used == 0 and len(s._queue) == 0


# -- update ----------------------------------------------------------------------------------------------------


@run
async def test_update_up_on_the_fast_path_replaces_the_permit() -> None:
    s = sem(10)
    p = await s.acquire(2)
    q = await s.update(p, 7)
    assert (q.permits, q.active, p.replaced, s.used) == (7, True, True, 7)
    s.release(p)  # releasing a replaced permit does nothing
    assert s.used == 7
    s.release(q)
    assert s.used == 0


@run
async def test_update_up_waits_in_fifo_while_the_old_permits_stay_held() -> None:
    s = sem(10)
    p = await s.acquire(3)
    other = await s.acquire(6)
    earlier = asyncio.create_task(s.acquire(4))  # queued first
    await settle()
    grow = asyncio.create_task(s.update(p, 5))  # needs 2 more; 1 free, and behind "earlier" anyway
    await settle()
    assert p.active and p.update_pending and s.used == 9 and s.queue_size == 2
    s.release(other)  # 7 free: "earlier" (4) then the update (2) fit, in that order
    await settle()
    assert earlier.done() and grow.done()
    q = await grow
    assert (q.permits, p.replaced, s.used) == (5, True, 9)
    s.release(q)
    s.release(await earlier)
    assert s.used == 0


@run
async def test_update_down_returns_the_difference_at_once_and_wakes_waiters() -> None:
    s = sem(10)
    p = await s.acquire(10)
    waiter = asyncio.create_task(s.acquire(6))
    await settle()
    q = await s.update(p, 4)
    assert (q.permits, p.replaced, s.used) == (4, True, 10)  # 4 held + 6 granted
    s.release(await waiter)
    s.release(q)
    assert s.used == 0


@run
async def test_update_to_zero_and_back() -> None:
    s = sem(10)
    p = await s.acquire(5)
    z = await s.update(p, 0)
    assert (z.permits, z.active, s.used) == (0, True, 0)
    same = await s.update(z, 0)
    assert same is not z and z.replaced and s.used == 0
    back = await s.update(same, 10)
    assert s.used == 10
    s.release(back)
    assert s.used == 0


@run
async def test_failed_update_keeps_the_old_permit_valid() -> None:
    s = sem(10, max_queue=1)
    p = await s.acquire(5)
    other = await s.acquire(5)
    with pytest.raises(AcquireTimeout):
        await s.update(p, 8, timeout=TINY)
    assert p.active and not p.update_pending and s.used == 10
    with pytest.raises(InvalidPermitRequest):
        await s.update(p, 11)
    blocker = asyncio.create_task(s.acquire(1))
    await settle()
    with pytest.raises(QueueFull):
        await s.update(p, 6)
    assert p.active and s.used == 10
    blocker.cancel()
    await settle()
    t = asyncio.create_task(s.update(p, 7))
    await settle()
    assert p.update_pending
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert p.active and s.used == 10 and s.queue_size == 0
    s.release(p)
    s.release(other)
    assert s.used == 0


@run
async def test_update_cancelled_after_grant_before_resume_keeps_the_old_permit() -> None:
    s = sem(10)
    p = await s.acquire(3)
    other = await s.acquire(7)
    t = asyncio.create_task(s.update(p, 6))
    await settle()
    s.release(other)  # grants the 3 extra permits; t has not resumed
    assert s.used == 6
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert p.active and s.used == 3
    s.release(p)
    assert s.used == 0


@run
async def test_update_of_a_dead_or_busy_permit_is_refused() -> None:
    s = sem(10)
    p = await s.acquire(1)
    q = await s.update(p, 2)
    with pytest.raises(InvalidPermit, match="replaced"):
        await s.update(p, 3)
    s.release(q)
    with pytest.raises(InvalidPermit, match="released"):
        await s.update(q, 3)
    r = await s.acquire(5)
    other = await s.acquire(5)
    pending = asyncio.create_task(s.update(r, 8))
    await settle()
    with pytest.raises(InvalidPermit, match="already has an update pending"):
        await s.update(r, 9)
    s.release(other)
    s.release(await pending)
    assert s.used == 0


# -- release ---------------------------------------------------------------------------------------------------


@run
async def test_double_release_does_nothing() -> None:
    s = sem(10)
    p = await s.acquire(4)
    keep = await s.acquire(3)
    s.release(p)
    s.release(p)
    assert s.used == 3
    s.release(keep)
    assert s.used == 0


@run
async def test_releasing_a_foreign_permit_is_an_error() -> None:
    a, b = sem(10, name="a"), sem(10, name="b")
    p = await a.acquire(1)
    with pytest.raises(InvalidPermit, match="another semaphore"):
        b.release(p)
    with pytest.raises(InvalidPermit):
        await b.update(p, 2)
    a.release(p)


@run
async def test_regression_release_while_update_pending_creates_no_permits() -> None:
    """Pulsar's post-release fix: releasing a permit whose update waits must void the update."""
    s = sem(10)
    p = await s.acquire(5)
    other = await s.acquire(5)
    grow = asyncio.create_task(s.update(p, 8))
    await settle()
    assert p.update_pending
    s.release(p)  # returns the 5 old permits; the pending update must not later add 8
    with pytest.raises(PermitReleased):
        await grow
    assert s.used == 5 and s.queue_size == 0
    s.release(other)
    assert s.used == 0
    # the whole limit is available again: nothing was created or lost
    full = await s.acquire(10)
    s.release(full)
    assert s.used == 0


@run
async def test_regression_release_after_update_granted_before_it_resumed() -> None:
    s = sem(10)
    p = await s.acquire(5)
    other = await s.acquire(5)
    grow = asyncio.create_task(s.update(p, 8))
    await settle()
    s.release(other)  # grants the 3 extra permits; "grow" has not resumed yet
    s.release(p)  # returns the 5 old ones and the 3 granted ones
    assert s.used == 0
    with pytest.raises(PermitReleased):
        await grow
    assert s.used == 0 and not p.update_pending


# -- unbounded mode ------------------------------------------------------------------------------------------------


@run
async def test_limit_zero_or_negative_is_unbounded() -> None:
    for limit in (0, -1):
        s = AsyncSemaphore(limit, max_queue=1, acquire_timeout=TINY)
        assert s.unbounded and s.limit == 0 and s.available is None
        ps = [await s.acquire(10**12) for _ in range(5)]  # no queue, no timeouts
        assert s.used == 5 * 10**12 and s.queue_size == 0
        big = await s.update(ps[0], 10**15)
        assert s.used == 4 * 10**12 + 10**15
        for p in [big, *ps[1:]]:
            s.release(p)
        assert s.used == 0
        with pytest.raises(InvalidPermitRequest):
            await s.acquire(-1)


# -- close -----------------------------------------------------------------------------------------------------


@run
async def test_close_fails_pending_waiters_and_later_requests() -> None:
    s = sem(10)
    held = await s.acquire(10)
    upd = await s.acquire(0)
    waiting = asyncio.create_task(s.acquire(1))
    grow = asyncio.create_task(s.update(upd, 5))
    await settle()
    s.close()
    for t in (waiting, grow):
        with pytest.raises(SemaphoreClosed, match="closed while"):
            await t
    assert upd.active and s.queue_size == 0 and s.closed
    with pytest.raises(SemaphoreClosed, match="is closed"):
        await s.acquire(1)
    with pytest.raises(SemaphoreClosed):
        await s.update(upd, 1)
    s.release(held)  # held permits can still be released
    s.release(upd)
    assert s.used == 0
    s.close()  # idempotent
    assert isinstance(SemaphoreClosed("x"), MemoryLimitError)


# -- lease (async context manager) -------------------------------------------------------------------------------


@run
async def test_lease_releases_on_success() -> None:
    s = sem(10)
    async with s.hold(4) as lease:
        assert s.used == 4 and lease.permits == 4
        await lease.update(6)
        assert s.used == 6
    assert s.used == 0


@run
async def test_lease_releases_on_exception() -> None:
    s = sem(10)
    with pytest.raises(RuntimeError, match="boom"):
        async with s.hold(4):
            raise RuntimeError("boom")
    assert s.used == 0


@run
async def test_lease_releases_on_cancellation_inside_and_while_entering() -> None:
    s = sem(10)
    inside = asyncio.Event()

    async def body() -> None:
        async with s.hold(4):
            inside.set()
            await asyncio.Event().wait()

    t = asyncio.create_task(body())
    await inside.wait()
    assert s.used == 4
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert s.used == 0

    held = await s.acquire(10)
    entering = asyncio.create_task(body())  # queued in __aenter__
    await settle()
    entering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await entering
    s.release(held)
    assert s.used == 0 and s.queue_size == 0


@run
async def test_lease_failed_update_releases_the_old_permit_on_exit() -> None:
    s = sem(10)
    other = await s.acquire(5)
    with pytest.raises(AcquireTimeout):
        async with s.hold(5) as lease:
            await lease.update(9, timeout=TINY)
    assert s.used == 5
    s.release(other)
    assert s.used == 0


@run
async def test_check_finds_a_broken_structure() -> None:
    """``AsyncSemaphore._check`` (called after every step of the state machine) fails on each kind of corruption."""
    for how in ("used over the limit", "live count off", "dead count off", "deadline untracked", "no timer"):
        s = AsyncSemaphore(10, acquire_timeout=60.0)
        held = await s.acquire(8)
        waiting = asyncio.ensure_future(s.acquire(5))
        await settle()
        s._check()
        if how == "used over the limit":
            s._used = 11
        elif how == "live count off":
            s._live += 1
        elif how == "dead count off":
            s._dead += 1
        elif how == "deadline untracked":
            s._deadlines.clear()
        elif how == "no timer":
            assert s._timer is not None
            s._timer.cancel()
            s._timer = None
        with pytest.raises(AssertionError):
            s._check()
        waiting.cancel()
        s.release(held)
        await settle()
