"""Typed column values as text: how the SQL front prints them (JSON rows) and reads them back.

DECIMAL prints as its exact digits (a JSON number would pass through binary floating point on the
way), DATETIME as ``YYYY-MM-DD HH:MM:SS[.ffffff]``, as MySQL clients show them.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def format_datetime(v: datetime) -> str:
    s = v.strftime(DATETIME_FORMAT)
    return f"{s}.{v.microsecond:06d}" if v.microsecond else s


def json_value(v: Any) -> Any:
    """A typed value as the SQL front prints it: DECIMAL as exact digits, DATETIME as text."""
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, datetime):
        return format_datetime(v)
    return v
