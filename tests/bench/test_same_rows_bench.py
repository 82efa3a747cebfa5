"""The driver's row comparison of the window checks (``spark_jobs.checks.window_checks.same_rows``: both sides sorted on
every column and compared in Arrow) against the comparison it replaced (a Counter of Python tuples, one per row),
side by side on the same tables: ``ROWS`` rows of five columns (BIGINT, VARCHAR, DECIMAL, INT, DATETIME), the
second a shuffle of the first. Prints both times and their ratio; asserts they agree.

Run: ``.venv/bin/pytest tests/bench/test_same_rows_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_ROWS`` (100000).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa

from spark_jobs.checks.window_checks import same_rows

ROWS = int(os.environ.get("CDCFLOW_BENCH_ROWS", "100000"))


def _python_tuples(a: pa.Table, b: pa.Table) -> bool:
    def rows(t: pa.Table) -> Counter[tuple[object, ...]]:
        return Counter(zip(*(c.to_pylist() for c in t.columns), strict=True))

    return a.num_rows == b.num_rows and rows(a) == rows(b)


def _best_of_3(compare: Callable[[pa.Table, pa.Table], bool], a: pa.Table, b: pa.Table) -> tuple[float, bool]:
    times, answers = [], set()
    for _ in range(3):
        started = time.perf_counter()
        answers.add(compare(a, b))
        times.append(time.perf_counter() - started)
    assert len(answers) == 1
    return min(times), answers.pop()


def test_same_rows_against_python_tuples() -> None:
    r = random.Random(18)
    a = pa.table({
        "id": pa.array(range(ROWS), pa.int64()),
        "name": pa.array([f"name-{r.random()}" for _ in range(ROWS)]),
        "amount": pa.array([Decimal(r.randrange(10**8)) / 100 for _ in range(ROWS)], pa.decimal128(12, 2)),
        "qty": pa.array([r.randrange(1000) for _ in range(ROWS)], pa.int32()),
        "ts": pa.array([r.randrange(10**15) for _ in range(ROWS)], pa.timestamp("us")),
    })
    b = a.take(pa.array(r.sample(range(ROWS), ROWS)))
    changed = b.set_column(3, "qty", pa.array([*b.column("qty").to_pylist()[:-1], 1000], pa.int32()))
    for other, want in ((b, True), (changed, False)):
        base, base_answer = _best_of_3(_python_tuples, a, other)
        now, answer = _best_of_3(same_rows, a, other)
        assert answer == base_answer == want
        print(f"\nsame_rows on {ROWS:,} rows ({'equal' if want else 'one value differs'}): Python tuples {base:.3f} s, "
              f"Arrow sort {now:.3f} s, ratio {now / base:.3f}")
