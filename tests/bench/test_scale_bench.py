"""Issue 18's scale benchmark (``make bench-scale``; not in ``make test``): real table sizes end to end.

One embedded upstream (its own process, 3 stores) is bulk-loaded by ``cdcflow upstream workload --prepare``
(``IMPORT INTO`` of Parquet files): db ``big`` one table of ``BIG_ROWS`` rows, db ``small`` ``TABLES`` tables of
``TABLE_ROWS``, db ``tiny`` one table of ``TINY_ROWS``. One changefeed replicates all of them (initial snapshot,
then windows), its windows run in this process (the local Spark engine). It measures:

1. the bulk load (rows/s) and the upstream's memory per row (its RSS growth over the rows loaded);
2. the snapshot window (rows/s);
3. size independence: the same ``CHANGES``-row window (an UPDATE of random rows) on ``big`` and on ``tiny``: the
   ratio of the windows' wall times, and of their check steps (goal <= 1.5);
4. lag: two workload processes (``cdcflow upstream workload``) change ``RATE`` rows/s over ``big`` and ``small`` for
   ``MINUTES`` while a window starts every ``WINDOW_S`` seconds (as the DAG's schedule does: the next one at once
   when a window overran): the checkpoint lag (wall clock minus the checkpoint's physical time), sampled every
   second, p50 / p99 (goal p99 <= WINDOW_S + 10 s), the p50 of each step's seconds and of the events a window
   pulled, and the peak RSS of every cdcflow process (upstream, workloads, this runner with its Spark JVM);
5. catch-up: the windows stop for ``BACKLOG_MINUTES`` while the workload goes on, then run back to back until the
   checkpoint passes the end of the backlog: rows/s and the runner's peak RSS.

The issue's sizes are the defaults (10 M rows, 10,000 rows/s for 10 minutes, a 1-hour backlog); a 2-core machine
holding the upstream in memory runs them scaled down by the environment variables ``CDCFLOW_SCALE_*`` (the names
above); ``CDCFLOW_SCALE_DELETION_VECTORS`` (1) sets the changefeed's ``[sink] deletion-vectors``. Figures are
printed, nothing is asserted but that every window's checks passed and the Delta tables agree
with the upstream (a full reconciliation at the end).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_core.changefeed import reconcile, runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import tso
from cdc_core.errors import ConfigError, DataQualityError


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"CDCFLOW_SCALE_{name}", default))


BIG_ROWS = int(_env("BIG_ROWS", 5_000_000))
TABLES = int(_env("TABLES", 50))
TABLE_ROWS = int(_env("TABLE_ROWS", 100_000))
TINY_ROWS = int(_env("TINY_ROWS", 10_000))
CHANGES = int(_env("CHANGES", 1_000))
RATE = _env("RATE", 10_000)
MINUTES = _env("MINUTES", 10)
WINDOW_S = _env("WINDOW_S", 60)
BACKLOG_MINUTES = _env("BACKLOG_MINUTES", 60)
ROWS_PER_TXN = int(_env("ROWS_PER_TXN", 50))
# The changefeed's [sink] deletion-vectors (1: on, what tables of millions of rows want; 0: copy-on-write MERGEs).
DELETION_VECTORS = bool(_env("DELETION_VECTORS", 1))
# cdcflow_airflow.dag_factory.DEFAULT_RETRIES: the catch-up is retried as its Airflow task would be
AIRFLOW_RETRIES = 3


def _cli(home: Path, *args: str, timeout: float = 7200) -> str:
    env = {**os.environ, "CDCFLOW_HOME": str(home)}
    res = subprocess.run([sys.executable, "-m", "cdc_core.cli.main", *args], env=env, capture_output=True,
                         text=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"cdcflow {' '.join(args)}: {res.stderr[-3000:]}"
    return res.stdout


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every process under it (0 once gone)."""
    total = 0
    for p in [pid, *_descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class Sampler:
    """Every second: the checkpoint lag (when ``lag`` is on) and the RSS of each named process tree (peaks kept)."""

    def __init__(self, cid: str) -> None:
        self.cid = cid
        self.pids: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.lags: list[float] = []
        self.lag = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scale-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for name, pid in list(self.pids.items()):
                self.peak[name] = max(self.peak.get(name, 0), _rss(pid))
            if self.lag:
                cp = load_state(self.cid).checkpoint_ts
                self.lags.append((tso.now_physical_ms() - tso.physical_ms(cp)) / 1000.0)

    def reset_peaks(self) -> None:
        self.peak = {}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def upstream_home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    _cli(home, "upstream", "start", "--detach", "--stores", "3", "--gc-life-time-s", "86400",
         "--sink-memory-quota-bytes", str(1 << 30))
    try:
        yield home
    finally:
        _cli(home, "upstream", "stop")


def _workload(home: Path, db: str, tables: int, id_range: int, rate: float, seconds: float) -> subprocess.Popen[str]:
    env = {**os.environ, "CDCFLOW_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "cdc_core.cli.main", "upstream", "workload", "--no-prepare", "--db", db,
         "--tables", str(tables), "--id-range", str(id_range), "--threads", "2", "--rows-per-txn", str(ROWS_PER_TXN),
         "--rows-per-s", str(rate), "--duration-s", str(seconds)], env=env, stdout=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen[str], seconds: float) -> dict[str, Any]:
    """The summary of a workload process started for ``seconds`` (waited for that long and 10 minutes more)."""
    out, _ = p.communicate(timeout=seconds + 600)
    assert p.returncode == 0, out
    return json.loads(out[out.index("{"):])  # type: ignore[no-any-return]


def _errors(summaries: list[dict[str, Any]]) -> dict[str, int]:
    """The workloads' failed transactions by kind, summed (duplicate keys and conflicts are expected, a few)."""
    total: dict[str, int] = {}
    for s in summaries:
        for kind, n in s["errors"].items():
            total[kind] = total.get(kind, 0) + n
    return total


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def _window(cid: str, target: int | None = None) -> tuple[float, dict[str, float], dict[str, Any]]:
    """One window: its wall time, the seconds of each step (``plan``, ``pull``, ``apply``, ``check``, ``publish``;
    the runner reports each step as it ends) and the runner's result."""
    marks: dict[str, float] = {}
    started = time.monotonic()
    r = runner.run_window(cid, target, lambda step, info: marks.setdefault(step, time.monotonic()))
    assert r["skipped"] or r["check"]["passed"], r.get("check")
    ends = [("start", started), *sorted(marks.items(), key=lambda kv: kv[1])]
    steps = {step: end - prev for (_, prev), (step, end) in itertools.pairwise(ends)}
    return time.monotonic() - started, steps, r


def _run_until_as_airflow(cid: str, until: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``runner.run_until`` retried as the Airflow task is (``AIRFLOW_RETRIES``, failing at once on data-quality and
    configuration errors, as ``RETRY_POLICY``), without Airflow's backoff; returns the results and each retried
    error, which the figures report."""
    retried: list[str] = []
    while True:
        try:
            return runner.run_until(cid, until), retried
        except (DataQualityError, ConfigError):
            raise
        except Exception as exc:  # what Airflow retries: the next try reuses the pulled window
            if len(retried) >= AIRFLOW_RETRIES:
                raise
            retried.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            print(f"catch-up: retrying after {retried[-1]}", flush=True)


def test_scale(upstream_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = upstream_home
    monkeypatch.setenv("CDCFLOW_HOME", str(home))
    info = json.loads((home / "upstream.json").read_text())
    monkeypatch.setenv("CDCFLOW_UPSTREAM", info["pd_addr"])
    cid = "scale"
    sampler = Sampler(cid)
    sampler.pids = {"upstream": int(info["pid"]), "runner (Python + Spark JVM)": os.getpid()}
    figures: dict[str, Any] = {}
    try:
        # 1. bulk load
        rss0 = _rss(int(info["pid"]))
        started = time.monotonic()
        for db, tables, rows in (("big", 1, BIG_ROWS), ("small", TABLES, TABLE_ROWS), ("tiny", 1, TINY_ROWS)):
            _cli(home, "upstream", "workload", "--prepare", "--db", db, "--tables", str(tables),
                 "--initial-rows", str(rows), "--id-range", str(rows // 2))
        total = BIG_ROWS + TABLES * TABLE_ROWS + TINY_ROWS
        load_s = time.monotonic() - started
        figures["load"] = {"rows": total, "seconds": round(load_s, 1), "rows_per_s": round(total / load_s),
                           "upstream_bytes_per_row": round((_rss(int(info["pid"])) - rss0) / total)}
        print(f"\nload: {figures['load']}", flush=True)

        # 2. the snapshot window
        with UpstreamClient(info["pd_addr"], timeout=600) as c:
            cfg = home / "scale.toml"
            cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{home / "lake"}"\nstart-ts = {c.get_ts()}\n'
                           'initial-snapshot = true\n[filter]\nrules = ["big.*", "small.*", "tiny.*"]\n'
                           f'[sink]\ndeletion-vectors = {str(DELETION_VECTORS).lower()}\n')
            _cli(home, "changefeed", "create", "--config", str(cfg))
            wall, _, _ = _window(cid, c.get_ts())
            figures["snapshot"] = {"rows": total, "seconds": round(wall, 1), "rows_per_s": round(total / wall)}
            print(f"snapshot: {figures['snapshot']}", flush=True)

            # 3. size independence: the same window on the big table and on the tiny one
            times = {}
            for db, rows in (("tiny", TINY_ROWS), ("big", BIG_ROWS), ("tiny", TINY_ROWS), ("big", BIG_ROWS)):
                ids = random.Random(rows).sample(range(-(rows // 2), rows // 2), CHANGES)
                c.execute(f"UPDATE {db}.sbtest1 SET k = k + 1 WHERE id IN ({', '.join(map(str, ids))})")
                wall, steps, _ = _window(cid, c.get_ts())
                times[db] = (wall, steps.get("check", 0.0))  # the second of each: a warm process, as in steady state
            figures["size_independence"] = {
                "changes": CHANGES, "window_s": {d: round(t[0], 2) for d, t in times.items()},
                "check_s": {d: round(t[1], 2) for d, t in times.items()},
                "window_ratio": round(times["big"][0] / times["tiny"][0], 2),
                "check_ratio": round(times["big"][1] / times["tiny"][1], 2)}
            print(f"size independence: {figures['size_independence']}", flush=True)

        # 4. lag under a steady workload, windows on a schedule
        seconds = MINUTES * 60
        share = BIG_ROWS / (BIG_ROWS + TABLES * TABLE_ROWS)
        loads = [_workload(home, "big", 1, BIG_ROWS // 2, RATE * share, seconds),
                 _workload(home, "small", TABLES, TABLE_ROWS // 2, RATE * (1 - share), seconds)]
        sampler.pids.update({"workload big": loads[0].pid, "workload small": loads[1].pid})
        sampler.reset_peaks()
        sampler.lag = True
        windows: list[float] = []
        step_s: dict[str, list[float]] = {}
        events: list[int] = []
        end = time.monotonic() + seconds
        next_at = time.monotonic()
        while time.monotonic() < end:
            time.sleep(max(0.0, next_at - time.monotonic()))  # the schedule's next tick (no condition to wait for)
            next_at += WINDOW_S
            wall, steps, r = _window(cid)
            windows.append(wall)
            for step, took in steps.items():
                step_s.setdefault(step, []).append(took)
            events.append(int((r.get("pull") or {}).get("events") or 0))
        sampler.lag = False
        done = [_finish(p, 0) for p in loads]  # their minutes are over: the windows ran as long
        rows = sum(d["rows"] for d in done)
        figures["lag"] = {"rows_per_s": round(rows / seconds), "workload_errors": _errors(done),
                          "windows": len(windows),
                          "window_s_p50": round(_pct(windows, 0.5), 1), "window_s_max": round(max(windows), 1),
                          "step_s_p50": {k: round(_pct(v, 0.5), 1) for k, v in step_s.items()},
                          "events_per_window_p50": round(_pct(events, 0.5)),
                          "lag_s_p50": round(_pct(sampler.lags, 0.5), 1),
                          "lag_s_p99": round(_pct(sampler.lags, 0.99), 1),
                          "goal_p99_s": WINDOW_S + 10,
                          "peak_rss_mib": {k: round(v / 2**20) for k, v in sampler.peak.items()}}
        print(f"lag: {figures['lag']}", flush=True)

        # 5. catch-up of a backlog built while no window ran
        backlog_s = BACKLOG_MINUTES * 60
        loads = [_workload(home, "big", 1, BIG_ROWS // 2, RATE * share, backlog_s),
                 _workload(home, "small", TABLES, TABLE_ROWS // 2, RATE * (1 - share), backlog_s)]
        done = [_finish(p, backlog_s) for p in loads]
        rows = sum(d["rows"] for d in done)
        sampler.pids = {k: v for k, v in sampler.pids.items() if not k.startswith("workload")}
        sampler.reset_peaks()
        with UpstreamClient(info["pd_addr"]) as c:
            until = c.get_ts()
        print(f"backlog workloads: {done}", flush=True)
        started = time.monotonic()
        results, retried = _run_until_as_airflow(cid, until)
        took = time.monotonic() - started
        assert load_state(cid).checkpoint_ts >= until and all(r["skipped"] or r["check"]["passed"] for r in results)
        figures["catch_up"] = {"backlog_rows": rows, "workload_errors": _errors(done), "seconds": round(took, 1),
                               "rows_per_s": round(rows / took),
                               "windows": len(results), "retried_after": retried,
                               "peak_rss_mib": {k: round(v / 2**20) for k, v in sampler.peak.items()}}
        print(f"catch-up: {figures['catch_up']}", flush=True)

        # the lake agrees with the upstream at the end
        started = time.monotonic()
        report = reconcile.reconcile(cid)
        assert all(r["passed"] for r in report.values()), [n for n, r in report.items() if not r["passed"]]
        figures["reconcile_s"] = round(time.monotonic() - started, 1)
    finally:
        sampler.stop()
        print(f"\nscale figures: {json.dumps(figures)}", flush=True)
