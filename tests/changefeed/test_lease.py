"""The window lease: one window of a changefeed at a time, waiters served in window order."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from cdc_core.changefeed import lease


def _fake_in_this_thread(monkeypatch: pytest.MonkeyPatch, name: str, fake: Callable[..., Any]) -> None:
    """``time.<name>`` is ``fake`` in the test's thread only: the module is global, and other threads of the process
    (a Spark session's, the session upstream's, when earlier tests started them) must keep the real clock."""
    me, real = threading.get_ident(), getattr(time, name)
    monkeypatch.setattr(time, name, lambda *a: fake(*a) if threading.get_ident() == me else real(*a))


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))


def test_one_holder_at_a_time_and_reentrant():
    lease.acquire("cf", "a", target_ts=10)
    assert lease.acquire("cf", "a", target_ts=10).owner == "a"  # a retried plan takes it again
    with pytest.raises(lease.LeaseBusy, match="busy: a window is being run by a"):
        lease.acquire("cf", "b", target_ts=5)
    assert lease.release("cf", "b") is False
    assert lease.holder("cf").owner == "a"
    assert lease.release("cf", "a") is True
    assert lease.holder("cf") is None
    assert lease.acquire("cf", "b", target_ts=5).owner == "b"


def test_changefeeds_are_independent():
    lease.acquire("one", "a")
    assert lease.acquire("two", "b").owner == "b"


def test_waiters_take_turns_in_window_order():
    lease.acquire("cf", "holder", target_ts=1)
    for owner, ts in [("late", 30), ("early", 10), ("middle", 20)]:
        with pytest.raises(lease.LeaseBusy):
            lease.acquire("cf", owner, target_ts=ts)
    assert lease.waiters("cf") == {"early": 10, "middle": 20, "late": 30}
    lease.release("cf", "holder")
    # Free, but "late" and "middle" are queued behind "early".
    with pytest.raises(lease.LeaseBusy, match="early"):
        lease.acquire("cf", "late", target_ts=30)
    with pytest.raises(lease.LeaseBusy, match="early"):
        lease.acquire("cf", "middle", target_ts=20)
    assert lease.acquire("cf", "early", target_ts=10).owner == "early"
    lease.release("cf", "early")
    assert lease.acquire("cf", "middle", target_ts=20).owner == "middle"
    lease.release("cf", "middle")
    assert lease.acquire("cf", "late", target_ts=30).owner == "late"


def test_a_waiter_that_went_away_leaves_the_queue(monkeypatch):
    lease.acquire("cf", "holder", target_ts=1)
    with pytest.raises(lease.LeaseBusy):
        lease.acquire("cf", "gone", target_ts=5)
    lease.release("cf", "holder")
    with pytest.raises(lease.LeaseBusy, match="gone"):
        lease.acquire("cf", "later", target_ts=9)
    now = lease.time.time()
    _fake_in_this_thread(monkeypatch, "time", lambda: now + lease.WAITER_STALE_S + 1)
    assert lease.waiters("cf") == {}
    assert lease.acquire("cf", "later", target_ts=9).owner == "later"
    assert lease.waiters("cf") == {}  # the holder is not a waiter


def test_expired_or_taken_over():
    lease.acquire("cf", "a", ttl_s=-1)  # already expired: its owner died long ago
    assert lease.holder("cf") is None
    assert lease.acquire("cf", "b").owner == "b"
    with pytest.raises(lease.LeaseBusy):
        lease.acquire("cf", "c", take_over=lambda held: False)
    seen = []
    got = lease.acquire("cf", "c", take_over=lambda held: seen.append(held.owner) or True)
    assert got.owner == "c" and seen == ["b"]


def test_wait_acquire_times_out_and_leaves_the_queue():
    lease.acquire("cf", "a")
    waits = []
    with pytest.raises(lease.LeaseBusy):
        lease.wait_acquire("cf", "b", timeout_s=0.0, poll_s=0.0, target_ts=1, on_wait=waits.append)
    lease.release("cf", "a")
    assert lease.acquire("cf", "c", target_ts=99).owner == "c"  # "b" is not queued any more


def test_wait_acquire_tells_on_wait_when_the_holder_changes_or_every_notify_interval(monkeypatch):
    clock = [1000.0]
    _fake_in_this_thread(monkeypatch, "monotonic", lambda: clock[0])
    _fake_in_this_thread(monkeypatch, "time", lambda: clock[0])  # leases and waiters age with the fake clock
    lease.acquire("cf", "a", ttl_s=1e6)
    polls = {"n": 0}

    def sleep(s: float) -> None:  # one poll = 2 s; "a" hands over to "b" after 20 s, "b" finishes at 55 s
        polls["n"] += 1
        clock[0] += s
        if polls["n"] == 10:
            lease.release("cf", "a")
            lease.acquire("cf", "b", ttl_s=1e6, target_ts=1)  # an earlier window: ahead of "w"
        if polls["n"] == 27:
            lease.release("cf", "b")

    _fake_in_this_thread(monkeypatch, "sleep", sleep)
    told: list[tuple[str, float]] = []
    got = lease.wait_acquire("cf", "w", timeout_s=600, poll_s=2.0, target_ts=5,
                             on_wait=lambda held: told.append((held.owner, clock[0] - 1000)))
    assert got.owner == "w" and polls["n"] == 27
    # 27 polls: told at the start, when "b" took over, and once 30 s after that; not on each poll.
    assert told == [("a", 0.0), ("b", 20.0), ("b", 50.0)]


def test_dead_cli_process_detected():
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = lease.Lease(owner=f"cli:{lease.socket.gethostname()}:{proc.stdout.strip()}", acquired_at=0, expires_at=1e12)
    alive = lease.Lease(owner=lease.process_owner(), acquired_at=0, expires_at=1e12)
    assert lease.dead_local_process(dead) is True
    assert lease.dead_local_process(alive) is False
    assert lease.dead_local_process(lease.Lease(owner="airflow:d:r", acquired_at=0, expires_at=1e12)) is False
    assert os.getpid() == int(alive.owner.rsplit(":", 1)[1])


def test_corrupt_file_is_named(tmp_path):
    lease.acquire("cf", "a")
    (tmp_path / "state" / "leases" / "cf.json").write_text("{nope")
    with pytest.raises(lease.ChangefeedError, match=r"cf\.json is corrupt"):
        lease.holder("cf")
