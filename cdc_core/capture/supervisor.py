"""The capture supervisor (``cdcflow capture supervise``): a capture kept running for every changefeed that wants
one -- the deployment's ``capture`` service (docker-compose.yml), as a TiCDC server runs a processor for every
changefeed it owns and starts it again after it fails.

Every poll it reads ``$CDCFLOW_HOME``: a changefeed whose config says ``[capture] auto-start`` (the default) and
whose state is ``normal`` wants a capture. One with no live capture gets a child ``cdcflow capture start <id>``
(its output appended to ``logs/capture-<id>.log``); a child that exits is started again after a backoff that
doubles from :data:`BACKOFF_MIN_S` to :data:`BACKOFF_MAX_S` and starts over once a child has run
:data:`BACKOFF_RESET_S`. A capture another process holds (a person's ``--detach``, the DAG's start, a second
supervisor) is left to it: the capture lease admits one. A changefeed paused, finished, in error or removed has its
child stopped (SIGTERM: the capture seals what it holds and releases the lease), as TiCDC stops the processors of
a changefeed that is no longer running. On SIGTERM the supervisor stops its children and exits.

Its heartbeat, ``state/capture-supervisor.json`` (pid, time, children), is what the service's health check reads
(``cdcflow capture supervise --check``, :func:`check`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_core import durable
from cdc_core.capture import control
from cdc_core.capture import lease as capture_lease
from cdc_core.capture.capture import DEFAULT_FLUSH_INTERVAL_S
from cdc_core.changefeed.config import load_config_file
from cdc_core.changefeed.state import load_state
from cdc_core.errors import CdcflowError
from cdc_core.home import changefeeds_dir, home, logs_dir, state_dir
from cdc_core.log import get_logger
from cdc_core.upstream_record import pid_alive

log = get_logger("cdcflow.capture.supervisor")

POLL_S = 5.0
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
BACKOFF_RESET_S = 60.0  # a child that ran this long failed afresh: its restart waits BACKOFF_MIN_S again
STOP_TIMEOUT_S = 30.0


def heartbeat_path() -> Path:
    return state_dir() / "capture-supervisor.json"


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    started: float  # time.monotonic()


class Supervisor:
    """``run()`` until :meth:`stop`; :meth:`step` is one poll (the tests drive it too)."""

    def __init__(self, *, poll_s: float = POLL_S, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S) -> None:
        self.poll_s = poll_s
        self.flush_interval_s = flush_interval_s
        self.children: dict[str, _Child] = {}
        self._delay: dict[str, float] = {}
        self._not_before: dict[str, float] = {}
        self._stop = threading.Event()

    def wanted(self) -> set[str]:
        """The changefeeds that want a capture now: ``[capture] auto-start`` and state ``normal``."""
        d = changefeeds_dir()
        out: set[str] = set()
        for p in sorted(d.glob("*.toml")) if d.is_dir() else []:
            try:
                cfg = load_config_file(p)
                if cfg.capture_auto_start and load_state(cfg.changefeed_id).state == "normal":
                    out.add(cfg.changefeed_id)
            except CdcflowError as exc:  # a broken config or state: its DAG says so; no capture for it
                log.debug("no capture for a changefeed that does not load", path=str(p), error=str(exc))
        return out

    def step(self) -> None:
        """Reap exited children (scheduling their restart), stop the unwanted, start the missing; the heartbeat."""
        now = time.monotonic()
        for cid, child in list(self.children.items()):
            rc = child.proc.poll()
            if rc is None:
                continue
            del self.children[cid]
            ran = now - child.started
            delay = BACKOFF_MIN_S if ran >= BACKOFF_RESET_S else min(
                BACKOFF_MAX_S, 2 * self._delay.get(cid, BACKOFF_MIN_S / 2))
            self._delay[cid], self._not_before[cid] = delay, now + delay
            log.warning("capture exited; starting it again after the backoff", changefeed=cid, code=rc,
                        ran_s=round(ran, 1), restart_in_s=delay, log_file=str(logs_dir() / control.log_name(cid)))
        wanted = self.wanted()
        for cid in sorted(set(self.children) - wanted):
            log.info("changefeed no longer wants a capture: stopping it", changefeed=cid)
            self._stop_child(cid)
        for cid in sorted(wanted - set(self.children)):
            if now < self._not_before.get(cid, 0.0) or capture_lease.live_holder(cid) is not None:
                continue
            self._start_child(cid)
        self._heartbeat()

    def run(self) -> None:
        """Poll until :meth:`stop`; then stop every child."""
        log.info("capture supervisor started", poll_s=self.poll_s)
        try:
            while not self._stop.is_set():
                self.step()
                self._stop.wait(self.poll_s)
        finally:
            for cid in list(self.children):
                self._stop_child(cid)
            heartbeat_path().unlink(missing_ok=True)
            log.info("capture supervisor stopped")

    def run_forever(self) -> None:
        """:meth:`run`, stopping on SIGTERM / SIGINT (the CLI's foreground process, a container's PID 1)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())
        self.run()

    def stop(self) -> None:
        self._stop.set()

    def _start_child(self, cid: str) -> None:
        logs = logs_dir()
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / control.log_name(cid), "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cdc_core.cli.main", "capture", "start", cid,
                 "--flush-interval", str(self.flush_interval_s)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "CDCFLOW_HOME": str(home())},
            )
        self.children[cid] = _Child(proc, time.monotonic())
        log.info("started the capture", changefeed=cid, pid=proc.pid)

    def _stop_child(self, cid: str) -> None:
        child = self.children.pop(cid)
        if child.proc.poll() is None:
            child.proc.terminate()
            try:
                child.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("capture did not exit on SIGTERM; killing it", changefeed=cid, pid=child.proc.pid)
                child.proc.kill()
                child.proc.wait()
        self._delay.pop(cid, None)
        self._not_before.pop(cid, None)

    def _heartbeat(self) -> None:
        heartbeat_path().parent.mkdir(parents=True, exist_ok=True)
        durable.write_file(heartbeat_path(), json.dumps({
            "pid": os.getpid(), "at": time.time(), "poll_s": self.poll_s,
            "children": {cid: c.proc.pid for cid, c in sorted(self.children.items())},
        }))


def check(now: float | None = None) -> tuple[bool, str]:
    """The health check: a supervisor runs (its pid) and polled within three polls."""
    try:
        beat: dict[str, Any] = json.loads(heartbeat_path().read_text())
    except (FileNotFoundError, ValueError):
        return False, f"no capture supervisor heartbeat at {heartbeat_path()}"
    age = (time.time() if now is None else now) - float(beat["at"])
    if not pid_alive(int(beat["pid"])):
        return False, f"the capture supervisor (pid {beat['pid']}) is gone"
    if age > 3 * float(beat["poll_s"]) + 10:
        return False, f"the capture supervisor (pid {beat['pid']}) last polled {age:.0f}s ago"
    return True, f"capture supervisor pid {beat['pid']}, captures {beat['children']}"
