"""The capture loop in-process against the session's upstream: one capture per changefeed, parts that hold every
row event of the replicated tables (a table created while capturing included), a clean stop that releases the
lease."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture import lease as capture_lease
from cdc_core.capture import parts
from cdc_core.capture.capture import Capture
from cdc_core.client.upstream import UpstreamClient
from cdc_core.schema import ddl_history
from testkit.e2e import cli


def until(cond: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


class Running:
    """A capture run in a thread of its own (its own event loop), stopped as SIGTERM would."""

    def __init__(self, cid: str, **kwargs: Any) -> None:
        self.capture = Capture(cid, **{"flush_interval_s": 0.3, **kwargs})
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(self.capture.run())
        except BaseException as exc:  # handed to the test
            self.error = exc

    def stop(self) -> None:
        until(lambda: self.capture._loop is not None)
        self.capture.stop()
        self.thread.join(30)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


@pytest.fixture
def feed(cdc_home: Path, upstream_cluster: Any) -> Iterator[tuple[str, str, UpstreamClient]]:
    db = "cap_loop"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; "
                  f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v INT)")
        start_ts = c.get_ts()
        sink = f"file://{cdc_home / 'lake'}"
        cfg = cdc_home / "feed.toml"
        cfg.write_text(f'changefeed-id = "cap"\nsink-uri = "{sink}"\nstart-ts = {start_ts}\n'
                       f'[filter]\nrules = ["{db}.*"]\n')
        cli("changefeed", "create", "--config", str(cfg))
        yield "cap", sink, c


def row_events(sink: str, cid: str, upto: int) -> Counter[int]:
    """Put events per table id in the parts (the DDL job table's left out)."""
    first = parts.list_parts(sink, cid)[0].from_ts
    out: Counter[int] = Counter()
    for b in parts.read_events(sink, cid, first, upto):
        for tid, op in zip(b.column("table_id").to_pylist(), b.column("op").to_pylist(), strict=True):
            if tid != ddl_history.JOB_TABLE_ID and op == "put":
                out[tid] += 1
    return out


def test_the_capture_writes_every_row_event_and_follows_new_tables(feed: tuple[str, str, UpstreamClient]) -> None:
    cid, sink, c = feed
    run = Running(cid)
    try:
        until(lambda: capture_lease.state(cid).get("resolved_ts") is not None)
        holder = capture_lease.live_holder(cid)
        assert holder is not None and holder.pid == os.getpid()
        c.execute("INSERT INTO cap_loop.a VALUES " + ", ".join(f"({i}, {i})" for i in range(50)))
        c.execute("CREATE TABLE cap_loop.b (id INT PRIMARY KEY); INSERT INTO cap_loop.b VALUES (1), (2), (3)")
        c.execute("INSERT INTO cap_loop.a VALUES (100, 100)")
        ts = c.get_ts()
        until(lambda: (parts.resolved_ts(sink, cid) or 0) >= ts)
        assert sorted(row_events(sink, cid, ts).values()) == [3, 51]
        st = capture_lease.state(cid)
        assert st["state"] == "up" and st["spans"] == 3 and st["regions"] >= 3  # job table, a, b
        assert st["resolved_ts"] >= ts and st["resolved_lag_s"] < 30
        got = parts.list_parts(sink, cid)
        assert all(a.to_ts == b.from_ts for a, b in itertools.pairwise(got))  # contiguous
    finally:
        run.stop()
    assert capture_lease.live_holder(cid) is None
    assert capture_lease.state(cid)["state"] == "down"


def test_a_restart_resumes_at_the_last_part_with_no_gap(feed: tuple[str, str, UpstreamClient]) -> None:
    cid, sink, c = feed
    run = Running(cid)
    c.execute("INSERT INTO cap_loop.a VALUES (1, 1), (2, 2)")
    ts1 = c.get_ts()
    until(lambda: (parts.resolved_ts(sink, cid) or 0) >= ts1)
    run.stop()
    stopped_at = parts.resolved_ts(sink, cid)
    c.execute("INSERT INTO cap_loop.a VALUES (3, 3); UPDATE cap_loop.a SET v = 20 WHERE id = 2")
    run = Running(cid)
    try:
        ts2 = c.get_ts()
        until(lambda: (parts.resolved_ts(sink, cid) or 0) >= ts2)
        got = parts.list_parts(sink, cid)
        assert any(p.from_ts == stopped_at for p in got)
        assert all(a.to_ts == b.from_ts for a, b in itertools.pairwise(got))
        assert sum(row_events(sink, cid, ts2).values()) == 4  # 2 + 1 inserts + 1 update, none twice
    finally:
        run.stop()


def test_a_part_holds_at_most_part_rows_events(feed: tuple[str, str, UpstreamClient]) -> None:
    cid, sink, c = feed
    run = Running(cid, part_rows=10, flush_interval_s=3.0)  # the row bound seals first
    try:
        c.execute("; ".join(f"INSERT INTO cap_loop.a VALUES ({i}, {i})" for i in range(35)))  # 35 commit ts
        ts = c.get_ts()
        until(lambda: sum(row_events(sink, cid, parts.resolved_ts(sink, cid) or 0).values()) >= 30
              if parts.list_parts(sink, cid) else False)
        got = parts.list_parts(sink, cid)
        assert max(p.rows for p in got) <= 10 and len(got) >= 3
        assert all(a.to_ts == b.from_ts for a, b in itertools.pairwise(got))
        until(lambda: (parts.resolved_ts(sink, cid) or 0) >= ts)  # the rest once the flush interval seals it
        assert sum(row_events(sink, cid, ts).values()) == 35
    finally:
        run.stop()
