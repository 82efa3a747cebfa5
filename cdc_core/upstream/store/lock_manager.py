"""TiKV's lock manager: pessimistic locks, the queues of transactions waiting for a key, and the deadlock detector.

A pessimistic lock (TiKV's ``LockType::Pessimistic``, taken by ``AcquirePessimisticLock``,
``src/storage/txn/actions/acquire_pessimistic_lock.rs``) marks a key as reserved by a transaction until it prewrites
or rolls back; it carries no value. TiKV keeps it in the lock CF with the prewrite locks, but everything that reads
locks there skips it: snapshot reads, the change feed (``components/cdc/src/delegate.rs`` ``decode_lock``: only
``LockType::Put`` / ``Delete`` become PREWRITE rows, "cdc skip lock record") and the resolved-ts resolver
(``components/resolved_ts/src/cmd.rs``: only ``Put`` / ``Delete`` locks are tracked). So they are kept here, apart
from ``MvccStore``'s prewrite locks, and those readers need no change; the MVCC store asks :meth:`holder` where a
prewrite must not pass another transaction's pessimistic lock.

Waiting (``src/storage/lock_manager/lock_waiting_queue.rs``): each key has a queue ordered by the waiters' start
ts, smallest first; a release wakes exactly the head, and a woken waiter that leaves without the lock passes the
wake-up on (TiKV wakes the rest after ``wake-up-delay-duration``; here at once, since nothing else would). A wait is
an ``asyncio`` future: no polling. It ends by a wake-up, by ``timeout`` (TiDB's ``innodb_lock_wait_timeout``:
:class:`LockWaitTimeoutError`), or by a deadlock.

Deadlock detection (``src/server/lock_manager/deadlock.rs``, ``DetectTable::detect``): before a transaction waits for
the holder of a key, the wait-for graph is walked from the holder; reaching the waiter means the new edge would
close a cycle, and the waiter gets :class:`DeadlockError` instead of waiting. A transaction runs one statement at a
time and waits for one key at a time, so each node has at most one outgoing edge and the walk is a chain.

==========================  =====================================
operation                   cost
==========================  =====================================
:meth:`holder`              O(1)
:meth:`lock` / release      O(1) per key (+ O(log w) to wake)
:meth:`wait`                O(length of the wait-for chain + log w)
==========================  =====================================
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from cdc_core.errors import EmbeddedUpstreamError

__all__ = ["DeadlockError", "LockManager", "LockWaitTimeoutError", "PessimisticLock"]


@dataclass(frozen=True)
class PessimisticLock:
    key: bytes
    start_ts: int
    primary: bytes
    for_update_ts: int


class LockWaitTimeoutError(EmbeddedUpstreamError):
    """A wait for a key outlasted the timeout (TiKV's ``WaitTimeout``; TiDB answers 1205)."""

    def __init__(self, key: bytes, start_ts: int, holder_ts: int) -> None:
        super().__init__(f"lock wait timeout: the transaction {start_ts} waited for key {key.hex()} held by "
                         f"{holder_ts}")
        self.key, self.start_ts, self.holder_ts = key, start_ts, holder_ts


class DeadlockError(EmbeddedUpstreamError):
    """Waiting would close a cycle in the wait-for graph (TiKV's ``Deadlock``; TiDB answers 1213). ``cycle``: the
    start ts from the waiter along the chain back to it."""

    def __init__(self, key: bytes, start_ts: int, cycle: list[int]) -> None:
        super().__init__(f"deadlock: the transaction {start_ts} waiting for key {key.hex()} closes the cycle "
                         + " -> ".join(map(str, cycle)))
        self.key, self.start_ts, self.cycle = key, start_ts, cycle


@dataclass(order=True)
class _Waiter:
    start_ts: int
    seq: int
    future: asyncio.Future[None] = field(compare=False)


class LockManager:
    """Pessimistic locks by key, per-key wait queues and the wait-for graph. Event-loop only (not thread-safe)."""

    def __init__(self) -> None:
        self._locks: dict[bytes, PessimisticLock] = {}
        self._by_txn: dict[int, set[bytes]] = {}
        self._queues: dict[bytes, list[_Waiter]] = {}
        self._wait_for: dict[int, tuple[int, bytes]] = {}  # waiter start ts -> (holder start ts, key)
        self._seq = itertools.count()

    # --- locks ----------------------------------------------------------------------------------
    def holder(self, key: bytes) -> PessimisticLock | None:
        return self._locks.get(key)

    def locks_of(self, start_ts: int) -> set[bytes]:
        """The keys the transaction ``start_ts`` holds pessimistic locks on."""
        return set(self._by_txn.get(start_ts, ()))

    def __len__(self) -> int:
        return len(self._locks)

    def lock(self, key: bytes, start_ts: int, primary: bytes, for_update_ts: int) -> None:
        """Take (or, for its holder, refresh at a newer ``for_update_ts``) the pessimistic lock on a free key. The
        caller checked that no other transaction holds it."""
        held = self._locks.get(key)
        assert held is None or held.start_ts == start_ts, "the key is another transaction's"
        newest = max(for_update_ts, held.for_update_ts if held else 0)
        self._locks[key] = PessimisticLock(key, start_ts, primary, newest)
        self._by_txn.setdefault(start_ts, set()).add(key)
        self.holder_changed(key, start_ts)

    def holder_changed(self, key: bytes, start_ts: int) -> None:
        """``key`` is locked by ``start_ts`` now (a pessimistic lock or a prewrite): the transactions still queued
        for it wait for this one, and the wait-for graph says so (TiKV updates the detector's wait-for entries of a
        queue's remaining waiters, ``update_wait_for``), or a cycle through the new holder would go unseen."""
        for w in self._queues.get(key, ()):
            edge = self._wait_for.get(w.start_ts)
            if edge is not None and edge[1] == key and w.start_ts != start_ts and not w.future.done():
                self._wait_for[w.start_ts] = (start_ts, key)

    def unlock(self, keys: Iterable[bytes], start_ts: int) -> list[bytes]:
        """Drop the transaction's pessimistic locks on ``keys`` (others' are left); returns the keys released. The
        caller wakes their waiters (:meth:`wake_up`) once the keys are free: a lock turned into a prewrite lock
        is not."""
        released = []
        mine = self._by_txn.get(start_ts)
        for key in keys:
            lk = self._locks.get(key)
            if lk is not None and lk.start_ts == start_ts:
                del self._locks[key]
                if mine is not None:
                    mine.discard(key)
                released.append(key)
        if mine is not None and not mine:
            del self._by_txn[start_ts]
        return released

    # --- waiting --------------------------------------------------------------------------------
    def waiting(self, key: bytes) -> list[int]:
        """The start ts waiting for ``key``, in the order they will be woken."""
        return [w.start_ts for w in sorted(self._queues.get(key, ())) if not w.future.done()]

    def waits_for(self, start_ts: int) -> int | None:
        """The holder the transaction ``start_ts`` waits for now (None: it does not wait)."""
        edge = self._wait_for.get(start_ts)
        return edge[0] if edge else None

    def wake_up(self, key: bytes) -> bool:
        """Wake the first live waiter for ``key`` (a key was released); whether one was woken."""
        queue = self._queues.get(key)
        while queue:
            w = heapq.heappop(queue)
            if not w.future.done():
                w.future.set_result(None)
                if not queue:
                    del self._queues[key]
                return True
        self._queues.pop(key, None)
        return False

    def wake_up_all(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self.wake_up(key)

    async def wait(self, key: bytes, start_ts: int, holder_ts: int, timeout: float) -> None:
        """Wait until ``key`` (held by ``holder_ts``) is released and this waiter's turn comes, at most ``timeout``
        seconds. Raises :class:`DeadlockError` at once when the wait would close a cycle, else
        :class:`LockWaitTimeoutError` when the time runs out. The caller checks the key again after it returns."""
        cycle = self._cycle(start_ts, holder_ts)
        if cycle is not None:
            raise DeadlockError(key, start_ts, cycle)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._queues.setdefault(key, []), _Waiter(start_ts, next(self._seq), fut))
        self._wait_for[start_ts] = (holder_ts, key)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise LockWaitTimeoutError(key, start_ts, holder_ts) from None
        finally:
            self._wait_for.pop(start_ts, None)
            if not fut.done():
                fut.cancel()  # cancelled or timed out: its queue entry is skipped (and dropped) at the next wake-up
            self._drop_dead(key)

    def _drop_dead(self, key: bytes) -> None:
        queue = self._queues.get(key)
        if queue is not None and all(w.future.done() for w in queue):
            del self._queues[key]

    def _cycle(self, waiter: int, holder: int) -> list[int] | None:
        """The chain ``waiter -> holder -> ... -> waiter`` if the edge would close one (TiKV's ``detect``)."""
        chain = [waiter, holder]
        seen = {waiter}
        node = holder
        while node not in seen:
            seen.add(node)
            edge = self._wait_for.get(node)
            if edge is None:
                return None
            node = edge[0]
            chain.append(node)
        return chain if node == waiter else None

    def _check(self) -> None:
        """The invariants: the per-transaction index matches the locks, every queue is a heap, and the wait-for graph
        has no cycle."""
        by_txn: dict[int, set[bytes]] = {}
        for key, lk in self._locks.items():
            assert lk.key == key
            by_txn.setdefault(lk.start_ts, set()).add(key)
        assert by_txn == self._by_txn, (by_txn, self._by_txn)
        for queue in self._queues.values():
            assert all(queue[(i - 1) // 2] <= queue[i] for i in range(1, len(queue)))
        for waiter in self._wait_for:
            node, steps = waiter, 0
            while node in self._wait_for:
                node = self._wait_for[node][0]
                steps += 1
                assert node != waiter and steps <= len(self._wait_for), "a cycle in the wait-for graph"
