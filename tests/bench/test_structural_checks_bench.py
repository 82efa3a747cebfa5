"""The window checks' structural expectations over many tables: one GX run for all of them
(:mod:`spark_jobs.checks.structural_checks`) against the baseline, side by side: a GX run per table
(:func:`spark_jobs.checks.data_quality.validate_arrow`, ``TABLE_THREADS`` tables at a time, as the window checks ran
them).

Each table is sysbench's (``id`` BIGINT PRIMARY KEY, ``k``, ``c``, ``pad`` NOT NULL) plus a nullable unique ``u``,
holding ``ROWS`` changed rows; ``TABLES`` of them, as a window of the scaled benchmark touches.

Run: ``.venv/bin/pytest tests/bench/test_structural_checks_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_TABLES`` (51), ``CDCFLOW_BENCH_ROWS`` (1300).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.checks import data_quality as dq
from spark_jobs.checks import structural_checks
from spark_jobs.checks.check_read_ahead import TABLE_THREADS

TABLES = int(os.environ.get("CDCFLOW_BENCH_TABLES", "51"))
ROWS = int(os.environ.get("CDCFLOW_BENCH_ROWS", "1300"))


def _table(n: int) -> tuple[TableInfo, pa.Table]:
    t = TableInfo(
        id=700 + n, db_name="bench", name=f"sbtest{n}",
        columns=(Column(1, "id", "bigint", nullable=False), Column(2, "k", "int", nullable=False),
                 Column(3, "c", "char", length=120, nullable=False),
                 Column(4, "pad", "char", length=60, nullable=False), Column(5, "u", "int")),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True), Index("uk_u", ("u",), unique=True)),
    )  # fmt: skip
    rows = pa.table({"id": pa.array(range(n * ROWS, (n + 1) * ROWS), pa.int64()),
                     "k": pa.array([i % 1000 for i in range(ROWS)], pa.int32()), "c": pa.array(["c" * 119] * ROWS),
                     "pad": pa.array(["p" * 59] * ROWS), "u": pa.array([i if i % 3 else None for i in range(ROWS)],
                                                                      pa.int32())})  # fmt: skip
    return t, rows.cast(t.arrow_schema())


def _per_table(tables: dict[str, tuple[TableInfo, pa.Table]]) -> set[str]:
    def one(item: tuple[str, tuple[TableInfo, pa.Table]]) -> str | None:
        name, (t, rows) = item
        got = dq.validate_arrow(rows, t, dq.structural_expectations(t))
        return None if all(r.success for r in got.values()) else name

    with ThreadPoolExecutor(TABLE_THREADS) as pool:
        return {n for n in pool.map(one, tables.items()) if n is not None}


def test_one_run_for_every_table_against_a_run_per_table() -> None:
    tables = {t.qualified_name: (t, rows) for t, rows in map(_table, range(TABLES))}
    _per_table(dict(list(tables.items())[:2]))  # GX's first run imports and registers what it needs
    times: dict[str, list[float]] = {"per_table": [], "one_run": []}
    for _ in range(2):
        for name, run in (("per_table", _per_table), ("one_run", structural_checks.failing)):
            started = time.perf_counter()
            assert run(tables) == set()
            times[name].append(time.perf_counter() - started)
    base, new = min(times["per_table"]), min(times["one_run"])
    print(f"\nstructural expectations of {TABLES} tables x {ROWS:,} rows: one GX run {new:.2f} s, a run per table "
          f"{base:.2f} s (ratio {new / base:.3f})")
