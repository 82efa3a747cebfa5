"""``cdcflow upstream``: start / stop the embedded upstream cluster and run SQL on it."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import typer

from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec.tso import parse_ts_or_datetime
from cdc_core.errors import ConfigError, UpstreamError
from cdc_core.memory import MIB, MemoryLimitConfig

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Run and drive the embedded upstream cluster.")


@app.command()
def start(
    stores: int = typer.Option(1, "--stores", help="Number of stores (only 1 is supported for now)."),
    pd_addr: str = typer.Option("127.0.0.1:0", "--pd-addr", help="HOST:PORT of the PD server (port 0: any free)."),
    data_dir: Path | None = typer.Option(
        None, "--data-dir",
        help="Accepted for forward compatibility. Data is kept in memory only: it is NOT persisted "
             "across restarts yet.",
    ),
    detach: bool = typer.Option(False, "--detach", help="Run in the background; return once it serves."),
    regions_per_table: int = typer.Option(2, "--regions-per-table", help="Regions each new table's rows get."),
    min_ts_interval_ms: int = typer.Option(200, "--min-ts-interval-ms", help="Resolved-ts interval of the feed."),
    catalog_heap_limit_bytes: int = typer.Option(
        100 * MIB, "--catalog-heap-limit-bytes",
        help="Heap memory for table listings being assembled (ListTables, WatchTableList); 0 disables."),
    catalog_direct_limit_bytes: int = typer.Option(
        100 * MIB, "--catalog-direct-limit-bytes",
        help="Memory for serialized table listings waiting to be written; 0 disables."),
    catalog_acquire_timeout_ms: int = typer.Option(
        25_000, "--catalog-acquire-timeout-ms",
        help="How long a listing may wait for memory before RESOURCE_EXHAUSTED (heap and direct); 0: no timeout."),
    catalog_max_queue: int = typer.Option(
        1000, "--catalog-max-queue",
        help="Most listings waiting for memory (each of heap and direct); more get RESOURCE_EXHAUSTED; 0: no bound."),
) -> None:
    """Start the upstream (PD + one store on loopback). Foreground until SIGINT/SIGTERM unless --detach.

    The address goes to $CDCFLOW_HOME/upstream.json while it serves; data lives in memory only.
    """
    from cdc_core.upstream import process
    from cdc_core.upstream.cluster import ClusterConfig, ClusterError

    memory_flags = {
        "heap-limit-bytes": catalog_heap_limit_bytes,
        "direct-limit-bytes": catalog_direct_limit_bytes,
        "acquire-timeout-ms": catalog_acquire_timeout_ms,
        "max-queue": catalog_max_queue,
    }
    try:
        catalog_memory = MemoryLimitConfig.from_mapping(memory_flags, where="cdcflow upstream start --catalog-*")
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    config = ClusterConfig(pd_addr=pd_addr, stores=stores, regions_per_table=regions_per_table,
                           min_ts_interval_ms=min_ts_interval_ms, data_dir=data_dir, catalog_memory=catalog_memory)
    try:
        config.validate()
    except ClusterError as exc:
        raise UpstreamError(str(exc)) from exc
    if detach:
        args = ["--stores", str(stores), "--pd-addr", pd_addr, "--regions-per-table", str(regions_per_table),
                "--min-ts-interval-ms", str(min_ts_interval_ms)]
        args += [arg for key, value in memory_flags.items() for arg in (f"--catalog-{key}", str(value))]
        if data_dir is not None:
            args += ["--data-dir", str(data_dir.resolve())]
        info = process.spawn_detached(args)
        typer.echo(json.dumps(info))
        return
    if os.environ.get(process.DETACHED_ENV):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger().addHandler(handler)
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
    process.run_foreground(config)


@app.command()
def stop() -> None:
    """Stop the upstream recorded in $CDCFLOW_HOME/upstream.json (SIGTERM, then wait for it to exit)."""
    from cdc_core.upstream import process

    pid, was_running = process.stop_running()
    if was_running:
        typer.echo(f"upstream (pid {pid}) stopped", err=True)
    else:
        typer.echo(f"upstream (pid {pid}) was not running; removed its stale record", err=True)


@app.command()
def sql(
    execute: str | None = typer.Option(None, "-e", "--execute", help="SQL script to run."),
    file: Path | None = typer.Option(None, "-f", "--file", help="File with the SQL script to run."),
    at_ts: str | None = typer.Option(None, "--at-ts", help="Read a snapshot at this TSO or ISO datetime."),
    pd: str | None = typer.Option(None, "--pd", help="PD address (default: $CDCFLOW_UPSTREAM, then upstream.json)."),
) -> None:
    """Run SQL: SELECT rows print as JSON lines on stdout, a summary of other statements on stderr."""
    if (execute is None) == (file is None):
        raise typer.BadParameter("give exactly one of -e SQL or -f FILE")
    if file is not None:
        try:
            script = file.read_text()
        except OSError as exc:
            raise UpstreamError(f"cannot read {file}: {exc}") from exc
    else:
        script = execute or ""
    try:
        ts = parse_ts_or_datetime(at_ts) if at_ts else 0
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--at-ts") from exc
    with UpstreamClient(resolve_pd_addr(pd)) as client:
        results = client.execute(script, at_ts=ts)
    for r in results:
        if r.columns:
            for row in r.rows:
                sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
            typer.echo(f"{_short(r.statement)}: {len(r.rows)} row(s)", err=True)
        else:
            extra = f", commit ts {r.commit_ts}" if r.commit_ts else ""
            typer.echo(f"{_short(r.statement)}: {r.affected_rows} row(s) affected{extra}", err=True)
    sys.stdout.flush()


def _short(text: str, n: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 3] + "..."
