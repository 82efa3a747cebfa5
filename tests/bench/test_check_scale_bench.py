"""Issue 18's size independence of the window checks: the same 1,000-change window checked on a small table and on
a large one, side by side in one run, and the ratio of the check step's wall times (goal: at most 1.5). The full
reconciliation of each table (what every window's checks cost before they read the changed keys only) is timed
next to them, for contrast.

Each table (``id BIGINT PRIMARY KEY, k INT, c VARCHAR(64), pad VARCHAR(32)``, ~100 bytes a row) is loaded into the
embedded upstream, replicated by a changefeed's first window (an initial snapshot), then 1,000 random rows change
and one window replicates them; the check step's time is measured between the runner's "apply" and "check"
progress calls.

A second test weighs what the number of tables a window touched costs: one window changing ``CHANGES`` rows spread
over ``CDCFLOW_BENCH_TABLES`` tables against one window changing as many rows of one table, side by side; the
ratio of their check steps, and the cost each further table adds; and the apply step of the many-table window with
every table's events netted in Spark (the apply's driver budget set to 0) beside it.

Run: ``.venv/bin/pytest tests/bench/test_check_scale_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_SMALL_ROWS`` (10000), ``CDCFLOW_BENCH_LARGE_ROWS`` (300000), ``CDCFLOW_BENCH_CHANGES``
(1000), ``CDCFLOW_BENCH_TABLES`` (24).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_core.changefeed import reconcile, runner
from cdc_core.changefeed.config import load_config
from cdc_core.client.upstream import UpstreamClient

SMALL = int(os.environ.get("CDCFLOW_BENCH_SMALL_ROWS", "10000"))
LARGE = int(os.environ.get("CDCFLOW_BENCH_LARGE_ROWS", "300000"))
CHANGES = int(os.environ.get("CDCFLOW_BENCH_CHANGES", "1000"))
TABLES = int(os.environ.get("CDCFLOW_BENCH_TABLES", "24"))
BATCH = 10_000


def _load(c: UpstreamClient, table: str, rows: int) -> None:
    c.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, k INT, c VARCHAR(64), pad VARCHAR(32))")
    for lo in range(0, rows, BATCH):
        c.execute(f"INSERT INTO {table} VALUES " + ", ".join(
            f"({i}, {i % 1000}, 'c-{i:012d}-{'x' * 40}', 'pad-{i % 977}')" for i in range(lo, min(lo + BATCH, rows))))


def _create(home: Path, cid: str, db: str, start: int) -> None:
    from typer.testing import CliRunner

    from cdc_core.cli.main import build_app

    cfg = home / f"{cid}.toml"
    cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{home / cid}"\nstart-ts = {start}\n'
                   f'initial-snapshot = true\n[filter]\nrules = ["{db}.*"]\n')
    res = CliRunner().invoke(build_app(), ["changefeed", "create", "--config", str(cfg)], catch_exceptions=False)
    assert res.exit_code == 0, res.output


def _measure(c: UpstreamClient, home: Path, rows: int) -> dict[str, float]:
    db, cid = f"bench_checks_{rows}", f"checks{rows}"
    c.execute(f"CREATE DATABASE {db}")
    _load(c, f"{db}.t", rows)
    _create(home, cid, db, c.get_ts())
    runner.run_until(cid, c.get_ts())  # the snapshot window
    rng = random.Random(rows)
    ids = rng.sample(range(rows), CHANGES)
    c.execute(f"UPDATE {db}.t SET k = -1 WHERE id IN ({', '.join(map(str, ids))})")
    marks: dict[str, float] = {}
    results = runner.run_until(cid, c.get_ts(), lambda step, info: marks.setdefault(step, time.monotonic()))
    assert results[-1]["check"]["passed"] and list(results[-1]["check"]["tables"]) == [f"{db}.t"]
    checked = marks["check"] - marks["apply"]
    conf = load_config(cid)
    started = time.monotonic()
    (table,) = reconcile.tables_at(conf, results[-1]["plan"]["target_ts"])
    assert reconcile.check_table(conf, table, results[-1]["plan"]["target_ts"])["passed"]
    return {"rows": rows, "window_check_s": checked, "full_check_s": time.monotonic() - started}


def test_the_window_checks_cost_what_the_window_changed(cdc_home: Path, upstream_cluster: Any) -> None:
    with UpstreamClient(upstream_cluster.pd_addr, timeout=120) as c:
        small = _measure(c, cdc_home, SMALL)
        large = _measure(c, cdc_home, LARGE)
    ratio = large["window_check_s"] / small["window_check_s"]
    full_ratio = large["full_check_s"] / small["full_check_s"]
    print(f"\n{CHANGES} changed rows: window checks {small['window_check_s']:.2f} s on {SMALL:,} rows, "
          f"{large['window_check_s']:.2f} s on {LARGE:,} rows (ratio {ratio:.2f}, goal <= 1.5); full reconciliation "
          f"{small['full_check_s']:.2f} s / {large['full_check_s']:.2f} s (ratio {full_ratio:.2f})")
    assert ratio <= 1.5


def _step_seconds(c: UpstreamClient, home: Path, db: str, tables: int, rows: int) -> tuple[float, float]:
    """The apply and check steps of one window changing ``CHANGES`` rows spread evenly over ``tables`` tables of
    ``rows``."""
    cid = db.replace("_", "")
    c.execute(f"CREATE DATABASE {db}")
    for i in range(tables):
        _load(c, f"{db}.t{i}", rows)
    _create(home, cid, db, c.get_ts())
    runner.run_until(cid, c.get_ts())  # the snapshot window
    rng = random.Random(tables)
    for i in range(tables):
        ids = rng.sample(range(rows), CHANGES // tables)
        c.execute(f"UPDATE {db}.t{i} SET k = -1 WHERE id IN ({', '.join(map(str, ids))})")
    marks: dict[str, float] = {}
    results = runner.run_until(cid, c.get_ts(), lambda step, info: marks.setdefault(step, time.monotonic()))
    assert results[-1]["check"]["passed"] and len(results[-1]["check"]["tables"]) == tables
    return marks["apply"] - marks["pull"], marks["check"] - marks["apply"]


def test_the_window_checks_cost_per_table_touched(cdc_home: Path, upstream_cluster: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs import apply_window

    with UpstreamClient(upstream_cluster.pd_addr, timeout=120) as c:
        (apply_one, one) = _step_seconds(c, cdc_home, "bench_one_table", 1, 2 * CHANGES)
        (apply_many, many) = _step_seconds(c, cdc_home, "bench_many_tables", TABLES, 2 * CHANGES)
        # the apply's baseline, side by side: every table's events netted in Spark (a driver budget of 0 events)
        monkeypatch.setattr(apply_window, "DRIVER_EVENTS", 0)
        (apply_many_spark, _) = _step_seconds(c, cdc_home, "bench_many_tables_spark", TABLES, 2 * CHANGES)
    for step, a, b in (("checks", one, many), ("apply", apply_one, apply_many)):
        print(f"\n{CHANGES} changed rows: window {step} {a:.2f} s in one table, {b:.2f} s over {TABLES} tables "
              f"(ratio {b / a:.2f}; {(b - a) / (TABLES - 1):.2f} s per further table)")
    print(f"\napply over {TABLES} tables: {apply_many:.2f} s with the events netted on the driver, "
          f"{apply_many_spark:.2f} s in Spark (ratio {apply_many / apply_many_spark:.2f})")
