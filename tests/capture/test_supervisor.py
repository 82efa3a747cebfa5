"""The capture supervisor (``cdc_core/capture/supervisor.py``, the deployment's ``capture`` service): a capture for
each changefeed that wants one and only those, started again after a kill -9, stopped when its changefeed is
paused and started on resume, a capture someone else runs left alone, every child stopped with the supervisor; the
health check follows it."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdc_core.capture import control, supervisor
from cdc_core.capture import lease as capture_lease
from cdc_core.client.upstream import UpstreamClient
from cdc_core.upstream_record import pid_alive
from testkit.airflow_feed import wait_for
from testkit.e2e import cli

DEADLINE_S = 60.0


def _until(what: str, cond: Callable[[], Any]) -> Any:
    return wait_for(cond, DEADLINE_S, what, poll_s=0.1)


def _up(cid: str) -> int | None:
    st = capture_lease.state(cid)
    return st["pid"] if st["state"] == "up" and st.get("updated_at") else None


def test_a_capture_for_each_changefeed_that_wants_one(cdc_home: Path, upstream_cluster: Any) -> None:
    db = "cap_supervise"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; CREATE TABLE {db}.a (id INT PRIMARY KEY)")
        start_ts = c.get_ts()
    for cid, auto in (("sup-a", "true"), ("sup-b", "true"), ("sup-off", "false")):
        cfg = cdc_home / f"{cid}.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{cdc_home / cid}"\nstart-ts = {start_ts}\n'
                       f'[filter]\nrules = ["{db}.*"]\n[capture]\nauto-start = {auto}\n')
        cli("changefeed", "create", "--config", str(cfg))
    # sup-b's capture is a person's: the supervisor leaves it to them
    theirs = control.start_detached("sup-b")["pid"]
    sup = supervisor.Supervisor(poll_s=0.2, flush_interval_s=0.5)
    thread = threading.Thread(target=sup.run, name="supervisor", daemon=True)
    thread.start()
    try:
        first = _until("a capture of sup-a", lambda: _up("sup-a"))
        assert first == sup.children["sup-a"].proc.pid
        assert set(sup.children) == {"sup-a"} and capture_lease.state("sup-off")["state"] == "down"
        assert _up("sup-b") == theirs
        ok, detail = supervisor.check()
        assert ok, detail
        assert "supervisor pid" in cli("capture", "supervise", "--check")

        os.kill(first, signal.SIGKILL)  # started again after the backoff; the dead lease is taken over
        second = _until("sup-a's capture started again", lambda: (p := _up("sup-a")) not in (None, first) and p)
        assert second == sup.children["sup-a"].proc.pid

        cli("changefeed", "pause", "sup-a")
        _until("sup-a's capture stopped on pause", lambda: "sup-a" not in sup.children and not pid_alive(second))
        assert capture_lease.state("sup-a")["state"] == "down"
        cli("changefeed", "resume", "sup-a")
        third = _until("sup-a's capture started on resume", lambda: _up("sup-a"))
    finally:
        sup.stop()
        thread.join(60)
    assert not thread.is_alive() and not pid_alive(third) and capture_lease.state("sup-a")["state"] == "down"
    assert pid_alive(theirs)  # not the supervisor's to stop
    ok, detail = supervisor.check()
    assert not ok and "no capture supervisor heartbeat" in detail
    assert control.stop("sup-b") == theirs
