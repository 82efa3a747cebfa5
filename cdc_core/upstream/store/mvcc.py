"""The MVCC key-value store of a store (TiKV's txn layer, in memory).

Owns every committed version of every key (a value or a tombstone, with its start and commit ts),
the locks left by prewrites, and the two-phase-commit state machine: ``prewrite`` checks and locks
all keys of a transaction atomically (or changes nothing), ``commit`` turns locks into versions at
a commit ts, ``rollback`` drops them. Readers get snapshot reads at a ts (``get`` / ``scan``) and,
for the change feed, every version newer than a checkpoint with the previous version as old value.

Observers (the CDC service) are called synchronously right after each state change, so an
observer sees prewrites, commits and rollbacks in exactly the order they happened.

Pessimistic locks (TiKV's ``AcquirePessimisticLock`` / ``PessimisticRollback``: ``try_pessimistic_lock``,
``acquire_pessimistic_locks``, ``pessimistic_rollback``) are kept by the store's ``lock_manager``, apart from the
prewrite locks: reads, observers and ``locks_in`` never see them, as TiKV's readers, change feed and resolved-ts
resolver skip ``LockType::Pessimistic``. A prewrite must not pass another transaction's pessimistic lock, and a
pessimistic prewrite (``for_update_ts``) turns its own into prewrite locks; every commit and rollback wakes the
first waiter of each key it frees.

Threads: every writer (prewrite, commit, rollback, GC, ingest) runs on the one event loop, one at a time, so a
prewrite's conflict checks and its locks, and a commit's lock lookups, need no lock of their own: nothing else
writes between them. ``_mutex`` is for the readers that run in worker threads (the SQL front's big SELECTs, a
snapshot's scans): they read ``_writes`` a page at a time under it, and the writers change ``_writes``, the index
by commit ts and ``max_ts`` under it. A writer moved off the loop would need the checks under the mutex too.

Every version is kept until GC: ``gc(safe_point)`` (or ``gc_step`` in chunks, for the periodic
GC worker) removes the versions a read at or above the safe point can no longer see - for each key
all versions older than the newest one at or below the safe point, and that one too when it is a
tombstone. The safe point only moves forward; a read below it raises ``GcSafePointPassedError``
(its versions may be gone, so an answer could be silently wrong).

The change feed's incremental scan (``versions_after``) reads the keys of its range changed after its
checkpoint, found through an index by commit ts (``(commit_ts, key)``) and the set of keys changed after that ts
it yields, kept for the next region asking from the same ts and updated by every commit (``_keys_after``): TiKV
skips data older than the checkpoint the same way (the min/max commit ts its SST files record), so a region whose
keys mostly predate the checkpoint costs what changed since, not what it holds.

``count`` (``COUNT(*)``'s pushed-down scan) answers from the map's order statistics: the keys of the range, less
those whose newest version is a tombstone (a sorted list, ``_dead``), corrected for the versions committed after the
read's ts (the index by commit ts). TiKV's coprocessor walks the keys, in Rust and a region per core, at millions
of keys a second; a Python walk of a 5 M-key table takes 10 s, and the stand-in, not the pipeline, would be what a
window's count check measured. A read below the newest ingest, or with more versions after it than keys in the
range, walks the keys.

``ingest`` writes versions straight in, without locks or observers (TiDB's physical import: Lightning's SST
ingest); they are not in the index by commit ts, so a scan from below the newest ingest walks the keys.

Memory: a key costs its bytes and value plus about 250 bytes of Python objects (the sorted map's entry, a list of
versions, a slotted ``Version``; ``tests/bench/test_upstream_memory_bench.py`` measures it).

Not yet: persistence, rollback records that block a late prewrite, resolving locks below the safe
point during GC.
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from sortedcontainers import SortedDict, SortedList, SortedSet

from cdc_core.errors import EmbeddedUpstreamError
from cdc_core.upstream.store.concurrency_manager import ConcurrencyManager
from cdc_core.upstream.store.lock_manager import LockManager


class Op(enum.IntEnum):
    PUT = 1
    DELETE = 2
    # Check for a write conflict on the key but write nothing (TiKV's CheckNotExists-like op):
    # used for keys a transaction touched and then left as they were.
    CHECK = 3


@dataclass(frozen=True)
class Mutation:
    key: bytes
    op: Op
    value: bytes = b""


@dataclass(frozen=True, slots=True)  # one per version of every key: slots keep a bulk-loaded row near its bytes
class Version:
    """One committed version of a key; ``value`` is None for a tombstone (DELETE)."""

    start_ts: int
    commit_ts: int
    op: Op
    value: bytes | None


@dataclass(frozen=True)
class Lock:
    key: bytes
    start_ts: int
    primary: bytes
    op: Op
    value: bytes | None
    old_value: bytes | None  # the value visible when the lock was taken (None: absent/deleted)


@dataclass(frozen=True)
class VersionRecord:
    """A committed change of a key: what the change feed reports as COMMIT / COMMITTED."""

    key: bytes
    start_ts: int
    commit_ts: int
    op: Op
    value: bytes | None
    old_value: bytes | None
    # Written by 1PC (``commit_one_pc``): no lock came before it, and TiKV's change feed reports the write as a
    # COMMITTED row with its value (``components/cdc/src/delegate.rs``, a ``TxnEntry::Commit`` without a lock).
    one_pc: bool = False


class MvccError(EmbeddedUpstreamError):
    """A transaction cannot proceed; the message says which key and why."""


class KeyLockedError(MvccError):
    def __init__(self, key: bytes, lock_ts: int) -> None:
        super().__init__(f"key {key.hex()} is locked by the transaction started at ts {lock_ts}")
        self.key = key
        self.lock_ts = lock_ts


class WriteConflictError(MvccError):
    """A key committed after the ts a transaction checks it at (TiKV's ``WriteConflict``: ``start_ts`` the
    transaction's, ``conflict_start_ts`` / ``conflict_commit_ts`` the newer write's, ``primary`` the transaction's
    primary key)."""

    def __init__(self, key: bytes, start_ts: int, conflict_commit_ts: int, conflict_start_ts: int = 0,
                 primary: bytes = b"") -> None:
        super().__init__(
            f"write conflict on key {key.hex()}: the transaction started at ts {start_ts} but the key "
            f"was committed at ts {conflict_commit_ts}"
        )
        self.key = key
        self.start_ts = start_ts
        self.conflict_commit_ts = conflict_commit_ts
        self.conflict_start_ts = conflict_start_ts
        self.primary = primary


class LockNotFoundError(MvccError):
    pass


class GcSafePointPassedError(MvccError):
    def __init__(self, ts: int, safe_point: int) -> None:
        super().__init__(f"GC safe point passed: ts {ts} < safe point {safe_point}")
        self.ts = ts
        self.safe_point = safe_point


@dataclass(frozen=True)
class GcStats:
    safe_point: int
    keys_scanned: int = 0
    versions_removed: int = 0
    keys_removed: int = 0


class MvccObserver(Protocol):
    def on_prewrite(self, lock: Lock) -> None: ...

    def on_commit(self, record: VersionRecord) -> None: ...

    def on_rollback(self, lock: Lock) -> None: ...


def _value_of(v: Version | None) -> bytes | None:
    return None if v is None or v.op is not Op.PUT else v.value


SCAN_PAGE = 1024  # keys a scan reads per hold of the store's lock
# The sets of keys changed after a ts kept (``MvccStore._keys_after``): a window's pull asks for one ts (its
# checkpoint, every region), its checks' counts for another; a ts with more versions after it than
# AFTER_SET_MAX_KEYS (a catch-up's) is not kept, and a read from it pays a pass over those versions.
AFTER_SETS = 4
AFTER_SET_MAX_KEYS = 500_000


def _in_range(keys: SortedDict | SortedList, start: bytes, end: bytes) -> int:
    """How many of the sorted ``keys`` are in ``[start, end)`` (``end == b""``: no bound), by bisection."""
    return (keys.bisect_left(end) if end else len(keys)) - keys.bisect_left(start)


def _live_at(vs: list[Version], ts: int) -> Version | None:
    """The version of a key a read at ``ts`` sees when it holds a value (None: absent or deleted at ``ts``)."""
    v: Version | None = vs[-1]
    if v is not None and v.commit_ts > ts:  # newer than the read: look further back
        v = next((x for x in reversed(vs) if x.commit_ts <= ts), None)
    return v if v is not None and v.op is Op.PUT and v.value is not None else None


class MvccStore:
    # The incremental scan reads the index by commit ts when it holds fewer versions after the checkpoint than this
    # times the keys of the range (0: always walk the keys; tests compare the two).
    index_scan_ratio = 1.0

    def __init__(self) -> None:
        self._writes: SortedDict = SortedDict()  # key -> list[Version], ascending commit_ts
        # Snapshot reads may run in worker threads (the SQL front's big SELECTs, off its event loop); they read
        # ``_writes`` a page at a time under this lock, and the event loop changes it (commit, GC) under it.
        self._mutex = threading.RLock()
        self._by_ts: SortedList = SortedList()  # (commit_ts, key) of every version above the safe point
        self._dead: SortedList = SortedList()  # keys whose newest version is a tombstone (until GC drops them)
        # Keys GC may have work on: more than one version, or a tombstone. A key written once holds no garbage, so
        # a GC pass visits these, not every key: its cost follows the writes, not the store's size.
        self._gc_due: SortedSet = SortedSet()
        self._locks: SortedDict = SortedDict()  # key -> Lock
        self._observers: list[MvccObserver] = []
        self.safe_point = 0  # versions a read below this ts needs may be gone
        self._ingest_ts = 0  # the newest commit ts of ingested versions (not in ``_by_ts``)
        # after ts -> the keys with a version committed after it (``_keys_after``), kept up to date by commits
        self._after: dict[int, SortedSet] = {}
        # The largest ts read at: where async-commit and 1PC commit ts come from (under ``_mutex``).
        self._cm = ConcurrencyManager()
        # Pessimistic locks and the transactions waiting for keys (TiKV's lock manager; not in ``_locks``: no read,
        # change feed or resolved ts sees them, as TiKV's skip ``LockType::Pessimistic``)
        self.lock_manager = LockManager()

    # --- observers ----------------------------------------------------------------------------
    def add_observer(self, obs: MvccObserver) -> None:
        self._observers.append(obs)

    def remove_observer(self, obs: MvccObserver) -> None:
        self._observers.remove(obs)

    # --- reads --------------------------------------------------------------------------------
    def latest_version(self, key: bytes) -> Version | None:
        vs = self._writes.get(key)
        return vs[-1] if vs else None

    def version_at(self, key: bytes, ts: int) -> Version | None:
        """The newest version with ``commit_ts <= ts``."""
        if ts < self.safe_point:
            raise GcSafePointPassedError(ts, self.safe_point)
        with self._mutex:
            self._cm.update_max_ts(ts)
            vs: list[Version] | None = self._writes.get(key)
            if not vs:
                return None
            for v in reversed(vs):
                if v.commit_ts <= ts:
                    return v
        return None

    def get(self, key: bytes, ts: int) -> bytes | None:
        """Snapshot read. Locks are ignored: a lock's commit ts is allocated after the reader's ts."""
        return _value_of(self.version_at(key, ts))

    def scan(self, start: bytes, end: bytes, ts: int, limit: int | None = None) -> list[tuple[bytes, bytes]]:
        """``(key, value)`` of every live key in ``[start, end)`` at ``ts`` (``end == b""``: no bound)."""
        out: list[tuple[bytes, bytes]] = []
        for kv in self.iter_scan(start, end, ts):
            out.append(kv)
            if limit is not None and len(out) >= limit:
                break
        return out

    def iter_scan(self, start: bytes, end: bytes, ts: int) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`scan` as it goes, holding nothing: a page of ``SCAN_PAGE`` keys at a time is read under the lock
        (any thread may call this), resuming after the page's last key."""
        self.check_read_ts(ts)
        writes = self._writes
        lo, first = start, True
        while True:
            page: list[tuple[bytes, bytes]] = []
            with self._mutex:
                if first:
                    self._cm.update_max_ts(ts)
                keys = list(itertools.islice(writes.irange(lo, end or None, inclusive=(first, False)), SCAN_PAGE))
                for key in keys:
                    v = _live_at(writes[key], ts)
                    if v is not None:
                        page.append((key, v.value))  # type: ignore[arg-type]
            yield from page
            if len(keys) < SCAN_PAGE:
                return
            lo, first = keys[-1], False

    def count(self, start: bytes, end: bytes, ts: int) -> int:
        """How many live keys ``[start, end)`` holds at ``ts``, none kept or copied (``COUNT(*)``'s pushed-down
        scan): from the order statistics (module docstring) in O(log n + versions after ``ts``) when ``ts`` is at
        or above the newest ingest and fewer versions follow it than the range has keys (``index_scan_ratio``),
        else a walk of a page of ``SCAN_PAGE`` keys per hold of the lock, as :meth:`iter_scan` reads."""
        self.check_read_ts(ts)
        writes = self._writes
        with self._mutex:
            self._cm.update_max_ts(ts)
            later = self._keys_after(ts, start, end)
            if later is not None:
                n = _in_range(writes, start, end) - _in_range(self._dead, start, end)
                for key in later:  # the count above is of the newest versions: undo what came after ts
                    vs = writes[key]
                    n += (_live_at(vs, ts) is not None) - (vs[-1].op is Op.PUT)
                return n
        n, lo, first = 0, start, True
        while True:
            with self._mutex:
                keys = list(itertools.islice(writes.irange(lo, end or None, inclusive=(first, False)), SCAN_PAGE))
                n += sum(1 for vs in map(writes.__getitem__, keys) if _live_at(vs, ts) is not None)
            if len(keys) < SCAN_PAGE:
                return n
            lo, first = keys[-1], False

    def _keys_after(self, ts: int, start: bytes, end: bytes, *, from_key: bytes | None = None,
                    limit: int | None = None) -> Iterable[bytes] | None:
        """The first ``limit`` (None: all) keys of ``[start, end)`` (after ``from_key``, exclusive) with a version
        committed after ``ts``, in order, when the index by commit ts can say (``ts`` at or above the safe point and
        the newest ingest); None: walk. A ts too far back to keep a set for (``AFTER_SET_MAX_KEYS``) walks when its
        versions outnumber the range's keys (``index_scan_ratio``).

        The set of every key changed after ``ts`` is built once (a pass over the versions after it) and kept, and
        each commit adds its keys to the kept sets below its commit ts: the regions of a window's pull, each asking
        for its own range from the same checkpoint, cost O(log n + the keys they get), not a pass each over every
        version after it (which made a long window's pull walk whole regions, the more the longer it was)."""
        if self.index_scan_ratio <= 0 or ts < max(self.safe_point, self._ingest_ts):
            return None
        lo, inclusive = (start, (True, False)) if from_key is None else (from_key, (False, False))
        with self._mutex:
            kept = self._after.pop(ts, None)
            if kept is None:
                first_after = self._by_ts.bisect_left((ts + 1, b""))
                if len(self._by_ts) - first_after > AFTER_SET_MAX_KEYS:
                    if len(self._by_ts) - first_after >= _in_range(self._writes, start, end) * self.index_scan_ratio:
                        return None
                    return sorted({k for _, k in self._by_ts.islice(first_after)
                                   if (k > lo if from_key is not None else k >= lo) and (not end or k < end)})[:limit]
                kept = SortedSet(k for _, k in self._by_ts.islice(first_after))
                while len(self._after) >= AFTER_SETS:
                    del self._after[next(iter(self._after))]  # the least recently asked
            self._after[ts] = kept
            # a step's keys only: a region of many changed keys, read a step at a time, is not copied once a step
            return list(itertools.islice(kept.irange(lo, end or None, inclusive=inclusive), limit))

    def check_read_ts(self, ts: int) -> None:
        """Raise ``GcSafePointPassedError`` if a read (or a change scan) at ``ts`` may miss GC'd versions."""
        if ts < self.safe_point:
            raise GcSafePointPassedError(ts, self.safe_point)

    def range_stats(self, start: bytes, end: bytes) -> tuple[int, int, bytes | None]:
        """``(keys, bytes of their latest values, middle key)`` of the keys in ``[start, end)``."""
        keys = list(self._writes.irange(start, end or None, inclusive=(True, False)))
        size = 0
        for k in keys:
            v = self._writes[k][-1]
            size += len(k) + len(v.value or b"")
        return len(keys), size, (keys[len(keys) // 2] if keys else None)

    def approximate_range_size(self, start: bytes, end: bytes, samples: int = 16) -> tuple[int, int]:
        """``(keys, bytes of every version)`` of ``[start, end)``, estimated from ``samples`` keys spread over it
        (the key count is exact): what TiKV reads from its SST properties for a range (``approximate_size_and_keys``)
        without reading the range. O(samples * log n)."""
        with self._mutex:
            lo = self._writes.bisect_left(start)
            hi = self._writes.bisect_left(end) if end else len(self._writes)
            n = hi - lo
            if n <= 0:
                return 0, 0
            step = max(1, n // samples)
            picked = range(lo, hi, step)
            sample = 0
            for i in picked:
                key, vs = self._writes.peekitem(i)
                sample += sum(len(key) + 8 + len(v.value or b"") for v in vs)  # key + commit ts + value
            return n, sample * n // len(picked)

    def key_count(self) -> int:
        return len(self._writes)

    def version_count(self) -> int:
        return sum(len(vs) for vs in self._writes.values())

    def versions(self, key: bytes) -> list[Version]:
        return list(self._writes.get(key, ()))

    def versions_after(
        self, start: bytes, end: bytes, after_ts: int, *, from_key: bytes | None = None, key_limit: int | None = None
    ) -> tuple[list[VersionRecord], bytes | None]:
        """Every version with ``commit_ts > after_ts`` of the keys in ``[start, end)``, in key then ts order.

        Each record carries the previous version's value as ``old_value``. With ``key_limit`` at
        most that many keys are read; the second result is the key to resume from (exclusive), or
        None when the range is exhausted.
        """
        out: list[VersionRecord] = []
        lo = start if from_key is None else from_key
        n = 0
        last: bytes | None = None
        inclusive = (from_key is None, False)
        # one key past the limit: what tells a full step from the range's last one
        changed = self._keys_after(after_ts, start, end, from_key=from_key,
                                   limit=None if key_limit is None else key_limit + 1)
        keys = changed if changed is not None else self._writes.irange(lo, end or None, inclusive=inclusive)
        for key in keys:
            if key_limit is not None and n >= key_limit:
                return out, last
            n += 1
            last = key
            prev: Version | None = None
            for v in self._writes[key]:
                if v.commit_ts > after_ts:
                    out.append(VersionRecord(key, v.start_ts, v.commit_ts, v.op, _value_of(v), _value_of(prev)))
                prev = v
        return out, None

    def split_points(self, start: bytes, end: bytes, every: int) -> list[bytes]:
        """Every ``every``-th key of ``[start, end)`` (not the first): where to cut it into ranges of that many."""
        keys = self._writes.keys()
        lo = self._writes.bisect_left(start)
        hi = self._writes.bisect_left(end) if end else len(keys)
        return [keys[i] for i in range(lo + every, hi, every)] if every > 0 else []

    def locks_in(self, start: bytes, end: bytes) -> list[Lock]:
        return [self._locks[k] for k in self._locks.irange(start, end or None, inclusive=(True, False))]

    def min_lock_ts(self, start: bytes, end: bytes) -> int | None:
        """The smallest start ts of a lock held on a key in ``[start, end)``."""
        ts = [lk.start_ts for lk in self.locks_in(start, end)]
        return min(ts) if ts else None

    def lock_of(self, key: bytes) -> Lock | None:
        return self._locks.get(key)

    # --- two-phase commit ---------------------------------------------------------------------
    def prewrite(self, mutations: Sequence[Mutation], primary: bytes, start_ts: int, for_update_ts: int = 0
                 ) -> list[Lock]:
        """Lock every key of ``mutations`` for the transaction ``start_ts``; all or nothing.

        Raises ``KeyLockedError`` when another transaction holds a lock on a key (a prewrite or a pessimistic one)
        and ``WriteConflictError`` when a key was committed after ``start_ts``. A pessimistic transaction
        (``for_update_ts`` set) prewrites the keys it holds pessimistic locks on without that check, which the lock
        made at its ``for_update_ts`` (TiKV's prewrite with ``is_pessimistic_lock``, ``DoPessimisticCheck``); the
        pessimistic locks become prewrite locks.
        """
        self._check_prewrite(mutations, start_ts, for_update_ts)
        locks = []
        for m in mutations:
            if m.op is Op.CHECK:
                continue
            old = _value_of(self.latest_version(m.key))
            lk = Lock(m.key, start_ts, primary, m.op, m.value if m.op is Op.PUT else None, old)
            self._locks[m.key] = lk
            locks.append(lk)
            self.lock_manager.holder_changed(m.key, start_ts)
        if for_update_ts:
            self.lock_manager.unlock([lk.key for lk in locks], start_ts)  # still locked: by the prewrite now
        for lk in locks:
            for obs in self._observers:
                obs.on_prewrite(lk)
        return locks

    @property
    def max_ts(self) -> int:
        """The largest ts read at or promised as resolved (``ConcurrencyManager``)."""
        return self._cm.max_ts

    def update_max_ts(self, ts: int) -> None:
        """Raise ``max_ts`` to ``ts``: what a read at ``ts`` through another path and a resolved ts about to be
        published do first (TiKV's ``cm.update_max_ts``), so that no async-commit or 1PC commit goes at or below it."""
        with self._mutex:
            self._cm.update_max_ts(ts)

    def _check_prewrite(self, mutations: Sequence[Mutation], start_ts: int, for_update_ts: int = 0) -> None:
        primary = mutations[0].key if mutations else b""
        for m in mutations:
            lk = self._locks.get(m.key)
            if lk is not None and lk.start_ts != start_ts:
                raise KeyLockedError(m.key, lk.start_ts)
            pl = self.lock_manager.holder(m.key)
            if pl is not None and pl.start_ts != start_ts:
                raise KeyLockedError(m.key, pl.start_ts)
            if pl is not None and for_update_ts:
                continue  # checked when the pessimistic lock was taken, at its for_update_ts
            latest = self.latest_version(m.key)
            if latest is not None and latest.commit_ts > start_ts:
                raise WriteConflictError(m.key, start_ts, latest.commit_ts, latest.start_ts, primary)

    # --- pessimistic locks --------------------------------------------------------------------
    def try_pessimistic_lock(self, key: bytes, primary: bytes, start_ts: int, for_update_ts: int) -> None:
        """One key of TiKV's ``AcquirePessimisticLock`` (``src/storage/txn/actions/acquire_pessimistic_lock.rs``):
        ``KeyLockedError`` when another transaction holds a lock on it (prewrite or pessimistic: wait and try
        again), ``WriteConflictError`` when it was committed after ``for_update_ts`` (TiDB then runs the statement
        again at a newer one), else the lock is the transaction's (again, if it held it)."""
        lk = self._locks.get(key)
        if lk is not None and lk.start_ts != start_ts:
            raise KeyLockedError(key, lk.start_ts)
        pl = self.lock_manager.holder(key)
        if pl is not None and pl.start_ts != start_ts:
            raise KeyLockedError(key, pl.start_ts)
        latest = self.latest_version(key)
        if latest is not None and latest.commit_ts > for_update_ts:
            raise WriteConflictError(key, start_ts, latest.commit_ts, latest.start_ts, primary)
        if lk is None:
            self.lock_manager.lock(key, start_ts, primary, for_update_ts)

    async def acquire_pessimistic_locks(self, keys: Iterable[bytes], primary: bytes, start_ts: int,
                                        for_update_ts: int, timeout: float) -> None:
        """Lock each of ``keys`` for the transaction, waiting for a key another one holds until it is released or
        ``timeout`` seconds pass (``LockWaitTimeoutError``); a wait that would close a cycle of waits raises
        ``DeadlockError`` (``lock_manager``). Keys locked before an error stay locked (TiDB rolls them back with the
        statement or the transaction)."""
        lm = self.lock_manager
        for key in keys:
            woken = False
            try:
                while True:
                    try:
                        self.try_pessimistic_lock(key, primary, start_ts, for_update_ts)
                        break
                    except KeyLockedError as exc:
                        await lm.wait(key, start_ts, exc.lock_ts, timeout)
                        woken = True
            except BaseException:
                if woken and self._locks.get(key) is None and lm.holder(key) is None:
                    lm.wake_up(key)  # the wake-up was ours and we leave without the lock: the next waiter's turn
                raise

    def pessimistic_rollback(self, keys: Iterable[bytes], start_ts: int) -> list[bytes]:
        """Drop the transaction's pessimistic locks on ``keys`` (TiKV's ``PessimisticRollback``: no write record, no
        change event), waking each key's first waiter."""
        released = self.lock_manager.unlock(keys, start_ts)
        self.lock_manager.wake_up_all(released)
        return released

    def commit(self, keys: Iterable[bytes], start_ts: int, commit_ts: int) -> list[VersionRecord]:
        """Turn the transaction's locks on ``keys`` into versions at ``commit_ts`` (a 2PC commit, its ts from PD)."""
        return self._commit(list(keys), start_ts, commit_ts)[1]

    def commit_async(self, keys: Iterable[bytes], start_ts: int, min_commit_ts: int = 0, for_update_ts: int = 0
                     ) -> int:
        """Commit the transaction's locks on ``keys`` as an async-commit transaction: at ``max(max_ts, start_ts) +
        1``, taken in the same critical section as the writes. Returns the commit ts.

        TiKV fixes an async-commit transaction's commit ts at prewrite (``min_commit_ts``), and a read at or above
        it that meets the lock waits for the commit. Here readers do not wait on locks, so the ts is taken when the
        locks turn into versions instead: every read before then raised ``max_ts`` and stays below the commit, every
        read after sees it. The change feed sees the same PREWRITE then COMMIT."""
        return self._commit(list(keys), start_ts, None, min_commit_ts, for_update_ts)[0]

    def _commit(self, keys: list[bytes], start_ts: int, commit_ts: int | None, min_commit_ts: int = 0,
                for_update_ts: int = 0) -> tuple[int, list[VersionRecord]]:
        for key in keys:
            lk = self._locks.get(key)
            if lk is None or lk.start_ts != start_ts:
                if any(v.start_ts == start_ts for v in self._writes.get(key, ())):
                    continue  # already committed: commit is idempotent
                raise LockNotFoundError(f"no lock of the transaction {start_ts} on key {key.hex()}")
        with self._mutex:
            ts = (self._cm.async_commit_ts(start_ts, for_update_ts, min_commit_ts) if commit_ts is None
                  else commit_ts)
            if ts <= start_ts:
                raise MvccError(f"commit ts {ts} must be greater than start ts {start_ts}")
            records = []
            for key in keys:
                lk = self._locks.get(key)
                if lk is None or lk.start_ts != start_ts:
                    continue
                del self._locks[key]
                records.append(self._put_version(key, start_ts, ts, lk.op, lk.value, one_pc=False))
        for rec in records:
            for obs in self._observers:
                obs.on_commit(rec)
        self.lock_manager.wake_up_all(rec.key for rec in records)
        return ts, records

    def commit_one_pc(self, mutations: Sequence[Mutation], start_ts: int, min_commit_ts: int = 0,
                      for_update_ts: int = 0) -> int:
        """Write ``mutations`` as a 1PC transaction (TiKV's one-phase commit: prewrite and commit in one request,
        no lock left behind): the conflict checks of :meth:`prewrite`, then every version at ``max(max_ts,
        start_ts) + 1`` in one critical section. Observers see only the commits, marked ``one_pc``. Returns the
        commit ts; raises as :meth:`prewrite` does and writes nothing then."""
        self._check_prewrite(mutations, start_ts, for_update_ts)
        with self._mutex:
            ts = self._cm.async_commit_ts(start_ts, for_update_ts, min_commit_ts)
            records = [self._put_version(m.key, start_ts, ts, m.op, m.value if m.op is Op.PUT else None, one_pc=True)
                       for m in mutations if m.op is not Op.CHECK]
        for rec in records:
            for obs in self._observers:
                obs.on_commit(rec)
        if for_update_ts:
            self.pessimistic_rollback([m.key for m in mutations], start_ts)  # written: the locks' work is done
        return ts

    def _put_version(self, key: bytes, start_ts: int, commit_ts: int, op: Op, value: bytes | None, *,
                     one_pc: bool) -> VersionRecord:
        """Append one committed version (under the lock) and keep the indexes true; its record for observers."""
        prev = self.latest_version(key)
        v = Version(start_ts, commit_ts, op, value)
        vs = self._writes.setdefault(key, [])
        vs.append(v)
        if len(vs) > 1 or v.op is not Op.PUT:
            self._gc_due.add(key)
        self._by_ts.add((commit_ts, key))
        for after, kept in self._after.items():
            if after < commit_ts:
                kept.add(key)
        self._note_newest(key, prev, v)
        return VersionRecord(key, start_ts, commit_ts, op, value, _value_of(prev), one_pc)

    def ingest(self, pairs: Iterable[tuple[bytes, bytes]], commit_ts: int) -> int:
        """Write each ``(key, value)`` as a version committed at ``commit_ts`` (a physical import): no lock, no
        observer, no change event. A key holding a lock or a version at or after ``commit_ts`` is a
        ``WriteConflictError``, and the batch is written up to it. Returns how many were written."""
        n = 0
        with self._mutex:
            self._ingest_ts = max(self._ingest_ts, commit_ts)
            self._forget_after(self._ingest_ts)  # ingested versions are not in the index
            writes = self._writes
            for key, value in pairs:
                if key in self._locks:
                    raise KeyLockedError(key, self._locks[key].start_ts)
                vs: list[Version] | None = writes.get(key)
                if vs is None:
                    writes[key] = [Version(commit_ts, commit_ts, Op.PUT, value)]
                else:
                    if vs[-1].commit_ts >= commit_ts:
                        raise WriteConflictError(key, commit_ts, vs[-1].commit_ts)
                    v = Version(commit_ts, commit_ts, Op.PUT, value)
                    self._note_newest(key, vs[-1], v)
                    vs.append(v)
                    self._gc_due.add(key)
                n += 1
        return n

    def _note_newest(self, key: bytes, prev: Version | None, v: Version) -> None:
        """Keep ``_dead`` true when ``v`` becomes ``key``'s newest version after ``prev`` (under the lock)."""
        was_dead, dead = prev is not None and prev.op is not Op.PUT, v.op is not Op.PUT
        if dead and not was_dead:
            self._dead.add(key)
        elif was_dead and not dead:
            self._dead.remove(key)

    def rollback(self, keys: Iterable[bytes], start_ts: int) -> list[Lock]:
        """Drop the transaction's locks on ``keys`` (keys it does not lock are ignored)."""
        dropped = []
        for key in keys:
            lk = self._locks.get(key)
            if lk is not None and lk.start_ts == start_ts:
                del self._locks[key]
                dropped.append(lk)
        for lk in dropped:
            for obs in self._observers:
                obs.on_rollback(lk)
        self.lock_manager.wake_up_all(lk.key for lk in dropped)
        return dropped

    # --- GC -----------------------------------------------------------------------------------
    def advance_safe_point(self, safe_point: int) -> int:
        """Move the safe point forward (never back); returns the safe point in force."""
        self.safe_point = max(self.safe_point, safe_point)
        # No read goes below the safe point: the index by commit ts forgets what is at or below it.
        with self._mutex:
            del self._by_ts[:self._by_ts.bisect_left((self.safe_point + 1, b""))]
            self._forget_after(self.safe_point)
        return self.safe_point

    def _forget_after(self, ts: int) -> None:
        """Drop the kept key sets of a ts below ``ts``: a read from there walks (under the lock)."""
        for after in [a for a in self._after if a < ts]:
            del self._after[after]

    def gc_step(self, from_key: bytes | None, key_limit: int) -> tuple[GcStats, bytes | None]:
        """GC at most ``key_limit`` of the keys GC may have work on (``_gc_due``) after ``from_key`` (exclusive; None:
        from the start).

        Returns the stats and the key to resume from (None when every key was visited). Each key
        is handled atomically, so a caller may yield the event loop between steps.
        """
        with self._mutex:  # a reader thread must not see a key's versions half removed
            sp = self.safe_point
            scanned = removed = keys_removed = 0
            last: bytes | None = None
            empty: list[bytes] = []
            settled: list[bytes] = []  # keys left with one PUT: nothing more for GC until they are written again
            inclusive = (from_key is None, False)
            for key in self._gc_due.irange(from_key, None, inclusive=inclusive):
                if scanned >= key_limit:
                    break
                scanned += 1
                last = key
                vs: list[Version] = self._writes[key]
                # the newest version at or below the safe point: what a read at the safe point sees
                keep_from = -1
                for i in range(len(vs) - 1, -1, -1):
                    if vs[i].commit_ts <= sp:
                        keep_from = i
                        break
                if keep_from < 0:
                    continue
                if vs[keep_from].op is not Op.PUT:
                    keep_from += 1  # a tombstone at the safe point reads as "absent" without it
                if keep_from:
                    removed += keep_from
                    del vs[:keep_from]
                    if not vs:
                        empty.append(key)
                    elif len(vs) == 1 and vs[0].op is Op.PUT:
                        settled.append(key)
            for key in empty:  # only a key whose newest version is a tombstone GC empties
                del self._writes[key]
                self._dead.discard(key)
            self._gc_due.difference_update(empty)
            self._gc_due.difference_update(settled)
            keys_removed = len(empty)
            done = scanned < key_limit or last is None
        return GcStats(sp, scanned, removed, keys_removed), (None if done else last)

    def gc(self, safe_point: int | None = None) -> GcStats:
        """Advance the safe point (if given) and GC every key in one go (tests, small stores)."""
        if safe_point is not None:
            self.advance_safe_point(safe_point)
        total = GcStats(self.safe_point)
        cursor: bytes | None = None
        while True:
            stats, cursor = self.gc_step(cursor, 1 << 30)
            total = GcStats(total.safe_point, total.keys_scanned + stats.keys_scanned,
                            total.versions_removed + stats.versions_removed,
                            total.keys_removed + stats.keys_removed)
            if cursor is None:
                return total
