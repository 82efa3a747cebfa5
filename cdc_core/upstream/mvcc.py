"""The MVCC key-value store of a store (TiKV's txn layer, in memory).

Owns every committed version of every key (a value or a tombstone, with its start and commit ts),
the locks left by prewrites, and the two-phase-commit state machine: ``prewrite`` checks and locks
all keys of a transaction atomically (or changes nothing), ``commit`` turns locks into versions at
a commit ts, ``rollback`` drops them. Readers get snapshot reads at a ts (``get`` / ``scan``) and,
for the change feed, every version newer than a checkpoint with the previous version as old value.

Observers (the CDC service) are called synchronously right after each state change, so an
observer sees prewrites, commits and rollbacks in exactly the order they happened.

Not yet: persistence, GC of old versions below a safe point, rollback records that block a late
prewrite (a later issue adds them together with fault injection).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sortedcontainers import SortedDict


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


@dataclass(frozen=True)
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


class MvccError(Exception):
    """A transaction cannot proceed; the message says which key and why."""


class KeyLockedError(MvccError):
    def __init__(self, key: bytes, lock_ts: int) -> None:
        super().__init__(f"key {key.hex()} is locked by the transaction started at ts {lock_ts}")
        self.key = key
        self.lock_ts = lock_ts


class WriteConflictError(MvccError):
    def __init__(self, key: bytes, start_ts: int, conflict_commit_ts: int) -> None:
        super().__init__(
            f"write conflict on key {key.hex()}: the transaction started at ts {start_ts} but the key "
            f"was committed at ts {conflict_commit_ts}"
        )
        self.key = key
        self.conflict_commit_ts = conflict_commit_ts


class LockNotFoundError(MvccError):
    pass


class MvccObserver(Protocol):
    def on_prewrite(self, lock: Lock) -> None: ...

    def on_commit(self, record: VersionRecord) -> None: ...

    def on_rollback(self, lock: Lock) -> None: ...


def _value_of(v: Version | None) -> bytes | None:
    return None if v is None or v.op is not Op.PUT else v.value


class MvccStore:
    def __init__(self) -> None:
        self._writes: SortedDict = SortedDict()  # key -> list[Version], ascending commit_ts
        self._locks: SortedDict = SortedDict()  # key -> Lock
        self._observers: list[MvccObserver] = []

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
        for key in self._writes.irange(start, end or None, inclusive=(True, False)):
            if end and key >= end:
                break
            val = self.get(key, ts)
            if val is not None:
                out.append((key, val))
                if limit is not None and len(out) >= limit:
                    break
        return out

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
        for key in self._writes.irange(lo, end or None, inclusive=(from_key is None, False)):
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

    def locks_in(self, start: bytes, end: bytes) -> list[Lock]:
        return [self._locks[k] for k in self._locks.irange(start, end or None, inclusive=(True, False))]

    def min_lock_ts(self, start: bytes, end: bytes) -> int | None:
        """The smallest start ts of a lock held on a key in ``[start, end)``."""
        ts = [lk.start_ts for lk in self.locks_in(start, end)]
        return min(ts) if ts else None

    def lock_of(self, key: bytes) -> Lock | None:
        return self._locks.get(key)

    # --- two-phase commit ---------------------------------------------------------------------
    def prewrite(self, mutations: Sequence[Mutation], primary: bytes, start_ts: int) -> list[Lock]:
        """Lock every key of ``mutations`` for the transaction ``start_ts``; all or nothing.

        Raises ``KeyLockedError`` when another transaction holds a lock on a key and
        ``WriteConflictError`` when a key was committed after ``start_ts``.
        """
        for m in mutations:
            lk = self._locks.get(m.key)
            if lk is not None and lk.start_ts != start_ts:
                raise KeyLockedError(m.key, lk.start_ts)
            latest = self.latest_version(m.key)
            if latest is not None and latest.commit_ts > start_ts:
                raise WriteConflictError(m.key, start_ts, latest.commit_ts)
        locks = []
        for m in mutations:
            if m.op is Op.CHECK:
                continue
            old = _value_of(self.latest_version(m.key))
            lk = Lock(m.key, start_ts, primary, m.op, m.value if m.op is Op.PUT else None, old)
            self._locks[m.key] = lk
            locks.append(lk)
        for lk in locks:
            for obs in self._observers:
                obs.on_prewrite(lk)
        return locks

    def commit(self, keys: Iterable[bytes], start_ts: int, commit_ts: int) -> list[VersionRecord]:
        """Turn the transaction's locks on ``keys`` into versions at ``commit_ts``."""
        if commit_ts <= start_ts:
            raise MvccError(f"commit ts {commit_ts} must be greater than start ts {start_ts}")
        keys = list(keys)
        for key in keys:
            lk = self._locks.get(key)
            if lk is None or lk.start_ts != start_ts:
                if any(v.start_ts == start_ts for v in self._writes.get(key, ())):
                    continue  # already committed: commit is idempotent
                raise LockNotFoundError(f"no lock of the transaction {start_ts} on key {key.hex()}")
        records = []
        for key in keys:
            lk = self._locks.get(key)
            if lk is None or lk.start_ts != start_ts:
                continue
            del self._locks[key]
            prev = self.latest_version(key)
            v = Version(start_ts, commit_ts, lk.op, lk.value)
            self._writes.setdefault(key, []).append(v)
            records.append(VersionRecord(key, start_ts, commit_ts, lk.op, lk.value, _value_of(prev)))
        for rec in records:
            for obs in self._observers:
                obs.on_commit(rec)
        return records

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
        return dropped
