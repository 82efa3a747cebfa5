"""Where a moved silver table went (spark_jobs.load.table_moves): dropped copies and move records under the names' path
components, inside the sink's _cdcflow directory, whatever the names hold."""

from __future__ import annotations

import os

import pytest

from cdc_core.errors import ChangefeedError
from spark_jobs.load.table_moves import database_dir, dropped_path, move_dir, read_move, record_move, silver_dir


def test_paths_hold_the_names_encoded(tmp_path) -> None:
    sink = f"file://{tmp_path}"
    assert silver_dir(sink, "shop", "orders") == f"{tmp_path}/shop/orders"  # as they always were
    assert silver_dir(sink, "_cdcflow", "../x") == f"{tmp_path}/~5Fcdcflow/~2E.~2Fx"
    assert database_dir(str(tmp_path), "a/b") == f"{tmp_path}/a~2Fb"
    assert dropped_path(sink, "shop", "t@1", 77) == f"{tmp_path}/_cdcflow/dropped/shop/t~401@77"


def test_move_records_keep_the_latest_move_per_name(tmp_path) -> None:
    sink = str(tmp_path)
    for table in ("t`1 ' \\ 中", "T`1 ' \\ 中"):  # names that differ in case only are two records (TiDB: never both)
        assert read_move(sink, "d/b", table) is None
        record_move(sink, "d/b", table, ts=200, to="x", job_id=1, table_id=9)
        record_move(sink, "d/b", table, ts=100, to="older", job_id=2, table_id=9)
        assert read_move(sink, "d/b", table) == {"ts": 200, "to": "x", "job_id": 1, "table_id": 9}
    assert sorted(os.listdir(tmp_path / "_cdcflow" / "moved" / "d~2Fb")) == [
        "T~601~20~27~20~5C~20中.json", "t~601~20~27~20~5C~20中.json"]


def test_moves_need_a_local_sink_and_a_free_destination(tmp_path) -> None:
    assert read_move("s3://bucket/lake", "d", "t") is None
    with pytest.raises(ChangefeedError, match="needs a local sink"):
        dropped_path("s3://bucket/lake", "d", "t", 1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(ChangefeedError, match="the destination exists"):
        move_dir(str(tmp_path / "a"), str(tmp_path / "b"))
    move_dir(str(tmp_path / "a"), str(tmp_path / "c" / "d"))
    assert (tmp_path / "c" / "d").is_dir() and not (tmp_path / "a").exists()
