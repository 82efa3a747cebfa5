"""Typed column values as text: how the SQL front prints them (JSON rows) and reads them back.

DECIMAL prints as its exact digits (a JSON number would pass through binary floating point on the
way), DATETIME as ``YYYY-MM-DD HH:MM:SS[.ffffff]``, TIME as ``[-]HH:MM:SS[.ffffff]``, as MySQL clients show
them; a date Python has none of (``rowcodec.MySQLTime``: ``0000-00-00``, ``2021-02-30``) in the same forms, as TiDB's
``Time.String`` prints it; a VECTOR as TiDB prints it (``[1.5,2]``); bytes, which JSON has no form for, as
``{"$binary": <base64>}``.
"""

from __future__ import annotations

import base64
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

from cdc_core.codec.rowcodec import MySQLTime
from cdc_core.codec.vector import VectorFloat32

DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S"
WIDE_DECIMAL = Context(prec=80)  # DECIMAL holds 65 digits; the default context rounds at 28


def decimal_text(value: Decimal, scale: int) -> str:
    """A DECIMAL as TiDB prints it (``MyDecimal.String``): plain notation, exactly ``scale`` fraction digits, no
    ``-0``; a value with more digits (stored before a MODIFY COLUMN narrowed the scale, until TiDB's reorg rewrites
    it) rounded half up, as rowcodec's ChunkDecoder rounds it."""
    q = value.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP, context=WIDE_DECIMAL)
    return format(q.copy_abs() if q.is_zero() else q, "f")


def format_datetime(v: datetime, fsp: int | None = None) -> str:
    """``YYYY-MM-DD HH:MM:SS`` and the fraction: exactly ``fsp`` digits (DATETIME(fsp) as MySQL prints it), or six
    when there is one and ``fsp`` is None."""
    s = f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:{v.second:02d}"
    return _fraction(s, v.microsecond, fsp)


def format_mysql_time(v: MySQLTime, *, date_only: bool = False, fsp: int | None = None) -> str:
    """A ``MySQLTime`` as TiDB's ``Time.String`` prints it: ``0000-00-00`` (a DATE: ``date_only``), or with the time
    and the fraction as :func:`format_datetime`'s, ``0000-00-00 00:00:00``."""
    day = f"{v.year:04d}-{v.month:02d}-{v.day:02d}"
    if date_only:
        return day
    return _fraction(f"{day} {v.hour:02d}:{v.minute:02d}:{v.second:02d}", v.microsecond, fsp)


def _fraction(text: str, micros: int, fsp: int | None) -> str:
    if fsp is None:
        return f"{text}.{micros:06d}" if micros else text
    return f"{text}.{micros:06d}"[: len(text) + 1 + fsp] if fsp else text


def json_value(v: Any) -> Any:
    """The JSON form of a typed value: itself where JSON has one, DECIMAL as exact digits, DATE/DATETIME/TIME as
    MySQL prints them, bytes as ``{"$binary": <base64>}`` (a column's ``convert`` reads each back)."""
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, datetime):
        return format_datetime(v)
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, timedelta):
        return format_duration(v)
    if isinstance(v, MySQLTime):
        return format_mysql_time(v)
    if isinstance(v, VectorFloat32):
        return v.text()
    if isinstance(v, bytes | bytearray):
        return {"$binary": base64.b64encode(bytes(v)).decode()}
    return v


def format_duration(v: timedelta, fsp: int | None = None) -> str:
    """A TIME value as MySQL prints it: ``[-]HH:MM:SS[.ffffff]``, hours past 24 as they are (up to 838); the fraction
    as :func:`format_datetime`'s."""
    total = v // timedelta(microseconds=1)
    sign, total = ("-", -total) if total < 0 else ("", total)
    secs, micros = divmod(total, 1_000_000)
    text = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    return _fraction(text, micros, fsp)
