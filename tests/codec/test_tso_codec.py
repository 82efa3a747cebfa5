from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.codec import tso

PHYS = st.integers(min_value=0, max_value=(tso.MAX_TS >> tso.LOGICAL_BITS))
LOGICAL = st.integers(min_value=0, max_value=tso.MAX_LOGICAL)

# a loaded 2-core CI box: no per-example deadline, no too-slow health check
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@RELAXED
@given(PHYS, LOGICAL)
def test_compose_parse_round_trip(phys: int, logical: int) -> None:
    ts = tso.compose(phys, logical)
    assert tso.parse(ts) == (phys, logical)
    assert tso.physical_ms(ts) == phys
    assert ts == (phys << 18) | logical


@RELAXED
@given(PHYS, LOGICAL, PHYS, LOGICAL)
def test_order_follows_physical_then_logical(p1: int, l1: int, p2: int, l2: int) -> None:
    assert (tso.compose(p1, l1) < tso.compose(p2, l2)) == ((p1, l1) < (p2, l2))


@RELAXED
@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)))
def test_datetime_round_trip_to_the_millisecond(dt: datetime) -> None:
    ts = tso.from_datetime(dt)
    back = tso.to_datetime(ts)
    assert abs(back - dt) <= timedelta(milliseconds=1)
    assert tso.parse(tso.from_datetime(dt, end_of_ms=True))[1] == tso.MAX_LOGICAL


def test_known_values_and_errors() -> None:
    dt = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    ts = tso.from_datetime(dt)
    assert tso.to_datetime(ts) == dt
    assert tso.from_datetime(dt.astimezone(timezone(timedelta(hours=5)))) == ts
    with pytest.raises(ValueError, match="no time zone"):
        tso.from_datetime(datetime(2024, 1, 1))
    with pytest.raises(ValueError):
        tso.compose(-1)
    with pytest.raises(ValueError):
        tso.compose(0, tso.MAX_LOGICAL + 1)
    with pytest.raises(ValueError):
        tso.parse(-5)


def test_parse_ts_or_datetime() -> None:
    assert tso.parse_ts_or_datetime(" 12345 ") == 12345
    end = tso.parse_ts_or_datetime("2024-01-02T03:04:05Z")
    assert tso.to_datetime(end) == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert tso.parse(end)[1] == tso.MAX_LOGICAL
    assert tso.parse_ts_or_datetime("2024-01-02 03:04:05") == end  # no zone: UTC
    for bad in ("", "yesterday", "-5"):
        with pytest.raises(ValueError):
            tso.parse_ts_or_datetime(bad)
