"""The bronze changelog layout, writer and readers."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from cdc_core.errors import ChangefeedError
from spark_jobs.normalize.bronze import (
    BRONZE_SCHEMA,
    list_windows,
    read_bronze,
    read_bronze_arrow,
    window_dir,
    write_bronze,
)
from testkit.builders import Bronze, clustered_table


def test_layout(tmp_path):
    assert str(window_dir(str(tmp_path), "cf1", 42)) == os.path.join(
        str(tmp_path), "_cdcflow", "changelog", "changefeed=cf1", "window=00000000000000000042"
    )
    assert window_dir(f"file://{tmp_path}", "cf1", 42) == window_dir(str(tmp_path), "cf1", 42)
    with pytest.raises(ValueError):
        window_dir(str(tmp_path), "a/b", 1)


def test_write_read_roundtrip(tmp_path, spark):
    t = clustered_table()
    sink = f"file://{tmp_path}"
    batch = Bronze().put(t, 1, 10, {1: 1, 2: 5}).delete(t, 2, 11, {1: 2, 2: 6}).arrow()
    p1 = write_bronze(sink, "cf", 100, batch.slice(0, 1))
    p2 = write_bronze(sink, "cf", 100, batch)  # a re-pull replaces the window whole
    assert p1 == p2 and os.path.isdir(p1)
    write_bronze(sink, "cf", 200, BRONZE_SCHEMA.empty_table())  # pulled, nothing changed
    write_bronze(sink, "cf", 50, batch)
    assert not [n for n in os.listdir(os.path.dirname(p1)) if n.startswith(".")]
    assert list_windows(sink, "cf") == [50, 100, 200]
    assert list_windows(sink, "other") == []
    at = read_bronze_arrow(sink, "cf", 100)
    assert at.schema == BRONZE_SCHEMA and at.num_rows == 2
    assert read_bronze(spark, sink, "cf", 100, table_ids=[t.id]).count() == 2
    assert read_bronze(spark, sink, "cf", 100, table_ids=[999]).count() == 0
    assert read_bronze(spark, sink, "cf", 200).count() == 0
    with pytest.raises(ChangefeedError, match="pull it first"):
        read_bronze(spark, sink, "cf", 999)  # never pulled: an error, not an empty window


def test_write_rejects_bad_batches(tmp_path):
    t = clustered_table()
    batch = Bronze().put(t, 1, 10, {1: 1}).arrow()
    bad_op = batch.set_column(3, "op", pa.array(["update"]))
    with pytest.raises(ValueError, match="unknown ops"):
        write_bronze(str(tmp_path), "cf", 1, bad_op)
    with pytest.raises(ValueError, match="lacks columns"):
        write_bronze(str(tmp_path), "cf", 1, batch.drop_columns(["old_value"]))
