"""spark_jobs.load.silver_read: handing rows read on the driver to Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs.load.silver_read import spark_frame

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int32()), ("owner", pa.string())])


def _batches(*sizes: int) -> pa.Table:
    """A table of record batches of ``sizes`` rows, ids counting from 0 (as delta-rs's scan of a table with deletion
    vectors yields them: an empty batch for a file whose vector removes all its rows)."""
    out, n = [], 0
    for k in sizes:
        ids = range(n, n + k)
        out.append(pa.record_batch([pa.array(ids, pa.int32()), pa.array([f"o{i}" for i in ids])], schema=SCHEMA))
        n += k
    return pa.Table.from_batches(out, schema=SCHEMA)


@pytest.mark.parametrize("sizes", [(1, 0, 1), (0, 0, 1, 1), (2, 0, 0, 3), (0,), ()],
                         ids=["1-0-1", "0-0-1-1", "2-0-0-3", "0", "none"])
def test_a_frame_of_batches_with_empty_ones_holds_every_row(spark, sizes):
    data = _batches(*sizes)
    df = spark_frame(spark, data, "id INT, owner STRING")
    assert sorted((r.id, r.owner) for r in df.collect()) == [(i, f"o{i}") for i in range(sum(sizes))]
    assert sorted(r.id for r in spark_frame(spark, data).collect()) == list(range(sum(sizes)))  # schema from Arrow
