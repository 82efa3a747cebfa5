"""End to end, issue 18: a table past 200,000 rows and 20 MB through every path with the default checks.

Its rows are loaded before the changefeed starts; the first window loads them as an initial snapshot (chunked
upstream reads) and reconciles the table whole; a window of 30,000 changes is applied and checked by its changed
keys only; a rebuild replays the snapshot base and the changelog into a new table, reconciled whole again; and
`cdcflow verify` compares the final Delta table with the upstream row by row (a checksum of every row, in Spark).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from e2elib import cli

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

ROWS = 220_000
BATCH = 10_000


def _row(i: int) -> str:
    return f"({i}, {i % 1000}, 'c-{i:012d}-{'x' * 40}', 'pad-{i % 977:05d}-{'y' * 16}')"


def test_a_table_past_200000_rows_and_20_mb_snapshots_replicates_checks_and_rebuilds(
        cdc_home: Path, upstream_cluster: Any) -> None:
    db, sink = "e2e_sizes", cdc_home / "lake"
    assert ROWS * (len(_row(ROWS)) - 4) > 20_000_000  # the values' bytes, each row ~100
    with UpstreamClient(upstream_cluster.pd_addr, timeout=120) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, k INT NOT NULL, "
                  "c VARCHAR(64), pad VARCHAR(32))")
        for lo in range(0, ROWS, BATCH):
            c.execute(f"INSERT INTO {db}.t VALUES " + ", ".join(_row(i) for i in range(lo, lo + BATCH)))
        start = c.get_ts()
        cfg = cdc_home / "sizes.toml"
        cfg.write_text(f'changefeed-id = "sizes"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{db}.*"]\n')
        cli("changefeed", "create", "--config", str(cfg))

        # 1. The initial snapshot, reconciled whole (what a snapshot replaced is new as a whole).
        (first,) = runner.run_until("sizes", c.get_ts())
        assert first["plan"]["mode"] == "snapshot"
        assert first["pull"]["snapshot"]["tables"][f"{db}.t"]["rows"] == ROWS
        rep = first["check"]["tables"][f"{db}.t"]
        assert rep["passed"] and rep["row_count"] == ROWS and "changed keys" not in rep["mode"]
        assert {r["expectation"] for r in rep["results"]} >= {"row_count_equals", "checksum_equals"}

        # 2. 30,000 changes: checked by their keys, the count from the Delta log.
        c.execute(f"UPDATE {db}.t SET k = -k, c = 'changed' WHERE id >= 1000 AND id < 21000; "
                  f"DELETE FROM {db}.t WHERE id >= 100000 AND id < 105000; "
                  f"INSERT INTO {db}.t VALUES " + ", ".join(_row(i) for i in range(ROWS, ROWS + 5000)))
        t2 = c.get_ts()
        (second,) = runner.run_until("sizes", t2)
        assert second["pull"]["events"] == 30_000
        rep = second["check"]["tables"][f"{db}.t"]
        assert rep["passed"] and "changed keys" in rep["mode"] and rep["row_count"] == ROWS
        assert {r["expectation"] for r in rep["results"]} == {
            "row_count_equals", "rows_equal", "schema_equals", "delta_key_unique", "not_null:id", "not_null:k"}

        # 3. A rebuild from the snapshot base and the changelog, reconciled whole.
        (third,) = runner.run_until("sizes", t2, mode="rebuild", run_tag="sizes-1")
        rebuilt = third["apply"]["rebuild"]["tables"][f"{db}.t"]
        assert rebuilt["base"] is not None and rebuilt["windows"] >= 1
        rep = third["check"]["tables"][f"{db}.t"]
        assert rep["passed"] and rep["row_count"] == ROWS and "changed keys" not in rep["mode"]
        assert load_state("sizes").checkpoint_ts == t2
        assert DeltaTable(str(sink / db / "t")).to_pyarrow_dataset().count_rows() == ROWS

        # 4. Every row against the upstream.
        (out,) = [json.loads(line) for line in cli("verify", "sizes").splitlines() if line.startswith("{")]
        assert out["passed"] and out["row_count"] == ROWS
