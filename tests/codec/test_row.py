from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.codec.row import decode_row, encode_row
from cdc_core.codec.rowcodec import RowCodecError, parse_row_v2
from cdc_core.codec.value_text import format_datetime, json_value
from cdc_core.schema.model import Column, TableInfo

INFO = TableInfo(
    id=70, db_name="d", name="t",
    columns=(Column(1, "i", "int"), Column(2, "b", "bigint"), Column(3, "s", "varchar", length=20),
             Column(4, "d", "decimal", precision=14, scale=4), Column(5, "ts", "datetime", fsp=6),
             Column(6, "x", "text")),
)
ROWS = st.fixed_dictionaries({}, optional={
    1: st.none() | st.integers(-(1 << 31), (1 << 31) - 1),
    2: st.none() | st.integers(-(1 << 63), (1 << 63) - 1),
    3: st.none() | st.text(max_size=20),
    4: st.none() | st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-(10**9), max_value=10**9),
    5: st.none() | st.datetimes(min_value=datetime(1000, 1, 1)),
    6: st.none() | st.text(max_size=200),
})

# a loaded 2-core CI box: no per-example deadline, no too-slow health check
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@RELAXED
@given(ROWS)
def test_round_trip_under_the_table_schema(values: dict[int, object]) -> None:
    encoded = encode_row(INFO, values)
    assert encoded[0] == 128  # rowcodec v2, as TiDB writes it
    assert decode_row(INFO, encoded) == values


def test_dropped_and_absent_columns() -> None:
    encoded = encode_row(INFO, {1: 5, 3: "x"})
    after_drop = TableInfo(id=70, db_name="d", name="t", columns=(INFO.columns[0], Column(7, "n", "int")))
    # id 3 is a dropped column now (skipped); id 7 was never stored (left out for the origin default)
    assert decode_row(after_drop, encoded) == {1: 5}
    assert after_drop.decode_values(decode_row(after_drop, encoded)) == {"i": 5, "n": None}


def test_unknown_column_and_corrupt_value_name_the_table() -> None:
    with pytest.raises(RowCodecError, match="has no column id 9"):
        encode_row(INFO, {9: 1})
    with pytest.raises(RowCodecError, match=r"table d\.t \(id 70\)"):
        decode_row(INFO, encode_row(INFO, {1: 5})[:-1])
    assert parse_row_v2(encode_row(INFO, {2: None})).null_ids == (2,)


def test_value_text() -> None:
    assert format_datetime(datetime(2024, 5, 6, 7, 8, 9)) == "2024-05-06 07:08:09"
    assert json_value(datetime(2024, 5, 6, 7, 8, 9, 123)) == "2024-05-06 07:08:09.000123"
    assert json_value(Decimal("1.50")) == "1.50"
