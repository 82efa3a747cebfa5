"""``cdcflow capture``: run a changefeed's capture (:mod:`cdc_core.capture.capture`) in the foreground or
detached, stop it, show its state, or supervise the captures of every changefeed.

``start --detach`` starts ``cdcflow capture start ID`` in a new session (its output in
``$CDCFLOW_HOME/logs/capture-<id>.log``) and returns once the child holds the capture lease and has published its
first status; ``stop`` sends SIGTERM to the lease's pid and waits for it to exit (the capture releases the lease):
:mod:`cdc_core.capture.control`. ``supervise`` keeps one running for every changefeed that wants one
(:mod:`cdc_core.capture.supervisor`).
"""

from __future__ import annotations

import json

import typer

from cdc_core.capture import control, supervisor
from cdc_core.capture import lease as capture_lease
from cdc_core.capture.capture import DEFAULT_FLUSH_INTERVAL_S, Capture
from cdc_core.home import changefeeds_dir

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Run a changefeed's continuous capture.")


@app.command()
def start(
    changefeed_id: str = typer.Argument(..., help="The changefeed to capture."),
    detach: bool = typer.Option(False, "--detach", help="Run in the background; return once it captures."),
    flush_interval: float = typer.Option(DEFAULT_FLUSH_INTERVAL_S, "--flush-interval",
                                         help="Seconds between sealed parts (the published resolved ts)."),
) -> None:
    """Hold the changefeed's subscriptions and write its changelog in parts until stopped."""
    if detach:
        typer.echo(json.dumps(control.start_detached(changefeed_id, flush_interval)))
        return
    Capture(changefeed_id, flush_interval_s=flush_interval).run_forever()


@app.command()
def stop(
    changefeed_id: str | None = typer.Argument(None, help="The changefeed whose capture stops."),
    stop_all: bool = typer.Option(False, "--all", help="Stop the capture of every changefeed in CDCFLOW_HOME."),
) -> None:
    """Stop the changefeed's capture (SIGTERM, then the wait for it to exit); ``--all``: every running capture."""
    if (changefeed_id is None) == (not stop_all):
        raise typer.BadParameter("name one changefeed or pass --all")
    ids = [changefeed_id] if changefeed_id else _changefeed_ids()
    for cid in ids:
        pid = control.stop(cid)
        if pid:
            typer.echo(f"capture of {cid} stopped (pid {pid})")
        elif changefeed_id:
            typer.echo(f"no capture running for {cid}")


def _changefeed_ids() -> list[str]:
    return sorted(p.stem for p in changefeeds_dir().glob("*.toml"))


@app.command()
def supervise(
    check: bool = typer.Option(False, "--check", help="Exit 0 when a supervisor runs and polls (a health check)."),
    poll: float = typer.Option(supervisor.POLL_S, "--poll", help="Seconds between looks at the changefeeds."),
    flush_interval: float = typer.Option(DEFAULT_FLUSH_INTERVAL_S, "--flush-interval",
                                         help="The captures' seconds between sealed parts."),
) -> None:
    """Keep a capture running for every changefeed with [capture] auto-start in state normal (the deployment's
    capture service): started when missing, started again after it exits, stopped when paused or removed."""
    if check:
        ok, detail = supervisor.check()
        typer.echo(detail)
        raise typer.Exit(0 if ok else 1)
    supervisor.Supervisor(poll_s=poll, flush_interval_s=flush_interval).run_forever()


@app.command()
def status(
    changefeed_id: str | None = typer.Argument(None, help="One changefeed (default: every one)."),
    as_json: bool = typer.Option(False, "--json", help="JSON: one object, or a list without an id."),
) -> None:
    """The capture's state ("up" / "down"), resolved ts, lag, regions and pending bytes."""
    ids = [changefeed_id] if changefeed_id else _changefeed_ids()
    states = [capture_lease.state(i) for i in ids]
    if as_json:
        typer.echo(json.dumps(states[0] if changefeed_id else states))
        return
    for st in states:
        typer.echo(f"{st['changefeed_id']}: {st['state']} resolved_ts={st.get('resolved_ts')} "
                   f"lag_s={st.get('resolved_lag_s')} regions={st.get('regions')} "
                   f"pending_bytes={st.get('pending_bytes')}")
