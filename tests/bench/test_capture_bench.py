"""Issue 55's capture figures (``make bench``): what a window costs with a capture running against the per-window
pull, as the number of regions grows, and what the capture costs in CPU per million rows.

One embedded upstream in its own process (``cdcflow upstream start --detach``, 3 stores, the scan costs at TiKV's
defaults: 6 incremental scans at once per store, 128 MiB/s), so that its CPU, the capture's and the windows' are
each their own process's; the counters are read as an operator reads them, from ``cdcflow upstream status --json``
(``"cdc": {"incremental_scans", "registered_regions"}``).

1. ``test_a_1_change_window_at_100_and_10000_regions``: one table split into 100, then one into 10,000 regions
   (``SPLIT TABLE``); at each size ``REPS`` 1-change windows with the per-window pull, then with ``cdcflow capture
   start --detach`` running. Each window is measured twice: as ``cdcflow changefeed run`` (a process: its imports,
   Great Expectations' among them, included) and as the same ``runner.run_until`` in this warm process (the window's
   own work). Bounds (the issue's): with the capture, the 10,000-region window over the 100-region one <= 1.2 and the
   10,000-region window <= 3 s; and 0 incremental scans over the capture's steady windows. The pull's figures are
   printed beside them, with no bound.
2. ``test_capture_cpu_per_million_rows``: the same ``CPU_ROWS`` rows (multi-row transactions of ``CPU_TXN_ROWS``) in
   ``CPU_WINDOWS`` windows, first pulled per window, then captured: CPU seconds per million rows of the per-window
   pulls (this process's CPU over the pull steps) against the capture process's CPU over the same rows plus the
   windows' reading of its parts (and, of the capture's, what it costs idle: its CPU rate over ``IDLE_S`` with
   nothing to capture, times the run's wall time); the upstream's CPU beside them. Bound: the capture not worse
   (ratio <= 1).

Run: ``.venv/bin/pytest tests/bench/test_capture_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_CAPTURE_REPS`` (windows per size and mode, 5), ``CDCFLOW_BENCH_CAPTURE_REGIONS`` (``100,10000``),
``CDCFLOW_BENCH_CPU_ROWS`` (200,000), ``CDCFLOW_BENCH_CPU_TXN_ROWS`` (500), ``CDCFLOW_BENCH_CPU_WINDOWS`` (4).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture import parts
from cdc_core.changefeed import runner
from cdc_core.client.upstream import UpstreamClient

ROOT = Path(__file__).resolve().parents[2]
CDCFLOW = str(ROOT / ".venv" / "bin" / "cdcflow")
REPS = int(os.environ.get("CDCFLOW_BENCH_CAPTURE_REPS", "5"))
SIZES = [int(x) for x in os.environ.get("CDCFLOW_BENCH_CAPTURE_REGIONS", "100,10000").split(",")]
CPU_ROWS = int(os.environ.get("CDCFLOW_BENCH_CPU_ROWS", "200000"))
CPU_TXN_ROWS = int(os.environ.get("CDCFLOW_BENCH_CPU_TXN_ROWS", "500"))
CPU_WINDOWS = int(os.environ.get("CDCFLOW_BENCH_CPU_WINDOWS", "4"))
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
IDLE_S = 10.0


class Upstream:
    """The detached upstream of the module and the ``cdcflow`` commands run against it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "CDCFLOW_HOME": str(home)}
        self.env.pop("CDCFLOW_UPSTREAM", None)  # upstream.json names it
        info = json.loads(self.cli("upstream", "start", "--detach", "--stores", "3", "--min-ts-interval-ms", "200"))
        self.pd, self.pid = info["pd_addr"], int(info["pid"])

    def cli(self, *args: str, timeout: float = 600) -> str:
        proc = subprocess.run([CDCFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"cdcflow {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def cdc(self) -> dict[str, int]:
        """``upstream status --json``'s ``cdc`` counters and the stores' ongoing scans."""
        st = json.loads(self.cli("upstream", "status", "--json"))
        return {**st["cdc"], "ongoing_scans": sum(s["cdc"]["ongoing_scans"] for s in st["stores"] if "cdc" in s)}

    def changefeed(self, cid: str, db: str) -> str:
        sink = f"file://{self.home / 'lake' / cid}"
        cfg = self.home / f"{cid}.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "{sink}"\n[filter]\nrules = ["{db}.*"]\n'
                       '[capture]\nauto-start = false\n')
        self.cli("changefeed", "create", "--config", str(cfg))
        return sink

    def capture_status(self, cid: str) -> dict[str, Any]:
        out = self.cli("capture", "status", cid, "--json")
        return dict(json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{"))))

    def start_capture(self, cid: str, regions: int) -> int:
        """``capture start --detach``; returns once its initial scans are over and its resolved ts is fresh."""
        out = self.cli("capture", "start", cid, "--detach")
        pid = int(json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{")))["pid"])
        deadline = time.monotonic() + 600
        while True:
            st, cdc = self.capture_status(cid), self.cdc()
            lag = st.get("resolved_lag_s")
            if (st.get("regions") or 0) >= regions and cdc["ongoing_scans"] == 0 and lag is not None and lag < 2:
                return pid
            assert time.monotonic() < deadline, f"the capture of {cid} did not settle: {st} {cdc}"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    up = Upstream(tmp_path_factory.mktemp("capbench"))
    try:
        yield up
    finally:
        up.cli("upstream", "stop")


@pytest.fixture
def home(upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> Upstream:
    """The module's upstream, with this process's windows (``runner.run_until``) pointed at its home."""
    monkeypatch.setenv("CDCFLOW_HOME", str(upstream.home))
    monkeypatch.delenv("CDCFLOW_UPSTREAM", raising=False)
    return upstream


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat`` utime, stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"


def one_change_windows(up: Upstream, c: UpstreamClient, cid: str, db: str, source: str) -> dict[str, list[float]]:
    """``REPS`` windows of one inserted row as ``changefeed run`` processes, then ``REPS`` in this process."""
    out: dict[str, list[float]] = {"process": [], "window": []}
    for i in range(REPS):
        c.execute(f"INSERT INTO {db}.t VALUES ({time.time_ns() // 1000}, {i})")
        t0 = time.perf_counter()
        up.cli("changefeed", "run", cid)
        out["process"].append(time.perf_counter() - t0)
    for i in range(REPS):
        c.execute(f"INSERT INTO {db}.t VALUES ({time.time_ns() // 1000}, {i})")
        ts = c.get_ts()
        t0 = time.perf_counter()
        (w,) = runner.run_until(cid, ts)
        out["window"].append(time.perf_counter() - t0)
        assert w["pull"]["source"] == source and w["pull"]["events"] == 1, w["pull"]
    return out


def test_a_1_change_window_at_100_and_10000_regions(home: Upstream) -> None:
    up = home
    figures: dict[int, dict[str, Any]] = {}
    with UpstreamClient(up.pd) as c:
        for n in SIZES:
            db, cid = f"capbench{n}", f"capbench{n}"
            c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, v INT); "
                      f"SPLIT TABLE {db}.t BETWEEN (0) AND (9223372036854775807) REGIONS {n}")
            up.changefeed(cid, db)
            c.execute(f"INSERT INTO {db}.t VALUES (0, 0)")
            up.cli("changefeed", "run", cid)  # the Delta table's first version: not what is measured
            pull = one_change_windows(up, c, cid, db, "pull")
            pid = up.start_capture(cid, n)
            try:
                regions = up.capture_status(cid)["regions"]
                before = up.cdc()
                captured = one_change_windows(up, c, cid, db, "capture")
                after = up.cdc()
            finally:
                up.cli("capture", "stop", cid)
            assert pid
            figures[n] = {"regions": regions, "pull": pull, "capture": captured,
                          "scans": after["incremental_scans"] - before["incremental_scans"],
                          "registered": before["registered_regions"]}

    lo, hi = SIZES[0], SIZES[-1]
    print(f"\n1-change window, scan costs on (6 scans/store at once, 128 MiB/s), {REPS} windows each:")
    for n, f in figures.items():
        print(f"  {n:>6,} regions ({f['regions']:,} captured, {f['registered']:,} registered on the stores):")
        for mode in ("pull", "capture"):
            print(f"    {mode:<8} changefeed run process {spread(f[mode]['process'])}; "
                  f"window in a warm process {spread(f[mode]['window'])}")
        print(f"    incremental scans over the {2 * REPS} steady capture windows: {f['scans']}")
    med = {(n, m, k): statistics.median(figures[n][m][k]) for n in figures for m in ("pull", "capture")
           for k in ("process", "window")}
    for m in ("pull", "capture"):
        print(f"  ratio {hi:,} / {lo:,} regions, {m}: window {med[hi, m, 'window'] / med[lo, m, 'window']:.2f}, "
              f"process {med[hi, m, 'process'] / med[lo, m, 'process']:.2f}")
    for f in figures.values():
        assert f["scans"] == 0, "a steady window with the capture running started an incremental scan"
    assert med[hi, "capture", "window"] / med[lo, "capture", "window"] <= 1.2
    assert med[hi, "capture", "window"] <= 3.0


def insert_rows(c: UpstreamClient, db: str, first: int, n: int) -> None:
    pad = "x" * 60
    for lo in range(first, first + n, CPU_TXN_ROWS):
        values = ", ".join(f"({i}, {i % 1000}, '{pad}')" for i in range(lo, min(lo + CPU_TXN_ROWS, first + n)))
        c.execute(f"INSERT INTO {db}.t VALUES {values}")


def run_windows(c: UpstreamClient, cid: str, db: str, first: int, source: str) -> tuple[float, int]:
    """``CPU_WINDOWS`` windows of ``CPU_ROWS / CPU_WINDOWS`` inserted rows each; the CPU seconds this process spent
    in their pull steps (the progress callback fires after plan and after pull) and the row events pulled."""
    per = CPU_ROWS // CPU_WINDOWS
    spent, events = 0.0, 0
    for w in range(CPU_WINDOWS):
        insert_rows(c, db, first + w * per, per)
        marks: dict[str, float] = {}
        (out,) = runner.run_until(cid, c.get_ts(),
                                  lambda step, _info, marks=marks: marks.setdefault(step, time.process_time()))
        assert out["pull"]["source"] == source
        spent += marks["pull"] - marks["plan"]
        events += out["pull"]["events"]
    return spent, events


def test_capture_cpu_per_million_rows(home: Upstream) -> None:
    up = home
    db, cid = "capcpu", "capcpu"
    with UpstreamClient(up.pd) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, k INT, pad VARCHAR(64))")
        sink = up.changefeed(cid, db)
        c.execute(f"INSERT INTO {db}.t VALUES (-1, 0, '')")
        runner.run_until(cid, c.get_ts())  # the Delta table's first version

        u0 = cpu_s(up.pid)
        pull_cpu, pull_events = run_windows(c, cid, db, 0, "pull")
        pull_up = cpu_s(up.pid) - u0

        pid = up.start_capture(cid, 1)
        try:
            # what the capture costs with nothing to capture (resolved ts, status, lease), per second
            k0, t0 = cpu_s(pid), time.monotonic()
            time.sleep(IDLE_S)  # the measured span itself: CPU over wall time
            idle_rate = (cpu_s(pid) - k0) / (time.monotonic() - t0)
            u0, k0, t0 = cpu_s(up.pid), cpu_s(pid), time.monotonic()
            read_cpu, cap_events = run_windows(c, cid, db, CPU_ROWS, "capture")
            # every row is in a part by the last window (it read them): the capture's work for them is done
            assert (parts.resolved_ts(sink, cid) or 0) > 0
            cap_cpu = cpu_s(pid) - k0
            wall = time.monotonic() - t0
            cap_idle = idle_rate * wall
            cap_up = cpu_s(up.pid) - u0
        finally:
            up.cli("capture", "stop", cid)
    assert pull_events == cap_events == CPU_ROWS // CPU_WINDOWS * CPU_WINDOWS
    per_m = 1e6 / pull_events
    pull_m, cap_m = pull_cpu * per_m, (cap_cpu + read_cpu) * per_m
    print(f"\nCPU per million rows, {pull_events:,} rows in {CPU_WINDOWS} windows ({CPU_TXN_ROWS}-row transactions):")
    print(f"  per-window pull: {pull_m:.1f} CPU s (the windows' pull steps); upstream {pull_up * per_m:.1f}")
    print(f"  capture: {cap_m:.1f} CPU s ({cap_cpu * per_m:.1f} the capture process, of which "
          f"{cap_idle * per_m:.1f} what it costs idle ({idle_rate * 100:.1f} % of a core) over the run's "
          f"{wall:.0f} s; {read_cpu * per_m:.1f} the windows reading its parts); upstream {cap_up * per_m:.1f}")
    print(f"  ratio capture / pull: {cap_m / pull_m:.2f}")
    assert cap_m <= pull_m, "the capture costs more CPU per row than the per-window pull"
