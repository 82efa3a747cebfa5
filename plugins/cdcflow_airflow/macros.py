"""Template macros: TSO <-> datetime, as ``{{ macros.cdcflow.tso_to_datetime(ts) }}`` and
``{{ macros.cdcflow.datetime_to_tso(data_interval_end) }}`` (Airflow puts a plugin's macros under
``macros.<plugin name>``).

Both go through ``cdc_core.codec.tso`` (``ts = physical_ms << 18 | logical``), so they agree with the windows
the changefeed DAGs compute.
"""

from __future__ import annotations

from datetime import UTC, datetime

from cdc_core.codec import tso


def tso_to_datetime(ts: int | str) -> datetime:
    """The UTC time of a TSO (an int or a decimal string); the logical part is dropped."""
    if isinstance(ts, str):
        if not ts.strip().isdigit():
            raise ValueError(f"{ts!r} is not a TSO (a non-negative integer)")
        ts = int(ts)
    return tso.to_datetime(ts)


def datetime_to_tso(dt: datetime | str, end_of_ms: bool = False) -> int:
    """The TSO of a datetime or ISO-8601 string (UTC when it has no zone); with ``end_of_ms`` the last TSO of
    that millisecond (how a window end is computed)."""
    if isinstance(dt, str):
        try:
            dt = datetime.fromisoformat(dt.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"{dt!r} is not an ISO-8601 datetime") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return tso.from_datetime(dt, end_of_ms=end_of_ms)
