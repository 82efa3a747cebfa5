"""``cdcflow capture``: run a changefeed's capture (:mod:`cdc_core.capture.capture`) in the foreground or
detached, stop it, show its state.

``start --detach`` starts ``cdcflow capture start ID`` in a new session (its output in
``$CDCFLOW_HOME/logs/capture-<id>.log``) and returns once the child holds the capture lease and has published its
first status; ``stop`` sends SIGTERM to the lease's pid and waits for it to exit (the capture releases the lease).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import typer

from cdc_core.capture import lease as capture_lease
from cdc_core.capture.capture import DEFAULT_FLUSH_INTERVAL_S, Capture
from cdc_core.changefeed.config import load_config
from cdc_core.errors import ChangefeedError
from cdc_core.home import changefeeds_dir, home, logs_dir
from cdc_core.upstream_record import pid_alive

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Run a changefeed's continuous capture.")


def _tail(path: os.PathLike[str], lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def spawn_detached(changefeed_id: str, flush_interval_s: float, timeout: float = 60.0) -> dict[str, object]:
    """Start the capture in the background; its state once it holds the lease and has flushed once."""
    load_config(changefeed_id)  # a changefeed that does not exist fails here, not in the child's log
    running = capture_lease.live_holder(changefeed_id)
    if running is not None:
        raise capture_lease.CaptureRunning(f"a capture of changefeed {changefeed_id!r} already runs (pid "
                                           f"{running.pid})")
    logs = logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"capture-{changefeed_id}.log"
    env = {**os.environ, "CDCFLOW_HOME": str(home())}
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdc_core.cli.main", "capture", "start", changefeed_id,
             "--flush-interval", str(flush_interval_s)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = proc.poll()
        if rc is not None:
            raise ChangefeedError(f"the capture exited with code {rc} while starting; {log_path}:\n{_tail(log_path)}")
        st = capture_lease.state(changefeed_id)
        if st["state"] == "up" and st["pid"] == proc.pid and st.get("updated_at"):
            return st
        time.sleep(0.1)
    proc.kill()
    raise ChangefeedError(f"the capture did not start within {timeout:g}s; {log_path}:\n{_tail(log_path)}")


def stop_capture(changefeed_id: str, timeout: float = 30.0) -> int | None:
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


@app.command()
def start(
    changefeed_id: str = typer.Argument(..., help="The changefeed to capture."),
    detach: bool = typer.Option(False, "--detach", help="Run in the background; return once it captures."),
    flush_interval: float = typer.Option(DEFAULT_FLUSH_INTERVAL_S, "--flush-interval",
                                         help="Seconds between sealed parts (the published resolved ts)."),
) -> None:
    """Hold the changefeed's subscriptions and write its changelog in parts until stopped."""
    if detach:
        typer.echo(json.dumps(spawn_detached(changefeed_id, flush_interval)))
        return
    Capture(changefeed_id, flush_interval_s=flush_interval).run_forever()


@app.command()
def stop(changefeed_id: str = typer.Argument(..., help="The changefeed whose capture stops.")) -> None:
    """Stop the changefeed's capture (SIGTERM, then the wait for it to exit)."""
    pid = stop_capture(changefeed_id)
    typer.echo(f"capture of {changefeed_id} stopped (pid {pid})" if pid else f"no capture running for "
                                                                             f"{changefeed_id}")


@app.command()
def status(
    changefeed_id: str | None = typer.Argument(None, help="One changefeed (default: every one)."),
    as_json: bool = typer.Option(False, "--json", help="JSON: one object, or a list without an id."),
) -> None:
    """The capture's state ("up" / "down"), resolved ts, lag, regions and pending bytes."""
    ids = [changefeed_id] if changefeed_id else sorted(p.stem for p in changefeeds_dir().glob("*.toml"))
    states = [capture_lease.state(i) for i in ids]
    if as_json:
        typer.echo(json.dumps(states[0] if changefeed_id else states))
        return
    for st in states:
        typer.echo(f"{st['changefeed_id']}: {st['state']} resolved_ts={st.get('resolved_ts')} "
                   f"lag_s={st.get('resolved_lag_s')} regions={st.get('regions')} "
                   f"pending_bytes={st.get('pending_bytes')}")
