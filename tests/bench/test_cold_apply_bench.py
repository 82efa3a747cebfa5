"""A window's apply in a fresh process, as each Airflow ``apply_check`` task and each ``cdcflow changefeed run``
applies one: the ``apply_window`` job as the local engine runs it, which starts Spark only when the window needs it
(the driver applies a window within its event budget in Arrow with delta-rs), next to the same job in a process
that starts its Spark session first, as every apply did before. Both apply the same bronze window (the apply
bench's: ``NET`` net changes into a ``BASE``-row table) into identical copies of the table, side by side; the
figure is the ratio of the two processes' wall times, start to exit.

Run: ``.venv/bin/pytest tests/bench/test_cold_apply_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_COLD_BASE_ROWS`` (200000), ``CDCFLOW_BENCH_COLD_NET_ROWS`` (20000).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from deltalake import DeltaTable
from test_apply_bench import CF, TABLE, T, _base_table, _events

BASE = int(os.environ.get("CDCFLOW_BENCH_COLD_BASE_ROWS", "200000"))
NET = int(os.environ.get("CDCFLOW_BENCH_COLD_NET_ROWS", "20000"))

# The job as spark_engine's local engine calls it; `spark_first` starts the session before it (the old apply).
_JOB = """
import json, sys
args, spark_first = json.loads(sys.argv[1]), sys.argv[2] == "1"
if spark_first:
    from spark_jobs.session import get_spark
    get_spark("cdcflow-apply-window")
from pyspark import SparkContext
from cdc_core.changefeed.job_args.apply_window import ApplyArgs
from spark_jobs.apply_window import run_job
out = run_job(ApplyArgs.from_dict(args))
print(json.dumps({"rows": out["rows_upserted"] + out["rows_deleted"],
                  "spark": SparkContext._active_spark_context is not None}))
"""


def _cold_apply(sink: str, spark_first: bool) -> tuple[float, dict[str, object]]:
    args = {"sink_uri": sink, "changefeed_id": CF, "window_end_ts": T, "after_ts": 0, "tables": [TABLE.to_json()]}
    env = {k: v for k, v in os.environ.items() if k not in ("CDCFLOW_DELTA_WRITER", "CDCFLOW_SPARK_MASTER")}
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _JOB, json.dumps(args), "1" if spark_first else "0"], env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    took = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    return took, json.loads(res.stdout.strip().splitlines()[-1])


def test_bench_a_fresh_process_applies_without_starting_spark(tmp_path: Path) -> None:
    from cdc_core.codec.sink_uri import table_path
    from spark_jobs.normalize.bronze import write_bronze

    base = str(tmp_path / "base")
    _base_table(base, BASE)
    bronze, _ = _events(BASE, NET)
    sinks = {}
    for name in ("on demand", "spark first"):
        sinks[name] = sink = f"file://{tmp_path / name.replace(' ', '_')}"
        shutil.copytree(base, table_path(sink, TABLE))
        write_bronze(sink, CF, T, bronze)
    took = {}
    for name, spark_first in (("on demand", False), ("spark first", True)):
        took[name], out = _cold_apply(sinks[name], spark_first)
        assert out == {"rows": NET, "spark": spark_first}, out  # on demand: no session for a window this size
    tables = [DeltaTable(table_path(s, TABLE)).to_pyarrow_table().sort_by("id") for s in sinks.values()]
    assert tables[0].equals(tables[1]), "the two applies disagree"
    print(f"\napply of {bronze.num_rows:,} events ({NET:,} net) into {BASE:,} rows, in a fresh process: "
          f"Spark on demand {took['on demand']:.1f} s, Spark started first {took['spark first']:.1f} s, "
          f"ratio {took['on demand'] / took['spark first']:.2f}")
