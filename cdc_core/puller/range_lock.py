"""The range lock of one subscribed span: which region holds which key range, and every region's resolved ts.

After TiCDC's ``RangeLock`` (``logservice/logpuller/regionlock/region_range_lock.go``). Before a region request
is sent, the subscription client locks the region's range with the region's epoch version, so a range is only
ever requested once at a time; when the region goes away (error, split, merge, leader change, unsubscribe) the
client unlocks it and the range becomes a *hole* at the region's last resolved ts until a region locks it again.

It owns:

* the **locked ranges** (a ``SortedDict`` by start key, plus a dict by region id): region id, epoch version,
  resolved ts, initialized;
* the **unlocked ranges** (:class:`~cdc_core.puller.range_ts_map.RangeTsMap`), each with the ts it is resolved to.

Invariant: locked ranges plus unlocked ranges tile ``[start, end)`` exactly (``end == b""`` is +∞).

Locking follows TiCDC's ``tryLockRange``: a range overlapping no locked range is locked at the smallest ts of
the holes it covers; if any overlapping locked range has an epoch version ≥ the requested one the request is
**stale** (the result lists the parts not covered by those newer ranges, to be retried with fresh region
info); otherwise the caller must **wait** for the (older) overlapping ranges to be unlocked — :meth:`lock` does
that wait in asyncio, :meth:`try_lock` returns at once. The range of the same region id, if locked elsewhere,
counts as overlapping too.

Resolved ts live in a numpy ``uint64`` array indexed by a dense *slot* per locked range (a free list reuses
slots), so recording a region's ts is O(1), a whole ``ResolvedTs`` batch is one vectorized assignment, and the
span minimum is one ``np.min`` plus the O(1) minimum of the holes. Region ids map to slots through a direct
numpy table (``id - min id -> slot``) while the locked ids are compact — PD allocates region ids from one
counter, so a span's usually are — and through a sorted numpy index (``np.searchsorted``) otherwise; both are
patched lazily, once per batch after lock changes.

Complexity (n = locked ranges, h = unlocked entries, k = ranges a call overlaps, b = regions in a batch,
c = lock changes since the previous batch, s = slot capacity ≤ 2·peak n):

================================= ============================ ==============================================
operation                         cost                         note
================================= ============================ ==============================================
``try_lock``                      O((k+1)·(log n + log h))
``lock`` (async)                  ``try_lock`` per wake-up     waits on the blockers' release futures
``unlock``                        O(log n + log h)             the range becomes a hole at its resolved ts
``update_resolved_ts``            O(1)                         one array store
``set_initialized``               O(1)
``update_resolved_batch``         O(b) dense / O(b log n)      vectorized, + index patch after lock changes:
                                  sparse + index patch         O(n + c log n), or O(n log n) when c > n/8
``select_tagged``                 as ``update_resolved_batch`` vectorized filter by the locking request's tag
``min_resolved_ts``               O(s) vectorized + O(1)       ``np.min`` over slots, min over holes
``holes`` / ``locked_count``      O(1)
``oldest_hole``                   O(log h)
``iter_locked`` / ``iter_holes``  O(n) / O(h)
================================= ============================ ==============================================
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedDict

from cdc_core.puller.range_ts_map import RangeTsMap, end_after

__all__ = ["TS_MAX", "LockResult", "LockStatus", "LockedRange", "RangeLock", "RangeLockError"]

# The value of a free slot: it never wins a minimum. TSOs are < 2**63, so it cannot collide with a real ts.
TS_MAX = np.iinfo(np.uint64).max

_INITIAL_CAPACITY = 64
# Above this share of changed regions, rebuilding the region-id index is cheaper than patching it.
_REBUILD_RATIO = 8
# A direct id -> slot table is used while max id - min id < this x the number of locked regions (+ slack).
_DENSE_FACTOR = 8
_DENSE_SLACK = 4096


class RangeLockError(RuntimeError):
    """Misuse of the lock (unlocking a range it does not hold, ...): a bug in the caller."""


class LockStatus(enum.Enum):
    LOCKED = "locked"
    WAIT = "wait"  # older overlapping ranges are locked: wait for them to be unlocked, then retry
    STALE = "stale"  # a newer (or the same) epoch holds part of the range: retry `retry_ranges` with fresh info
    CANCELLED = "cancelled"  # the lock is stopped


class LockedRange:
    """A locked range and its real-time state (TiCDC's ``rangeLockEntry`` + ``LockedRangeState``).

    ``resolved_ts`` and ``initialized`` read the lock's arrays while the range is locked and keep their last
    values after it is unlocked.
    """

    __slots__ = ("_final_ts", "_lock", "_released", "end", "region_id", "slot", "start", "version")

    def __init__(self, lock: RangeLock, start: bytes, end: bytes, region_id: int, version: int, slot: int) -> None:
        self._lock = lock
        self.start = start
        self.end = end
        self.region_id = region_id
        self.version = version
        self.slot = slot  # -1 once unlocked
        self._final_ts = 0
        self._released: asyncio.Future[None] | None = None

    @property
    def locked(self) -> bool:
        return self.slot >= 0

    @property
    def resolved_ts(self) -> int:
        return int(self._lock._ts[self.slot]) if self.slot >= 0 else self._final_ts

    @property
    def initialized(self) -> bool:
        return bool(self._lock._init[self.slot]) if self.slot >= 0 else False

    def released(self) -> asyncio.Future[None]:
        """A future done once this range is unlocked (needs a running loop)."""
        if self._released is None:
            self._released = asyncio.get_running_loop().create_future()
            if self.slot < 0:
                self._released.set_result(None)
        return self._released

    def __repr__(self) -> str:
        return (
            f"LockedRange(region={self.region_id}, version={self.version}, "
            f"[{self.start.hex()}, {self.end.hex()}), ts={self.resolved_ts})"
        )


@dataclass(slots=True)
class LockResult:
    status: LockStatus
    state: LockedRange | None = None  # LOCKED
    retry_ranges: list[tuple[bytes, bytes]] = field(default_factory=list)  # STALE
    blockers: list[LockedRange] = field(default_factory=list)  # WAIT and STALE: the overlapping locked ranges


class RangeLock:
    """Locked and unlocked ranges of one span; see the module docstring for semantics and costs."""

    def __init__(self, start: bytes, end: bytes, start_ts: int) -> None:
        self.start = start
        self.end = end
        self.start_ts = start_ts
        self._unlocked = RangeTsMap(start, end, start_ts)
        self._locked: SortedDict = SortedDict()  # start key -> LockedRange
        self._by_region: dict[int, LockedRange] = {}
        self._ts: NDArray[np.uint64] = np.full(_INITIAL_CAPACITY, TS_MAX, dtype=np.uint64)
        self._init: NDArray[np.bool_] = np.zeros(_INITIAL_CAPACITY, dtype=np.bool_)
        self._tag: NDArray[np.int64] = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
        self._free: list[int] = list(range(_INITIAL_CAPACITY - 1, -1, -1))  # a stack: low slots first
        self._high_water = 0  # slots >= this were never used: the minimum can skip them
        self._initialized = 0
        self._stopped = False
        # Sorted region ids of the locked ranges and their slots, patched from `_index_changes` on demand.
        self._index_ids: NDArray[np.uint64] = np.empty(0, dtype=np.uint64)
        self._index_slots: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._index_changes: dict[int, int] = {}  # region id -> new slot (-1: removed)
        # id - base -> slot (-1: none), when the locked ids span at most _DENSE_FACTOR x their count.
        self._dense: NDArray[np.int32] | None = None
        self._dense_base = 0
        # Bumped on every change that can move the minimum: lets the advancer skip useless computations.
        self.mutations = 0

    # --- locking ---------------------------------------------------------------------------------
    def try_lock(self, start: bytes, end: bytes, region_id: int, version: int, tag: int = 0) -> LockResult:
        """Lock ``[start, end)`` for ``region_id`` at epoch ``version`` if nothing overlapping is locked.

        ``tag`` is the caller's label of the locking request (the subscription client's request id), kept per
        slot so that :meth:`select_tagged` can filter a batch vectorized.
        """
        if self._stopped:
            return LockResult(LockStatus.CANCELLED)
        if start < self.start or (self.end and end_after(end, self.end)) or (end and end <= start):
            raise RangeLockError(
                f"region {region_id}: range [{start.hex()}, {end.hex()}) is not inside the span "
                f"[{self.start.hex()}, {self.end.hex()})"
            )
        overlaps = self._overlapping(start, end, region_id)
        if not overlaps:
            ts = self._unlocked.unset(start, end)
            slot = self._alloc_slot()
            state = LockedRange(self, start, end, region_id, version, slot)
            self._ts[slot] = ts
            self._init[slot] = False
            self._tag[slot] = tag
            self._locked[start] = state
            self._by_region[region_id] = state
            self._index_changes[region_id] = slot
            self.mutations += 1
            return LockResult(LockStatus.LOCKED, state=state)
        if any(r.version >= version for r in overlaps):
            return LockResult(LockStatus.STALE, retry_ranges=_uncovered(start, end, overlaps), blockers=overlaps)
        return LockResult(LockStatus.WAIT, blockers=overlaps)

    async def lock(self, start: bytes, end: bytes, region_id: int, version: int, tag: int = 0) -> LockResult:
        """:meth:`try_lock`, waiting for older overlapping ranges to be unlocked; never returns WAIT."""
        while True:
            res = self.try_lock(start, end, region_id, version, tag)
            if res.status is not LockStatus.WAIT:
                return res
            # asyncio.wait, not gather: a cancelled waiter must not cancel the futures other waiters share.
            await asyncio.wait([b.released() for b in res.blockers])

    def unlock(self, state: LockedRange, resolved_ts: int | None = None) -> int:
        """Unlock ``state``'s range; it becomes a hole at ``resolved_ts`` (default: its last resolved ts).

        Returns the hole's ts. Raises :class:`RangeLockError` if ``state`` is not currently locked here.
        """
        if self._by_region.get(state.region_id) is not state or state.slot < 0:
            raise RangeLockError(f"unlocking region {state.region_id}, which does not hold {state!r}")
        ts = int(self._ts[state.slot]) if resolved_ts is None else resolved_ts
        del self._locked[state.start]
        del self._by_region[state.region_id]
        self._unlocked.set(state.start, state.end, ts)
        if self._init[state.slot]:
            self._initialized -= 1
        self._free_slot(state.slot)
        self._index_changes[state.region_id] = -1
        state.slot = -1
        state._final_ts = ts
        if state._released is not None and not state._released.done():
            state._released.set_result(None)
        self.mutations += 1
        return ts

    def stop(self) -> bool:
        """Refuse further locks (pending :meth:`lock` calls return CANCELLED once woken). True when drained."""
        self._stopped = True
        return not self._by_region

    # --- resolved ts -----------------------------------------------------------------------------
    def set_initialized(self, state: LockedRange) -> None:
        if state.slot >= 0 and not self._init[state.slot]:
            self._init[state.slot] = True
            self._initialized += 1
            self.mutations += 1

    def update_resolved_ts(self, state: LockedRange, ts: int) -> bool:
        """Record one region's resolved ts (ignored if it would go backwards or the range is unlocked). O(1)."""
        slot = state.slot
        if slot < 0 or ts <= self._ts[slot]:
            return False
        self._ts[slot] = ts
        self.mutations += 1
        return True

    def update_resolved_batch(
        self,
        region_ids: NDArray[Any] | Sequence[int],
        ts: int | NDArray[np.uint64],
        *,
        only_initialized: bool = True,
    ) -> int:
        """Record ``ts`` for every region of ``region_ids`` locked here (initialized ones unless told otherwise).

        ``ts`` is one ts for the whole batch (a ``ResolvedTs`` message) or an array aligned with ``region_ids``
        (a coalesced batch; its region ids should then be unique). Ids of regions this span does not lock are
        ignored; a ts never goes backwards. Returns how many entries advanced (regions, when the ids are unique).
        Vectorized: O(b) with the dense id table, O(b log n) without.
        """
        ids = np.asarray(region_ids, dtype=np.uint64)
        slots = self.lookup_slots(ids)
        keep = slots >= 0
        if only_initialized:
            keep &= self._init[np.maximum(slots, 0)]
        slots = slots[keep]
        if slots.size == 0:
            return 0
        current = self._ts[slots]
        if np.ndim(ts) == 0:
            newer = current < np.uint64(ts)
            advanced = int(np.count_nonzero(newer))
            if advanced:
                self._ts[slots[newer]] = np.uint64(ts)
        else:
            values = np.asarray(ts, dtype=np.uint64)[keep]
            newer = current < values
            advanced = int(np.count_nonzero(newer))
            if advanced:
                # maximum.at, not a plain store: with repeated ids the largest ts must win, not the last one.
                np.maximum.at(self._ts, slots[newer], values[newer])
        if advanced:
            self.mutations += 1
        return advanced

    def select_tagged(self, region_ids: NDArray[np.uint64], tag: int) -> NDArray[np.uint64]:
        """The ids of ``region_ids`` locked here with ``tag`` (in their order). Vectorized, as :meth:`lookup_slots`."""
        slots = self.lookup_slots(region_ids)
        keep = slots >= 0
        keep &= self._tag[np.maximum(slots, 0)] == tag
        return region_ids[keep]

    def min_resolved_ts(self) -> int:
        """The span's resolved ts right now: the minimum over locked ranges and holes together."""
        locked_min = int(self._ts[: self._high_water].min()) if self._high_water else int(TS_MAX)
        holes_min = self._unlocked.min_ts()
        return locked_min if holes_min is None else min(locked_min, holes_min)

    def lookup_slots(self, region_ids: NDArray[np.uint64]) -> NDArray[np.int64]:
        """The slot of each region id (-1 where the region is not locked here).

        Vectorized: O(b) through the dense table when the locked ids are compact (PD allocates region ids from
        one counter, so a span's ids usually are), else O(b log b + b log n) through the sorted index.
        """
        self._patch_index()
        dense = self._dense
        if dense is not None:
            offset = region_ids - np.uint64(self._dense_base)  # ids below the base wrap around: out of range
            inside = offset < np.uint64(dense.size)
            out = np.full(region_ids.shape, -1, dtype=np.int64)
            out[inside] = dense[offset[inside]]
            return out
        index = self._index_ids
        if index.size == 0:
            return np.full(region_ids.shape, -1, dtype=np.int64)
        # Sorted needles: numpy's binary search then reuses the previous position, and memory access stays
        # local; on 50k random ids into 450k this is 4x faster than searching them in arrival order.
        order = np.argsort(region_ids)
        needles = region_ids[order]
        pos = np.searchsorted(index, needles)
        np.minimum(pos, index.size - 1, out=pos)
        out = np.empty(region_ids.shape, dtype=np.int64)
        out[order] = np.where(index[pos] == needles, self._index_slots[pos], np.int64(-1))
        return out

    # --- queries ---------------------------------------------------------------------------------
    @property
    def locked_count(self) -> int:
        return len(self._by_region)

    @property
    def initialized_count(self) -> int:
        return self._initialized

    @property
    def holes(self) -> int:
        """Number of unlocked ranges (entries of the unlocked map)."""
        return self._unlocked.holes

    @property
    def stopped(self) -> bool:
        return self._stopped

    def oldest_hole(self) -> tuple[bytes, bytes, int] | None:
        return self._unlocked.oldest_hole()

    def get(self, region_id: int) -> LockedRange | None:
        return self._by_region.get(region_id)

    def iter_locked(self) -> Iterator[LockedRange]:
        """Locked ranges in key order."""
        return iter(self._locked.values())

    def iter_holes(self) -> Iterator[tuple[bytes, bytes, int]]:
        """Unlocked ranges ``(start, end, ts)`` in key order."""
        return self._unlocked.iter_holes()

    # --- internals -------------------------------------------------------------------------------
    def _check(self) -> None:
        """Assert the structure's invariants (as sortedcontainers' ``_check``; the state-machine test calls it after
        every step). O(n log n + h + s).

        - the locked ranges and the holes tile ``[start, end)`` in key order, nothing left over or overlapping;
        - each locked range is filed under its start key and its region id, and holds a slot of its own below the
          high-water mark, with its tag; the free slots are the others, each at ``TS_MAX``, not initialized;
        - the initialized count is the initialized slots';
        - the region-id index (dense or sorted, patched here) finds each locked region's slot, and nothing else.
        """
        parts = sorted([(r.start, r.end) for r in self._locked.values()]
                       + [(lo, hi) for lo, hi, _ in self._unlocked.iter_holes()])
        pos: bytes | None = self.start
        for lo, hi in parts:
            assert pos is not None and lo == pos, f"gap or overlap at {lo.hex()} (expected {pos!r}): {parts}"
            pos = hi if hi else None  # b"": +inf, nothing may follow
        assert (pos is None and not self.end) or pos == self.end, f"the tiling ends at {pos!r}, not {self.end!r}"
        assert len(self._locked) == len(self._by_region)
        used: set[int] = set()
        for key, r in self._locked.items():
            held: LockedRange = r
            assert key == held.start and held._lock is self and self._by_region.get(held.region_id) is held, held
            assert 0 <= held.slot < self._high_water and held.slot not in used, held
            used.add(held.slot)
        free = set(self._free)
        capacity = self._ts.size
        assert self._init.size == self._tag.size == capacity and len(free) == len(self._free)
        assert not used & free and used | free == set(range(capacity)), "a slot both used and free, or neither"
        free_slots = np.fromiter(free, dtype=np.int64, count=len(free))
        assert (self._ts[free_slots] == TS_MAX).all() and not self._init[free_slots].any()
        assert self._initialized == int(self._init.sum())
        ids = np.fromiter(self._by_region, dtype=np.uint64, count=len(self._by_region))
        slots = np.fromiter((r.slot for r in self._by_region.values()), dtype=np.int64, count=ids.size)
        assert (self.lookup_slots(ids) == slots).all(), "the region-id index lost a locked region"

    def _overlapping(self, start: bytes, end: bytes, region_id: int) -> list[LockedRange]:
        locked = self._locked
        found: list[LockedRange] = []
        prev_key = next(locked.irange(maximum=start, inclusive=(True, False), reverse=True), None)
        if prev_key is not None:
            prev: LockedRange = locked[prev_key]
            if end_after(prev.end, start):
                found.append(prev)
        for key in locked.irange(start, end or None, inclusive=(True, False)):
            found.append(locked[key])
        same = self._by_region.get(region_id)
        if same is not None and all(r is not same for r in found):
            found.append(same)  # the region already holds another range: as good as overlapping
        return found

    def _alloc_slot(self) -> int:
        if not self._free:
            old = self._ts.size
            self._ts = np.concatenate([self._ts, np.full(old, TS_MAX, dtype=np.uint64)])
            self._init = np.concatenate([self._init, np.zeros(old, dtype=np.bool_)])
            self._tag = np.concatenate([self._tag, np.zeros(old, dtype=np.int64)])
            self._free = list(range(2 * old - 1, old - 1, -1))
        slot = self._free.pop()
        if slot >= self._high_water:
            self._high_water = slot + 1
        return slot

    def _free_slot(self, slot: int) -> None:
        self._ts[slot] = TS_MAX
        self._init[slot] = False
        self._tag[slot] = -1
        self._free.append(slot)

    def _patch_index(self) -> None:
        if not self._index_changes:
            return
        self._patch_sorted_index()
        ids, slots = self._index_ids, self._index_slots
        self._dense = None
        if ids.size:
            base, top = int(ids[0]), int(ids[-1])
            if top - base < _DENSE_FACTOR * ids.size + _DENSE_SLACK:
                dense = np.full(top - base + 1, -1, dtype=np.int32)
                dense[ids - np.uint64(base)] = slots
                self._dense, self._dense_base = dense, base

    def _patch_sorted_index(self) -> None:
        changes = self._index_changes
        ids, slots = self._index_ids, self._index_slots
        if len(changes) * _REBUILD_RATIO > ids.size:
            ids = np.fromiter(self._by_region.keys(), dtype=np.uint64, count=len(self._by_region))
            slots = np.fromiter((s.slot for s in self._by_region.values()), dtype=np.int64, count=ids.size)
            order = np.argsort(ids, kind="stable")
            self._index_ids, self._index_slots = ids[order], slots[order]
            changes.clear()
            return
        ch_ids = np.fromiter(changes.keys(), dtype=np.uint64, count=len(changes))
        ch_slots = np.fromiter(changes.values(), dtype=np.int64, count=len(changes))
        changes.clear()
        # Drop every changed id, then insert the ones that are locked now (a relock gets a new slot).
        if ids.size:
            pos = np.minimum(np.searchsorted(ids, ch_ids), ids.size - 1)
            present = ids[pos] == ch_ids
            keep = np.ones(ids.size, dtype=np.bool_)
            keep[pos[present]] = False
            ids, slots = ids[keep], slots[keep]
        add = ch_slots >= 0
        add_ids, add_slots = ch_ids[add], ch_slots[add]
        order = np.argsort(add_ids)
        add_ids, add_slots = add_ids[order], add_slots[order]
        at = np.searchsorted(ids, add_ids)
        self._index_ids = np.insert(ids, at, add_ids)
        self._index_slots = np.insert(slots, at, add_slots)


def _uncovered(start: bytes, end: bytes, overlaps: list[LockedRange]) -> list[tuple[bytes, bytes]]:
    """The parts of ``[start, end)`` no range of ``overlaps`` covers (TiCDC's retry ranges of a stale lock)."""
    out: list[tuple[bytes, bytes]] = []
    cur: bytes | None = start  # None: +∞, nothing left
    for r in sorted(overlaps, key=lambda r: r.start):
        # Skip the range of the same region found by id when it lies elsewhere.
        if not end_after(r.end, start) or (end and r.start >= end):
            continue
        if cur is None:
            break
        if r.start > cur:
            out.append((cur, r.start))
        if not r.end:
            cur = None
        elif r.end > cur:
            cur = r.end
    if cur is not None and end_after(end, cur):
        out.append((cur, end))
    return out
