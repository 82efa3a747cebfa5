"""TSO timestamps: ``ts = (physical_ms << 18) | logical``, and their conversion to datetimes.

Windows, checkpoints and Airflow data intervals all convert through these functions, so an
interval end ``dt`` maps to ``compose(ms(dt), MAX_LOGICAL)``: the last ts of that millisecond.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

LOGICAL_BITS = 18
MAX_LOGICAL = (1 << LOGICAL_BITS) - 1
# A ts must fit a signed 64-bit integer so that Parquet/Delta/Spark can hold it as int64.
MAX_TS = (1 << 63) - 1


def compose(physical_ms: int, logical: int = 0) -> int:
    """Build a ts from a physical time in ms since the Unix epoch and a logical counter."""
    if physical_ms < 0:
        raise ValueError(f"physical time must be >= 0, got {physical_ms}")
    if not 0 <= logical <= MAX_LOGICAL:
        raise ValueError(f"logical part must be in [0, {MAX_LOGICAL}], got {logical}")
    ts = (physical_ms << LOGICAL_BITS) | logical
    if ts > MAX_TS:
        raise ValueError(f"physical time {physical_ms} ms is too large for a 63-bit ts")
    return ts


def parse(ts: int) -> tuple[int, int]:
    """Split a ts into ``(physical_ms, logical)``."""
    if ts < 0:
        raise ValueError(f"ts must be >= 0, got {ts}")
    return ts >> LOGICAL_BITS, ts & MAX_LOGICAL


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def to_datetime(ts: int) -> datetime:
    """The UTC wall-clock time of a ts (the logical part is dropped)."""
    return datetime.fromtimestamp(physical_ms(ts) / 1000.0, tz=UTC)


def datetime_to_ms(dt: datetime) -> int:
    if dt.tzinfo is None:
        raise ValueError(f"datetime {dt.isoformat()} has no time zone; TSO needs an aware datetime")
    return round(dt.timestamp() * 1000)


def from_datetime(dt: datetime, *, end_of_ms: bool = False) -> int:
    """The ts of an aware datetime; with ``end_of_ms`` the last ts of that millisecond."""
    return compose(datetime_to_ms(dt), MAX_LOGICAL if end_of_ms else 0)


def now_physical_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_ts_or_datetime(text: str) -> int:
    """Read a user-supplied ts: a decimal TSO, or an ISO-8601 datetime (UTC when no zone is given)."""
    s = text.strip()
    if not s:
        raise ValueError("empty timestamp")
    if s.isdigit():
        return int(s)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{text!r} is neither a TSO (integer) nor an ISO-8601 datetime") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return from_datetime(dt, end_of_ms=True)
