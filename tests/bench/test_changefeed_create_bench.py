"""``cdcflow changefeed create`` against a DDL history of 10,000 jobs and of 10, the same live tables
(``make bench``; issue 52 item 7, goal: ratio <= 1.5).

The starting schema is TiDB's meta snapshot at start-ts, so creating a changefeed costs the tables it replicates,
not the cluster's DDL history. Two private embedded upstreams (on threads of this process): one whose history
holds 10,000 jobs (``SCRATCH`` tables created, altered and dropped, then the live tables), one whose history is the
live tables' CREATE TABLEs and their CREATE DATABASE (10 jobs). ``create`` runs through the CLI's function in
alternating rounds, a new changefeed each; the fastest round of each is kept. Printed: seconds each and their
ratio, and, for scale, what replaying the history at start-ts (what ``create`` did before) costs on each.
Asserted: the schema log holds the live tables, and the ratio is at most 1.5.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_core.schema import ddl_history
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster

LIVE = 9  # with CREATE DATABASE, the short history's 10 jobs
JOBS = 10_000
SCRATCH = (JOBS - LIVE - 1) // 3  # create, alter, drop: three jobs each
ROUNDS = 5
BATCH = 300  # statements per script


def _cluster() -> EmbeddedCluster:
    return EmbeddedCluster(ClusterConfig(regions_per_table=1, gc_life_time_s=86_400)).start()


def _fill(ec: EmbeddedCluster, scratch: int) -> None:
    from cdc_core.client.upstream import UpstreamClient

    with UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE bench")
        statements = [s for i in range(scratch) for s in (
            f"CREATE TABLE s{i} (id INT PRIMARY KEY)", f"ALTER TABLE s{i} ADD COLUMN v INT", f"DROP TABLE s{i}")]
        statements += [f"CREATE TABLE live{i} (id INT PRIMARY KEY, v VARCHAR(20), n DECIMAL(10, 2))"
                       for i in range(LIVE)]
        for i in range(0, len(statements), BATCH):
            c.execute("USE bench; " + "; ".join(statements[i:i + BATCH]))
        jobs = c.query("SELECT COUNT(*) AS n FROM mysql.tidb_ddl_history WHERE db_name = 'bench'")[0]["n"]
        assert int(jobs) == 1 + 3 * scratch + LIVE


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, EmbeddedCluster]]:
    long, short = _cluster(), _cluster()
    try:
        started = time.perf_counter()
        _fill(long, SCRATCH)
        _fill(short, 0)
        print(f"\nhistories written in {time.perf_counter() - started:.0f} s")
        yield {"long": long, "short": short}
    finally:
        long.stop()
        short.stop()


def _replay_s(pd_addr: str) -> float:
    """What ``create`` did before: read both DDL job tables at a ts and replay them."""
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.schema.storage import SchemaStorage

    with UpstreamClient(pd_addr) as c:
        ts = c.get_ts()
        started = time.perf_counter()
        rows = [r for n in (ddl_history.HISTORY_TABLE_NAME, ddl_history.JOB_TABLE_NAME)
                for r in c.query(f"SELECT job_meta FROM mysql.{n}", at_ts=ts)]
        SchemaStorage.from_jobs(ddl_history.jobs_from_sql(rows, ts))
        return time.perf_counter() - started


def test_bench_create_costs_the_tables_not_the_history(upstreams: dict[str, EmbeddedCluster], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.changefeed.ddl_puller import SchemaLog
    from cdc_core.cli import changefeed_cmd

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    took: dict[str, list[float]] = {"long": [], "short": []}
    for i in range(ROUNDS):
        for name, ec in upstreams.items():
            monkeypatch.setenv("CDCFLOW_UPSTREAM", ec.pd_addr)
            cid = f"{name}{i}"
            cfg = tmp_path / f"{cid}.toml"
            cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{tmp_path / "lake" / cid}"\n'
                           '[filter]\nrules = ["bench.*"]\n')
            started = time.perf_counter()
            changefeed_cmd.create(cfg)
            took[name].append(time.perf_counter() - started)
            slog = SchemaLog.load(cid)
            assert sorted(t.name for t in slog.storage().tables_at(slog.resolved_ts)) == sorted(
                f"live{j}" for j in range(LIVE))
    long, short = min(took["long"]), min(took["short"])
    replay_long, replay_short = _replay_s(upstreams["long"].pd_addr), _replay_s(upstreams["short"].pd_addr)
    print(f"\nchangefeed create, {LIVE} live tables: {long * 1000:.0f} ms with {1 + 3 * SCRATCH + LIVE:,} DDL jobs in "
          f"the history, {short * 1000:.0f} ms with {1 + LIVE} (ratio {long / short:.2f}, goal <= 1.5); the history "
          f"replayed at start-ts, as create did before: {replay_long * 1000:.0f} ms and {replay_short * 1000:.0f} ms")
    assert long / short <= 1.5
