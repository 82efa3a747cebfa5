"""Starting and stopping a capture from outside it (``cdc_core/capture/control.py``): the DAG's start is idempotent
-- a second caller, or one racing the first, finds the capture running and starts none -- and a stop (of one, or
``capture stop --all``) ends the process and frees the lease, after which a start starts a new one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture import control
from cdc_core.capture import lease as capture_lease
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import ConfigError
from cdc_core.upstream_record import pid_alive
from testkit.e2e import cli


def test_ensure_running_starts_one_capture_and_stop_ends_it(cdc_home: Path, upstream_cluster: Any) -> None:
    db = "cap_control"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; CREATE TABLE {db}.a (id INT PRIMARY KEY)")
        start_ts = c.get_ts()
    cfg = cdc_home / "control.toml"
    cfg.write_text(f'changefeed-id = "ctl"\nsink-uri = "file://{cdc_home / "lake"}"\nstart-ts = {start_ts}\n'
                   f'[filter]\nrules = ["{db}.*"]\n')
    cli("changefeed", "create", "--config", str(cfg))
    first = control.ensure_running("ctl")
    try:
        assert first["started"] and first["state"] == "up" and pid_alive(first["pid"])
        again = control.ensure_running("ctl")
        assert not again["started"] and again["pid"] == first["pid"]
        with pytest.raises(capture_lease.CaptureRunning, match=f"already runs \\(pid {first['pid']}\\)"):
            control.start_detached("ctl")
        assert (cdc_home / "home" / "logs" / control.log_name("ctl")).exists()
        cap = json.loads(cli("changefeed", "query", "ctl"))["capture"]
        assert (cap["state"], cap["pid"]) == ("up", first["pid"])
        assert {"resolved_ts", "resolved_lag_s", "regions", "incremental_scans", "pending_bytes"} <= set(cap)
        assert cap["regions"] >= 1 and cap["incremental_scans"] >= cap["regions"]
    finally:
        out = cli("capture", "stop", "--all")  # how `make airflow` stops the captures its DAG runs started
    assert f"capture of ctl stopped (pid {first['pid']})" in out
    assert not pid_alive(first["pid"]) and capture_lease.state("ctl")["state"] == "down"
    assert control.stop("ctl") is None  # none runs
    assert json.loads(cli("changefeed", "query", "ctl"))["capture"]["state"] == "down"
    # removing the changefeed stops its capture: nothing writes parts for a changefeed that is gone
    again = control.ensure_running("ctl")
    assert f"stopped the capture of ctl (pid {again['pid']})" in cli("changefeed", "remove", "ctl")
    assert not pid_alive(again["pid"])
    with pytest.raises(ConfigError, match=r"changefeed 'nope' does not exist"):
        control.ensure_running("nope")  # no such changefeed: refused here, not in a child's log
