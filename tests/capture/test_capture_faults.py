"""The continuous capture under faults (issue 55 item 5), on the session's three-store cluster: ``kill -9`` of the
capture mid-window, two captures racing for the lease (and the fence that stops the one that lost it), a store stop,
PD leader moves, region splits and merges, and the puller's fault storm, each while rows are written.

Every test runs windows through ``changefeed run`` (:func:`cdc_core.changefeed.runner.run_until`) that read the
capture's parts, then checks the two promises: the Delta table equals the upstream snapshot at the checkpoint
(nothing lost), and the windows' bronze events are exactly the upstream's committed changes of the table, each once
(nothing twice: the capture dedups a re-scanned region's re-delivery at seal, and a restarted capture resumes
after its last durable part). Each prints its figures: changes, incremental scans the stores started and regions
registered during the fault (a steady window starts none).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cdc_core import durable
from cdc_core.capture import control, parts
from cdc_core.capture import lease as capture_lease
from cdc_core.changefeed import runner
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import key as keycodec
from cdc_core.codec import tso
from cdc_core.upstream_record import pid_alive
from testkit.e2e import cli, typed_rows_match
from testkit.puller import mvcc_history
from testkit.storm import Storm

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

HANDLES = 2_000  # the writer's ids and the faults' split handles: [-HANDLES, HANDLES)
FLUSH_S = "0.3"


def until(cond: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll ``cond`` until it holds (its value), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        time.sleep(0.05)


def cdc_counters(ec: Any) -> dict[str, int]:
    """The stores' change-feed counters, as ``cdcflow upstream status --json`` sums them under ``"cdc"``:
    incremental scans started since each store started, and regions registered now."""
    nodes = list(ec.cluster.stores.values())
    return {"incremental_scans": sum(n.cdc.scan_gate.started for n in nodes),
            "registered_regions": sum(n.cdc.captured_regions() for n in nodes)}


@dataclass
class Writer:
    """Random single- and few-row inserts, updates and deletes of ``db.t`` through SQL on a thread, until stopped.

    A statement refused by a fault is retried later (the test compares with the upstream, not with the writer's
    belief); after one, the writer reloads the ids it thinks exist."""

    pd: str
    db: str
    seed: int = 3
    statements: int = 0
    refused: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> Writer:
        self._thread = threading.Thread(target=self._run, name=f"writer-{self.db}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(60)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error

    def wrote(self, n: int, timeout: float = 60.0) -> None:
        """Wait until ``n`` more statements committed."""
        target = self.statements + n
        until(lambda: self.statements >= target or self.error is not None, timeout, f"{n} statements")

    def _run(self) -> None:
        rng = random.Random(self.seed)
        try:
            with UpstreamClient(self.pd, timeout=30) as c:
                present = {r["id"] for r in c.query(f"SELECT id FROM {self.db}.t")}
                while not self._stop.is_set():
                    ids = {rng.randrange(-HANDLES, HANDLES) for _ in range(rng.randint(1, 4))}
                    new, old = sorted(ids - present), sorted(ids & present)
                    if new and (rng.random() < 0.6 or not old):
                        stmt = f"INSERT INTO {self.db}.t VALUES " + ", ".join(f"({i}, {rng.randrange(1000)})"
                                                                               for i in new)
                        after = present | set(new)
                    elif rng.random() < 0.7:
                        stmt = f"UPDATE {self.db}.t SET v = v + 1 WHERE id IN ({', '.join(map(str, old))})"
                        after = present
                    else:
                        stmt = f"DELETE FROM {self.db}.t WHERE id IN ({', '.join(map(str, old))})"
                        after = present - set(old)
                    try:
                        c.execute(stmt)
                    except Exception:  # a fault refused it (a stopped store, a PD election): reload and go on
                        self.refused += 1
                        with contextlib.suppress(Exception):
                            present = {r["id"] for r in c.query(f"SELECT id FROM {self.db}.t")}
                        continue
                    present = after
                    self.statements += 1
        except BaseException as exc:  # handed to the test
            self.error = exc


@dataclass
class Feed:
    """A changefeed of ``db.t`` on the three-store cluster, in a private CDCFLOW_HOME."""

    ec: Any
    cid: str
    db: str
    sink: Path
    start_ts: int
    client: UpstreamClient
    windows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def sink_uri(self) -> str:
        return f"file://{self.sink}"

    def start_capture(self) -> int:
        return int(control.start_detached(self.cid, flush_interval_s=float(FLUSH_S))["pid"])

    def run_windows(self, until_ts: int | None = None, source: str = "capture") -> list[dict[str, Any]]:
        """Windows up to ``until_ts`` (default: now); each read from ``source`` (the capture's parts)."""
        out = runner.run_until(self.cid, until_ts or self.client.get_ts())
        for w in out:
            assert not w["skipped"] and w["pull"]["source"] == source, w["pull"]
        self.windows += out
        return out

    def checkpoint(self) -> int:
        return int(self.windows[-1]["publish"]["checkpoint_ts"])

    def check(self) -> dict[str, int]:
        """Delta equals the upstream at the checkpoint; the windows' events are the upstream's changes, once each.
        Returns the figures."""
        ts = self.checkpoint()
        rows = typed_rows_match(self.client, self.sink, self.db, "t", ts)
        start, end = keycodec.table_span(self.ec.faults.table_id(self.db, "t"))
        history = mvcc_history(self.ec, start, end, self.start_ts, ts)
        events = sum(int(w["pull"]["events"]) for w in self.windows)
        assert events == len(history), f"{events} events in the windows, {len(history)} upstream changes"
        return {"changes": len(history), "rows": rows, "windows": len(self.windows)}


_feeds = iter(range(1, 1_000))


@pytest.fixture
def feed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, multi_cluster: Any,
         request: pytest.FixtureRequest) -> Iterator[Feed]:
    """``db.t`` in 8 regions on the three-store cluster, its changefeed created (``request.param``: more of its
    TOML); every capture stopped at the end."""
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CDCFLOW_UPSTREAM", multi_cluster.pd_addr)
    n = next(_feeds)
    db, cid = f"capf{n}", f"capf{n}"
    with UpstreamClient(multi_cluster.pd_addr, timeout=30) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; "
                  f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
        multi_cluster.faults.split_table(db, "t", lo=-HANDLES, hi=HANDLES, regions=8)
        start_ts = c.get_ts()
        cfg = tmp_path / "feed.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{tmp_path / "lake"}"\nstart-ts = {start_ts}\n'
                       f'[filter]\nrules = ["{db}.*"]\n{getattr(request, "param", "")}')
        cli("changefeed", "create", "--config", str(cfg))
        try:
            yield Feed(multi_cluster, cid, db, tmp_path / "lake", start_ts, c)
        finally:
            with contextlib.suppress(Exception):
                control.stop(cid)
            for store in (1, 2, 3):
                multi_cluster.faults.start_store(store)
            multi_cluster.faults.transfer_pd_leader(1)


def figures(name: str, feed: Feed, before: dict[str, int], **extra: Any) -> dict[str, Any]:
    """The test's figures (printed): its changes and windows, the incremental scans the stores started since
    ``before`` (the fault's re-registrations), the regions registered now (the capture still runs)."""
    after = cdc_counters(feed.ec)
    out = {**feed.check(), "incremental_scans": after["incremental_scans"] - before["incremental_scans"],
           "registered_regions": after["registered_regions"], **extra}
    print(f"capture fault {name}:", json.dumps(out))
    return out


def kill9(pid: int) -> None:
    """``kill -9`` of a capture the test started, reaped so that its pid is gone at once."""
    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    until(lambda: not pid_alive(pid), 10, "the killed capture gone")


class WindowThread:
    """``changefeed run`` to a target on a thread: its result, or its error, for the test."""

    def __init__(self, feed: Feed, target: int) -> None:
        self.feed, self.target = feed, target
        self.result: list[dict[str, Any]] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="window", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self.feed.run_windows(self.target)
        except BaseException as exc:  # handed to the test
            self.error = exc

    def join(self, timeout: float = 120.0) -> list[dict[str, Any]]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the window did not finish"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def future_ts(c: UpstreamClient, seconds: float) -> int:
    """A TSO ``seconds`` ahead of the upstream's now: a window target the capture cannot have reached yet."""
    now = c.get_ts()
    return tso.compose(tso.physical_ms(now) + int(seconds * 1000), 0)


def test_kill_9_mid_window_the_window_waits_for_a_new_capture(feed: Feed) -> None:
    c, sink = feed.client, feed.sink_uri
    pid = feed.start_capture()
    writer = Writer(feed.ec.pd_addr, feed.db).start()
    try:
        writer.wrote(20)
        before = cdc_counters(feed.ec)
        # 1. Killed mid-window: the window started while the capture ran; its target is ahead of the capture.
        target = future_ts(c, 2.0)
        win = WindowThread(feed, target)
        until(lambda: (parts.resolved_ts(sink, feed.cid) or 0) > feed.start_ts, 30, "the capture's first parts")
        kill9(pid)
        assert (parts.resolved_ts(sink, feed.cid) or 0) < target
        assert capture_lease.holder(feed.cid) is not None  # held by the dead: not released
        writer.wrote(20)  # rows written while no capture runs
        until(lambda: c.get_ts() > target, 10, "the target passed")
        assert win.thread.is_alive()  # the window waits (a pull of its own would have been its fallback)
        pid = feed.start_capture()
        win.join()
        # 2. Killed between windows: a window started while it is down waits for the next capture too.
        kill9(pid)
        writer.wrote(20)
        target = c.get_ts()
        win = WindowThread(feed, target)
        until(lambda: c.get_ts() > target, 10, "the target passed")
        writer.wrote(10)
        assert win.thread.is_alive() and capture_lease.live_holder(feed.cid) is None
        pid = feed.start_capture()
        win.join()
    finally:
        writer.stop()
    feed.run_windows()
    got = figures("kill -9", feed, before, restarts=2, refused=writer.refused)
    assert got["windows"] >= 3


def test_two_captures_race_for_the_lease_and_the_loser_of_a_takeover_is_fenced(feed: Feed, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "cdc_core.cli.main", "capture", "start", feed.cid, "--flush-interval", FLUSH_S]
    logs = [tmp_path / "race-a.log", tmp_path / "race-b.log"]
    procs = []
    for log in logs:
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
    writer = Writer(feed.ec.pd_addr, feed.db).start()
    try:
        # One wins the lease; the other is refused and exits.
        loser = until(lambda: next((p for p in procs if p.poll() is not None), None), 60, "the race's loser to exit")
        winner = next(p for p in procs if p is not loser)
        assert loser.returncode != 0 and "already runs" in logs[procs.index(loser)].read_text()
        until(lambda: (h := capture_lease.live_holder(feed.cid)) is not None and h.pid == winner.pid, 30,
              "the winner holding the lease")
        assert winner.poll() is None
        before = cdc_counters(feed.ec)
        writer.wrote(20)
        until(lambda: (parts.resolved_ts(feed.sink_uri, feed.cid) or 0) > feed.start_ts, 30, "the winner's parts")

        # The winner stalls (SIGSTOP) past its lease's expiry: a new capture takes the lease over.
        lock = capture_lease.lease_path(feed.cid).with_suffix(".lock")
        while True:
            os.kill(winner.pid, signal.SIGSTOP)
            with open(lock, "w") as f:  # stopped outside the lease's lock, or the takeover would wait on it
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.kill(winner.pid, signal.SIGCONT)
                    continue
                held = capture_lease.CaptureLease(**json.loads(capture_lease.lease_path(feed.cid).read_text()))
                expired = {**held.__dict__, "expires_at": time.time() - 1}  # as if TTL_S passed while stopped
                durable.write_file(capture_lease.lease_path(feed.cid), json.dumps(expired))
                fcntl.flock(f, fcntl.LOCK_UN)
                break
        stalled_at = parts.resolved_ts(feed.sink_uri, feed.cid) or 0
        new_pid = feed.start_capture()
        writer.wrote(20)
        until(lambda: (parts.resolved_ts(feed.sink_uri, feed.cid) or 0) > stalled_at, 30, "the new capture's parts")
        os.kill(winner.pid, signal.SIGCONT)
        # Its next part is refused by the fence, or its next renewal finds the lease taken (whichever comes first):
        # it writes nothing more and exits.
        rc = until(lambda: winner.poll() is not None, 30, "the fenced capture to exit") and winner.returncode
        said = logs[procs.index(winner)].read_text()
        assert rc != 0 and ("it must stop" in said or "was taken over" in said), said
        h = capture_lease.live_holder(feed.cid)
        assert h is not None and h.pid == new_pid
        got = parts.list_parts(feed.sink_uri, feed.cid)
        assert all(a.to_ts == b.from_ts for a, b in itertools.pairwise(got))  # still contiguous
    finally:
        writer.stop()
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                p.terminate()
                p.wait(30)
    feed.run_windows()
    figures("lease race", feed, before, refused=writer.refused)


def test_a_store_stop_and_start_while_capturing(feed: Feed) -> None:
    feed.start_capture()
    writer = Writer(feed.ec.pd_addr, feed.db).start()
    try:
        writer.wrote(30)
        feed.run_windows()
        steady = cdc_counters(feed.ec)
        writer.wrote(10)
        feed.run_windows()  # a steady window: the capture's streams stay open
        before = cdc_counters(feed.ec)
        assert before["incremental_scans"] == steady["incremental_scans"], "a steady window started a scan"
        led = {r.leader_store_id for r in feed.ec.faults.table_regions(feed.db, "t")}
        victim = min(led)
        feed.ec.faults.stop_store(victim, move_leaders=True)  # its streams break; PD names the new leaders
        writer.wrote(40)
        feed.ec.faults.start_store(victim)
        writer.wrote(20)
    finally:
        writer.stop()
    feed.run_windows()
    got = figures("store stop", feed, before, steady_window_scans=0, refused=writer.refused)
    assert got["incremental_scans"] >= 1  # the moved regions were registered again on their new leaders


def test_pd_leader_moves_while_capturing(feed: Feed) -> None:
    feed.start_capture()
    writer = Writer(feed.ec.pd_addr, feed.db).start()
    try:
        writer.wrote(20)
        before = cdc_counters(feed.ec)
        for member in (2, 3, 1):
            feed.ec.faults.transfer_pd_leader(member)
            # a split after each move: the capture must ask the new PD leader for the regions
            feed.ec.faults.split_table(feed.db, "t", handles=[random.Random(member).randrange(-HANDLES, HANDLES)])
            writer.wrote(20)
    finally:
        writer.stop()
    feed.run_windows()
    got = figures("PD leader moves", feed, before, refused=writer.refused)
    assert got["incremental_scans"] >= 1


def test_region_splits_and_merges_while_capturing(feed: Feed) -> None:
    feed.start_capture()
    writer = Writer(feed.ec.pd_addr, feed.db).start()
    rng = random.Random(5)
    try:
        writer.wrote(20)
        before = cdc_counters(feed.ec)
        for i in range(12):
            f = feed.ec.faults
            if i % 3 == 2:
                regions = f.table_regions(feed.db, "t")
                j = rng.randrange(len(regions) - 1)
                f.merge(regions[j].id, regions[j + 1].id)
            else:
                f.split_table(feed.db, "t", handles=[rng.randrange(-HANDLES, HANDLES) for _ in range(2)])
            writer.wrote(8)
            if i == 5:
                feed.run_windows()  # a window in the middle of it
    finally:
        writer.stop()
    feed.run_windows()
    got = figures("splits and merges", feed, before, refused=writer.refused)
    assert got["incremental_scans"] >= 8


def test_the_fault_storm_against_the_capture(feed: Feed) -> None:
    feed.start_capture()
    storm = Storm(feed.ec, feed.db, feed.ec.faults.table_id(feed.db, "t"), handles=HANDLES)
    writer = Writer(feed.ec.pd_addr, feed.db).start()
    stop = threading.Event()
    storming = threading.Thread(target=storm.run, args=(stop,), name="storm", daemon=True)
    try:
        writer.wrote(20)
        before = cdc_counters(feed.ec)
        storming.start()
        writer.wrote(150, timeout=120)
        feed.run_windows()  # a window while the storm blows
        writer.wrote(150, timeout=120)
    finally:
        stop.set()
        storming.join(60)
        writer.stop()
    for store in (1, 2, 3):
        feed.ec.faults.start_store(store)
    feed.run_windows()
    got = figures("storm", feed, before, faults=storm.counts, refused=writer.refused)
    assert sum(storm.counts.get(k, 0) for k in ("split", "merge", "transfer", "stop", "drop")) >= 5, storm.counts
    assert got["incremental_scans"] >= 5


@pytest.mark.parametrize("feed", ["[puller]\npull-timeout-s = 3\n"], indirect=True)
def test_a_dead_capture_not_replaced_within_the_pull_timeout_hands_the_window_to_its_own_pull(feed: Feed) -> None:
    c = feed.client
    pid = feed.start_capture()
    until(lambda: (parts.resolved_ts(feed.sink_uri, feed.cid) or 0) > feed.start_ts, 30, "the capture's first parts")
    c.execute(f"INSERT INTO {feed.db}.t VALUES (1, 1), (2, 2)")
    kill9(pid)
    held = capture_lease.holder(feed.cid)
    assert held is not None
    c.execute(f"UPDATE {feed.db}.t SET v = 20 WHERE id = 2; INSERT INTO {feed.db}.t VALUES (3, 3)")
    before = cdc_counters(feed.ec)
    (w,) = feed.run_windows(source="pull")  # no new capture within 3 s of the dead one's last renewal
    assert time.time() - held.renewed_at >= 3
    got = figures("dead capture, pull fallback", feed, before)
    assert got["rows"] == 3 and w["pull"]["events"] == 4
