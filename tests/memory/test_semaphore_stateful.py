"""Random interleavings of acquire / update / release / cancel / timeouts on a real event loop.

Each example gets its own event loop whose clock is virtual (``loop.time()`` only moves in the
``advance`` rule), so timeouts are deterministic and no test waits for real time. Rules may leave the
loop unsettled (a grant or a cancellation delivered but the task not resumed yet), which is where the
races live; the model is compared with the semaphore whenever the loop has settled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cdc_core.memory import (
    DEFAULT_TIMEOUT,
    AcquireTimeout,
    AsyncSemaphore,
    InvalidPermit,
    InvalidPermitRequest,
    Permit,
    PermitReleased,
    QueueFull,
    Timeout,
)

LIMIT = 10
MAX_QUEUE = 4
DEFAULT_TIMEOUT_S = 0.004
TIMEOUTS = st.sampled_from([DEFAULT_TIMEOUT, DEFAULT_TIMEOUT, None, None, 0.001, 0.010])


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test says so."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now


async def _yields(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@dataclass(eq=False)
class Request:
    seq: int
    permits: int  # requested total (the new size for an update)
    old: Permit | None  # the permit being updated
    task: asyncio.Task[Permit]
    old_size: int = 0

    @property
    def need(self) -> int:
        return self.permits - self.old_size


class SemaphoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualClockLoop()
        self.sem = AsyncSemaphore(LIMIT, max_queue=MAX_QUEUE, acquire_timeout=DEFAULT_TIMEOUT_S)
        self.live: list[Permit] = []  # permits the model holds
        self.dead: list[Permit] = []  # released or replaced: releasing them again must do nothing
        self.pending: list[Request] = []  # submitted, not finished, in submission order
        self.granted: list[int] = []  # seqs of requests that obtained permits by acquiring (not shrinking)
        self.seq = 0
        self.settled = True

    # -- driving the loop ---------------------------------------------------------------------------------

    def _settle(self) -> None:
        self.loop.run_until_complete(_yields(20))
        self._harvest()
        self.settled = True

    def _maybe_settle(self, settle: bool) -> None:
        if settle:
            self._settle()
        else:
            self.settled = False

    def _submit(self, coro: Coroutine[Any, Any, Permit], permits: int, old: Permit | None, settle: bool) -> None:
        self.seq += 1
        task = self.loop.create_task(coro)
        size = old.permits if old is not None else 0
        self.pending.append(Request(self.seq, permits, old, task, size))
        self._maybe_settle(settle)

    def _harvest(self) -> None:
        still = [r for r in self.pending if not r.task.done()]
        done = [r for r in self.pending if r.task.done()]
        # successes first: they replace old permits, which later checks of failed updates must know
        done.sort(key=lambda r: r.task.cancelled() or r.task.exception() is not None)
        for r in done:
            kind = "update" if r.old is not None else "acquire"
            outcome = "cancelled" if r.task.cancelled() else type(r.task.exception() or r.task.result()).__name__
            event(f"{kind} -> {outcome}")
            if r.task.cancelled():
                if r.old is not None and r.old not in self.dead:
                    assert r.old.active, "a cancelled update must leave the old permit valid"
                continue
            exc = r.task.exception()
            if exc is None:
                permit = r.task.result()
                assert permit.active and permit.permits == r.permits
                if r.old is not None:
                    assert r.old.replaced
                    if r.old in self.live:
                        self.live.remove(r.old)
                        self.dead.append(r.old)
                if r.old is None or r.need > 0:
                    self.granted.append(r.seq)
                self.live.append(permit)
            elif isinstance(exc, PermitReleased):
                assert r.old is not None and r.old.released and r.old in self.dead
            elif isinstance(exc, InvalidPermitRequest):
                assert r.permits < 0 or r.permits > LIMIT
            elif isinstance(exc, InvalidPermit):
                assert r.old is not None  # released/replaced before it ran, or another update pending
            elif isinstance(exc, AcquireTimeout | QueueFull):
                if r.old is not None and r.old not in self.dead:
                    assert r.old.active, "a failed update must leave the old permit valid"
            else:
                raise exc
        self.pending = still

    # -- rules -------------------------------------------------------------------------------------------------

    @rule(n=st.integers(-1, LIMIT + 1), timeout=TIMEOUTS, settle=st.booleans())
    def acquire(self, n: int, timeout: Timeout, settle: bool) -> None:
        self._submit(self.sem.acquire(n, timeout=timeout), n, None, settle)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), n=st.integers(0, LIMIT + 1), timeout=TIMEOUTS, settle=st.booleans())
    def update(self, data: st.DataObject, n: int, timeout: Timeout, settle: bool) -> None:
        permit = data.draw(st.sampled_from(self.live))
        self._submit(self.sem.update(permit, n, timeout=timeout), n, permit, settle)

    @precondition(lambda self: self.live or self.dead)
    @rule(data=st.data(), settle=st.booleans())
    def release(self, data: st.DataObject, settle: bool) -> None:
        permit = data.draw(st.sampled_from(self.live + self.dead))
        self.sem.release(permit)  # a dead permit: nothing happens; a pending update of it: PermitReleased
        if permit in self.live:
            self.live.remove(permit)
            self.dead.append(permit)
        assert not permit.active
        self._maybe_settle(settle)

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), settle=st.booleans())
    def cancel(self, data: st.DataObject, settle: bool) -> None:
        data.draw(st.sampled_from(self.pending)).task.cancel()
        self._maybe_settle(settle)

    @precondition(lambda self: self.live and self.pending)
    @rule(data=st.data(), revoke=st.booleans())
    def release_then_race(self, data: st.DataObject, revoke: bool) -> None:
        """Release a permit (which may grant queued requests) and, before any task resumes, cancel a
        pending request or release the permit a pending update resizes (Pulsar's race)."""
        updates = [r for r in self.pending if r.old in self.live]
        target = data.draw(st.sampled_from(updates if revoke and updates else self.pending))
        others = [p for p in self.live if p is not target.old]
        if others:
            permit = data.draw(st.sampled_from(others))
            self.sem.release(permit)
            self.live.remove(permit)
            self.dead.append(permit)
        if revoke and target.old in self.live:
            assert target.old is not None
            self.sem.release(target.old)
            self.live.remove(target.old)
            self.dead.append(target.old)
        else:
            target.task.cancel()
        self._settle()

    @rule(ms=st.integers(1, 6))
    def advance(self, ms: int) -> None:
        self.loop.now += ms / 1000
        self._settle()

    @rule()
    def settle(self) -> None:
        self._settle()

    # -- invariants --------------------------------------------------------------------------------------------

    @invariant()
    def structure_holds(self) -> None:
        self.sem._check()

    @invariant()
    def used_never_exceeds_the_limit(self) -> None:
        assert 0 <= self.sem.used <= LIMIT

    @invariant()
    def accounting_equals_the_live_permits(self) -> None:
        if not self.settled:
            return
        assert all(p.active for p in self.live) and not any(p.active for p in self.dead)
        assert self.sem.used == sum(p.permits for p in self.live)
        assert self.sem.queue_size == len(self.pending)

    @invariant()
    def fifo_is_respected(self) -> None:
        if not self.settled or not self.pending:
            return
        head = self.pending[0]
        # nobody submitted after a still-waiting request has been served ...
        assert all(seq < head.seq for seq in self.granted), (self.granted, head.seq)
        # ... and the waiting head really does not fit (the queue never stalls)
        available = self.sem.available
        assert available is not None and head.need > available

    def teardown(self) -> None:
        try:
            for r in self.pending:
                r.task.cancel()
            self._settle()
            assert not self.pending
            for p in self.live + self.dead:
                self.sem.release(p)
            assert self.sem.used == 0 and self.sem.queue_size == 0
            full = self.loop.run_until_complete(self.sem.acquire(LIMIT))  # nothing was lost either
            self.sem.release(full)
            assert self.sem.used == 0
        finally:
            self.loop.close()


SemaphoreMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSemaphoreInterleavings = SemaphoreMachine.TestCase


def test_timeout_of_a_waiter_whose_cancellation_is_in_flight() -> None:
    """The timer fires in the same loop iteration as (after) the callback that cancelled the task."""
    loop = VirtualClockLoop()
    try:
        sem = AsyncSemaphore(1, acquire_timeout=None)
        held = loop.run_until_complete(sem.acquire(1))
        task = loop.create_task(sem.acquire(1, timeout=0.010))
        loop.run_until_complete(_yields(3))
        loop.call_at(0.009, task.cancel)  # due together with the timeout, and runs before it
        loop.now = 0.020
        loop.run_until_complete(_yields(5))
        assert task.cancelled() and sem.queue_size == 0 and sem.used == 1
        sem.release(held)
        assert sem.used == 0
    finally:
        loop.close()


def test_default_timeouts_share_one_timer_and_expire_in_order() -> None:
    loop = VirtualClockLoop()
    try:
        sem = AsyncSemaphore(1, acquire_timeout=0.010)
        held = loop.run_until_complete(sem.acquire(1))
        tasks = []
        for _ in range(5):  # enqueued 1 ms apart: deadlines 10, 11, 12, 13, 14 ms
            tasks.append(loop.create_task(sem.acquire(1)))
            loop.run_until_complete(_yields(3))
            loop.now += 0.001
        timers = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert len(timers) == 1  # one shared timer
        tasks[1].cancel()  # abandoned in the middle
        loop.now = 0.0115
        loop.run_until_complete(_yields(5))
        assert tasks[0].done() and isinstance(tasks[0].exception(), AcquireTimeout)
        assert tasks[1].cancelled() and not any(t.done() for t in tasks[2:])
        sem.release(held)  # serves tasks[2]; the others still wait
        loop.run_until_complete(_yields(5))
        served = tasks[2].result()
        loop.now = 1.0
        loop.run_until_complete(_yields(5))
        assert all(isinstance(t.exception(), AcquireTimeout) for t in tasks[3:])
        assert sem.queue_size == 0 and sem.used == 1 and not sem._deadlines and sem._timer is None
        sem.release(served)
        assert sem.used == 0
    finally:
        loop.close()
