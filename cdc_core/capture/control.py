"""Starting and stopping a changefeed's capture process from outside it: ``cdcflow capture start --detach`` and
``stop``, and the DAG's start of a capture that is not running (``[capture] auto-start``).

A start is idempotent in effect: the capture lease admits one capture per changefeed, so two callers racing to
start one (two DAG runs, a person and a DAG) end with one capture; :func:`ensure_running` treats the loser's
refusal as "it runs". Stop sends SIGTERM to the lease's pid; the capture seals what it holds and releases the lease.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from cdc_core import detached
from cdc_core.capture import lease as capture_lease
from cdc_core.capture.capture import DEFAULT_FLUSH_INTERVAL_S
from cdc_core.changefeed.config import load_config
from cdc_core.errors import ChangefeedError
from cdc_core.log import get_logger
from cdc_core.upstream_record import pid_alive

log = get_logger("cdcflow.capture.control")

START_TIMEOUT_S = 60.0


def log_name(changefeed_id: str) -> str:
    """The detached capture's log under ``$CDCFLOW_HOME/logs``."""
    return f"capture-{changefeed_id}.log"


def start_detached(changefeed_id: str, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
                   timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Start the capture in the background; its state (:func:`~cdc_core.capture.lease.state`) once it holds the
    lease and has published its first status. ``CaptureRunning`` when a live capture holds the lease already."""
    load_config(changefeed_id)  # a changefeed that does not exist fails here, not in the child's log
    running = capture_lease.live_holder(changefeed_id)
    if running is not None:
        raise capture_lease.CaptureRunning(f"a capture of changefeed {changefeed_id!r} already runs (pid "
                                           f"{running.pid})")

    def capturing(pid: int) -> dict[str, Any] | None:
        st = capture_lease.state(changefeed_id)
        return st if st["state"] == "up" and st["pid"] == pid and st.get("updated_at") else None

    return detached.spawn(["capture", "start", changefeed_id, "--flush-interval", str(flush_interval_s)],
                          log_name=log_name(changefeed_id), what="the capture", ready=capturing,
                          error=ChangefeedError, timeout=timeout)


def ensure_running(changefeed_id: str) -> dict[str, Any]:
    """The changefeed's capture, started detached when none runs: ``{"started": bool, **state}``. A capture
    another caller started meanwhile counts as running (the lease refused this one)."""
    st = capture_lease.state(changefeed_id)
    if st["state"] == "up":
        return {"started": False, **st}
    try:
        started = start_detached(changefeed_id)
    except capture_lease.CaptureRunning:
        return {"started": False, **capture_lease.state(changefeed_id)}
    except ChangefeedError:
        # lost the race inside the child: it found the lease taken and exited; the winner runs
        now = capture_lease.state(changefeed_id)
        if now["state"] == "up":
            return {"started": False, **now}
        raise
    log.info("started the capture", changefeed=changefeed_id, pid=started.get("pid"))
    return {"started": True, **started}


def stop(changefeed_id: str, timeout: float = 30.0) -> int | None:
    """SIGTERM the changefeed's live capture and wait for it to exit; its pid (None when none ran)."""
    running = capture_lease.live_holder(changefeed_id)
    if running is None:
        return None
    os.kill(running.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(running.pid):
            return running.pid
        time.sleep(0.05)
    raise ChangefeedError(f"the capture (pid {running.pid}) did not exit within {timeout:g}s of SIGTERM")
