from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.codec import key

I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)

# a loaded 2-core CI box: no per-example deadline, no too-slow health check
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@RELAXED
@given(I64)
def test_int_round_trip(v: int) -> None:
    b = key.encode_int(v)
    assert len(b) == 8 and key.decode_int(b) == v


@RELAXED
@given(I64, I64)
def test_byte_order_equals_numeric_order(a: int, b: int) -> None:
    assert (key.encode_int(a) < key.encode_int(b)) == (a < b)


@RELAXED
@given(st.integers(min_value=0, max_value=(1 << 40)), I64)
def test_row_key_round_trip_and_span(table_id: int, handle: int) -> None:
    k = key.row_key(table_id, handle)
    assert key.decode_row_key(k) == (table_id, handle)
    assert key.table_id_of(k) == table_id
    start, end = key.table_span(table_id)
    assert start <= k < end
    # the next table's span starts after this one ends
    assert end <= key.table_span(table_id + 1)[0]


@RELAXED
@given(st.integers(min_value=0, max_value=1000), I64, I64)
def test_row_keys_order_by_handle(table_id: int, h1: int, h2: int) -> None:
    assert (key.row_key(table_id, h1) < key.row_key(table_id, h2)) == (h1 < h2)


def test_errors() -> None:
    with pytest.raises(ValueError):
        key.encode_int(1 << 63)
    with pytest.raises(ValueError):
        key.decode_int(b"\x00" * 7)
    with pytest.raises(ValueError, match="not a row key"):
        key.decode_row_key(b"t" + b"\x00" * 8 + b"_i" + b"\x00" * 8)
    with pytest.raises(ValueError, match="not a table key"):
        key.table_id_of(b"x")
    ik = key.index_key(7, 1, b"v")
    assert ik < key.table_span(7)[0]  # index entries lie outside the row span
