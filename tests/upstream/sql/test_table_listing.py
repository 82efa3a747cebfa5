"""Listings of information_schema.TABLES under the ``upstream-catalog`` limiter (seed 001, server side): which queries
stream, refusals with TiDB's code and a clear message, permits released on every path, bounded memory at scale."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pymysql.cursors
import pytest
from prometheus_client import CollectorRegistry
from sqlglot import parse_one
from wire.eventfeed import wait_until

from cdc_core.client.tidb_sql import connection_literal
from cdc_core.client.upstream import UpstreamClient, listing_sql
from cdc_core.codec.sql_literal import string_literal
from cdc_core.memory import LimitType, MemoryLimitConfig, Permit
from cdc_core.schema.model import Column, TableInfo
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.sql.ddl.catalog import Catalog, DatabaseInfo
from cdc_core.upstream.sql.table_listing import CHUNK, TableListing, plan_listing, row_wire_size
from testkit.listing_load import MIB, PeakObserver, run_listing_load

COLS = (Column(1, "id", "bigint", nullable=False),)
MEM_QUOTA = 8175  # TiDB's ErrMemoryExceedForQuery


class Limited:
    """An embedded cluster with given listing limits, and handles on its limiter."""

    def __init__(self, **limits: int) -> None:
        self.registry = CollectorRegistry()
        self.ec = EmbeddedCluster(ClusterConfig(catalog_memory=MemoryLimitConfig(**limits),
                                                metrics_registry=self.registry)).start()
        assert self.ec.cluster is not None
        self.cluster = self.ec.cluster
        self.listing: TableListing = self.cluster.table_listing
        self.up = UpstreamClient(self.ec.pd_addr, timeout=30)

    def connect(self) -> pymysql.connections.Connection[Any]:
        host, _, port = self.ec.mysql_addr.rpartition(":")
        return pymysql.connect(host=host, port=int(port), user="root", autocommit=True, read_timeout=60)

    def bulk(self, schema: str, names: list[str]) -> list[TableInfo]:
        if self.cluster.catalog.database(schema) is None:
            self.up.execute(f"CREATE DATABASE {schema}")
        return self.ec.call(lambda: self.cluster.catalog.bulk_create_tables(schema, names, COLS))

    def used(self) -> tuple[int, int]:
        lim = self.listing.limiter
        return self.ec.call(lambda: (lim.heap.used, lim.direct.used))

    def queued(self, pool: LimitType) -> int:
        return self.ec.call(lambda: self.listing.limiter.semaphore(pool).queue_size)

    def hold(self, size: int, pool: LimitType) -> Permit:
        return self.ec.run(self.listing.limiter.acquire(size, pool))

    def release(self, permit: Permit) -> None:
        self.ec.call(lambda: self.listing.limiter.release(permit))

    def list_tables(self, schema: str, sql: str = "") -> list[tuple[Any, ...]]:
        """A listing streamed with an unbuffered cursor, as a client of a large schema reads it."""
        conn = self.connect()
        try:
            with conn.cursor(pymysql.cursors.SSCursor) as cur:
                cur.execute(sql or listing_sql(schema, literal=connection_literal(conn)))
                return list(cur.fetchall_unbuffered())
        finally:
            conn.close()

    def close(self) -> None:
        self.up.close()
        self.ec.stop()


@pytest.fixture
def limited() -> Iterator[Callable[..., Limited]]:
    made: list[Limited] = []

    def make(**limits: int) -> Limited:
        made.append(Limited(**limits))
        return made[-1]

    yield make
    for c in made:
        c.close()


def refused(fn: Callable[[], Any]) -> str:
    with pytest.raises(pymysql.MySQLError) as ei:
        fn()
    assert ei.value.args[0] == MEM_QUOTA, ei.value
    return str(ei.value.args[1])


# --- which queries stream, and the catalog at scale --------------------------------------------------------

def test_listing_queries_stream_others_are_built_whole() -> None:
    def plan(sql: str, db: str = "") -> Any:
        return plan_listing(parse_one(sql, read="mysql"), db)

    p = plan(listing_sql("shop", "o%", literal=functools.partial(string_literal, no_backslash_escapes=False)))
    assert p is not None and p.positions is not None and p.predicate is not None and p.schema == "shop"
    assert p.columns == ("TIDB_TABLE_ID", "TABLE_SCHEMA", "TABLE_NAME")
    row = ("def", "shop", "orders", "BASE TABLE", *(None,) * 17, 7, "CLUSTERED")
    assert p.predicate(row) and not p.predicate((*row[:2], "users", *row[3:]))
    assert plan("SELECT * FROM tables", "information_schema").columns[0] == "TABLE_CATALOG"
    computed = plan("SELECT UPPER(table_name) AS n FROM information_schema.tables WHERE table_schema = 'a' OR 1")
    assert computed is not None and computed.positions is None  # streams, evaluated by sqlglot chunk by chunk
    for whole in ("SELECT table_name FROM information_schema.tables ORDER BY table_name",
                  "SELECT COUNT(*) FROM information_schema.tables",
                  "SELECT table_name FROM information_schema.tables LIMIT 3",
                  "SELECT DISTINCT table_schema FROM information_schema.tables",
                  "SELECT column_name FROM information_schema.columns",
                  "SELECT t.table_name FROM information_schema.tables t JOIN information_schema.columns c "
                  "ON t.table_name = c.table_name",
                  "SELECT table_name FROM my.tables"):
        assert plan(whole) is None, whole
    assert row_wire_size((1, "ab", None, "é")) == 4 + 2 + 3 + 1 + 3


def test_bulk_create_is_real_catalog_state_and_listing_is_per_schema() -> None:
    cat = Catalog()
    for name in ("a", "b"):
        cat.add_database(DatabaseInfo(cat.alloc_id(), name))
    version = cat.schema_version
    tables = cat.bulk_create_tables("a", (f"t{i}" for i in range(1000)), COLS)
    cat.bulk_create_tables("b", ["x"], COLS)
    assert len({t.id for t in tables}) == 1000 and all(t.schema_version == version + 1 for t in tables)
    assert cat.table("A", "T999") == tables[-1] and cat.table_by_id(tables[0].id) == tables[0]
    assert [t.name for t in cat.tables("b")] == ["x"] and cat.table_count("a") == 1000
    with pytest.raises(ValueError, match="already exists"):
        cat.bulk_create_tables("a", ["new", "T5"], COLS)
    with pytest.raises(ValueError, match="Unknown database"):
        cat.bulk_create_tables("nope", ["t"], COLS)
    assert cat.table("a", "new") is None
    # what is left: b.x and TiDB's two DDL job tables
    assert len(cat.drop_database("a")) == 1000 and cat.tables("a") == [] and cat.table_count() == 3


# --- streaming: the memory held is a chunk's, whatever the listing's size ---------------------------------

def test_a_listing_larger_than_the_pools_streams_within_them(limited: Callable[..., Limited]) -> None:
    n = 3 * CHUNK + 17
    # Direct fits one chunk of rows (~40 bytes each), not the listing; heap the walk and one chunk being built.
    c = limited(direct_limit_bytes=CHUNK * 60, heap_limit_bytes=8 * n + 450 * CHUNK)
    names = [f"t{i:06d}" for i in range(n)]
    made = c.bulk("big", names)
    lim = c.listing.limiter
    peaks = c.ec.call(lambda: {"heap": PeakObserver(lim.heap), "direct": PeakObserver(lim.direct)})
    rows = c.list_tables("big")
    assert sorted(rows) == sorted((t.id, "big", t.name) for t in made)  # every table, once
    whole = sum(row_wire_size(r) for r in rows)
    assert whole > CHUNK * 60 >= peaks["direct"].peak > 0  # never the whole listing's bytes at once
    assert 0 < peaks["heap"].peak <= 8 * n + 450 * CHUNK
    wait_until(lambda: c.used() == (0, 0), what="permits released after the last row")
    # A client that stops reading holds the server at the chunk in flight, not the listing.
    conn = c.connect()
    cur = conn.cursor(pymysql.cursors.SSCursor)
    cur.execute(listing_sql("big", literal=connection_literal(conn)))
    assert cur.fetchone() is not None
    wait_until(lambda: c.used()[1] > 0, what="a chunk in flight")
    assert c.used()[1] <= CHUNK * 60
    assert cur._result is not None
    cur._result.unbuffered_active = False  # the rest stays unread: the client goes away mid-result
    conn.close()  # the server notices at its next write and releases
    wait_until(lambda: c.used() == (0, 0), what="released when the client went away", timeout=30)


# --- refusals with a clear message, and permits released on every path -------------------------------------

def test_a_listing_larger_than_a_pool_is_refused_with_the_limit_named(limited: Callable[..., Limited]) -> None:
    c = limited(heap_limit_bytes=100_000, direct_limit_bytes=1_000_000)
    c.bulk("big", [f"t{i:04d}" for i in range(300)])
    c.bulk("small", ["t1", "t2"])
    msg = refused(lambda: c.list_tables("big"))
    assert "upstream-catalog heap memory" in msg and "listing `SELECT TIDB_TABLE_ID" in msg
    assert "limit 100000 bytes (--catalog-heap-limit-bytes)" in msg and "never be served" in msg
    assert len(c.list_tables("small")) == 2  # a smaller listing fits
    wait_until(lambda: c.used() == (0, 0), what="permits released")

    d = limited(heap_limit_bytes=1_000_000, direct_limit_bytes=3000)
    d.bulk("big", [f"t{i:04d}" for i in range(300)])
    msg = refused(lambda: d.list_tables("big"))  # a chunk of 300 rows is ~9 KB
    assert "upstream-catalog direct memory" in msg and "limit 3000 bytes (--catalog-direct-limit-bytes)" in msg
    wait_until(lambda: d.used() == (0, 0), what="permits released")


def test_other_information_schema_queries_are_bounded_as_a_whole(limited: Callable[..., Limited]) -> None:
    c = limited(heap_limit_bytes=200_000)
    c.bulk("big", [f"t{i:04d}" for i in range(1000)])
    msg = refused(lambda: c.list_tables("", "SELECT COUNT(*) FROM information_schema.tables"))
    assert "information_schema query" in msg and "--catalog-heap-limit-bytes" in msg
    wait_until(lambda: c.used() == (0, 0), what="permits released")


def test_queue_full_timeout_and_success_release_everything(limited: Callable[..., Limited]) -> None:
    c = limited(direct_limit_bytes=10_000, direct_max_queue=1, direct_acquire_timeout_ms=60_000,
                heap_acquire_timeout_ms=60_000)
    c.bulk("db", [f"t{i}" for i in range(20)])
    blocker = c.hold(10_000, LimitType.DIRECT)
    waiting: dict[str, Any] = {}
    first = threading.Thread(target=lambda: waiting.setdefault("rows", c.list_tables("db")), daemon=True)
    first.start()
    wait_until(lambda: c.queued(LimitType.DIRECT) == 1, what="first listing queued")
    msg = refused(lambda: c.list_tables("db"))
    assert "wait queue is full (max 1 waiting, --catalog-max-queue)" in msg and "10000 bytes" in msg
    c.release(blocker)
    first.join(30)
    assert len(waiting["rows"]) == 20  # the queued listing went on once memory was free
    wait_until(lambda: c.used() == (0, 0), what="released after the response")

    t = limited(direct_limit_bytes=10_000, direct_acquire_timeout_ms=50)
    t.bulk("db", ["t"])
    blocker = t.hold(10_000, LimitType.DIRECT)
    msg = refused(lambda: t.list_tables("db"))
    assert "waited 50 ms" in msg and "--catalog-acquire-timeout-ms" in msg and "limit 10000 bytes" in msg
    t.release(blocker)
    wait_until(lambda: t.used() == (0, 0), what="released after the timeout")


def test_metrics_exported_as_upstream_catalog(limited: Callable[..., Limited]) -> None:
    c = limited(heap_limit_bytes=7 * MIB, direct_limit_bytes=5 * MIB, direct_acquire_timeout_ms=20)
    c.bulk("db", ["t"])
    blocker = c.hold(5 * MIB, LimitType.DIRECT)
    refused(lambda: c.list_tables("db"))
    labels = {"limiter": "upstream-catalog"}
    sample = c.registry.get_sample_value
    assert sample("cdcflow_memory_limiter_limit_bytes", {**labels, "type": "heap"}) == 7 * MIB
    assert sample("cdcflow_memory_limiter_used_bytes", {**labels, "type": "direct"}) == 5 * MIB
    assert sample("cdcflow_memory_limiter_timeouts_total", {**labels, "type": "direct"}) == 1
    c.release(blocker)


# --- load (issue 5, on the SQL path): one schema of 100,000 tables, concurrent listings -------------------

# Growth of process RSS (server and clients in this one process) over the baseline once the tables exist: the
# tracked part is bounded by the four pools; the rest is the rows in the client library's and the kernel's buffers.
@pytest.mark.load
def test_listing_load_100k() -> None:
    """Issue 5's scenario on TiDB's interface: 100,000 tables in one schema, 10 concurrent listings, default limits."""
    res = run_listing_load(100_000, n_lists=10)
    print(res.summary())
    assert res.wrong == []
    assert res.lists_ok == 10
    for pool in ("heap", "direct"):
        assert 0 < res.server_peak[pool] <= res.limits[pool]
        assert 0 < res.client_peak[pool] <= 100 * MIB
    # The server holds chunks, not listings: 10 listings of 100k rows (~3.5 MB each) never hold more than a
    # chunk (~370 KB) each.
    assert res.server_peak["direct"] < 10 * res.listing_bytes / 5
    assert res.peak_rss - res.baseline_rss <= 300 * MIB, res.summary()


# --- configuration: `cdcflow upstream start --catalog-*` -------------------------------------------------

def test_upstream_start_flags_reach_the_cluster_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cdc_core.cli import upstream_control
    from cdc_core.cli.upstream_cmd import app
    from cdc_core.upstream import process

    got: dict[str, Any] = {}
    monkeypatch.setattr(process, "run_foreground", lambda config: got.setdefault("config", config))
    monkeypatch.setattr(upstream_control, "spawn_detached", lambda args: got.setdefault("args", args) and {})
    runner = CliRunner()
    assert runner.invoke(app, ["start"]).exit_code == 0
    assert got.pop("config").catalog_memory == MemoryLimitConfig()  # the seed's defaults
    flags = ["--catalog-heap-limit-bytes", "1000", "--catalog-direct-limit-bytes", "0",
             "--catalog-acquire-timeout-ms", "250", "--catalog-max-queue", "3"]
    assert runner.invoke(app, ["start", *flags]).exit_code == 0
    assert got.pop("config").catalog_memory == MemoryLimitConfig(1000, 0, 250, 250, 3, 3)
    assert runner.invoke(app, ["start", "--detach", *flags]).exit_code == 0
    args = got.pop("args")
    assert [args[args.index(f) + 1] for f in flags[::2]] == flags[1::2]  # the background server gets them
    bad = runner.invoke(app, ["start", "--catalog-max-queue", "-1"])
    squeezed = "".join(ch for ch in bad.output if not ch.isspace() and ch != "│")  # rich wraps it in a box
    assert bad.exit_code != 0 and "'max-queue'mustbeaninteger>=0" in squeezed
