"""Issue 55's scale figure (``make bench-scale``; not in ``make test``): the highest row rate the embedded upstream
sustains, captured (``cdcflow capture start --detach``, ``[capture] auto-start`` on) and applied in 1-minute windows
through a real Airflow for 30 minutes: checkpoint lag p99 <= 70 s.

One embedded upstream in its own process (3 stores, the scan costs at TiKV's defaults), Airflow standalone (its
tasks' Spark a Spark Connect server, as ``make airflow``: ``tests/testkit/airflow_server.py``), a changefeed of two
tables scheduled every ``WINDOW_S`` seconds. ``THREADS`` writers, each its own SQL connection, commit multi-row
transactions (an ``INSERT`` of ``TXN_ROWS`` rows and an ``UPDATE`` of ``TXN_ROWS // 10`` of the rows just written, in
one ``BEGIN ... COMMIT``) paced at ``RATE`` rows/s together for ``MINUTES``; the rate they reached is the figure (the
upstream's SQL front is what bounds it). The checkpoint lag (wall clock minus the checkpoint's physical time) is
sampled every second from the first window's end to the end of the writes: p50 / p99 / max, with the DAG runs'
durations. At the end the tables' rows at the checkpoint equal the upstream's (count and sum of the updated column).

Run the issue's size: ``make bench-scale`` (or ``.venv/bin/pytest tests/bench/test_capture_scale_bench.py -q
-p no:cacheprovider --override-ini addopts= -o timeout=0 -s``). Env ``CDCFLOW_SCALE_CAPTURE_*``: ``MINUTES`` (30),
``RATE`` (5000 rows/s), ``TXN_ROWS`` (250), ``THREADS`` (2), ``WINDOW_S`` (60); e.g. ``CDCFLOW_SCALE_CAPTURE_MINUTES=4``
for a short run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import tso


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"CDCFLOW_SCALE_CAPTURE_{name}", default))


MINUTES = _env("MINUTES", 30)
RATE = _env("RATE", 5000)
TXN_ROWS = int(_env("TXN_ROWS", 250))
THREADS = int(_env("THREADS", 2))
WINDOW_S = int(_env("WINDOW_S", 60))
ROOT = Path(__file__).resolve().parents[2]
CDCFLOW = str(ROOT / ".venv" / "bin" / "cdcflow")
CF = DB = "capscale"
TABLES = ("t1", "t2")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path, str]]:
    """The upstream (detached) and Airflow over one CDCFLOW_HOME; ``(airflow, home, pd)``."""
    from testkit.airflow_server import AirflowServer

    work = tmp_path_factory.mktemp("capscale")
    home = work / "cdcflow"
    (home / "changefeeds").mkdir(parents=True)
    env = {**os.environ, "CDCFLOW_HOME": str(home)}
    env.pop("CDCFLOW_UPSTREAM", None)
    out = subprocess.run([CDCFLOW, "upstream", "start", "--detach", "--stores", "3"], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    pd = json.loads(out)["pd_addr"]
    server = AirflowServer(work, {"CDCFLOW_HOME": str(home), "CDCFLOW_UPSTREAM": pd})
    try:
        server.start()
        yield server, home, pd
    finally:
        server.remove()
        subprocess.run([CDCFLOW, "upstream", "stop"], env=env, capture_output=True, timeout=120)


class Writers:
    """``THREADS`` paced writers of multi-row transactions; ``rows`` committed so far."""

    def __init__(self, pd: str) -> None:
        self.pd = pd
        self.rows = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(THREADS)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _run(self, n: int) -> None:
        table = TABLES[n % len(TABLES)]
        per_s = RATE / THREADS
        pad = "p" * 48
        next_id = n * 10**12
        with UpstreamClient(self.pd, timeout=60) as c:
            t0, done = time.monotonic(), 0
            while not self.stop.is_set():
                lo, hi = next_id, next_id + TXN_ROWS
                values = ", ".join(f"({i}, 0, '{pad}')" for i in range(lo, hi))
                try:
                    c.execute(f"BEGIN; INSERT INTO {DB}.{table} VALUES {values}; UPDATE {DB}.{table} SET v = v + 1 "
                              f"WHERE id >= {lo} AND id < {lo + TXN_ROWS // 10}; COMMIT")
                except Exception as exc:  # counted and shown: a rate the upstream cannot take shows as errors
                    self.errors.append(str(exc)[:200])
                    continue
                next_id = hi
                done += TXN_ROWS
                with self._lock:
                    self.rows += TXN_ROWS
                ahead = done / per_s - (time.monotonic() - t0)
                if ahead > 0:
                    self.stop.wait(ahead)  # the pace: a writer ahead of its rate waits for the clock

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)


def test_capture_at_the_upstreams_highest_rate_through_airflow(deployment: tuple[Any, Path, str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    server, home, pd = deployment
    monkeypatch.setenv("CDCFLOW_HOME", str(home))
    monkeypatch.setenv("CDCFLOW_UPSTREAM", pd)
    env = {**server.env, "CDCFLOW_HOME": str(home), "CDCFLOW_UPSTREAM": pd}

    def cdcflow(*args: str) -> str:
        proc = subprocess.run([CDCFLOW, *args], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"cdcflow {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
        return proc.stdout

    with UpstreamClient(pd) as c:
        c.execute(f"CREATE DATABASE {DB}; " + " ".join(
            f"CREATE TABLE {DB}.{t} (id BIGINT PRIMARY KEY, v INT, pad VARCHAR(64));" for t in TABLES))
    sink = home / "lake" / CF
    config = home / f"{CF}.toml"
    config.write_text(f'changefeed-id = "{CF}"\nsink-uri = "file://{sink}"\n[filter]\nrules = ["{DB}.*"]\n'
                      f'[airflow]\nschedule = "{WINDOW_S}s"\ncatchup = false\n[capture]\nauto-start = true\n')
    cdcflow("changefeed", "create", "--config", str(config))
    dag_id = f"cdcflow__{CF}"
    server.wait_dag(dag_id)
    cdcflow("capture", "start", CF, "--detach")  # up before the first window (the DAG would start it too)
    writers = Writers(pd)
    lags: list[float] = []
    started = time.monotonic()
    start_ckpt = load_state(CF).checkpoint_ts
    try:
        server.set_paused(dag_id, False)
        writers.start()
        end = started + MINUTES * 60
        while time.monotonic() < end:
            ckpt = load_state(CF).checkpoint_ts
            if ckpt > start_ckpt:  # from the first window's end: before it the lag is the changefeed's age
                lags.append(max(0.0, time.time() - tso.physical_ms(ckpt) / 1000))
            time.sleep(1.0)
        wrote_s = time.monotonic() - started
    finally:
        writers.join()
    rows = writers.rows
    assert lags, "no window ended while the writers ran"
    with UpstreamClient(pd) as c:
        target = c.get_ts()
        deadline = time.monotonic() + 20 * WINDOW_S
        while load_state(CF).checkpoint_ts < target:  # the windows catch up with the last writes
            assert time.monotonic() < deadline, "the checkpoint did not pass the end of the writes"
            time.sleep(2.0)
        server.pause_and_settle(dag_id)
        ckpt = load_state(CF).checkpoint_ts
        want = {t: c.query(f"SELECT COUNT(*) AS n, SUM(v) AS s FROM {DB}.{t}", at_ts=ckpt)[0] for t in TABLES}
    cdcflow("capture", "stop", CF)
    got = {t: delta_count_sum(sink, t, ckpt) for t in TABLES}
    runs = [r for r in server.runs(dag_id) if r["state"] in ("success", "failed")]
    timings = [server.run_timings(dag_id, r) for r in runs if r.get("end_date")]
    durations = [t["run"] for t in timings]
    steps = {task: round(statistics.median(t[task] for t in timings if task in t), 1)
             for task in sorted({k for t in timings for k in t if k != "run"})}
    figures = {
        "minutes": round(wrote_s / 60, 1), "rate_asked": RATE, "rows": rows, "rows_per_s": round(rows / wrote_s),
        "txn_rows": TXN_ROWS, "threads": THREADS, "writer_errors": len(writers.errors),
        "window_s": WINDOW_S, "dag_runs": {s: sum(r["state"] == s for r in runs) for s in ("success", "failed")},
        "run_s_p50": round(statistics.median(durations), 1) if durations else None,
        "run_s_max": round(max(durations), 1) if durations else None,
        "task_s_p50": steps,
        "lag_samples": len(lags),
        "lag_p50_s": round(float(np.percentile(lags, 50)), 1), "lag_p99_s": round(float(np.percentile(lags, 99)), 1),
        "lag_max_s": round(max(lags), 1),
    }
    print("\ncapture at scale through Airflow:\n" + json.dumps(figures, indent=2))
    if writers.errors:
        print("first writer errors:", writers.errors[:3])
    assert got == {t: (int(w["n"]), int(w["s"] or 0)) for t, w in want.items()}, (got, want)
    assert figures["dag_runs"]["failed"] == 0, figures
    assert figures["lag_p99_s"] <= 70, figures


def delta_count_sum(sink: Path, table: str, ts: int) -> tuple[int, int]:
    """Rows and the sum of ``v`` of the Delta table ``DB.table`` as of upstream ts ``ts``."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from cdc_core.codec.sink_uri import table_path_of
    from spark_jobs.checks.data_quality import version_as_of
    from spark_jobs.load.silver_read import read_table

    path = table_path_of(str(sink), DB, table)
    version = version_as_of(path, ts)
    assert version is not None
    dt = DeltaTable(path)
    dt.load_as_version(version)
    rows = read_table(dt)
    return rows.num_rows, int(pc.sum(rows.column("v")).as_py() or 0)
