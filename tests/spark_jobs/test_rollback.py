"""The rollback job: silver tables written after a ts go back to their version at it (rows and the changefeed's app
transaction), others are left as they are and say why; its JSON arguments are checked when built."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from cdc_core.changefeed.job_args.rollback import RollbackArgs
from cdc_core.codec.sink_uri import app_id_for, table_path
from spark_jobs.load.delta_writer import DeltaRsWriter
from spark_jobs.rollback import run_job
from testkit.builders import clustered_table

CF = "cf"


def _merge(sink: str, rows: list[tuple[int, int]], version: int) -> None:
    t = clustered_table()
    changes = pa.table({"a": [a for a, _ in rows], "b": [b for _, b in rows], "_cdc_op": ["upsert"] * len(rows)})
    DeltaRsWriter().merge(table_path(sink, t), t, changes, app_id=app_id_for(CF), version=version)


def test_a_table_written_after_the_ts_goes_back_to_its_version_at_it(tmp_path: Path) -> None:
    sink = f"file://{tmp_path}"
    t, other = clustered_table(), clustered_table(table_id=105, name="gone")
    _merge(sink, [(1, 10), (2, 20)], 100)
    _merge(sink, [(2, 21), (3, 30)], 200)
    args = {"sink_uri": sink, "changefeed_id": CF, "tables": [t.to_json(), other.to_dict()], "ts": 100,
            "reason": "rows_equal failed"}
    out = run_job(RollbackArgs.from_dict(args))["tables"]
    assert out["test.c"]["restored"] and out["test.c"]["to_version"] < out["test.c"]["from_version"]
    assert out["test.gone"] == {"restored": False, "why": "no Delta table"}
    dt = DeltaTable(table_path(sink, t))
    assert sorted(dt.to_pyarrow_table().to_pylist(), key=lambda r: r["a"]) == [{"a": 1, "b": 10}, {"a": 2, "b": 20}]
    assert dt.transaction_version(app_id_for(CF)) == 100  # the steps after 100 re-run after a resume
    # once restored, the table is at its state at 100: nothing to do again
    assert run_job(RollbackArgs.from_dict(args))["tables"]["test.c"]["why"] == "unchanged since the checkpoint"
