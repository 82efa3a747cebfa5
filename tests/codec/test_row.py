from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.codec.row import decode_row, encode_row, format_datetime

VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.text(max_size=20),
)

# a loaded 2-core CI box: no per-example deadline, no too-slow health check
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@RELAXED
@given(st.dictionaries(st.integers(min_value=1, max_value=500), VALUES, max_size=10))
def test_round_trip_json_values(values: dict[int, object]) -> None:
    assert decode_row(encode_row(values)) == values


@RELAXED
@given(st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-(10**12), max_value=10**12))
def test_decimal_keeps_exact_digits(d: Decimal) -> None:
    raw = decode_row(encode_row({1: d}))[1]
    assert isinstance(raw, str) and Decimal(raw) == d


def test_datetime_date_none_and_encoding_is_deterministic() -> None:
    dt = datetime(2024, 5, 6, 7, 8, 9, 123)
    out = decode_row(encode_row({3: dt, 1: None, 2: date(2024, 1, 2)}))
    assert out == {1: None, 2: "2024-01-02", 3: "2024-05-06 07:08:09.000123"}
    assert format_datetime(datetime(2024, 5, 6, 7, 8, 9)) == "2024-05-06 07:08:09"
    assert encode_row({2: "b", 1: "a"}) == encode_row({1: "a", 2: "b"}) == b'{"1":"a","2":"b"}'


def test_unsupported_and_corrupt_input() -> None:
    with pytest.raises(TypeError, match="unsupported row value type"):
        encode_row({1: 1.5})
    with pytest.raises(ValueError, match="non-finite"):
        encode_row({1: Decimal("NaN")})
    for bad, msg in ((b"\xff\xfe", "corrupt row value"), (b"[1, 2]", "expected a JSON object"),
                     (b'{"x": 1}', "non-integer column id"), (b"{", "corrupt row value")):
        with pytest.raises(ValueError, match=msg):
            decode_row(bad)
