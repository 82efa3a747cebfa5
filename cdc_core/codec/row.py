"""Row values keyed by column id, as TiDB's row format is.

A value is a UTF-8 JSON object ``{"<column id>": value}``: decoding needs the table schema at the
commit ts (ids it no longer has are dropped columns; ids it has but the value lacks take the
column default or NULL). JSON was chosen over a binary layout so that Spark can decode a whole
window natively with ``from_json`` instead of a Python UDF per row.

Value encoding: integers as JSON integers, DECIMAL as a JSON string of its exact digits (a JSON
number would pass through binary floating point somewhere),
DATETIME as ``"YYYY-MM-DD HH:MM:SS[.ffffff]"``, strings as strings, NULL as null (an absent id
means "not set", which is different from NULL only for columns added later).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime
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


def _encode_value(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, Decimal):
        if not v.is_finite():
            raise ValueError(f"cannot encode non-finite decimal {v}")
        return format(v, "f")
    if isinstance(v, datetime):
        return format_datetime(v)
    if isinstance(v, date):
        return v.isoformat()
    raise TypeError(f"unsupported row value type {type(v).__name__}: {v!r}")


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_row(values: Mapping[int, Any]) -> bytes:
    """Encode ``{column_id: value}``."""
    payload = {str(int(cid)): _encode_value(v) for cid, v in sorted(values.items())}
    return _encoder.encode(payload).encode("utf-8")


def decode_row(data: bytes) -> dict[int, Any]:
    """Decode to ``{column_id: json value}`` (DECIMAL and DATETIME stay strings; the schema types them)."""
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"corrupt row value ({len(data)} bytes): {exc}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"corrupt row value: expected a JSON object, got {type(obj).__name__}")
    try:
        return {int(k): v for k, v in obj.items()}
    except ValueError as exc:
        raise ValueError(f"corrupt row value: non-integer column id in {sorted(obj)}") from exc
