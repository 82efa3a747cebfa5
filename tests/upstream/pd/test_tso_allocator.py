from __future__ import annotations

import threading

import pytest

from cdc_core.codec import tso as tso_codec
from cdc_core.upstream.pd.tso import TsoAllocator


def test_strictly_increasing_with_real_clock() -> None:
    a = TsoAllocator()
    seen = [a.next() for _ in range(5000)]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert a.last() == seen[-1]


def test_clock_going_backwards_never_moves_ts_back() -> None:
    clock = iter([1000, 1000, 900, 800, 1000, 1001])
    a = TsoAllocator(clock_ms=lambda: next(clock), update_physical_interval_ms=1)
    got = [a.next() for _ in range(6)]
    assert got == sorted(got) and len(set(got)) == 6
    assert [tso_codec.parse(t) for t in got] == [(1000, 0), (1000, 1), (1000, 2), (1000, 3), (1000, 4), (1001, 0)]


def test_the_physical_part_follows_the_clock_once_per_update_interval_as_pds() -> None:
    clock = iter([1000, 1010, 1049, 1050, 1060, 1200])
    a = TsoAllocator(clock_ms=lambda: next(clock))  # PD's 50 ms
    got = [tso_codec.parse(a.next()) for _ in range(6)]
    assert got == [(1000, 0), (1000, 1), (1000, 2), (1050, 0), (1050, 1), (1200, 0)]
    with pytest.raises(ValueError):
        TsoAllocator(update_physical_interval_ms=0)


def test_logical_overflow_moves_physical_forward() -> None:
    a = TsoAllocator(clock_ms=lambda: 5)
    a.next(tso_codec.MAX_LOGICAL)  # logical 0..MAX-1 used
    last = a.next(2)
    assert tso_codec.parse(last) == (6, 1)


def test_count_returns_last_of_range() -> None:
    a = TsoAllocator(clock_ms=lambda: 7)
    assert tso_codec.parse(a.next(10)) == (7, 9)
    assert tso_codec.parse(a.next()) == (7, 10)
    with pytest.raises(ValueError):
        a.next(0)


def test_thread_safety() -> None:
    a = TsoAllocator()
    out: list[list[int]] = [[] for _ in range(4)]

    def work(i: int) -> None:
        out[i].extend(a.next() for _ in range(2000))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [t for part in out for t in part]
    assert len(set(flat)) == len(flat)
    assert all(part == sorted(part) for part in out)
