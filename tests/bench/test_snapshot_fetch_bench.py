"""A snapshot's fetch of many small tables (``make bench``): four tables at a time, each streamed on the driver, against
the fetch as it was, one table at a time by a Spark job each, side by side.

An initial snapshot reads every replicated table at the changefeed's start. A table of a few thousand rows costs
little to read and much in fixed costs when a Spark job reads it (a job, its Python workers, a parquet commit):
``snapshot_load`` now reads a table of at most ``DRIVER_ROWS`` rows on the driver, ``FETCH_THREADS`` tables at a
time. The baseline is the same job with one thread and ``$CDCFLOW_SNAPSHOT_DRIVER_ROWS=0`` (every table of more
than one chunk in Spark, as before).

The upstream is its own process (``cdcflow upstream start --detach``), as a cluster is; the tables are the
workload's (``upstream workload --prepare``), two regions each. The two ways run in alternating rounds, each into
a fresh sink; the fastest round of each is kept. Printed: seconds each way and their ratio.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TABLES = 24
ROWS = 4_000
ROUNDS = 2


def _cli(home: Path, *args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "cdc_core.cli.main", *args], env={**os.environ, "CDCFLOW_HOME":
                         str(home)}, capture_output=True, text=True, timeout=1800, check=False)
    assert res.returncode == 0, f"cdcflow {' '.join(args)}: {res.stderr[-3000:]}"
    return res.stdout


@pytest.fixture
def upstream_home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    _cli(home, "upstream", "start", "--detach", "--stores", "3", "--gc-life-time-s", "86400")
    try:
        yield home
    finally:
        _cli(home, "upstream", "stop")


def test_small_tables_fetched_on_the_driver_four_at_a_time(upstream_home: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.changefeed.job_args.snapshot_load import SnapshotJobArgs
    from cdc_core.changefeed.reconcile import load_schema
    from cdc_core.client.upstream import UpstreamClient
    from spark_jobs import snapshot_load
    from spark_jobs.session import get_spark

    _cli(upstream_home, "upstream", "workload", "--prepare", "--db", "small", "--tables", str(TABLES),
         "--initial-rows", str(ROWS), "--id-range", str(ROWS))
    pd_addr = json.loads((upstream_home / "upstream.json").read_text())["pd_addr"]
    with UpstreamClient(pd_addr) as c:
        ts = c.get_ts()
        tables = [t for t in load_schema(c, ts).tables_at(ts) if t.db_name == "small"]
    assert len(tables) == TABLES
    get_spark("cdcflow-snapshot-load")  # the JVM's start is neither way's cost

    def fetch(new: bool, sink: Path) -> float:
        monkeypatch.setattr(snapshot_load, "FETCH_THREADS", snapshot_load.FETCH_THREADS if new else 1)
        monkeypatch.setenv(snapshot_load.ENV_DRIVER_ROWS, str(snapshot_load.DRIVER_ROWS if new else 0))
        started = time.perf_counter()
        out = snapshot_load.run_job(SnapshotJobArgs(phase="fetch", sink_uri=f"file://{sink}", changefeed_id="bench",
                                                    pd_addr=pd_addr, ts=ts, tables=tuple(tables)))
        took = time.perf_counter() - started
        assert [r["rows"] for r in out["tables"].values()] == [ROWS] * TABLES
        assert {r["chunks"] for r in out["tables"].values()} == {2}  # more than one chunk: Spark's, before
        return took

    fetch(False, tmp_path / "warm")  # the first Spark job of the session pays for its workers' start
    took: dict[bool, list[float]] = {True: [], False: []}
    for i in range(ROUNDS):
        for new in (True, False):
            took[new].append(fetch(new, tmp_path / f"sink-{i}-{new}"))
    now, before = min(took[True]), min(took[False])
    print(f"\nsnapshot fetch of {TABLES} tables of {ROWS:,} rows: {now:.1f} s four at a time on the driver, "
          f"{before:.1f} s one at a time by Spark jobs (ratio {now / before:.2f})")
    assert now < before
