"""``cdcflow upstream``: start / stop the embedded upstream cluster, run SQL, inject faults, run a workload."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer

from cdc_core.client.tidb_sql import iter_statements, split_statements
from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec.tso import parse_ts_or_datetime
from cdc_core.errors import ConfigError, UpstreamError
from cdc_core.memory import MIB, MemoryLimitConfig
from cdc_core.upstream.store.incremental_scan import (
    INCREMENTAL_SCAN_CONCURRENCY,
    INCREMENTAL_SCAN_SPEED_LIMIT,
    INCREMENTAL_SCAN_TS_FILTER_RATIO,
    ScanCosts,
)

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Run and drive the embedded upstream cluster.")
SQL_PASSWORD_ENV = "CDCFLOW_UPSTREAM_SQL_PASSWORD"
SCRIPT_PIECE_CHARS = 1 << 20  # `sql -f` reads its script a MiB at a time


@app.command()
def start(
    stores: int = typer.Option(3, "--stores", help="Number of stores, each its own gRPC server."),
    pd_addr: str = typer.Option("127.0.0.1:0", "--pd-addr", help="HOST:PORT of the PD server (port 0: any free)."),
    mysql_addr: str = typer.Option("127.0.0.1:0", "--mysql-addr",
                                   help="HOST:PORT of the SQL front over the MySQL protocol (port 0: any free)."),
    pd_members: int = typer.Option(
        1, "--pd-members",
        help="PD members: member 1 on --pd-addr leads, the others follow on free ports (clients must follow the "
             "leader; `cdcflow upstream fault pd-leader` moves it)."),
    store_hosts: str = typer.Option(
        "", "--store-hosts",
        help="Comma-separated hosts the stores bind, store i on the i-th (round robin), e.g. 127.0.0.2,127.0.0.3 "
             "(default: --pd-addr's host)."),
    advertise_host: str = typer.Option(
        "", "--advertise-host",
        help="The host PD, the stores and the SQL front publish to clients (as PD's advertise-client-urls and "
             "TiKV's advertise-addr); required when binding 0.0.0.0."),
    control_addr: str = typer.Option(
        "", "--control-addr",
        help="HOST:PORT of the control service (faults, `upstream fault ...`): a port of its own, off unless given. "
             "For tests and drills; a deployment runs without it."),
    sql_user: str = typer.Option("root", "--sql-user", help="The SQL front's user when a password is set."),
    sql_password: str = typer.Option(
        "", "--sql-password", envvar=SQL_PASSWORD_ENV, show_default=False,
        help=f"The SQL front's password (better from ${SQL_PASSWORD_ENV}: an argument shows in `ps`). Set, only "
             "--sql-user with it logs in; unset, any user without a password (a fresh TiDB's root: loopback only)."),
    tls_ca: str = typer.Option("", "--tls-ca", help="CA of the cluster's TLS (with --tls-cert and --tls-key): mutual "
                               "TLS on PD, the stores and the control port, TLS on the SQL front."),
    tls_cert: str = typer.Option("", "--tls-cert", help="The servers' certificate (PEM), signed by --tls-ca."),
    tls_key: str = typer.Option("", "--tls-key", help="The certificate's private key (PEM)."),
    detach: bool = typer.Option(False, "--detach", help="Run in the background; return once it serves."),
    regions_per_table: int = typer.Option(2, "--regions-per-table", help="Regions each new table's rows get."),
    min_ts_interval_ms: int = typer.Option(200, "--min-ts-interval-ms", help="Resolved-ts interval of the feed."),
    split_region_keys: int = typer.Option(0, "--split-region-keys",
                                          help="Split a region automatically past this many keys (0: off)."),
    split_region_bytes: int = typer.Option(0, "--split-region-bytes",
                                           help="Split a region automatically past this many bytes (0: off)."),
    gc_life_time_s: float = typer.Option(600.0, "--gc-life-time-s",
                                         help="GC keeps versions this long unless a service safe point is lower."),
    gc_interval_s: float = typer.Option(60.0, "--gc-interval-s", help="Seconds between GC passes (0: no GC)."),
    txn_heartbeat_ms: int = typer.Option(
        1000, "--txn-heartbeat-ms",
        help="Send a fake (empty) PREWRITE for locks held longer than this, as TiKV reports a transaction's TTL "
             "heartbeat (0: off)."),
    sink_memory_quota: int = typer.Option(
        512 * MIB, "--sink-memory-quota-bytes",
        help="Live rows an EventFeed connection may queue before its regions get 'congested' (0: unbounded)."),
    scan_limit: int = typer.Option(
        10_000, "--incremental-scan-concurrency-limit",
        help="Running incremental scans past which region requests get 'too many pending incremental scans'."),
    scan_concurrency: int = typer.Option(
        INCREMENTAL_SCAN_CONCURRENCY, "--incremental-scan-concurrency",
        help="Incremental scans a store runs at once (TiKV's cdc.incremental-scan-concurrency); the others queue."),
    scan_speed_limit: int = typer.Option(
        INCREMENTAL_SCAN_SPEED_LIMIT, "--incremental-scan-speed-limit-bytes",
        help="Bytes per second a store's incremental scans read (TiKV's cdc.incremental-scan-speed-limit, "
             "128 MiB; 0: unlimited)."),
    scan_ts_filter_ratio: float = typer.Option(
        INCREMENTAL_SCAN_TS_FILTER_RATIO, "--incremental-scan-ts-filter-ratio",
        help="A scan reads only the newer versions when they are at most this share of the region's "
             "(TiKV's cdc.incremental-scan-ts-filter-ratio; 0: it reads every region whole)."),
    catalog_heap_limit_bytes: int = typer.Option(
        100 * MIB, "--catalog-heap-limit-bytes",
        help="Heap memory for information_schema.TABLES listings being assembled; 0 disables."),
    catalog_direct_limit_bytes: int = typer.Option(
        100 * MIB, "--catalog-direct-limit-bytes",
        help="Memory for listing rows encoded and waiting to be written to clients; 0 disables."),
    catalog_acquire_timeout_ms: int = typer.Option(
        25_000, "--catalog-acquire-timeout-ms",
        help="How long a listing may wait for memory before error 8175 (heap and direct); 0: no timeout."),
    catalog_max_queue: int = typer.Option(
        1000, "--catalog-max-queue",
        help="Most listings waiting for memory (each of heap and direct); more get error 8175; 0: no bound."),
) -> None:
    """Start the upstream (PD + N stores, on loopback unless told otherwise). Foreground until SIGINT/SIGTERM unless
    --detach.

    The address goes to $CDCFLOW_HOME/upstream.json while it serves; data lives in memory only.
    """
    from cdc_core.cli import upstream_control
    from cdc_core.tls import ENV_CA, ENV_CERT, ENV_KEY, TlsConfig
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
    try:
        scan_costs = ScanCosts(concurrency=scan_concurrency, speed_limit_bytes=scan_speed_limit,
                               ts_filter_ratio=scan_ts_filter_ratio)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        tls = TlsConfig.from_paths(tls_ca, tls_cert, tls_key, "cdcflow upstream start --tls-*")
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    config = ClusterConfig(pd_addr=pd_addr, mysql_addr=mysql_addr, pd_members=pd_members, stores=stores,
                           regions_per_table=regions_per_table,
                           min_ts_interval_ms=min_ts_interval_ms, split_region_keys=split_region_keys,
                           split_region_bytes=split_region_bytes, gc_life_time_s=gc_life_time_s,
                           gc_interval_s=gc_interval_s, catalog_memory=catalog_memory,
                           txn_heartbeat_interval_ms=txn_heartbeat_ms, incremental_scan_concurrency_limit=scan_limit,
                           scan_costs=scan_costs, sink_memory_quota_bytes=sink_memory_quota,
                           store_hosts=tuple(h.strip() for h in store_hosts.split(",") if h.strip()),
                           advertise_host=advertise_host.strip(), control_addr=control_addr.strip(),
                           sql_user=sql_user, sql_password=sql_password, tls=tls)
    try:
        config.validate()
    except ClusterError as exc:
        raise UpstreamError(str(exc)) from exc
    if detach:
        args = ["--stores", str(stores), "--pd-addr", pd_addr, "--mysql-addr", mysql_addr,
                "--pd-members", str(pd_members),
                "--regions-per-table", str(regions_per_table),
                "--min-ts-interval-ms", str(min_ts_interval_ms), "--split-region-keys", str(split_region_keys),
                "--split-region-bytes", str(split_region_bytes), "--gc-life-time-s", str(gc_life_time_s),
                "--gc-interval-s", str(gc_interval_s), "--txn-heartbeat-ms", str(txn_heartbeat_ms),
                "--incremental-scan-concurrency-limit", str(scan_limit),
                "--incremental-scan-concurrency", str(scan_concurrency),
                "--incremental-scan-speed-limit-bytes", str(scan_speed_limit),
                "--incremental-scan-ts-filter-ratio", str(scan_ts_filter_ratio),
                "--sink-memory-quota-bytes", str(sink_memory_quota), "--store-hosts", store_hosts,
                "--advertise-host", advertise_host, "--control-addr", control_addr, "--sql-user", sql_user]
        if sql_password:  # to the child through its environment, never its arguments
            os.environ[SQL_PASSWORD_ENV] = sql_password
        if tls is not None:
            args += ["--tls-ca", tls.ca_path, "--tls-cert", tls.cert_path, "--tls-key", tls.key_path]
            # this process checks that the child serves: over TLS, with the servers' certificate unless told
            for env, path in ((ENV_CA, tls.ca_path), (ENV_CERT, tls.cert_path), (ENV_KEY, tls.key_path)):
                os.environ.setdefault(env, path)
        args += [arg for key, value in memory_flags.items() for arg in (f"--catalog-{key}", str(value))]
        info = upstream_control.spawn_detached(args)
        typer.echo(json.dumps(info))
        return
    if os.environ.get(upstream_control.DETACHED_ENV):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger().addHandler(handler)
    process.run_foreground(config)


@app.command()
def stop() -> None:
    """Stop the upstream recorded in $CDCFLOW_HOME/upstream.json (SIGTERM, then wait for it to exit)."""
    from cdc_core.cli import upstream_control

    pid, was_running = upstream_control.stop_running()
    if was_running:
        typer.echo(f"upstream (pid {pid}) stopped", err=True)
    else:
        typer.echo(f"upstream (pid {pid}) was not running; removed its stale record", err=True)


@app.command()
def status(as_json: bool = typer.Option(False, "--json",
                                        help="One JSON object: pd, pd_members, mysql, stores, pid, cdc.")) -> None:
    """Where the running embedded upstream serves: PD, its MySQL front, its stores, and its pid (exit 1: none)."""
    from cdc_core.cli import upstream_control

    info = upstream_control.status()
    if as_json:
        typer.echo(json.dumps(info))
        return
    typer.echo(f"PD      {info['pd']} (leader)")
    for m in info["pd_members"]:
        typer.echo(f"PD member {m['id']} {m['address']}{' (leader)' if m['leader'] else ''}")
    typer.echo(f"MySQL   {info['mysql'] or '(not served)'}")
    for s in info["stores"]:
        typer.echo(f"store {s['id']} {s['address']} ({s['state']})")
        if "cdc" in s:
            c = s["cdc"]
            typer.echo(f"      change feed: {c['registered_regions']} regions registered, {c['incremental_scans']} "
                       f"incremental scans since start ({c['ongoing_scans']} running)")
    typer.echo(f"pid     {info['pid']}")


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
    try:
        ts = parse_ts_or_datetime(at_ts) if at_ts else 0
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--at-ts") from exc

    def print_row(row: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")

    # A script of any size: statements read from the file as they come, each run once read, rows printed as
    # they arrive (nothing holds the script or a result whole).
    with contextlib.ExitStack() as stack:
        if file is not None:
            try:
                f = stack.enter_context(file.open(encoding="utf-8"))
            except OSError as exc:
                raise UpstreamError(f"cannot read {file}: {exc}") from exc
            # Whole lines, about a MiB at a time: a piece then rarely ends inside a literal (which would make it
            # wait for the next), as dumps put a statement's end at a line's.
            statements: Iterable[str] = iter_statements(iter(lambda: "".join(f.readlines(SCRIPT_PIECE_CHARS)), ""))
        else:
            statements = split_statements(execute or "")
        client = stack.enter_context(UpstreamClient(resolve_pd_addr(pd)))
        for r in client.sql().stream(statements, ts, on_row=print_row):
            if r.columns:
                typer.echo(f"{_short(r.statement)}: {r.row_count} row(s)", err=True)
            else:
                extra = f", commit ts {r.commit_ts}" if r.commit_ts else ""
                typer.echo(f"{_short(r.statement)}: {r.affected_rows} row(s) affected{extra}", err=True)
    sys.stdout.flush()


def _short(text: str, n: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 3] + "..."


# --- faults ---------------------------------------------------------------------------------------
fault_app = typer.Typer(no_args_is_help=True, add_completion=False,
                        help="Inject faults into the running upstream (prints the result as JSON).")
app.add_typer(fault_app, name="fault")

_CONTROL = typer.Option(None, "--control", help="The upstream's control address (default: "
                        "$CDCFLOW_UPSTREAM_CONTROL, then upstream.json's; served only with `start --control-addr`).")
_TABLE = typer.Option("", "--table", help="DB.TABLE: act on the table's row regions.")


def _admin(control: str | None) -> Any:
    from cdc_core.client.admin import AdminClient, resolve_control_addr

    return AdminClient(resolve_control_addr(control))


def _out(value: Any) -> None:
    typer.echo(json.dumps(value))


@fault_app.command("split")
def fault_split(
    region: int = typer.Option(0, "--region", help="Region id to split at --key."),
    key: list[str] = typer.Option([], "--key", help="Split key in hex (repeatable; with --region)."),
    table: str = _TABLE,
    handle: list[int] = typer.Option([], "--handle", help="Split the table at this row handle (repeatable)."),
    lo: int = typer.Option(0, "--lo", help="With --regions: lower handle."),
    hi: int = typer.Option(0, "--hi", help="With --regions: upper handle."),
    regions: int = typer.Option(0, "--regions", help="Split [lo, hi) of the table into this many regions."),
    control: str | None = _CONTROL,
) -> None:
    """Split a region at keys, or a table's rows at handles / evenly between --lo and --hi."""
    with _admin(control) as a:
        if table:
            _out(a.split_table(table, handles=handle, lo=lo, hi=hi, regions=regions))
        elif region and key:
            try:
                keys = [bytes.fromhex(k) for k in key]
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--key") from exc
            _out(a.split_region(region, keys))
        else:
            raise typer.BadParameter("give --region with --key, or --table with --handle or --lo/--hi/--regions")


@fault_app.command("merge")
def fault_merge(
    region: int = typer.Option(0, "--region", help="Region id to merge away."),
    into: int = typer.Option(0, "--into", help="Adjacent region to merge into (default: the right neighbour)."),
    table: str = _TABLE,
    control: str | None = _CONTROL,
) -> None:
    """Merge a region into a neighbour, or all of a table's row regions into one."""
    with _admin(control) as a:
        if table:
            _out(a.merge_table(table))
        elif region:
            _out(a.merge(region, into))
        else:
            raise typer.BadParameter("give --region or --table")


@fault_app.command("transfer-leader")
def fault_transfer_leader(
    to_store: int = typer.Option(..., "--to-store", help="Store id that becomes the leader."),
    region: int = typer.Option(0, "--region", help="Region id."),
    table: str = _TABLE,
    control: str | None = _CONTROL,
) -> None:
    """Move the leader of a region (or of every row region of a table) to a store."""
    if not region and not table:
        raise typer.BadParameter("give --region or --table")
    with _admin(control) as a:
        _out(a.transfer_leader(to_store, region_id=region, table=table))


@fault_app.command("stop-store")
def fault_stop_store(
    store: int = typer.Option(..., "--store", help="Store id."),
    move_leaders: bool = typer.Option(False, "--move-leaders", help="Move its leaders to the live stores."),
    control: str | None = _CONTROL,
) -> None:
    """Stop a store: its EventFeed streams break with UNAVAILABLE and new ones are refused (data kept)."""
    with _admin(control) as a:
        _out(a.stop_store(store, move_leaders))


@fault_app.command("start-store")
def fault_start_store(store: int = typer.Option(..., "--store", help="Store id."),
                      control: str | None = _CONTROL) -> None:
    """Start a stopped store again."""
    with _admin(control) as a:
        _out(a.start_store(store))


@fault_app.command("drop-streams")
def fault_drop_streams(store: int = typer.Option(0, "--store", help="Store id (0: every store)."),
                       control: str | None = _CONTROL) -> None:
    """Break the EventFeed streams of a store (it stays up)."""
    with _admin(control) as a:
        _out(a.drop_streams(store))


@fault_app.command("hold-lock")
def fault_hold_lock(
    table: str = typer.Option(..., "--table", help="DB.TABLE."),
    handle: list[int] = typer.Option([], "--handle", help="Row handle to lock (repeatable)."),
    count: int = typer.Option(1, "--count", help="Without --handle: lock the first COUNT rows."),
    control: str | None = _CONTROL,
) -> None:
    """Prewrite rows and keep the locks (holds the regions' resolved ts); prints the start ts."""
    with _admin(control) as a:
        _out(a.hold_lock(table, handles=handle, count=count))


@fault_app.command("release-lock")
def fault_release_lock(
    start_ts: int = typer.Option(..., "--start-ts", help="Start ts printed by hold-lock."),
    rollback: bool = typer.Option(False, "--rollback", help="Roll back instead of committing."),
    control: str | None = _CONTROL,
) -> None:
    """Commit (default) or roll back a held lock."""
    with _admin(control) as a:
        _out(a.release_lock(start_ts, rollback))


@fault_app.command("busy")
def fault_busy(
    store: int = typer.Option(..., "--store", help="Store id."),
    duration_ms: int = typer.Option(5000, "--duration-ms", help="How long it answers server_is_busy."),
    control: str | None = _CONTROL,
) -> None:
    """Make a store answer new region requests with server_is_busy for a while."""
    with _admin(control) as a:
        _out(a.busy(store, duration_ms))


@fault_app.command("pd-leader")
def fault_pd_leader(member: int = typer.Option(..., "--member",
                                              help="PD member id (1..--pd-members; 0: no leader until the next)."),
                    control: str | None = _CONTROL) -> None:
    """Move PD's leadership to another member (as `pd-ctl member leader transfer`); clients must follow it."""
    with _admin(control) as a:
        _out(a.transfer_pd_leader(member))


@fault_app.command("gc")
def fault_gc(control: str | None = _CONTROL) -> None:
    """Run a GC pass now; prints the safe point and what was removed."""
    with _admin(control) as a:
        _out(a.gc())


# --- workload -------------------------------------------------------------------------------------
@app.command()
def workload(
    txns: int = typer.Option(0, "--txns", help="Stop after this many transactions (0: no limit)."),
    duration_s: float = typer.Option(0.0, "--duration-s", help="Stop after this many seconds (0: no limit)."),
    db: str = typer.Option("sbtest", "--db", help="Database of the sbtest tables."),
    tables: int = typer.Option(2, "--tables", help="Number of sbtest tables."),
    threads: int = typer.Option(4, "--threads", help="Concurrent sessions."),
    seed: int = typer.Option(0, "--seed", help="RNG seed (thread i uses seed + i); 0: from the clock, as sysbench's "
                                               "--rand-seed=0 (the summary says which, to run the same mix again)."),
    id_range: int = typer.Option(10_000, "--id-range", help="Ids are drawn from [-N, N] (both table regions)."),
    initial_rows: int = typer.Option(100, "--initial-rows", help="Rows loaded per table before the run."),
    insert_weight: int = typer.Option(30, "--insert-weight"),
    update_weight: int = typer.Option(40, "--update-weight"),
    delete_weight: int = typer.Option(10, "--delete-weight"),
    multi_weight: int = typer.Option(20, "--multi-weight", help="Weight of multi-row transactions across regions."),
    pk_update_share: float = typer.Option(0.2, "--pk-update-share", help="Share of updates changing the PK."),
    uk_update_share: float = typer.Option(0.2, "--uk-update-share", help="Share of updates changing the UK."),
    ddl_per_s: float = typer.Option(0.0, "--ddl-per-s", help="DDL statements per second (0: none)."),
    rows_per_txn: int = typer.Option(1, "--rows-per-txn",
                                     help="Rows an insert / update / delete statement touches."),
    rows_per_s: float = typer.Option(0.0, "--rows-per-s", help="Pace of the run in rows per second (0: no pace)."),
    no_prepare: bool = typer.Option(False, "--no-prepare", help="Do not create / load the tables first."),
    prepare_only: bool = typer.Option(False, "--prepare",
                                      help="Only create and load the tables (sysbench's prepare); no transactions."),
    prepare_with: str = typer.Option(
        "import", "--prepare-with",
        help="How the initial rows are loaded: 'import' (Parquet files and IMPORT INTO, for millions of rows; the "
             "upstream's TiDB must read --import-dir) or 'insert' (INSERT statements)."),
    import_dir: str | None = typer.Option(None, "--import-dir",
                                          help="Where the import files are written (default: a temporary directory)."),
    pd: str | None = typer.Option(None, "--pd", help="PD address (default: $CDCFLOW_UPSTREAM, then upstream.json)."),
) -> None:
    """Run a sysbench-like OLTP mix against the SQL front; prints a JSON summary."""
    from cdc_core.upstream.workload import Workload, WorkloadConfig

    if seed == 0:  # a second run on the same tables must not replay the first one's ids
        seed = time.time_ns() % (1 << 31) or 1
    cfg = WorkloadConfig(db=db, tables=tables, id_range=id_range, initial_rows=initial_rows, txns=txns,
                         duration_s=duration_s, threads=threads, seed=seed, insert_weight=insert_weight,
                         update_weight=update_weight, delete_weight=delete_weight, multi_weight=multi_weight,
                         pk_update_share=pk_update_share, uk_update_share=uk_update_share, ddl_per_s=ddl_per_s,
                         rows_per_txn=rows_per_txn, rows_per_s=rows_per_s)
    try:
        cfg.validate(prepare_only=prepare_only)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if prepare_only and no_prepare:
        raise typer.BadParameter("--prepare and --no-prepare exclude each other")
    if prepare_with not in ("import", "insert"):
        raise typer.BadParameter(f"--prepare-with must be 'import' or 'insert', got {prepare_with!r}")
    # An IMPORT INTO of millions of rows answers when it is done: minutes, not the default minute.
    with UpstreamClient(resolve_pd_addr(pd), timeout=3600.0) as client, tempfile.TemporaryDirectory() as tmp:
        def execute(script: str) -> list[tuple[int, int]]:
            return [(r.affected_rows, r.commit_ts) for r in client.execute(script)]

        w = Workload(cfg, execute, client.query)
        if not no_prepare:
            w.prepare(os.path.abspath(import_dir or tmp) if prepare_with == "import" else None)
        if prepare_only:
            _out({"prepared": {f"{db}.sbtest{i}": n for i, n in
                               enumerate(w.row_counts(client.query), start=1)}})
            return
        summary = w.run()
    _out(summary.to_dict())
