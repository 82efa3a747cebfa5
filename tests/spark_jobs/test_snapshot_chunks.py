"""How a snapshot load cuts a table into chunks: region boundary keys as handle ranges (no Spark needed); which
tables it reads on the driver."""

from __future__ import annotations

import functools

import pytest

from cdc_core.codec import key
from cdc_core.codec.datum_key import encode_key
from cdc_core.codec.sql_literal import string_literal
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs import snapshot_load
from spark_jobs.snapshot_load import Chunk, chunks_from_boundaries, handle_lower_bound, range_column, select_sql

TID = 104
LIT = functools.partial(string_literal, no_backslash_escapes=False)


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
    assert select_sql(clustered, Chunk(0, 250), LIT) == "SELECT * FROM `d`.`t` WHERE `id` >= 0 AND `id` < 250"
    assert select_sql(clustered, Chunk(None, None), LIT) == "SELECT * FROM `d`.`t`"
    assert select_sql(hidden, Chunk(None, 9), LIT) == "SELECT *, `_tidb_rowid` FROM `d`.`h` WHERE `_tidb_rowid` < 9"


def test_a_common_handle_led_by_an_integer_is_chunked_by_that_column():
    pk = (Index("PRIMARY", ("tenant", "k"), unique=True, primary=True, id=1),)
    common = TableInfo(id=TID, db_name="d", name="c", is_common_handle=True, indexes=pk,
                       columns=(Column(1, "tenant", "int", nullable=False), Column(2, "k", "text", nullable=False)))
    by_decimal = TableInfo(id=TID, db_name="d", name="s", is_common_handle=True, indexes=(
        Index("PRIMARY", ("amt", "tenant"), unique=True, primary=True, id=1),),
        columns=(*common.columns, Column(3, "amt", "decimal", precision=10, scale=2, nullable=False)))
    assert range_column(common) == "tenant" and range_column(by_decimal) is None  # a DECIMAL lead: one chunk
    start, _ = key.table_span(TID)

    def boundary(tenant: int, k: bytes) -> bytes:
        return key.common_row_key(TID, encode_key([(common.columns[0].field_type(), tenant),
                                                   (common.columns[1].field_type(), k)]))

    # Cuts at the leading datum of each boundary; a boundary in the middle of one tenant's rows cuts at that tenant
    # (its rows all go to the range that starts there: every row lands in exactly one range).
    bounds = [start, boundary(-3, b"x"), boundary(10, b""), boundary(10, b"zz"), start + b"\x03\x80"]
    assert chunks_from_boundaries(TID, bounds, 64, common=True) == [Chunk(None, -3), Chunk(-3, 0), Chunk(0, 10),
                                                                    Chunk(10, None)]
    assert select_sql(common, Chunk(-3, 0), LIT) == "SELECT * FROM `d`.`c` WHERE `tenant` >= -3 AND `tenant` < 0"


def test_a_common_handle_led_by_a_string_is_chunked_by_its_leading_bytes():
    pk = (Index("PRIMARY", ("k", "n"), unique=True, primary=True, id=1),)
    cols = (Column(1, "k", "text", nullable=False), Column(2, "n", "int", nullable=False))
    common = TableInfo(id=TID, db_name="d", name="s", is_common_handle=True, indexes=pk, columns=cols)
    assert range_column(common) == "k"
    # under a case-insensitive collation the key holds weight strings, no cut of the values: one chunk
    ci = TableInfo(id=TID, db_name="d", name="s", is_common_handle=True, indexes=pk,
                   columns=(Column(1, "k", "text", nullable=False, collate="utf8mb4_general_ci"), cols[1]))
    assert range_column(ci) is None
    start, _ = key.table_span(TID)

    def boundary(k: str, n: int = 0) -> bytes:
        return key.common_row_key(TID, encode_key([(cols[0].field_type(), k), (cols[1].field_type(), n)]))

    long = boundary("user-00042-with-a-long-name")
    bounds = [start, boundary("apple"), long[:len(start) + 1 + 9 * 2], boundary("pear ", 3), boundary("\x01x")]
    # Cuts at the leading string (a boundary cut inside it: its whole groups; trailing spaces dropped, as a PAD
    # SPACE collation compares; a cut with a character below U+0020, where that order differs, dropped).
    assert chunks_from_boundaries(TID, bounds, 64, common=True) == [
        Chunk(None, "apple"), Chunk("apple", "pear"), Chunk("pear", "user-00042-with-"),
        Chunk("user-00042-with-", None)]
    assert select_sql(common, Chunk("apple", "it's"), LIT) == \
        "SELECT * FROM `d`.`s` WHERE `k` >= 'apple' AND `k` < 'it''s'"
    assert Chunk.from_spec(*Chunk("a", None).spec()) == Chunk("a", None)
    assert Chunk.from_spec(*Chunk(-3, 7).spec()) == Chunk(-3, 7)


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
