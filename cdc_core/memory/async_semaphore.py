"""A strictly FIFO, bounded-queue, updatable asyncio semaphore counting arbitrary permits (bytes).

This is the ``AsyncSemaphore`` of Pulsar's ``AsyncDualMemoryLimiter`` design (seed 001), for asyncio.
One instance guards one pool (e.g. heap memory of the upstream catalog's table listings): a request
for ``n`` permits completes when ``n`` permits are free *and* every request queued before it has been
served; it fails at once when it can never fit (:class:`InvalidPermitRequest`) or when the queue is full
(:class:`QueueFull`), and after its timeout (:class:`AcquireTimeout`).

Semantics
---------
* **Strict FIFO.** A request that does not fit blocks every request behind it, even smaller ones that
  would fit. A request takes the fast path (no queueing) only when the queue is empty.
* **Permits are objects.** :meth:`AsyncSemaphore.acquire` returns a :class:`Permit`. Releasing it twice,
  or releasing a permit that an :meth:`~AsyncSemaphore.update` replaced, does nothing.
* **Updates.** ``update(permit, n)`` returns a *new* permit for ``n`` and marks the old one replaced.
  Growing waits in the same FIFO queue for the difference while the old permits stay held; if it fails
  (timeout, full queue, cancellation, close) the old permit stays valid. Shrinking returns the
  difference at once. If the old permit is released while its update is pending, the update fails with
  :class:`PermitReleased` and creates no permits (the race Pulsar fixed after release).
* **Cancellation** of a waiting task removes its request (the queue is reprocessed) and never leaks
  permits, including when the permits were granted but the task had not resumed yet.
* **Unbounded mode.** ``limit <= 0`` disables the limit: every request is served at once (no queue, no
  timeouts); ``used`` is still tracked.
* **Close.** :meth:`AsyncSemaphore.close` fails pending waiters with :class:`SemaphoreClosed`; later
  requests fail at once. Held permits can still be released.

Complexity (``q`` = requests in the queue, including abandoned ones not yet reclaimed)
-------------------------------------------------------------------------------------
* ``acquire`` / growing ``update`` on the fast path: O(1). Queued: O(1) to enqueue.
* ``release``, shrinking ``update``: O(1) plus O(k) to wake the ``k`` requests that now fit.
* Timeout or cancellation of a queued request: amortized O(1) — the entry is marked dead and skipped
  when it reaches the head; the queue is compacted (O(q), in place) only when dead entries outnumber live
  ones, so memory stays O(live requests) and each dead entry is paid for once.
* Timers: requests with the semaphore's default timeout have deadlines in queue order, so they share
  **one** loop timer armed at the earliest pending deadline (O(1) per request, instead of a
  ``TimerHandle`` and an O(log n) heap push/pop each); a request given its own ``timeout=`` gets its own
  timer. Expiring ``k`` requests costs O(k).
* ``close``: O(q). All properties: O(1).

The semaphore is not thread-safe: use it from one event loop at a time.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
from collections import deque
from types import TracebackType
from typing import Final, Literal, Protocol

from cdc_core.memory.errors import (
    AcquireTimeout,
    InvalidPermit,
    InvalidPermitRequest,
    MemoryLimitError,
    PermitReleased,
    QueueFull,
    SemaphoreClosed,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "AsyncSemaphore",
    "Permit",
    "PermitLease",
    "SemaphoreObserver",
    "Timeout",
]


class _Default(enum.Enum):
    TOKEN = 0


DEFAULT_TIMEOUT: Final = _Default.TOKEN
"""Per-request ``timeout`` meaning "use the semaphore's ``acquire_timeout``"."""

Timeout = float | None | Literal[_Default.TOKEN]
"""Per-request timeout: seconds (> 0), ``None`` for no timeout, or :data:`DEFAULT_TIMEOUT`."""

# Permit states.
_ACTIVE: Final = 0
_RELEASED: Final = 1
_REPLACED: Final = 2

# Waiter states.
_PENDING: Final = 0  # in the queue, waiting
_GRANTED: Final = 1  # permits counted as used; the task has not necessarily resumed yet
_TIMED_OUT: Final = 2
_CANCELLED: Final = 3
_CLOSED: Final = 4
_REVOKED: Final = 5  # an update whose permit was released meanwhile

# Compact the queue when it holds more than this many dead entries and more dead than live ones.
_COMPACT_MIN: Final = 32


class SemaphoreObserver(Protocol):
    """Receives the events that gauges cannot read from the semaphore (see :mod:`cdc_core.memory.metrics`)."""

    def on_granted(self, waited_s: float) -> None:
        """A request (acquire or growing update) got its permits after waiting ``waited_s`` seconds."""

    def on_timeout(self) -> None:
        """A queued request timed out."""

    def on_rejected(self, reason: str) -> None:
        """A request was rejected at once; ``reason`` is ``"queue_full"`` or ``"too_large"``."""


class Permit:
    """Permits held from one :class:`AsyncSemaphore`; hand it back with :meth:`AsyncSemaphore.release`.

    A permit is *active* until it is released or replaced by an update; only active permits count as
    used. Permits are compared by identity.
    """

    __slots__ = ("_owner", "_pending", "_permits", "_state")

    def __init__(self, owner: AsyncSemaphore, permits: int) -> None:
        self._owner = owner
        self._permits = permits
        self._state: int = _ACTIVE
        self._pending: _Waiter | None = None

    @property
    def permits(self) -> int:
        """How many permits this permit holds (while active)."""
        return self._permits

    @property
    def semaphore(self) -> AsyncSemaphore:
        """The semaphore the permit came from."""
        return self._owner

    @property
    def active(self) -> bool:
        """Neither released nor replaced: releasing it returns :attr:`permits` to the semaphore."""
        return self._state == _ACTIVE

    @property
    def released(self) -> bool:
        """Released by :meth:`AsyncSemaphore.release`."""
        return self._state == _RELEASED

    @property
    def replaced(self) -> bool:
        """Replaced by the permit an update returned; releasing it does nothing."""
        return self._state == _REPLACED

    @property
    def update_pending(self) -> bool:
        """An update of this permit is waiting in the queue."""
        return self._pending is not None

    def __repr__(self) -> str:
        state = {_ACTIVE: "active", _RELEASED: "released", _REPLACED: "replaced"}[self._state]
        return f"<Permit {self._permits} of {self._owner.name!r}, {state}>"


class _Waiter:
    """A queued request: ``need`` permits (for an update, the difference), woken through ``future``."""

    __slots__ = ("deadline", "enqueued_at", "future", "need", "permit", "state", "timer")

    def __init__(self, need: int, future: asyncio.Future[None], permit: Permit | None, enqueued_at: float) -> None:
        self.need = need
        self.future = future
        self.permit = permit  # the permit being updated, or None for an acquire
        self.enqueued_at = enqueued_at
        self.state: int = _PENDING
        self.timer: asyncio.TimerHandle | None = None  # own timer, for a per-request timeout
        self.deadline = 0.0  # loop time it expires at, for the semaphore's default timeout


class AsyncSemaphore:
    """A FIFO asyncio semaphore of ``limit`` permits with a bounded wait queue and per-request timeouts.

    :param limit: total permits; ``<= 0`` means unbounded (no queue, no timeouts).
    :param max_queue: most requests waiting at once; a request that would exceed it fails with
        :class:`QueueFull`. ``<= 0`` means no bound.
    :param acquire_timeout: default seconds a request may wait; ``None`` or ``<= 0`` means no timeout.
    :param name: shown in errors and ``repr``.
    :param observer: receives wait times, timeouts and rejections (metrics); may be set later via
        :attr:`observer`.
    """

    __slots__ = (
        "_closed",
        "_dead",
        "_deadlines",
        "_limit",
        "_live",
        "_max_queue",
        "_name",
        "_queue",
        "_timeout",
        "_timer",
        "_timer_when",
        "_used",
        "observer",
    )

    def __init__(
        self,
        limit: int,
        *,
        max_queue: int = 1000,
        acquire_timeout: float | None = 25.0,
        name: str = "semaphore",
        observer: SemaphoreObserver | None = None,
    ) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise TypeError(f"{name}: limit must be an int, got {limit!r}")
        if not isinstance(max_queue, int) or isinstance(max_queue, bool):
            raise TypeError(f"{name}: max_queue must be an int, got {max_queue!r}")
        self._limit = max(limit, 0)
        self._max_queue = max(max_queue, 0)
        self._timeout = float(acquire_timeout) if acquire_timeout is not None and acquire_timeout > 0 else None
        self._name = name
        self._used = 0
        self._queue: deque[_Waiter] = deque()
        self._live = 0  # waiters in _queue still pending
        self._dead = 0  # entries in _queue no longer pending (abandoned), reclaimed lazily
        # Waiters with the default timeout, in enqueue order, hence in deadline order: one loop timer,
        # armed at the head's deadline, serves them all (instead of a TimerHandle per request).
        self._deadlines: deque[_Waiter] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0
        self._closed = False
        self.observer = observer

    # -- properties (all O(1)) ----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def limit(self) -> int:
        """Total permits; ``0`` when unbounded."""
        return self._limit

    @property
    def unbounded(self) -> bool:
        return self._limit == 0

    @property
    def max_queue(self) -> int:
        """Most requests waiting at once; ``0`` when the queue is not bounded."""
        return self._max_queue

    @property
    def acquire_timeout(self) -> float | None:
        """Default seconds a request may wait, or ``None``."""
        return self._timeout

    @property
    def used(self) -> int:
        """Permits held by active permits (plus granted requests whose task has not resumed yet)."""
        return self._used

    @property
    def available(self) -> int | None:
        """Permits free right now; ``None`` when unbounded."""
        return self._limit - self._used if self._limit else None

    @property
    def queue_size(self) -> int:
        """Requests waiting in the queue."""
        return self._live

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        limit = self._limit or "unbounded"
        return f"<AsyncSemaphore {self._name!r} used={self._used} limit={limit} queued={self._live}>"

    # -- public operations ---------------------------------------------------------------------------------

    async def acquire(self, permits: int, *, timeout: Timeout = DEFAULT_TIMEOUT) -> Permit:
        """Wait for ``permits`` permits, in FIFO order, and return them as a :class:`Permit`.

        :raises InvalidPermitRequest: at once if ``permits`` is negative or larger than the limit.
        :raises QueueFull: at once if the request must wait and the queue is full.
        :raises AcquireTimeout: after ``timeout`` seconds in the queue.
        :raises SemaphoreClosed: if the semaphore is or gets closed.

        O(1) on the fast path (queue empty and the permits fit); otherwise O(1) to enqueue.
        """
        self._check_open()
        self._check_request(permits)
        self._check_timeout(timeout)
        if not self._limit:
            self._used += permits
            return Permit(self, permits)
        if not self._live and permits <= self._limit - self._used:
            self._used += permits
            if self.observer is not None:
                self.observer.on_granted(0.0)
            return Permit(self, permits)
        waiter = self._enqueue(permits, timeout, None)
        await self._wait(waiter)
        return Permit(self, permits)

    async def update(self, permit: Permit, new_permits: int, *, timeout: Timeout = DEFAULT_TIMEOUT) -> Permit:
        """Resize ``permit`` to ``new_permits`` and return the new permit; the old one becomes *replaced*.

        Growing waits in the FIFO queue for the difference while the old permits stay held; on any
        failure (exception or cancellation) the old permit stays valid. Shrinking (or keeping the size)
        returns the difference at once. If the old permit is released while the update waits, the update
        fails with :class:`PermitReleased`.

        :raises InvalidPermit: at once if ``permit`` is released, replaced, already being updated, or
            belongs to another semaphore.
        :raises InvalidPermitRequest, QueueFull, AcquireTimeout, SemaphoreClosed: as :meth:`acquire`.

        O(1) plus, when shrinking, O(k) to wake the ``k`` requests that now fit.
        """
        self._check_open()
        self._check_permit(permit)
        self._check_request(new_permits)
        self._check_timeout(timeout)
        delta = new_permits - permit._permits
        if delta > 0 and self._limit and (self._live or delta > self._limit - self._used):
            waiter = self._enqueue(delta, timeout, permit)
            await self._wait(waiter)
            permit._pending = None
        else:
            self._used += delta
            if delta > 0 and self._limit and self.observer is not None:
                self.observer.on_granted(0.0)
        permit._state = _REPLACED
        if delta < 0 and self._queue:
            self._drain()
        return Permit(self, new_permits)

    def release(self, permit: Permit) -> None:
        """Return ``permit``'s permits and serve the queue head(s) that now fit.

        Does nothing if the permit was already released or replaced. If an update of the permit is
        pending, that update fails with :class:`PermitReleased` and creates no permits.

        :raises InvalidPermit: if ``permit`` belongs to another semaphore.

        O(1) plus O(k) to wake the ``k`` requests that now fit.
        """
        if permit._owner is not self:
            raise InvalidPermit(f"{self._name}: {permit!r} belongs to another semaphore")
        if permit._state != _ACTIVE:
            return
        permit._state = _RELEASED
        freed = permit._permits
        waiter = permit._pending
        if waiter is not None:
            permit._pending = None
            if waiter.state == _PENDING:
                self._kill(waiter, _REVOKED)
            elif waiter.state == _GRANTED:  # granted, but the updating task has not resumed yet
                waiter.state = _REVOKED
                freed += waiter.need
        self._used -= freed
        if self._queue:
            self._drain()

    def close(self) -> None:
        """Fail every pending request with :class:`SemaphoreClosed`; later requests fail at once.

        Held permits stay valid and can still be released. Idempotent. O(q).
        """
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadlines.clear()
        queue = self._queue
        while queue:
            waiter = queue.popleft()
            if waiter.state == _PENDING:
                waiter.state = _CLOSED
                self._settle(waiter)
        self._live = self._dead = 0

    def hold(self, permits: int, *, timeout: Timeout = DEFAULT_TIMEOUT) -> PermitLease:
        """An async context manager that acquires ``permits`` on entry and releases on every exit path.

        ``async with sem.hold(n) as lease: ... await lease.update(m) ...``
        """
        return PermitLease(self, permits, timeout)

    # -- internals ---------------------------------------------------------------------------------------------

    def _check(self) -> None:
        """Assert the structure's invariants (as sortedcontainers' ``_check``; the state-machine test calls it after
        every step). O(q).

        - ``0 <= used <= limit`` (bounded semaphores);
        - the live count is the queue's pending entries, the dead count the others (reclaimed lazily), and the
          live ones are at most the queue bound;
        - a pending update is its permit's pending waiter;
        - every pending request with the default timeout is in the deadline queue, in deadline order, and then
          the shared timer is armed.
        """
        assert self._used >= 0 and (not self._limit or self._used <= self._limit), (self._used, self._limit)
        pending = [w for w in self._queue if w.state == _PENDING]
        assert self._live == len(pending) and self._dead == len(self._queue) - len(pending), (self._live, self._dead)
        assert not self._max_queue or self._live <= self._max_queue
        assert all(w.permit is None or w.permit._pending is w for w in pending), "an update lost its permit's link"
        timed = [w for w in self._deadlines if w.state == _PENDING]
        assert {id(w) for w in timed} == {id(w) for w in pending if w.deadline}, "a default timeout not tracked"
        assert all(a.deadline <= b.deadline for a, b in itertools.pairwise(timed)), "deadlines out of order"
        assert not timed or self._timer is not None, "pending deadlines, but no timer armed"

    def _check_open(self) -> None:
        if self._closed:
            raise SemaphoreClosed(f"{self._name}: the semaphore is closed")

    def _check_request(self, permits: int) -> None:
        if not isinstance(permits, int) or isinstance(permits, bool):
            raise TypeError(f"{self._name}: permits must be an int, got {permits!r}")
        if permits < 0:
            raise InvalidPermitRequest(f"{self._name}: cannot acquire a negative number of permits ({permits})")
        if self._limit and permits > self._limit:
            if self.observer is not None:
                self.observer.on_rejected("too_large")
            raise InvalidPermitRequest(
                f"{self._name}: request for {permits} permits exceeds the limit of {self._limit}; "
                "it can never be served"
            )

    @staticmethod
    def _check_timeout(timeout: Timeout) -> None:
        if timeout is not DEFAULT_TIMEOUT and timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, None or DEFAULT_TIMEOUT, got {timeout!r}")

    def _check_permit(self, permit: Permit) -> None:
        if permit._owner is not self:
            raise InvalidPermit(f"{self._name}: {permit!r} belongs to another semaphore")
        if permit._state != _ACTIVE:
            raise InvalidPermit(f"{self._name}: cannot update {permit!r}")
        if permit._pending is not None:
            raise InvalidPermit(f"{self._name}: {permit!r} already has an update pending")

    def _enqueue(self, need: int, timeout: Timeout, permit: Permit | None) -> _Waiter:
        if self._max_queue and self._live >= self._max_queue:
            if self.observer is not None:
                self.observer.on_rejected("queue_full")
            raise QueueFull(
                f"{self._name}: {self._live} requests already wait for permits (max queue {self._max_queue}); "
                f"request for {need} permits rejected"
            )
        loop = asyncio.get_running_loop()
        now = loop.time()
        waiter = _Waiter(need, loop.create_future(), permit, now)
        if timeout is DEFAULT_TIMEOUT:
            if self._timeout is not None:
                waiter.deadline = now + self._timeout
                self._deadlines.append(waiter)
                if self._timer is None or len(self._deadlines) == 1:
                    if self._timer is not None:  # armed for requests that are all gone (maybe another loop)
                        self._timer.cancel()
                    self._arm(loop, waiter.deadline)
        elif timeout is not None:
            waiter.timer = loop.call_later(timeout, self._on_timeout, waiter)
        self._queue.append(waiter)
        self._live += 1
        if permit is not None:
            permit._pending = waiter
        return waiter

    async def _wait(self, waiter: _Waiter) -> None:
        """Await ``waiter``; on success its permits are counted as used. Undo everything on cancellation."""
        try:
            await waiter.future
        except BaseException:
            self._abandon(waiter)
            raise
        state = waiter.state
        if state == _GRANTED:
            return
        raise self._failure(waiter)

    def _abandon(self, waiter: _Waiter) -> None:
        """The waiting task was cancelled (or its await failed): remove the request, return its permits."""
        if waiter.state == _PENDING:
            self._kill(waiter, _CANCELLED)
        elif waiter.state == _GRANTED:
            waiter.state = _CANCELLED
            self._used -= waiter.need
            if waiter.permit is not None:
                waiter.permit._pending = None
        else:
            return  # timed out, closed or revoked already: nothing is held
        self._drain()

    def _failure(self, waiter: _Waiter) -> MemoryLimitError:
        kind = "update" if waiter.permit is not None else "request"
        if waiter.state == _TIMED_OUT:
            return AcquireTimeout(
                f"{self._name}: {kind} for {waiter.need} permits timed out in the queue "
                f"(limit {self._limit}, used {self._used}, queued {self._live})"
            )
        if waiter.state == _CLOSED:
            return SemaphoreClosed(f"{self._name}: the semaphore was closed while the {kind} waited")
        if waiter.state == _REVOKED:
            return PermitReleased(f"{self._name}: the permit was released while its update was pending")
        raise AssertionError(f"unexpected waiter state {waiter.state}")  # pragma: no cover

    @staticmethod
    def _settle(waiter: _Waiter) -> None:
        """Stop ``waiter``'s timer, unlink it from its permit and wake its task (unless it was cancelled)."""
        if waiter.timer is not None:
            waiter.timer.cancel()
            waiter.timer = None
        if waiter.permit is not None:
            waiter.permit._pending = None
        if not waiter.future.done():
            waiter.future.set_result(None)

    def _kill(self, waiter: _Waiter, state: int) -> None:
        """Mark a pending, queued waiter dead; its entry is reclaimed when it reaches the head."""
        waiter.state = state
        self._live -= 1
        self._dead += 1
        self._settle(waiter)
        if self._dead > _COMPACT_MIN and self._dead > self._live:
            for queue in (self._queue, self._deadlines):
                live = [w for w in queue if w.state == _PENDING]
                queue.clear()
                queue.extend(live)
            self._dead = 0
            if not self._deadlines and self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _time_out(self, waiter: _Waiter) -> None:
        if waiter.future.done():  # its task was cancelled and has not run its handler yet
            self._kill(waiter, _CANCELLED)
        else:
            self._kill(waiter, _TIMED_OUT)
            if self.observer is not None:
                self.observer.on_timeout()

    def _on_timeout(self, waiter: _Waiter) -> None:
        """The own timer of a request with a per-request timeout fired."""
        waiter.timer = None
        if waiter.state == _PENDING:
            self._time_out(waiter)
            self._drain()

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._timer = loop.call_at(when, self._expire)
        self._timer_when = when

    def _expire(self) -> None:
        """The shared timer fired: time out the default-timeout requests whose deadline passed, re-arm.

        Amortized O(1) per request: each entry of ``_deadlines`` is popped once. The timer is not moved
        when its request is served, so it may fire early; it then only re-arms for the new head.
        """
        self._timer = None
        deadlines = self._deadlines
        expired = False
        if deadlines:
            loop = deadlines[0].future.get_loop()
            horizon = max(loop.time(), self._timer_when)  # loops fire timers up to a clock resolution early
            while deadlines:
                waiter = deadlines[0]
                if waiter.state != _PENDING:
                    deadlines.popleft()
                    continue
                if waiter.deadline > horizon:
                    self._arm(loop, waiter.deadline)
                    break
                deadlines.popleft()
                self._time_out(waiter)
                expired = True
        if expired:
            self._drain()

    def _drain(self) -> None:
        """Serve queue heads while they fit, in order; skip dead entries. O(1 + served + dead skipped)."""
        queue = self._queue
        observer = self.observer
        while queue:
            waiter = queue[0]
            if waiter.state != _PENDING:
                queue.popleft()
                self._dead -= 1
                continue
            if waiter.future.done():  # cancelled; its task has not run its handler yet
                self._kill(waiter, _CANCELLED)
                continue
            if waiter.need > self._limit - self._used:
                break
            queue.popleft()
            self._live -= 1
            self._used += waiter.need
            waiter.state = _GRANTED
            if waiter.timer is not None:
                waiter.timer.cancel()
                waiter.timer = None
            waiter.future.set_result(None)
            if observer is not None:
                observer.on_granted(waiter.future.get_loop().time() - waiter.enqueued_at)
        # Drop served/abandoned entries from the head of _deadlines; they precede every pending one, so
        # _deadlines never holds more than the queue does. Stop the shared timer when nothing is left.
        deadlines = self._deadlines
        while deadlines and deadlines[0].state != _PENDING:
            deadlines.popleft()
        if not deadlines and self._timer is not None:
            self._timer.cancel()
            self._timer = None


class PermitLease:
    """Holds one permit for the body of an ``async with``; releases it on every exit path.

    The body may resize the lease with :meth:`update`; on exit the current permit is released (if the
    update failed, that is still the old one). Releasing early with :meth:`release` is allowed.
    """

    __slots__ = ("_permit", "_permits", "_semaphore", "_timeout")

    def __init__(self, semaphore: AsyncSemaphore, permits: int, timeout: Timeout = DEFAULT_TIMEOUT) -> None:
        self._semaphore = semaphore
        self._permits = permits
        self._timeout = timeout
        self._permit: Permit | None = None

    @property
    def permit(self) -> Permit:
        """The permit currently held."""
        if self._permit is None:
            raise RuntimeError("the lease has not been entered")
        return self._permit

    @property
    def permits(self) -> int:
        return self.permit.permits

    async def update(self, new_permits: int, *, timeout: Timeout = DEFAULT_TIMEOUT) -> Permit:
        """Resize the held permit (see :meth:`AsyncSemaphore.update`)."""
        self._permit = await self._semaphore.update(self.permit, new_permits, timeout=timeout)
        return self._permit

    def release(self) -> None:
        """Release the held permit now (the exit then does nothing more)."""
        if self._permit is not None:
            self._semaphore.release(self._permit)

    async def __aenter__(self) -> PermitLease:
        if self._permit is not None:
            raise RuntimeError("a PermitLease can be entered only once")
        self._permit = await self._semaphore.acquire(self._permits, timeout=self._timeout)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
