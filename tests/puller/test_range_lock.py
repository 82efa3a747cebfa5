"""RangeLock and RangeTsMap: lock / unlock / stale / wait / coverage, and a state machine against a brute model.

The state machine plays PD: regions tile a small key space and split / merge with bumped epochs while the
subscription side locks, unlocks, initializes and advances them. After every step the lock's locked ranges and
holes must tile the span exactly, match the model range by range, and give the model's minimum resolved ts.
"""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cdc_core.puller.range_lock import LockStatus, RangeLock, RangeLockError
from cdc_core.puller.range_ts_map import RangeTsMap, RangeTsMapError


def k(i: int) -> bytes:
    return b"k%03d" % i


def tiles(lock: RangeLock) -> list[tuple[bytes, bytes, str]]:
    """Locked ranges and holes in key order, checked to be contiguous."""
    parts = [(r.start, r.end, f"region{r.region_id}") for r in lock.iter_locked()]
    parts += [(s, e, f"hole@{ts}") for s, e, ts in lock.iter_holes()]
    parts.sort()
    pos = lock.start
    for s, e, _ in parts:
        assert s == pos, f"gap or overlap at {s!r} (expected {pos!r}) in {parts}"
        pos = e
    assert pos == lock.end
    return parts


# --- RangeTsMap ---------------------------------------------------------------------------------
def test_range_ts_map_set_unset_and_min() -> None:
    m = RangeTsMap(k(0), k(100), 5)
    assert m.min_ts() == 5 and m.holes == 1
    assert m.unset(k(10), k(20)) == 5
    assert list(m.iter_holes()) == [(k(0), k(10), 5), (k(20), k(100), 5)]
    m.set(k(10), k(15), 9)
    assert list(m.iter_holes()) == [(k(0), k(10), 5), (k(10), k(15), 9), (k(20), k(100), 5)]
    assert m.min_ts_in_range(k(10), k(15)) == 9
    assert m.unset(k(0), k(12)) == 5  # spans two holes: their minimum
    assert list(m.iter_holes()) == [(k(12), k(15), 9), (k(20), k(100), 5)]
    assert m.min_ts() == 5 and m.oldest_hole() == (k(20), k(100), 5)
    m.unset(k(20), k(100))
    assert m.min_ts() == 9


def test_range_ts_map_rejects_double_set_and_unset() -> None:
    m = RangeTsMap(k(0), k(100), 5)
    with pytest.raises(RangeTsMapError):
        m.set(k(0), k(10), 7)
    m.unset(k(0), k(10))
    with pytest.raises(RangeTsMapError):
        m.unset(k(5), k(15))
    with pytest.raises(RangeTsMapError):
        m.min_ts_in_range(k(0), k(20))
    with pytest.raises(RangeTsMapError):
        m.unset(k(50), k(200))  # beyond the span


def test_range_ts_map_unbounded_end() -> None:
    m = RangeTsMap(b"", b"", 3)
    m.unset(b"m", b"")
    assert list(m.iter_holes()) == [(b"", b"m", 3)]
    m.set(b"m", b"", 8)
    assert list(m.iter_holes()) == [(b"", b"m", 3), (b"m", b"", 8)]
    assert m.min_ts_in_range(b"z", b"") == 8


# --- RangeLock: unit --------------------------------------------------------------------------------
def test_lock_takes_the_hole_ts_and_unlock_leaves_a_hole_at_the_last_resolved_ts() -> None:
    lock = RangeLock(k(0), k(100), 100)
    assert tiles(lock) == [(k(0), k(100), "hole@100")] and lock.min_resolved_ts() == 100
    res = lock.try_lock(k(10), k(20), region_id=7, version=1)
    assert res.status is LockStatus.LOCKED and res.state is not None
    st7 = res.state
    assert st7.resolved_ts == 100 and not st7.initialized
    assert tiles(lock) == [(k(0), k(10), "hole@100"), (k(10), k(20), "region7"), (k(20), k(100), "hole@100")]
    lock.set_initialized(st7)
    assert lock.update_resolved_ts(st7, 150)
    assert not lock.update_resolved_ts(st7, 120)  # never backwards
    assert lock.min_resolved_ts() == 100  # the holes still hold the span back
    assert lock.unlock(st7) == 150
    assert not st7.locked and st7.resolved_ts == 150
    assert tiles(lock) == [(k(0), k(10), "hole@100"), (k(10), k(20), "hole@150"), (k(20), k(100), "hole@100")]
    # Relocking the hole starts from its ts; an explicit unlock ts wins over the recorded one.
    st7b = lock.try_lock(k(10), k(20), 7, 2).state
    assert st7b is not None and st7b.resolved_ts == 150
    assert lock.unlock(st7b, resolved_ts=140) == 140
    assert (k(10), k(20), 140) in list(lock.iter_holes())


def test_span_min_covers_locked_and_holes() -> None:
    lock = RangeLock(k(0), k(30), 100)
    states = [lock.try_lock(k(i * 10), k(i * 10 + 10), i + 1, 1).state for i in range(3)]
    assert all(s is not None for s in states)
    assert lock.holes == 0
    for s, ts in zip(states, (300, 200, 400), strict=True):
        assert s is not None
        lock.set_initialized(s)
        lock.update_resolved_ts(s, ts)
    assert lock.min_resolved_ts() == 200
    assert states[1] is not None
    lock.unlock(states[1], resolved_ts=180)
    assert lock.min_resolved_ts() == 180 and lock.holes == 1


def test_overlap_with_an_older_epoch_must_wait_and_a_newer_epoch_is_stale() -> None:
    lock = RangeLock(k(0), k(100), 100)
    old = lock.try_lock(k(10), k(30), 1, version=5).state
    assert old is not None
    # A split: the right half with a newer epoch must wait for the old region to be unlocked.
    res = lock.try_lock(k(20), k(30), 2, version=6)
    assert res.status is LockStatus.WAIT and res.blockers == [old]
    # An older epoch over the newer lock is stale; the retry ranges are what the newer lock does not cover.
    res = lock.try_lock(k(0), k(50), 3, version=4)
    assert res.status is LockStatus.STALE
    assert res.retry_ranges == [(k(0), k(10)), (k(30), k(50))]
    # Same epoch, same range (a duplicate request) is stale too, with nothing to retry.
    res = lock.try_lock(k(10), k(30), 1, version=5)
    assert res.status is LockStatus.STALE and res.retry_ranges == []
    lock.unlock(old)
    res = lock.try_lock(k(20), k(30), 2, version=6)
    assert res.status is LockStatus.LOCKED
    tiles(lock)


def test_the_same_region_locked_elsewhere_counts_as_overlapping() -> None:
    lock = RangeLock(k(0), k(100), 100)
    a = lock.try_lock(k(10), k(20), 1, version=1).state
    assert a is not None
    res = lock.try_lock(k(40), k(50), 1, version=2)  # region 1 after a merge moved its range
    assert res.status is LockStatus.WAIT and res.blockers == [a]
    res = lock.try_lock(k(40), k(50), 1, version=1)
    assert res.status is LockStatus.STALE and res.retry_ranges == [(k(40), k(50))]


def test_unlock_of_a_range_not_held_is_an_error() -> None:
    lock = RangeLock(k(0), k(100), 100)
    s = lock.try_lock(k(0), k(10), 1, 1).state
    assert s is not None
    lock.unlock(s)
    with pytest.raises(RangeLockError):
        lock.unlock(s)
    with pytest.raises(RangeLockError):
        lock.try_lock(k(90), k(110), 2, 1)  # outside the span


def test_async_lock_waits_for_the_blocker_and_stop_cancels() -> None:
    async def main() -> None:
        lock = RangeLock(k(0), k(100), 100)
        old = lock.try_lock(k(0), k(50), 1, 1).state
        assert old is not None
        waiter = asyncio.create_task(lock.lock(k(0), k(25), 2, 2))
        await asyncio.sleep(0)
        assert not waiter.done()
        lock.unlock(old)
        res = await asyncio.wait_for(waiter, 5)
        assert res.status is LockStatus.LOCKED and res.state is not None and res.state.region_id == 2
        # A waiter on a lock that stops is woken with CANCELLED once its blocker goes.
        waiter2 = asyncio.create_task(lock.lock(k(0), k(25), 3, 3))
        await asyncio.sleep(0)
        assert not lock.stop()
        lock.unlock(res.state)
        assert (await asyncio.wait_for(waiter2, 5)).status is LockStatus.CANCELLED

    asyncio.run(main())


def test_resolved_batch_is_vectorized_and_ignores_uninitialized_and_foreign_regions() -> None:
    lock = RangeLock(k(0), k(100), 100)
    states = {}
    for i in range(10):
        s = lock.try_lock(k(i * 10), k(i * 10 + 10), 1000 + i, 1).state
        assert s is not None
        states[1000 + i] = s
    for rid in range(1000, 1008):  # 1008, 1009 stay uninitialized
        lock.set_initialized(states[rid])
    ids = np.array([1000, 1001, 1008, 42, 1009, 1005], dtype=np.uint64)
    assert lock.update_resolved_batch(ids, 200) == 3
    assert [states[r].resolved_ts for r in (1000, 1001, 1005, 1008, 1009, 1002)] == [200, 200, 200, 100, 100, 100]
    assert lock.update_resolved_batch([1000, 1001], 150) == 0  # older: ignored
    # Per-region ts, with a repeated id: the largest wins.
    assert lock.update_resolved_batch([1002, 1003, 1002], np.array([300, 250, 310], dtype=np.uint64)) == 3
    assert states[1002].resolved_ts == 310 and states[1003].resolved_ts == 250
    assert lock.min_resolved_ts() == 100
    # After an unlock and relock the region maps to its new slot; the old one is free.
    lock.unlock(states[1000])
    s = lock.try_lock(k(0), k(10), 1000, 2).state
    assert s is not None
    lock.set_initialized(s)
    assert lock.update_resolved_batch([1000], 500) == 1 and s.resolved_ts == 500


def test_select_tagged_keeps_only_the_regions_locked_by_that_request() -> None:
    lock = RangeLock(k(0), k(100), 100)
    a = lock.try_lock(k(0), k(10), 1000, 1, tag=7).state
    b = lock.try_lock(k(10), k(20), 1001, 1, tag=7).state
    c = lock.try_lock(k(20), k(30), 1002, 1, tag=9).state
    assert a is not None and b is not None and c is not None
    ids = np.array([1002, 1001, 42, 1000], dtype=np.uint64)
    assert lock.select_tagged(ids, 7).tolist() == [1001, 1000]
    assert lock.select_tagged(ids, 9).tolist() == [1002]
    # Relocked by another request: the old request's tag no longer selects it.
    lock.unlock(a)
    assert lock.try_lock(k(0), k(10), 1000, 2, tag=11).state is not None
    assert lock.select_tagged(ids, 7).tolist() == [1001]
    assert lock.select_tagged(ids, 11).tolist() == [1000]


def test_unbounded_span_end() -> None:
    lock = RangeLock(b"", b"", 10)
    a = lock.try_lock(b"", b"m", 1, 1).state
    b = lock.try_lock(b"m", b"", 2, 1).state
    assert a is not None and b is not None and lock.holes == 0
    res = lock.try_lock(b"p", b"", 3, 0)
    assert res.status is LockStatus.STALE and res.retry_ranges == []
    lock.unlock(b, resolved_ts=20)
    assert list(lock.iter_holes()) == [(b"m", b"", 20)]
    tiles(lock)


# --- RangeLock: state machine against a brute model ----------------------------------------------
N_ATOMS = 12
START_TS = 100


class RangeLockMachine(RuleBasedStateMachine):
    """Atoms [k(i), k(i+1)) tile the span; PD's regions are runs of atoms. The model keeps one ts per unlocked
    atom and one entry per locked region."""

    unbounded = False

    def __init__(self) -> None:
        super().__init__()
        self.keys = [self.key(i) for i in range(N_ATOMS + 1)]
        self.atom_of = {key: i for i, key in enumerate(self.keys)}
        self.lock = RangeLock(self.keys[0], self.keys[-1], START_TS)
        self.ids = itertools.count(100)
        self.versions = itertools.count(2)
        # PD: region id -> (lo, hi, version), tiling [0, N_ATOMS); and every region that ever existed.
        self.layout = {next(self.ids): (i, i + 3, 1) for i in range(0, N_ATOMS, 3)}
        self.history = list(self.layout.items())
        self.atom_ts: list[int | None] = [START_TS] * N_ATOMS
        self.locked: dict[int, tuple[int, int, int]] = {}  # region id -> lo, hi, version
        self.ts: dict[int, int] = {}
        self.initialized: set[int] = set()
        self.states: dict[int, object] = {}

    def key(self, i: int) -> bytes:
        if self.unbounded and i == 0:
            return b""
        if self.unbounded and i == N_ATOMS:
            return b""
        return k(i * 5)

    def start_atom(self, key: bytes) -> int:
        return 0 if key == self.keys[0] else self.atom_of[key]

    def end_atom(self, key: bytes) -> int:
        return N_ATOMS if key == self.keys[-1] else self.atom_of[key]

    # --- PD side -----------------------------------------------------------------------------------
    @precondition(lambda self: any(hi - lo >= 2 for lo, hi, _ in self.layout.values()))
    @rule(data=st.data())
    def split(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(r for r, (lo, hi, _) in self.layout.items() if hi - lo >= 2)))
        lo, hi, _ = self.layout[rid]
        at = data.draw(st.integers(lo + 1, hi - 1))
        v = next(self.versions)
        new_id = next(self.ids)
        self.layout[rid] = (lo, at, v)
        self.layout[new_id] = (at, hi, v)
        self.history += [(rid, self.layout[rid]), (new_id, self.layout[new_id])]

    @precondition(lambda self: len(self.layout) >= 2)
    @rule(data=st.data())
    def merge(self, data: st.DataObject) -> None:
        by_lo = sorted(self.layout.items(), key=lambda kv: kv[1][0])
        i = data.draw(st.integers(0, len(by_lo) - 2))
        (left, (lo, _, _)), (right, (_, hi, _)) = by_lo[i], by_lo[i + 1]
        del self.layout[left]
        self.layout[right] = (lo, hi, next(self.versions))  # the target region keeps its id
        self.history.append((right, self.layout[right]))

    # --- subscription side -------------------------------------------------------------------------
    @rule(data=st.data(), current=st.booleans())
    def lock_region(self, data: st.DataObject, current: bool) -> None:
        pool = sorted(self.layout.items()) if current else self.history
        rid, (lo, hi, version) = data.draw(st.sampled_from(pool))
        overlaps = {r: v for r, v in self.locked.items() if (v[0] < hi and lo < v[1]) or r == rid}
        res = self.lock.try_lock(self.keys[lo], self.keys[hi], rid, version)
        if not overlaps:
            assert res.status is LockStatus.LOCKED and res.state is not None
            expected_ts = min(t for t in self.atom_ts[lo:hi] if t is not None)
            assert res.state.resolved_ts == expected_ts
            assert all(t is not None for t in self.atom_ts[lo:hi])
            for a in range(lo, hi):
                self.atom_ts[a] = None
            self.locked[rid] = (lo, hi, version)
            self.ts[rid] = expected_ts
            self.states[rid] = res.state
        elif any(v[2] >= version for v in overlaps.values()):
            assert res.status is LockStatus.STALE
            covered = {a for v in overlaps.values() for a in range(v[0], v[1])}
            free = [a for a in range(lo, hi) if a not in covered]
            runs = [list(g) for _, g in itertools.groupby(free, key=lambda a, c=itertools.count(): a - next(c))]
            assert res.retry_ranges == [(self.keys[r[0]], self.keys[r[-1] + 1]) for r in runs]
        else:
            assert res.status is LockStatus.WAIT
            assert {b.region_id for b in res.blockers} == set(overlaps)

    @precondition(lambda self: bool(self.locked))
    @rule(data=st.data(), explicit=st.one_of(st.none(), st.integers(START_TS, START_TS + 500)))
    def unlock_region(self, data: st.DataObject, explicit: int | None) -> None:
        rid = data.draw(st.sampled_from(sorted(self.locked)))
        lo, hi, _ = self.locked.pop(rid)
        hole_ts = self.ts.pop(rid) if explicit is None else explicit
        self.ts.pop(rid, None)
        self.initialized.discard(rid)
        assert self.lock.unlock(self.states.pop(rid), explicit) == hole_ts  # type: ignore[arg-type]
        for a in range(lo, hi):
            self.atom_ts[a] = hole_ts

    @precondition(lambda self: bool(self.locked))
    @rule(data=st.data())
    def initialize(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.locked)))
        self.lock.set_initialized(self.states[rid])  # type: ignore[arg-type]
        self.initialized.add(rid)

    @rule(data=st.data(), ts=st.integers(START_TS, START_TS + 1000), per_region=st.booleans())
    def resolved_batch(self, data: st.DataObject, ts: int, per_region: bool) -> None:
        candidates = sorted(self.locked) + [1, 2, 3] + [r for r, _ in self.history]
        ids = data.draw(st.lists(st.sampled_from(candidates), max_size=8))
        if per_region:
            tss = data.draw(st.lists(st.integers(START_TS, START_TS + 1000), min_size=len(ids), max_size=len(ids)))
            self.lock.update_resolved_batch(np.array(ids, dtype=np.uint64), np.array(tss, dtype=np.uint64))
        else:
            tss = [ts] * len(ids)
            self.lock.update_resolved_batch(ids, ts)
        for rid, t in zip(ids, tss, strict=True):
            if rid in self.locked and rid in self.initialized:
                self.ts[rid] = max(self.ts[rid], t)

    # --- invariants --------------------------------------------------------------------------------
    @invariant()
    def structure_holds(self) -> None:
        self.lock._check()

    @invariant()
    def coverage_matches_the_model(self) -> None:
        parts = tiles(self.lock)
        locked = {
            r.region_id: (self.start_atom(r.start), self.end_atom(r.end), r.version) for r in self.lock.iter_locked()
        }
        assert locked == self.locked
        for s, e, ts in self.lock.iter_holes():
            lo, hi = self.start_atom(s), self.end_atom(e)
            assert self.atom_ts[lo:hi] == [ts] * (hi - lo), (parts, self.atom_ts)
        assert self.lock.locked_count == len(self.locked)
        assert self.lock.initialized_count == len(self.initialized)

    @invariant()
    def minimum_matches_the_model(self) -> None:
        brute = min([t for t in self.atom_ts if t is not None] + list(self.ts.values()))
        assert self.lock.min_resolved_ts() == brute
        for rid, t in self.ts.items():
            assert self.states[rid].resolved_ts == t  # type: ignore[attr-defined]

    @invariant()
    def region_index_matches(self) -> None:
        ids = np.array([*sorted(self.locked), 1, 2, 3], dtype=np.uint64)
        slots = self.lock.lookup_slots(ids)
        expected = [self.states[r].slot for r in sorted(self.locked)] + [-1, -1, -1]  # type: ignore[attr-defined]
        assert slots.tolist() == expected


class UnboundedRangeLockMachine(RangeLockMachine):
    unbounded = True


_settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestRangeLockMachine = RangeLockMachine.TestCase
TestRangeLockMachine.settings = _settings
TestUnboundedRangeLockMachine = UnboundedRangeLockMachine.TestCase
TestUnboundedRangeLockMachine.settings = _settings


def test_region_lookup_with_sparse_ids_uses_the_sorted_index() -> None:
    lock = RangeLock(k(0), k(100), 100)
    ids = [7, 10**12, 3 * 10**15, 42, 2**63]
    states = {}
    for i, rid in enumerate(ids):
        s = lock.try_lock(k(i * 10), k(i * 10 + 10), rid, 1).state
        assert s is not None
        lock.set_initialized(s)
        states[rid] = s
    probe = np.array([2**63, 8, 42, 10**12, 0, 7, 3 * 10**15, 2**64 - 1], dtype=np.uint64)
    slots = lock.lookup_slots(probe)
    assert lock._dense is None  # ids too spread out for a direct table
    expected = [states[int(r)].slot if int(r) in states else -1 for r in probe]
    assert slots.tolist() == expected
    assert lock.update_resolved_batch(probe, 500) == 5
    assert all(s.resolved_ts == 500 for s in states.values())
    # Compact ids get the direct table; ids below its base or past its end are simply not found.
    dense_lock = RangeLock(k(0), k(100), 100)
    for i in range(10):
        dense_lock.try_lock(k(i * 10), k(i * 10 + 10), 1000 + 3 * i, 1)
    slots = dense_lock.lookup_slots(np.array([999, 1000, 1001, 1027, 1030, 5], dtype=np.uint64))
    assert dense_lock._dense is not None
    assert (slots >= 0).tolist() == [False, True, False, True, False, False]


def test_check_finds_a_broken_structure() -> None:
    """``_check`` (called after every step of the state machines above) fails on each kind of corruption."""
    import copy

    lock = RangeLock(k(0), k(100), 100)
    lock.try_lock(k(10), k(20), 7, 1)
    lock.try_lock(k(30), k(40), 8, 1)
    lock._check()

    def broken(how: str) -> RangeLock:
        bad = copy.deepcopy(lock)
        if how == "a hole lost":
            bad._unlocked = RangeTsMap(k(0), k(100), 100)
            bad._unlocked.unset(k(0), k(40))
        elif how == "a free slot holding a ts":
            bad._ts[bad._free[-1]] = 5
        elif how == "a region unfiled":
            del bad._by_region[8]
        elif how == "the initialized count off":
            bad._initialized += 1
        elif how == "the index stale":
            bad._index_changes.clear()
            bad._dense = None
            bad._index_ids = bad._index_ids[:0]
            bad._index_slots = bad._index_slots[:0]
        return bad

    for how in ("a hole lost", "a free slot holding a ts", "a region unfiled", "the initialized count off",
                "the index stale"):
        with pytest.raises(AssertionError):
            broken(how)._check()
