"""Reading the upstream (spark_jobs.upstream_read): how a table is cut into chunks (region boundary keys as handle
ranges, no Spark needed) and the SQL of its chunk reads; the point reads at a window's changed keys, each Delta key
value written as the literal that selects exactly the upstream rows holding it, many keys several statements at a
time."""

from __future__ import annotations

import functools
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from cdc_core.changefeed.schema_loader import load_schema
from cdc_core.codec import key
from cdc_core.codec.datum_key import encode_key
from cdc_core.codec.sql_literal import string_literal
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs import upstream_read
from spark_jobs.upstream_read import (
    Chunk,
    chunks_from_boundaries,
    handle_lower_bound,
    key_literal,
    point_select,
    range_column,
    select_sql,
)
from testkit.builders import clustered_table

TID = 104
LIT = functools.partial(string_literal, no_backslash_escapes=False)
NBE_LIT = functools.partial(string_literal, no_backslash_escapes=True)


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


def test_a_small_decimal_key_is_a_decimal_literal_not_an_exponent() -> None:
    """Arrow gives DECIMAL(10,8)'s 0.00000010 back as Decimal('1.0E-7'), whose str() MySQL reads as a DOUBLE."""
    col = clustered_table().columns[0]
    (small,) = pa.array([Decimal("0.00000010")], pa.decimal128(10, 8)).to_pylist()
    assert "E" in str(small)
    assert key_literal(col, small, LIT) == "0.00000010"
    assert key_literal(col, Decimal("-12345678.5"), LIT) == "-12345678.5"


def test_other_key_values_and_a_value_without_a_literal() -> None:
    col = clustered_table().columns[0]
    assert key_literal(col, datetime(2026, 1, 2, 3, 4, 5, 60), LIT) == "'2026-01-02 03:04:05.000060'"
    assert key_literal(col, date(2026, 1, 2), LIT) == "'2026-01-02'"
    assert key_literal(col, b"\x00\xff", LIT) == "X'00ff'"
    assert key_literal(col, "it's", LIT) == "'it''s'"
    assert key_literal(col, True, LIT) == "1" and key_literal(col, None, LIT) == "NULL"
    with pytest.raises(ChangefeedError, match=repr(col.name)):
        key_literal(col, 1.5, LIT)


def test_a_string_key_is_written_as_the_session_reads_it() -> None:
    """A backslash is doubled for a session without NO_BACKSLASH_ESCAPES and left alone under it (where doubling
    would select a\\\\b instead of a\\b); a quote is doubled in both."""
    col = clustered_table().columns[0]
    assert key_literal(col, "a\\b'c", LIT) == "'a\\\\b''c'"
    assert key_literal(col, "a\\b'c", NBE_LIT) == "'a\\b''c'"


def test_a_composite_key_selects_by_row_constructor() -> None:
    t = clustered_table()
    a, b = t.columns[0].name, t.columns[1].name
    sql = point_select(t, [a, b], [(1, 2), (3, 4)], LIT)
    assert sql == f"SELECT * FROM `{t.db_name}`.`{t.name}` WHERE (`{a}`, `{b}`) IN ((1, 2), (3, 4))"
    assert point_select(t, [a], [(1,), (3,)], LIT).endswith(f"WHERE `{a}` IN (1, 3)")


def test_point_reads_quote_every_name_with_its_backticks_doubled() -> None:
    a, b = "a`.q", "b 'c'"
    odd = TableInfo(id=7, db_name="d`b.x", name="t`1 y", columns=(Column(1, a, "int", nullable=False),
                                                                 Column(2, b, "varchar", nullable=False, length=9)),
                    indexes=(Index("PRIMARY", (a, b), unique=True, primary=True),))
    assert point_select(odd, [a, b], [(1, "x")], LIT) == (
        "SELECT * FROM `d``b.x`.`t``1 y` WHERE (`a``.q`, `b 'c'`) IN ((1, 'x'))")


def test_many_changed_keys_are_read_several_statements_at_a_time_and_every_row_arrives(
        pd_addr: str, upstream_client: Any, fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys past one statement's ``POINT_BATCH`` go through the shared point-read threads, ``READ_STREAMS``
    statements in flight: every row at the keys comes back, at the ts asked (a later write is not seen), keys
    without a row give none; a client of the job's own opens no more connections than those threads."""
    monkeypatch.setattr(upstream_read, "POINT_BATCH", 100)
    upstream_client.execute(f"CREATE TABLE {fresh_db}.t (id BIGINT PRIMARY KEY, v VARCHAR(10), d DECIMAL(6,2))")
    rows = ", ".join(f"({i}, 'v{i}', {i}.5)" for i in range(900))
    upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES {rows}")
    ts = upstream_client.get_ts()
    upstream_client.execute(f"UPDATE {fresh_db}.t SET v = 'later' WHERE id < 10")
    (table,) = [t for t in load_schema(upstream_client, ts).tables_at(ts) if t.db_name == fresh_db]
    keys = pa.table({"id": pa.array(range(-50, 1000, 1), pa.int64())})  # 11 statements; 150 keys without a row
    opened = len(upstream_client._sqls)
    got = upstream_read.upstream_rows_at(pd_addr, None, ts, table, keys, upstream_client)
    assert got.num_rows == 900 and sorted(got.column("id").to_pylist()) == list(range(900))
    assert {r["v"] for r in got.to_pylist() if r["id"] < 10} == {f"v{i}" for i in range(10)}
    assert sorted(got.column("d").to_pylist())[:2] == [Decimal("0.50"), Decimal("1.50")]
    assert len(upstream_client._sqls) - opened <= upstream_read.READ_STREAMS
