"""The snapshot_load job (its phases run end to end in tests/e2e/test_snapshot_rebuild.py, its arguments are tested
in tests/changefeed/test_job_args.py): a base of the values the lake holds by a mapping (vectors, wide decimals,
zero dates), fetched and loaded; which tables it reads on the driver and which temporary directories a fetch
removes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc_core.errors import ChangefeedError
from spark_jobs import snapshot_load


@pytest.mark.spark
@pytest.mark.parametrize("where", ["driver", "spark"])
def test_a_snapshot_keeps_vectors_and_wide_decimals_and_counts_the_dates_it_reads_as_null(
        spark: Any, upstream_client: Any, fresh_db: str, pd_addr: str, tmp_path: Path, where: str) -> None:
    """Rows read over SQL at the ts (zero dates written under sql_mode '') become the base as the lake holds them:
    a vector's float32 elements, a DECIMAL(65,30)'s text, NULL for a date Delta cannot hold; the base's meta and the
    load's result count those per column, on the driver and in Spark tasks alike."""
    from deltalake import DeltaTable

    from cdc_core.changefeed.schema_loader import load_schema
    from cdc_core.codec.sink_uri import table_path
    from spark_jobs.snapshot_load import fetch_table, load_base

    def row(i: int) -> str:
        d = "0000-00-00" if i % 3 == 0 else "2024-02-29"
        t = "2021-00-01 00:00:00" if i % 4 == 0 else "2021-01-01 00:00:00"
        z = "0000-00-00 00:00:00" if i % 5 == 0 else "2021-01-01 00:00:00"
        return f"({i}, '[{i}, -0.5]', {i}.{i:030d}, '{d}', '{t}', '{z}')"

    upstream_client.execute(
        f"CREATE TABLE {fresh_db}.m (id INT PRIMARY KEY, v VECTOR(2), w DECIMAL(65,30), d DATE NOT NULL, "
        f"t DATETIME, ts TIMESTAMP); SPLIT TABLE {fresh_db}.m BETWEEN (0) AND (40) REGIONS 4; SET sql_mode = '';"
        f"INSERT INTO {fresh_db}.m VALUES {', '.join(row(i) for i in range(40))}; SET sql_mode = DEFAULT")
    ts = upstream_client.get_ts()
    (table,) = [t for t in load_schema(upstream_client, ts).tables_at(ts) if t.db_name == fresh_db]
    sink = f"file://{tmp_path}/lake"
    fetched = fetch_table(spark, sink, "cf", pd_addr, ts, table, max_driver_rows=10**6 if where == "driver" else 0)
    want = {"d": 14, "t": 10, "ts": 8}  # ids divisible by 3, by 4 and by 5 in range(40)
    assert fetched["rows"] == 40 and fetched["mapped"] == want and fetched["chunks"] > 1  # Spark: a task per chunk
    loaded = load_base(sink, "cf", fetched["path"], table, version=ts, load_id="snap/1")
    assert loaded["mapped"] == want
    rows = {r["id"]: r for r in DeltaTable(table_path(sink, table)).to_pyarrow_table().to_pylist()}
    assert rows[3]["v"] == [3.0, -0.5] and rows[3]["w"] == "3." + "0" * 29 + "3" and rows[3]["d"] is None
    assert rows[7]["d"].isoformat() == "2024-02-29" and rows[4]["t"] is None and rows[5]["ts"] is None
    assert "_cdc_mapped" not in rows[1]


def test_the_driver_row_bound_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(snapshot_load.ENV_DRIVER_ROWS, raising=False)
    assert snapshot_load.driver_rows() == snapshot_load.DRIVER_ROWS
    monkeypatch.setenv(snapshot_load.ENV_DRIVER_ROWS, " 0 ")
    assert snapshot_load.driver_rows() == 0
    for bad in ("many", "-1", "1e5"):
        monkeypatch.setenv(snapshot_load.ENV_DRIVER_ROWS, bad)
        with pytest.raises(ChangefeedError, match=rf"\$CDCFLOW_SNAPSHOT_DRIVER_ROWS must be a row count.*{bad!r}"):
            snapshot_load.driver_rows()


def test_a_fetch_removes_only_its_own_table_s_stale_temporary_directories(tmp_path):
    """Tables are fetched four at a time: ``db.t``'s clean-up must not remove ``db.t-x``'s directory in the
    making."""
    own, other, kept = (tmp_path / f".tmp-db.t-{'0f' * 16}", tmp_path / f".tmp-db.t-x-{'a' * 32}",
                        tmp_path / ".tmp-db.t-notahex")
    for d in (own, other, kept):
        d.mkdir(parents=True)
    snapshot_load.remove_stale_temps(tmp_path / "db.t")
    assert not own.exists() and other.exists() and kept.exists()
