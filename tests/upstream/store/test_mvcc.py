from __future__ import annotations

import pytest

from cdc_core.upstream.store.mvcc import (
    KeyLockedError,
    Lock,
    LockNotFoundError,
    Mutation,
    MvccStore,
    Op,
    VersionRecord,
    WriteConflictError,
)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, bytes, int]] = []

    def on_prewrite(self, lock: Lock) -> None:
        self.events.append(("prewrite", lock.key, lock.start_ts))

    def on_commit(self, record: VersionRecord) -> None:
        self.events.append(("commit", record.key, record.commit_ts))

    def on_rollback(self, lock: Lock) -> None:
        self.events.append(("rollback", lock.key, lock.start_ts))


def put(store: MvccStore, start: int, commit: int, **kv: bytes | None) -> None:
    muts = [Mutation(k.encode(), Op.PUT, v) if v is not None else Mutation(k.encode(), Op.DELETE)
            for k, v in kv.items()]
    store.prewrite(muts, muts[0].key, start)
    store.commit([m.key for m in muts], start, commit)


def test_snapshot_reads_see_versions_by_commit_ts() -> None:
    s = MvccStore()
    put(s, 10, 11, a=b"1", b=b"x")
    put(s, 20, 21, a=b"2")
    put(s, 30, 31, a=None)
    assert s.get(b"a", 5) is None
    assert s.get(b"a", 11) == b"1"
    assert s.get(b"a", 20) == b"1"
    assert s.get(b"a", 21) == b"2"
    assert s.get(b"a", 31) is None  # tombstone
    assert s.scan(b"", b"", 25) == [(b"a", b"2"), (b"b", b"x")]
    assert s.scan(b"b", b"c", 100) == [(b"b", b"x")]
    assert [v.commit_ts for v in s.versions(b"a")] == [11, 21, 31]


def test_locks_block_other_transactions_and_are_ignored_by_readers() -> None:
    s = MvccStore()
    put(s, 1, 2, k=b"v0")
    s.prewrite([Mutation(b"k", Op.PUT, b"v1")], b"k", 10)
    assert s.get(b"k", 100) == b"v0"  # a reader's ts was taken before the lock's commit ts
    assert s.min_lock_ts(b"", b"") == 10
    assert s.lock_of(b"k").old_value == b"v0"  # type: ignore[union-attr]
    with pytest.raises(KeyLockedError):
        s.prewrite([Mutation(b"k", Op.PUT, b"other")], b"k", 11)
    s.prewrite([Mutation(b"k", Op.PUT, b"v1")], b"k", 10)  # the same txn again: idempotent
    s.commit([b"k"], 10, 12)
    assert s.min_lock_ts(b"", b"") is None
    assert s.get(b"k", 12) == b"v1"
    s.commit([b"k"], 10, 12)  # commit is idempotent


def test_write_conflict_and_all_or_nothing_prewrite() -> None:
    s = MvccStore()
    put(s, 5, 20, x=b"1")
    with pytest.raises(WriteConflictError):
        s.prewrite([Mutation(b"y", Op.PUT, b"2"), Mutation(b"x", Op.PUT, b"3")], b"y", 10)
    assert s.lock_of(b"y") is None  # nothing was locked


def test_rollback_drops_locks_and_commit_without_lock_fails() -> None:
    s = MvccStore()
    rec = Recorder()
    s.add_observer(rec)
    s.prewrite([Mutation(b"a", Op.PUT, b"1"), Mutation(b"b", Op.DELETE)], b"a", 10)
    s.rollback([b"a", b"b"], 10)
    assert s.locks_in(b"", b"") == []
    with pytest.raises(LockNotFoundError):
        s.commit([b"a"], 10, 11)
    assert rec.events == [("prewrite", b"a", 10), ("prewrite", b"b", 10), ("rollback", b"a", 10),
                          ("rollback", b"b", 10)]


def test_check_op_checks_conflicts_but_writes_nothing() -> None:
    s = MvccStore()
    s.prewrite([Mutation(b"a", Op.PUT, b"1"), Mutation(b"c", Op.CHECK)], b"a", 10)
    assert s.lock_of(b"c") is None
    s.commit([b"a"], 10, 11)
    put(s, 12, 13, c=b"z")
    with pytest.raises(WriteConflictError):
        s.prewrite([Mutation(b"c", Op.CHECK)], b"c", 11)


def test_versions_after_lists_changes_with_old_values_in_chunks() -> None:
    s = MvccStore()
    put(s, 1, 2, a=b"a1", b=b"b1")
    put(s, 3, 4, a=b"a2")
    put(s, 5, 6, b=None)
    put(s, 7, 8, c=b"c1")
    recs, cursor = s.versions_after(b"", b"", 2)
    assert cursor is None
    assert [(r.key, r.commit_ts, r.op, r.value, r.old_value) for r in recs] == [
        (b"a", 4, Op.PUT, b"a2", b"a1"),
        (b"b", 6, Op.DELETE, None, b"b1"),
        (b"c", 8, Op.PUT, b"c1", None),
    ]
    # chunked: one key per call, resuming after the returned key
    got, cur = [], None
    while True:
        part, cur = s.versions_after(b"", b"", 0, from_key=cur, key_limit=1)
        got.extend((r.key, r.commit_ts) for r in part)
        if cur is None:
            break
    assert got == [(b"a", 2), (b"a", 4), (b"b", 2), (b"b", 6), (b"c", 8)]
    recs, _ = s.versions_after(b"b", b"c", 0)
    assert [r.key for r in recs] == [b"b", b"b"]


def _count_walked_keys(s: MvccStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the keys the store's walks read from now on (until ``monkeypatch`` undoes it): ``[n]``."""
    walked = [0]
    real = s._writes.irange

    def counting(*args: object, **kwargs: object) -> object:
        for k in real(*args, **kwargs):
            walked[0] += 1
            yield k

    monkeypatch.setattr(s._writes, "irange", counting)
    return walked


def _count_index_passes(s: MvccStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the reads of the index by commit ts from now on: ``[n]``."""
    passes = [0]
    real = s._by_ts.islice

    def counting(*args: object, **kwargs: object) -> object:
        passes[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(s._by_ts, "islice", counting)
    return passes


def test_versions_after_by_commit_ts_index_equals_the_key_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past a checkpoint that most keys predate, the incremental scan reads the versions committed since (the index
    by commit ts) instead of every key; both give the same records, chunks, resume keys and GC behaviour."""
    import random

    rng = random.Random(11)
    s = MvccStore()
    ts = 10
    for i in range(2000):  # the bulk, before any checkpoint
        put(s, ts, ts + 1, **{f"k{i:05d}": b"v0"})
        ts += 2
    checkpoints = [ts]
    for _ in range(300):  # a few changes after it, some keys many times, deletes too
        k = f"k{rng.randrange(2000):05d}"
        put(s, ts, ts + 1, **{k: None if rng.random() < 0.2 else f"v{ts}".encode()})
        ts += 2
        if rng.random() < 0.02:
            checkpoints.append(ts)

    def scan(after: int, lo: bytes, hi: bytes, limit: int | None) -> list[tuple]:
        """The records of the range, page after page (pages end at other keys: the walk counts every key read)."""
        out: list[tuple] = []
        cur = None
        while True:
            recs, cur = s.versions_after(lo, hi, after, from_key=cur, key_limit=limit)
            out.extend((r.key, r.commit_ts, r.op, r.value, r.old_value) for r in recs)
            if cur is None:
                return out

    cases = [(c, lo, hi, limit) for c in checkpoints for lo, hi in [(b"", b""), (b"k00500", b"k01500")]
             for limit in (None, 7)]
    by_index = [scan(*c) for c in cases]
    assert all(by_index[:-4]) and by_index[0] != by_index[-4]
    monkeypatch.setattr(s, "index_scan_ratio", 0.0)  # every call walks the keys
    walked = _count_walked_keys(s, monkeypatch)
    assert [scan(*c) for c in cases] == by_index
    assert walked[0] > 2000
    monkeypatch.undo()
    s.gc(checkpoints[-1])  # the index forgets what the safe point passed; later checkpoints still read the same
    assert scan(checkpoints[-1], b"", b"", None) == by_index[-4]


def test_a_pull_of_many_regions_passes_over_the_versions_after_its_checkpoint_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty regions scanned from one checkpoint (a window's pull) read the index by commit ts once, walk no key,
    and see what the walk sees; the kept set of changed keys follows later commits, and is dropped when the safe
    point or an ingest passes its ts (a scan from there walks)."""
    import random

    rng = random.Random(7)
    s = MvccStore()
    s.ingest(((f"k{i:05d}".encode(), b"v0") for i in range(2000)), 5)
    ts = 10
    for _ in range(200):
        put(s, ts, ts + 1, **{f"k{rng.randrange(2000):05d}": f"v{ts}".encode()})
        ts += 2
    checkpoint = ts
    regions = [(f"k{i:05d}".encode(), f"k{i + 100:05d}".encode()) for i in range(0, 2000, 100)]

    def pull() -> list[tuple]:
        out: list[tuple] = []
        for lo, hi in regions:
            cur = None
            while True:
                recs, cur = s.versions_after(lo, hi, checkpoint, from_key=cur, key_limit=3)
                out.extend((r.key, r.commit_ts, r.value, r.old_value) for r in recs)
                if cur is None:
                    break
        return out

    def walked_pull() -> list[tuple]:
        with monkeypatch.context() as m:
            m.setattr(s, "index_scan_ratio", 0.0)
            return pull()

    for round_ in range(3):  # commits between the pulls: in regions, at their edges, deletes
        for _ in range(40):
            k = f"k{rng.choice([rng.randrange(2000), 100 * rng.randrange(20), 2000 + rng.randrange(5)]):05d}"
            put(s, ts, ts + 1, **{k: None if rng.random() < 0.2 else f"v{ts}".encode()})
            ts += 2
        with monkeypatch.context() as m:
            passes = _count_index_passes(s, m)
            walked = _count_walked_keys(s, m)
            got = pull()
        assert got == walked_pull() and len(got) >= 40 * (round_ + 1) * 0.5
        assert walked[0] == 0 and passes[0] == (1 if round_ == 0 else 0), round_
    assert s.count(b"", b"", ts) == sum(1 for _ in s.iter_scan(b"", b"", ts))  # another ts: a set of its own
    assert len(s._after) == 2
    s.advance_safe_point(checkpoint + 1)
    assert checkpoint not in s._after and ts in s._after
    s.ingest([(b"z", b"1")], ts + 1)
    assert not s._after


def test_count_from_order_statistics_equals_the_key_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """COUNT(*)'s pushed-down count answers from the key map's order statistics and the versions after its ts,
    walking no key, and agrees with the walk and with the rows a scan returns at every ts: through ingests,
    deletes, re-inserts of deleted keys, keys born after the ts, and GC dropping tombstones."""
    import random

    rng = random.Random(18)
    s = MvccStore()
    s.ingest(((f"k{i:05d}".encode(), b"v0") for i in range(0, 3000, 2)), 5)  # a physical import first
    ts = 10
    marks = [ts]
    for _ in range(1500):  # inserts, updates, deletes, re-inserts; a few keys many times
        k = f"k{rng.randrange(3000):05d}"
        put(s, ts, ts + 1, **{k: None if rng.random() < 0.3 else f"v{ts}".encode()})
        ts += 2
        if rng.random() < 0.05:
            marks.append(ts)
    marks.append(ts)
    ranges = [(b"", b""), (b"k00500", b"k01500"), (b"k02990", b""), (b"a", b"b")]

    def walk(at: int, lo: bytes, hi: bytes) -> int:
        return sum(1 for _ in s.iter_scan(lo, hi, at))

    def keys_walked(at: int, lo: bytes, hi: bytes) -> tuple[int, int]:
        with monkeypatch.context() as m:
            walked = _count_walked_keys(s, m)
            n = s.count(lo, hi, at)
        return n, walked[0]

    # Marks late in the history have fewer versions after them than the wide ranges have keys: counted from the
    # statistics, no key walked (a range of a few keys is walked: that is cheaper than the versions after).
    late = [at for at in marks if s._by_ts.bisect_left((at + 1, b"")) > len(s._by_ts) - 500]
    assert len(late) > 3
    for at in late:
        for lo, hi in ranges:
            n, walked = keys_walked(at, lo, hi)
            assert n == walk(at, lo, hi), (at, lo, hi)
            if lo in (b"", b"k00500"):
                assert walked == 0, (at, lo, hi)
    with monkeypatch.context() as m:
        m.setattr(s, "index_scan_ratio", 0.0)  # every count walks the keys: the same answers
        assert all(s.count(lo, hi, at) == walk(at, lo, hi) for at in marks for lo, hi in ranges)
    assert s.count(b"", b"", 6) == 1500 and s.count(b"", b"", 4) == 0  # before and after the ingest: walked

    s.gc(marks[-3])  # tombstones at the safe point go: the statistics follow
    assert all(s.count(lo, hi, at) == walk(at, lo, hi) for at in marks[-3:] for lo, hi in ranges)
    assert all(s.get(k, ts) is None for k in s._dead) and len(s._dead) == sum(
        1 for k in s._writes if s.versions(k)[-1].op is Op.DELETE)


def test_observers_see_changes_in_order() -> None:
    s = MvccStore()
    rec = Recorder()
    s.add_observer(rec)
    put(s, 1, 2, a=b"1")
    assert rec.events == [("prewrite", b"a", 1), ("commit", b"a", 2)]
    s.remove_observer(rec)
    put(s, 3, 4, a=b"2")
    assert len(rec.events) == 2


def test_commit_ts_must_exceed_start_ts() -> None:
    s = MvccStore()
    s.prewrite([Mutation(b"a", Op.PUT, b"1")], b"a", 10)
    with pytest.raises(Exception, match="greater than start ts"):
        s.commit([b"a"], 10, 10)
