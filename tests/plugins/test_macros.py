"""The template macros: TSO <-> datetime through cdc_core.codec.tso."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from cdcflow_airflow.macros import datetime_to_tso, tso_to_datetime

from cdc_core.codec import tso


@pytest.mark.parametrize("dt", [
    datetime(2025, 1, 1, tzinfo=UTC),
    datetime(2026, 11, 23, 12, 34, 56, 789000, tzinfo=UTC),
    datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=timezone(timedelta(hours=8))),
])
def test_round_trip(dt: datetime) -> None:
    ts = datetime_to_tso(dt)
    assert tso.parse(ts) == (round(dt.timestamp() * 1000), 0)
    assert tso_to_datetime(ts) == dt
    assert tso_to_datetime(ts).tzinfo == UTC
    end = datetime_to_tso(dt, end_of_ms=True)
    assert end == ts + tso.MAX_LOGICAL and tso_to_datetime(end) == dt


def test_iso_strings_and_naive_datetimes_are_utc() -> None:
    expected = tso.compose(1735689600000)
    assert datetime_to_tso("2025-01-01T00:00:00Z") == expected
    assert datetime_to_tso("2025-01-01T00:00:00") == expected
    assert datetime_to_tso("2025-01-01 08:00:00+08:00") == expected
    assert datetime_to_tso(datetime(2025, 1, 1)) == expected
    assert tso_to_datetime(str(expected)) == datetime(2025, 1, 1, tzinfo=UTC)


def test_pendulum_datetimes_as_airflow_passes_them() -> None:
    import pendulum

    assert datetime_to_tso(pendulum.datetime(2025, 1, 1, tz="UTC")) == tso.compose(1735689600000)


@pytest.mark.parametrize("bad", ["yesterday", "2025-13-01", ""])
def test_bad_datetimes(bad: str) -> None:
    with pytest.raises(ValueError, match="ISO-8601"):
        datetime_to_tso(bad)


@pytest.mark.parametrize("bad", ["-1", "12a", ""])
def test_bad_tsos(bad: str) -> None:
    with pytest.raises(ValueError, match="not a TSO"):
        tso_to_datetime(bad)
