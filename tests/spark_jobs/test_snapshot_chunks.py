"""How a snapshot load cuts a table into chunks: region boundary keys as handle ranges (no Spark needed)."""

from __future__ import annotations

from cdc_core.codec import key
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.snapshot_load import Chunk, chunks_from_boundaries, handle_lower_bound, range_column, select_sql

TID = 104


def test_boundary_keys_become_handle_lower_bounds():
    start, end = key.table_span(TID)
    assert handle_lower_bound(TID, b"") is None and handle_lower_bound(TID, start) is None
    assert handle_lower_bound(TID, key.row_key(TID, 250)) == 250
    assert handle_lower_bound(TID, key.row_key(TID, -7)) == -7
    assert handle_lower_bound(TID, key.row_key(TID, 250) + b"\x00") == 251  # sorts after the row key of 250
    assert handle_lower_bound(TID, start + key.encode_int(256)[:7]) == 256  # a prefix: padded with zeros
    try:
        handle_lower_bound(TID, end)
        raise AssertionError("a boundary at the span end has no handle")
    except OverflowError:
        pass


def test_regions_give_chunks_capped_by_max_chunks():
    start, end = key.table_span(TID)
    bounds = [start[:5], start, key.row_key(TID, 0), key.row_key(TID, 250), key.row_key(TID, 500), end]
    assert chunks_from_boundaries(TID, bounds, 64) == [Chunk(None, 0), Chunk(0, 250), Chunk(250, 500),
                                                       Chunk(500, None)]
    assert chunks_from_boundaries(TID, bounds, 2) == [Chunk(None, 0), Chunk(0, None)]
    assert chunks_from_boundaries(TID, bounds, 1) == [Chunk(None, None)]
    assert chunks_from_boundaries(TID, [start], 64) == [Chunk(None, None)]


def test_chunk_queries_range_the_handle():
    clustered = TableInfo(id=TID, db_name="d", name="t", pk_is_handle=True,
                          columns=(Column(1, "id", "bigint", nullable=False), Column(2, "v", "text")),
                          indexes=(Index("PRIMARY", ("id",), unique=True, primary=True, id=1),))
    hidden = TableInfo(id=TID, db_name="d", name="h", columns=(Column(1, "v", "text"),))
    assert range_column(clustered) == "id" and range_column(hidden) == "_tidb_rowid"
    assert select_sql(clustered, Chunk(0, 250)) == "SELECT * FROM `d`.`t` WHERE `id` >= 0 AND `id` < 250"
    assert select_sql(clustered, Chunk(None, None)) == "SELECT * FROM `d`.`t`"
    assert select_sql(hidden, Chunk(None, 9)) == "SELECT *, `_tidb_rowid` FROM `d`.`h` WHERE `_tidb_rowid` < 9"
