"""The checks' read-ahead (spark_jobs.check_prefetch): what a check takes from the stage, what it leaves, and a
read-ahead that fails or is cancelled never fails the apply it runs beside."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_jobs_builders import clustered_table

from spark_jobs import check_prefetch


def _stage(sink: str, mode: str = "checksum", keys: int = 2) -> pa.Table:
    table = clustered_table()
    d = check_prefetch.stage_dir(sink, "cf", 300, 250, 100)
    d.mkdir(parents=True)
    rows = pa.Table.from_pylist([{"a": 1, "b": 10}, {"a": 2, "b": None}], schema=table.arrow_schema())
    check_prefetch._write(check_prefetch._file(d, table), table, keys, 7, rows if mode == "checksum" else None, mode)
    return rows


def test_a_check_takes_what_was_staged_for_its_keys_ts_and_table(tmp_path: Path) -> None:
    sink = f"file://{tmp_path}"
    rows = _stage(sink)
    table = clustered_table()
    got = check_prefetch.staged(sink, "cf", 300, table, ts=250, after_ts=100, keys=2, mode="checksum")
    assert got is not None and got.count == 7 and got.rows is not None and got.rows.equals(rows)
    assert got.rows.schema.metadata is None  # the stage's bookkeeping is not part of the rows compared
    counted = check_prefetch.staged(sink, "cf", 300, table, ts=250, after_ts=100, keys=2, mode="count")
    assert counted is not None and counted.rows is None and counted.count == 7
    # the stage lives in the bronze window's directory, where no reader of its parts looks
    assert check_prefetch.stage_dir(sink, "cf", 300, 250, 100).parent.name == "_checks"
    assert not list(check_prefetch.stage_dir(sink, "cf", 300, 250, 100).parent.parent.glob("*.parquet"))


@pytest.mark.parametrize("change", ["ts", "after_ts", "keys", "table", "mode"])
def test_a_check_of_other_keys_ts_schema_or_mode_reads_the_upstream_itself(tmp_path: Path, change: str) -> None:
    sink = f"file://{tmp_path}"
    _stage(sink, mode="count")
    table = clustered_table()
    ask: dict[str, Any] = {"ts": 250, "after_ts": 100, "keys": 2, "mode": "count"}
    if change == "table":
        table = clustered_table(name="other")  # another schema version: another table JSON
    elif change == "mode":
        ask["mode"] = "checksum"  # a count-only stage holds no rows
    else:
        ask[change] += 1
    assert check_prefetch.staged(sink, "cf", 300, table, **ask) is None


def test_a_failing_read_ahead_is_logged_and_never_raised(monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    def boom(args: dict[str, Any], stop: threading.Event | None = None) -> dict[str, Any]:
        raise RuntimeError("upstream unreachable")

    monkeypatch.setattr(check_prefetch, "prefetch", boom)
    assert check_prefetch.start({"ts": 1}).join() == {"failed": True}
    assert "reading the checks' upstream half ahead failed" in caplog.text
    assert check_prefetch.start(None).join() is None  # a step without a check after it reads nothing


def test_cancelling_stops_the_tables_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """An apply that fails cancels its read-ahead: the tables it has not started are not read."""
    seen: list[bool] = []

    def waits_for_cancel(args: dict[str, Any], stop: threading.Event | None = None) -> dict[str, Any]:
        assert stop is not None
        seen.append(stop.wait(60))
        return {"tables": 0}

    monkeypatch.setattr(check_prefetch, "prefetch", waits_for_cancel)
    assert check_prefetch.start({"ts": 1}).join(cancel=True) == {"tables": 0} and seen == [True]
