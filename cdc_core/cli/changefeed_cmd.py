"""`cdcflow changefeed …`: create, list, query, pause, resume, remove and run changefeeds."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cdc_core.capture import control as capture_control
from cdc_core.capture import lease as capture_lease
from cdc_core.changefeed import config as cfgmod
from cdc_core.changefeed import gc_safepoint, runner, sink_features
from cdc_core.changefeed.ddl_puller import SchemaLog
from cdc_core.changefeed.schema_loader import load_schema_jobs
from cdc_core.changefeed.snapshot import keep_schema
from cdc_core.changefeed.state import create_state, load_state, locked_state
from cdc_core.changefeed.steps import replicated_at
from cdc_core.client.table_discovery import SyncTableDiscovery
from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec import tso
from cdc_core.codec.sink_uri import check_lake_names, table_path
from cdc_core.errors import ChangefeedError, ConfigError
from cdc_core.home import changefeeds_dir, state_dir

app = typer.Typer(no_args_is_help=True)
console = Console()
err = Console(stderr=True)


def _ts_text(ts: int) -> str:
    return f"{ts} ({tso.to_datetime(ts).isoformat()})" if ts else "0"


@app.command()
def create(config: Annotated[Path, typer.Option("--config", help="changefeed TOML file")]) -> None:
    """Create a changefeed from a TOML config (start-ts absent = the upstream's now)."""
    cfg = cfgmod.load_config_file(config)
    if cfgmod.config_path(cfg.changefeed_id).exists():
        raise ConfigError(f"changefeed {cfg.changefeed_id!r} already exists; remove it first or pick another id")
    if not cfg.start_ts:
        with UpstreamClient(resolve_pd_addr(cfg.upstream), tidb=cfg.tidb) as c:
            cfg = cfg.with_start_ts(c.get_ts())
    if cfg.target_ts and cfg.target_ts <= cfg.start_ts:
        raise ConfigError(f"{config}: target-ts {cfg.target_ts} is not after start-ts {cfg.start_ts}")
    # As TiCDC at creation: a start-ts GC has passed cannot be replicated from, and the service safe point is
    # registered now, so that GC keeps start-ts's versions until the first window (which may come later than
    # gc-life-time) has read them.
    pd_addr = resolve_pd_addr(cfg.upstream)
    gc_safepoint.check_not_lost_by_gc(pd_addr, cfg.changefeed_id, cfg.start_ts, "start-ts")
    with UpstreamClient(pd_addr, tidb=cfg.tidb) as c:
        # Which tables the filter matches now, from information_schema.TABLES through the memory-bounded discovery
        # client (seed 001's proxy case: a schema may hold a million tables).
        with SyncTableDiscovery(c.sql_addresses(), cfg.discovery_memory) as discovery:
            matched = discovery.matching_tables(cfg.table_filter)
        # The schema storage starts from TiDB's meta snapshot at start-ts: the tables the filter matches.
        jobs = load_schema_jobs(c, cfg.start_ts, cfg.table_filter)
    slog = SchemaLog(cfg.changefeed_id, jobs, cfg.start_ts)
    replicated = replicated_at(cfg, slog.storage(), cfg.start_ts)
    for t in replicated:  # names the lake cannot hold: refused now, not later
        check_lake_names(t)
    if cfg.deletion_vectors and os.environ.get("CDCFLOW_DELTA_WRITER", "").strip().lower() != "delta-spark":
        # tables already in the sink with a feature the deletion-vector writer (delta-rs's, the local engine's;
        # spark_jobs.load.delta_writer.WRITER_ENV picks the writer) would break: refused now, not at a window
        sink_features.check_sink_tables([table_path(cfg.sink_uri, t) for t in replicated])
    sp = gc_safepoint.refresh_service_safe_point(pd_addr, cfg.changefeed_id, cfg.start_ts)
    if not sp.in_force:
        raise ChangefeedError(f"changefeed {cfg.changefeed_id}: PD keeps GC at {sp.min_safe_point}, above start-ts "
                              f"{cfg.start_ts}, and refused a service safe point below it: pick a later start-ts")
    cfgmod.save_config(cfg)
    create_state(cfg.changefeed_id, cfg.start_ts)
    slog.save()
    keep_schema(cfg, slog, cfg.start_ts)  # where a rebuild of a table without a snapshot base starts
    names = sorted(f"{t.schema}.{t.name}" for t in matched)
    console.print_json(json.dumps({"changefeed_id": cfg.changefeed_id, "start_ts": cfg.start_ts,
                                   "sink_uri": cfg.sink_uri, "matched_tables": len(names)}))
    if names:
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        err.print(f"the filter matches {len(names)} table(s) now: {shown}")
    else:
        err.print("[yellow]warning:[/] the filter matches no table yet; tables created later that match are picked up")


@app.command("list")
def list_cmd() -> None:
    """List changefeeds with their state and checkpoint."""
    t = Table("id", "state", "checkpoint", "resolved", "sink")
    d = changefeeds_dir()
    for path in sorted(d.glob("*.toml")) if d.is_dir() else []:
        try:
            cfg = cfgmod.load_config_file(path)
        except ConfigError as exc:  # one broken config does not hide the others (its DAG is an import error)
            t.add_row(path.stem, "[red]config error[/]", "", "", escape(str(exc)))
            continue
        try:
            st = load_state(cfg.changefeed_id)
            t.add_row(cfg.changefeed_id, st.state, _ts_text(st.checkpoint_ts), _ts_text(st.resolved_ts), cfg.sink_uri)
        except ChangefeedError:
            t.add_row(cfg.changefeed_id, "no state", "", "", cfg.sink_uri)
    console.print(t)


@app.command()
def query(changefeed_id: str) -> None:
    """Print the changefeed's state, checkpoint-ts, resolved-ts, last checks and capture as JSON."""
    cfgmod.load_config(changefeed_id)
    st = load_state(changefeed_id)
    out: dict[str, Any] = {
        "changefeed_id": changefeed_id,
        "state": st.state,
        "checkpoint_ts": st.checkpoint_ts,
        "checkpoint_time": tso.to_datetime(st.checkpoint_ts).isoformat() if st.checkpoint_ts else None,
        "resolved_ts": st.resolved_ts,
        "error": st.error,
        "last_window": st.last_window,
        "last_checks": st.last_checks,
        "initial_snapshot_done": st.initial_snapshot_done,
        "snapshot": st.snapshot,
        "rebuild": st.rebuild,
        # the continuous capture windows read from: up/down, resolved ts and its lag, regions, scans, pending bytes
        "capture": capture_lease.state(changefeed_id),
    }
    print(json.dumps(out, indent=2, sort_keys=True))


def _set_state(changefeed_id: str, new: str, allowed: tuple[str, ...]) -> None:
    cfgmod.load_config(changefeed_id)
    with locked_state(changefeed_id) as st:
        if st.state not in allowed:
            raise ChangefeedError(f"changefeed {changefeed_id!r} is {st.state}; cannot make it {new}")
        st.state = new
        if new == "normal":
            st.error = None
    console.print(f"changefeed {changefeed_id} is {new}")


@app.command()
def pause(changefeed_id: str) -> None:
    """Pause: scheduled windows are skipped until resumed."""
    _set_state(changefeed_id, "paused", ("normal", "error"))


@app.command()
def resume(changefeed_id: str) -> None:
    """Resume a paused changefeed or one in error (after fixing the cause)."""
    _set_state(changefeed_id, "normal", ("paused", "error", "normal"))


@app.command()
def remove(changefeed_id: str) -> None:
    """Stop its capture, remove the changefeed's config and state (its Delta tables and changelog stay)."""
    p = cfgmod.config_path(changefeed_id)
    if not p.exists():
        raise ConfigError(f"changefeed {changefeed_id!r} does not exist")
    stopped = capture_control.stop(changefeed_id)  # its capture would write parts for a changefeed that is gone
    if stopped:
        console.print(f"stopped the capture of {changefeed_id} (pid {stopped})")
    gc_safepoint.remove_for_changefeed(changefeed_id)  # reads the PD address from the config: before unlink
    p.unlink()
    for f in (state_dir() / f"{changefeed_id}.json", state_dir() / f"{changefeed_id}.lock"):
        f.unlink(missing_ok=True)
    shutil.rmtree(state_dir() / changefeed_id, ignore_errors=True)
    console.print(f"changefeed {changefeed_id} removed")


@app.command()
def run(
    changefeed_id: str,
    until_ts: Annotated[str, typer.Option("--until-ts", help="TSO, ISO datetime, or 'now'")] = "now",
    mode: Annotated[str, typer.Option(
        "--mode", help="the first window's mode: incremental, snapshot (reload tables from the upstream at the "
        "checkpoint first) or rebuild (rebuild tables from the bronze changelog first)")] = "incremental",
    tables: Annotated[str | None, typer.Option(
        "--tables", help="comma-separated db.table names a snapshot or rebuild covers (default: every table)")] = None,
    full_check: Annotated[bool, typer.Option(
        "--full-check", help="also reconcile every table whole against the upstream at each window end (costs what "
        "the tables hold; without it the checks cost what the windows changed)")] = False,
) -> None:
    """Run windows until the checkpoint reaches --until-ts (the same code the DAG tasks call)."""
    table_list = [t.strip() for t in tables.split(",") if t.strip()] if tables else None
    cfg = cfgmod.load_config(changefeed_id)
    if until_ts == "now":
        with UpstreamClient(resolve_pd_addr(cfg.upstream), tidb=cfg.tidb) as c:
            target = c.get_ts()
    else:
        try:
            target = tso.parse_ts_or_datetime(until_ts)
        except ValueError as exc:
            raise ConfigError(f"--until-ts: {exc}") from exc
    steps = ("plan", "pull", "apply", "check", "publish")
    with console.status(f"[bold]{changefeed_id}[/]: running to {_ts_text(target)}") as status:

        def progress(step: str, info: dict[str, Any]) -> None:
            nxt = steps.index(step) + 1
            status.update(f"[bold]{changefeed_id}[/]: {step} done" + (f", {steps[nxt]} …" if nxt < len(steps) else ""))
            if step == "plan" and not info.get("skip") and info.get("mode", "incremental") != "incremental":
                what = info.get("snapshot") or info.get("rebuild") or {}
                console.print(f"  {info['mode']} window at checkpoint {info['checkpoint_ts']} of "
                              f"{len(what.get('tables') or [])} table(s)"
                              + (f": {what['reason']}" if what.get("reason") else ""))
            elif step == "pull" and not info.get("skipped"):
                for name, s in ((info.get("snapshot") or {}).get("tables") or {}).items():
                    console.print(f"  snapshot base of {name}: {s.get('rows')} rows in {s.get('chunks')} chunk(s)")
                console.print(f"  pulled {info['events']} row events from {len(info['tables'])} table(s)")
            elif step == "apply" and not info.get("skipped"):
                if (info.get("rebuild") or {}).get("trash"):
                    console.print(f"  rebuilt tables; the old ones are in {info['rebuild']['trash']}")
                for name, s in info.get("tables", {}).items():
                    console.print(f"  applied {name}: {s}")
            elif step == "check" and not info.get("skipped"):
                console.print(f"  checks passed for {len(info.get('tables', {}))} changed table(s)"
                              + (f", {len(info['unchanged'])} unchanged" if info.get("unchanged") else ""))

        results = runner.run_until(changefeed_id, target, progress, mode=mode, tables=table_list,
                                   full_check=full_check)
    for r in results:
        if r["skipped"]:
            console.print(f"nothing to do: {r['plan']['reason']}")
    st = load_state(changefeed_id)
    console.print(f"changefeed {changefeed_id}: state {st.state}, checkpoint {_ts_text(st.checkpoint_ts)}")

