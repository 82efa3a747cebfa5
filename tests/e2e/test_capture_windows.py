"""End to end with a capture: windows run with ``runner.run_until`` while ``cdcflow capture start --detach`` runs
read the capture's parts (no subscription of their own), equal the upstream, follow a table created while
capturing, start no incremental scan on the stores once the capture is up, and survive a ``kill -9`` of the
capture: a restart resumes from its last part with nothing lost and nothing twice."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture import lease as capture_lease
from cdc_core.capture import parts
from cdc_core.changefeed import runner, tasks
from cdc_core.client.upstream import UpstreamClient
from testkit.e2e import cli, typed_rows_match

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

DB = "e2e_capture"


def scans(upstream_cluster: Any) -> int:
    """Incremental scans the stores started since they started (TiKV's tikv_cdc_scan_tasks{type="total"})."""
    return sum(s.cdc.scan_gate.started for s in upstream_cluster.cluster.stores.values())


def as_json(output: str) -> Any:
    """The JSON line of a command's output (the log may print lines around it)."""
    return json.loads(next(line for line in reversed(output.splitlines()) if line.startswith("{")))


def window(cid: str, ts: int) -> list[dict[str, Any]]:
    out = runner.run_until(cid, ts)
    assert out and not out[-1]["skipped"]
    return out


def test_windows_read_the_capture(cdc_home: Path, upstream_cluster: Any) -> None:
    sink = cdc_home / "lake"
    cid = "capwin"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {DB}; CREATE TABLE {DB}.acct (id INT PRIMARY KEY, bal INT, note VARCHAR(20))")
        start_ts = c.get_ts()
        cfg = cdc_home / "feed.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start_ts}\n'
                       f'[filter]\nrules = ["{DB}.*"]\n')
        cli("changefeed", "create", "--config", str(cfg))
        try:  # stopped in the finally whatever fails (a capture left running would outlive the test)
            pid = int(as_json(cli("capture", "start", cid, "--detach", "--flush-interval", "0.3"))["pid"])
            assert as_json(cli("capture", "status", cid, "--json"))["state"] == "up"
            c.execute(f"INSERT INTO {DB}.acct VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c')")
            (first,) = window(cid, c.get_ts())
            assert first["pull"]["source"] == "capture"
            assert typed_rows_match(c, sink, DB, "acct", first["publish"]["checkpoint_ts"]) == 3
            # The DAG's wait opens no stream either: the capture holds them.
            spec = tasks.wait_spec(tasks.plan(cid, interval_end_ts=c.get_ts()))
            assert spec["spans"] == [] and spec["capture_resolved_ts"] is not None

            # Steady windows: the capture's streams stay open; no window registers a region.
            before = scans(upstream_cluster)
            for i in range(2):
                c.execute(f"UPDATE {DB}.acct SET bal = bal + 1 WHERE id = 1; INSERT INTO {DB}.acct VALUES "
                          f"({10 + i}, {i}, 'steady'); DELETE FROM {DB}.acct WHERE id = {2 + i}")
                (w,) = window(cid, c.get_ts())
                assert w["pull"]["source"] == "capture"
                typed_rows_match(c, sink, DB, "acct", w["publish"]["checkpoint_ts"])
            assert scans(upstream_cluster) == before, "a steady window started an incremental scan"

            # A table created while capturing is subscribed by the capture and replicated.
            c.execute(f"CREATE TABLE {DB}.fresh (k INT PRIMARY KEY, v VARCHAR(8)); "
                      f"INSERT INTO {DB}.fresh VALUES (1, 'x'), (2, 'y')")
            (w,) = window(cid, c.get_ts())
            assert w["pull"]["source"] == "capture"
            assert typed_rows_match(c, sink, DB, "fresh", w["publish"]["checkpoint_ts"]) == 2

            # kill -9 mid-way: events committed while it is down are resumed from its last part.
            c.execute(f"INSERT INTO {DB}.acct VALUES (20, 1, 'before kill')")
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # our child (the detached start): reaped, so its pid is gone at once
            assert as_json(cli("capture", "status", cid, "--json"))["state"] == "down"
            last = parts.resolved_ts(f"file://{sink}", cid)
            c.execute(f"INSERT INTO {DB}.acct VALUES (21, 2, 'while down'); UPDATE {DB}.acct SET note = 'moved' "
                      f"WHERE id = 20; INSERT INTO {DB}.fresh VALUES (3, 'z')")
            pid = int(as_json(cli("capture", "start", cid, "--detach", "--flush-interval", "0.3"))["pid"])
            ts = c.get_ts()
            (w,) = window(cid, ts)
            assert w["pull"]["source"] == "capture"
            got = parts.list_parts(f"file://{sink}", cid)
            assert any(p.from_ts == last for p in got) or got[0].from_ts >= last  # resumed at the last part
            for table in ("acct", "fresh"):
                typed_rows_match(c, sink, DB, table, ts)
        finally:
            cli("capture", "stop", cid)
        assert capture_lease.live_holder(cid) is None

        # Without a capture the window pulls itself, as before.
        c.execute(f"INSERT INTO {DB}.acct VALUES (30, 3, 'no capture')")
        (w,) = window(cid, c.get_ts())
        assert w["pull"]["source"] == "pull"
        typed_rows_match(c, sink, DB, "acct", w["publish"]["checkpoint_ts"])
