"""The SQL of the window checks' point reads (spark_jobs.window_checks): each Delta key value written as the literal
that selects exactly the upstream rows holding it."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from spark_jobs_builders import clustered_table

from cdc_core.errors import ChangefeedError
from spark_jobs.window_checks import key_literal, point_select


def test_a_small_decimal_key_is_a_decimal_literal_not_an_exponent() -> None:
    """Arrow gives DECIMAL(10,8)'s 0.00000010 back as Decimal('1.0E-7'), whose str() MySQL reads as a DOUBLE."""
    col = clustered_table().columns[0]
    (small,) = pa.array([Decimal("0.00000010")], pa.decimal128(10, 8)).to_pylist()
    assert "E" in str(small)
    assert key_literal(col, small) == "0.00000010"
    assert key_literal(col, Decimal("-12345678.5")) == "-12345678.5"


def test_other_key_values_and_a_value_without_a_literal() -> None:
    col = clustered_table().columns[0]
    assert key_literal(col, datetime(2026, 1, 2, 3, 4, 5, 60)) == "'2026-01-02 03:04:05.000060'"
    assert key_literal(col, date(2026, 1, 2)) == "'2026-01-02'"
    assert key_literal(col, b"\x00\xff") == "X'00ff'"
    assert key_literal(col, "it's") == "'it\\'s'"
    assert key_literal(col, True) == "1" and key_literal(col, None) == "NULL"
    with pytest.raises(ChangefeedError, match=repr(col.name)):
        key_literal(col, 1.5)


def test_a_composite_key_selects_by_row_constructor() -> None:
    t = clustered_table()
    a, b = t.columns[0].name, t.columns[1].name
    sql = point_select(t, [a, b], [(1, 2), (3, 4)])
    assert sql == f"SELECT * FROM `{t.db_name}`.`{t.name}` WHERE (`{a}`, `{b}`) IN ((1, 2), (3, 4))"
    assert point_select(t, [a], [(1,), (3,)]).endswith(f"WHERE `{a}` IN (1, 3)")
