"""The SQL of the window checks' point reads (spark_jobs.window_checks): each Delta key value written as the literal
that selects exactly the upstream rows holding it; the driver's comparison of the rows at the changed keys."""

from __future__ import annotations

import functools
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from cdc_core.changefeed.schema_loader import load_schema
from cdc_core.codec.sql_literal import string_literal
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs import window_checks
from spark_jobs.window_checks import key_literal, point_select, same_rows
from testkit.builders import clustered_table

LIT = functools.partial(string_literal, no_backslash_escapes=False)
NBE_LIT = functools.partial(string_literal, no_backslash_escapes=True)


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


def test_same_rows_compares_multisets_of_rows_whatever_their_order_and_chunks() -> None:
    a = pa.table({"k": [1, 2, 2, None], "v": ["x", "y", "y", None]})
    shuffled = a.take([2, 3, 0, 1])
    assert same_rows(a, shuffled) and same_rows(pa.concat_tables([a.slice(0, 1), a.slice(1)]), shuffled)
    # the same set of rows with another multiplicity, and one value changed
    assert not same_rows(a, a.take([0, 0, 1, 3]))
    assert not same_rows(a, pa.table({"k": [1, 2, 2, None], "v": ["x", "y", "z", None]}))
    assert not same_rows(a, a.slice(1))
    typed = pa.table({"d": pa.array([Decimal("1.10"), Decimal("2.00")], pa.decimal128(5, 2)),
                      "t": pa.array([datetime(2020, 1, 1), None], pa.timestamp("us")),
                      "b": pa.array([b"\x00", b"\xff"]), "day": pa.array([date(2020, 1, 2), date(1970, 1, 1)])})
    assert same_rows(typed, typed.take([1, 0]))
    assert not same_rows(typed, typed.set_column(0, "d", pa.array([Decimal("1.10"), Decimal("2.01")],
                                                                   pa.decimal128(5, 2))))


def test_same_rows_is_false_without_exact_equality_and_compares_unsortable_types_as_tuples() -> None:
    nan = pa.table({"f": [1.0, float("nan")]})
    assert not same_rows(nan, nan)  # a NaN equals nothing: the table is compared again in Spark
    listed = pa.table({"l": pa.array([[1.5, 2.0], [2.0], []], pa.list_(pa.float32()))})  # a VECTOR's elements
    assert same_rows(listed, listed.take([2, 0, 1]))  # compared as tuples
    assert not same_rows(listed, pa.table({"l": pa.array([[1.5, 2.0], [2.0], [0.0]], pa.list_(pa.float32()))}))
    nested = pa.table({"s": pa.array([{"a": 1}, {"a": 2}])})
    assert same_rows(nested, nested.take([1, 0]))
    assert not same_rows(nested, pa.table({"s": pa.array([{"a": 1}, {"a": 3}])}))


def test_many_changed_keys_are_read_several_statements_at_a_time_and_every_row_arrives(
        pd_addr: str, upstream_client: Any, fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys past one statement's ``POINT_BATCH`` go through the shared point-read threads, ``READ_STREAMS``
    statements in flight: every row at the keys comes back, at the ts asked (a later write is not seen), keys
    without a row give none; a client of the job's own opens no more connections than those threads."""
    monkeypatch.setattr(window_checks, "POINT_BATCH", 100)
    upstream_client.execute(f"CREATE TABLE {fresh_db}.t (id BIGINT PRIMARY KEY, v VARCHAR(10), d DECIMAL(6,2))")
    rows = ", ".join(f"({i}, 'v{i}', {i}.5)" for i in range(900))
    upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES {rows}")
    ts = upstream_client.get_ts()
    upstream_client.execute(f"UPDATE {fresh_db}.t SET v = 'later' WHERE id < 10")
    (table,) = [t for t in load_schema(upstream_client, ts).tables_at(ts) if t.db_name == fresh_db]
    keys = pa.table({"id": pa.array(range(-50, 1000, 1), pa.int64())})  # 11 statements; 150 keys without a row
    opened = len(upstream_client._sqls)
    got = window_checks.upstream_rows_at(pd_addr, None, ts, table, keys, upstream_client)
    assert got.num_rows == 900 and sorted(got.column("id").to_pylist()) == list(range(900))
    assert {r["v"] for r in got.to_pylist() if r["id"] < 10} == {f"v{i}" for i in range(10)}
    assert sorted(got.column("d").to_pylist())[:2] == [Decimal("0.50"), Decimal("1.50")]
    assert len(upstream_client._sqls) - opened <= window_checks.READ_STREAMS
