"""Pessimistic locks and lock waits as TiKV's lock manager keeps them: a transaction waits for a key another holds
until it is released or the timeout passes, a wait that would close a cycle is a deadlock for the transaction that
closes it, a release wakes exactly the first waiter by start ts, and a prewrite or a newer write interacts with the
locks as in TiKV (``cdc_core/upstream/store/lock_manager.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from cdc_core.upstream.store.lock_manager import DeadlockError, LockManager, LockWaitTimeoutError
from cdc_core.upstream.store.mvcc import KeyLockedError, Mutation, MvccStore, Op, WriteConflictError

LONG = 30.0  # a timeout no passing test reaches


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


async def settle() -> None:
    """Let every task that can run, run (each woken waiter takes a few loop steps to retry its key)."""
    for _ in range(10):
        await asyncio.sleep(0)


def lock(s: MvccStore, key: bytes, ts: int, for_update_ts: int | None = None, timeout: float = LONG
         ) -> asyncio.Task[None]:
    return asyncio.ensure_future(s.acquire_pessimistic_locks([key], key, ts, for_update_ts or ts, timeout))


def test_a_second_transaction_waits_until_the_holder_releases() -> None:
    async def scenario() -> None:
        s = MvccStore()
        await lock(s, b"k", 10)
        waiter = lock(s, b"k", 20)
        await settle()
        assert not waiter.done() and s.lock_manager.waiting(b"k") == [20]
        assert s.lock_manager.waits_for(20) == 10
        s.lock_manager._check()
        s.pessimistic_rollback([b"k"], 10)
        await waiter
        holder = s.lock_manager.holder(b"k")
        assert holder is not None and holder.start_ts == 20
        assert s.lock_manager.waiting(b"k") == [] and s.lock_manager.waits_for(20) is None
        s.lock_manager._check()

    run(scenario())


def test_a_wait_ends_with_lock_wait_timeout_and_leaves_no_trace() -> None:
    async def scenario() -> None:
        s = MvccStore()
        await lock(s, b"k", 10)
        with pytest.raises(LockWaitTimeoutError) as ei:
            await lock(s, b"k", 20, timeout=0.05)
        assert ei.value.holder_ts == 10 and ei.value.key == b"k"
        assert s.lock_manager.waiting(b"k") == [] and s.lock_manager.waits_for(20) is None
        s.lock_manager._check()
        holder = s.lock_manager.holder(b"k")
        assert holder is not None and holder.start_ts == 10

    run(scenario())


def test_a_two_transaction_cycle_is_a_deadlock_for_the_one_that_closes_it() -> None:
    async def scenario() -> None:
        s = MvccStore()
        await lock(s, b"a", 10)
        await lock(s, b"b", 20)
        t20 = lock(s, b"a", 20)  # 20 waits for 10
        await settle()
        with pytest.raises(DeadlockError) as ei:
            await lock(s, b"b", 10)  # 10 waiting for 20 closes the cycle
        assert ei.value.start_ts == 10 and ei.value.cycle == [10, 20, 10]
        assert not t20.done()  # the other transaction still waits
        s.lock_manager._check()
        s.pessimistic_rollback([b"a"], 10)  # TiDB rolls the deadlocked transaction back
        await t20
        assert s.lock_manager.holder(b"a").start_ts == 20  # type: ignore[union-attr]

    run(scenario())


def test_a_three_transaction_cycle_is_found_along_the_chain() -> None:
    async def scenario() -> None:
        s = MvccStore()
        for key, ts in ((b"a", 10), (b"b", 20), (b"c", 30)):
            await lock(s, key, ts)
        t10 = lock(s, b"b", 10)  # 10 -> 20
        t20 = lock(s, b"c", 20)  # 20 -> 30
        await settle()
        with pytest.raises(DeadlockError) as ei:
            await lock(s, b"a", 30)  # 30 -> 10 closes 30 -> 10 -> 20 -> 30
        assert ei.value.cycle == [30, 10, 20, 30]
        assert not t10.done() and not t20.done()
        s.pessimistic_rollback([b"c"], 30)
        await t20
        s.pessimistic_rollback([b"b", b"c"], 20)
        await t10
        s.lock_manager._check()

    run(scenario())


def test_waits_without_a_cycle_are_no_deadlock() -> None:
    async def scenario() -> None:
        s = MvccStore()
        await lock(s, b"a", 10)
        await lock(s, b"b", 20)
        t20 = lock(s, b"a", 20)  # 20 -> 10
        t30 = lock(s, b"b", 30)  # 30 -> 20: a chain, not a cycle
        await settle()
        assert not t20.done() and not t30.done()
        s.pessimistic_rollback([b"a"], 10)
        await t20
        s.pessimistic_rollback([b"a", b"b"], 20)
        await t30

    run(scenario())


def test_a_release_wakes_exactly_the_first_waiter_by_start_ts() -> None:
    async def scenario() -> None:
        s = MvccStore()
        await lock(s, b"k", 10)
        late_old = {ts: lock(s, b"k", ts) for ts in (40, 30)}  # 40 came first, 30 is older
        await settle()
        t20 = lock(s, b"k", 20)
        await settle()
        assert s.lock_manager.waiting(b"k") == [20, 30, 40]
        s.pessimistic_rollback([b"k"], 10)
        await t20
        await settle()
        assert not late_old[30].done() and not late_old[40].done()  # woken: 20 alone
        assert s.lock_manager.waiting(b"k") == [30, 40]
        s.pessimistic_rollback([b"k"], 20)
        await late_old[30]
        await settle()
        assert not late_old[40].done() and s.lock_manager.holder(b"k").start_ts == 30  # type: ignore[union-attr]
        s.pessimistic_rollback([b"k"], 30)
        await late_old[40]
        s.lock_manager._check()

    run(scenario())


def test_waiters_left_in_the_queue_wait_for_the_new_holder_and_its_cycles_are_found() -> None:
    async def scenario() -> None:
        s = MvccStore()
        await lock(s, b"k", 10)
        await lock(s, b"m", 30)
        t20 = lock(s, b"k", 20)
        t30 = lock(s, b"k", 30)  # 30 holds m and waits for k
        await settle()
        s.pessimistic_rollback([b"k"], 10)
        await t20  # 20 holds k now: 30 waits for 20, no longer for 10
        assert s.lock_manager.waits_for(30) == 20
        with pytest.raises(DeadlockError) as ei:
            await lock(s, b"m", 20)  # 20 -> 30 -> 20
        assert ei.value.cycle == [20, 30, 20]
        s.pessimistic_rollback([b"k"], 20)
        await t30
        s.lock_manager._check()

    run(scenario())


def test_a_woken_waiter_that_leaves_without_the_lock_passes_the_turn_on() -> None:
    async def scenario() -> None:
        s = MvccStore()
        await lock(s, b"k", 10)
        t20 = lock(s, b"k", 20, for_update_ts=25)
        t30 = lock(s, b"k", 30, for_update_ts=100)
        await settle()
        # the holder writes the key and commits at 50: newer than 20's for_update_ts, older than 30's
        s.prewrite([Mutation(b"k", Op.PUT, b"v")], b"k", 10, for_update_ts=10)
        s.commit([b"k"], 10, 50)
        with pytest.raises(WriteConflictError) as ei:
            await t20
        assert ei.value.conflict_commit_ts == 50 and ei.value.conflict_start_ts == 10
        await t30  # not stranded until its timeout
        assert s.lock_manager.holder(b"k").start_ts == 30  # type: ignore[union-attr]

    run(scenario())


def test_a_newer_write_than_for_update_ts_is_a_write_conflict_an_older_one_is_not() -> None:
    async def scenario() -> None:
        s = MvccStore()
        s.prewrite([Mutation(b"k", Op.PUT, b"v")], b"k", 5)
        s.commit([b"k"], 5, 50)
        with pytest.raises(WriteConflictError):
            await lock(s, b"k", 10, for_update_ts=40)
        assert s.lock_manager.holder(b"k") is None
        await lock(s, b"k", 10, for_update_ts=60)  # the statement again, at a newer for_update_ts
        assert s.lock_manager.holder(b"k").for_update_ts == 60  # type: ignore[union-attr]

    run(scenario())


def test_a_prewrite_lock_is_waited_for_and_a_pessimistic_lock_blocks_other_prewrites() -> None:
    async def scenario() -> None:
        s = MvccStore()
        s.prewrite([Mutation(b"p", Op.PUT, b"1")], b"p", 5)  # an optimistic transaction in its 2PC
        t10 = lock(s, b"p", 10, for_update_ts=60)
        await settle()
        assert not t10.done()
        s.commit([b"p"], 5, 50)
        await t10
        with pytest.raises(KeyLockedError) as ei:
            s.prewrite([Mutation(b"p", Op.PUT, b"2")], b"p", 70)  # an optimistic writer meets the pessimistic lock
        assert ei.value.lock_ts == 10
        assert s.lock_of(b"p") is None  # pessimistic locks are not prewrite locks: reads, CDC, resolved ts skip them

    run(scenario())


def test_a_pessimistic_prewrite_turns_the_locks_into_prewrite_locks_and_its_commit_wakes_waiters() -> None:
    async def scenario() -> None:
        s = MvccStore()
        s.prewrite([Mutation(b"k", Op.PUT, b"0")], b"k", 1)
        s.commit([b"k"], 1, 2)
        await lock(s, b"k", 10, for_update_ts=12)
        await lock(s, b"r", 10, for_update_ts=12)  # a key it only read for update
        waiter = lock(s, b"k", 20, for_update_ts=100)
        s.prewrite([Mutation(b"k", Op.PUT, b"1")], b"k", 10, for_update_ts=12)
        assert s.lock_manager.holder(b"k") is None and s.lock_of(b"k") is not None
        await settle()
        assert not waiter.done()  # still locked, by the prewrite now
        s.commit([b"k"], 10, 30)
        s.pessimistic_rollback(s.lock_manager.locks_of(10), 10)  # the read-only key's lock, after the commit
        await waiter
        assert s.get(b"k", 40) == b"1" and s.lock_manager.holder(b"r") is None
        assert s.lock_manager.locks_of(10) == set()

    run(scenario())


def test_lock_manager_alone_keeps_its_invariants() -> None:
    lm = LockManager()
    lm.lock(b"a", 1, b"a", 1)
    lm.lock(b"a", 1, b"a", 5)
    lm.lock(b"b", 1, b"a", 2)
    assert lm.holder(b"a").for_update_ts == 5 and lm.locks_of(1) == {b"a", b"b"}  # type: ignore[union-attr]
    assert lm.unlock([b"a", b"c"], 1) == [b"a"] and lm.unlock([b"b"], 2) == []
    assert len(lm) == 1 and not lm.wake_up(b"b")
    lm._check()
