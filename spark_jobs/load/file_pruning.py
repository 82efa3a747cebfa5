"""Which of a Delta table's files may hold one of a set of keys, by the file's statistics alone.

A file's ``add`` action carries the min and max of its leading columns (``stats``, PROTOCOL.md "Per-file
Statistics"); a file whose range admits none of the changed keys is not read. A wrong answer either way is not
equal: admitting a file costs a read of its key columns, refusing one that holds a key loses a delete. So every
bound is used only in the direction in which it is safe:

- integers: exact;
- strings: a writer may truncate a long min or max (delta-spark keeps 32 characters and makes the max a bound by
  appending a tie-breaker; other writers may cut it short). A prefix of the true min is still a lower bound; a max
  that is a prefix of the true max is not an upper bound, but every string above it and below the true max starts
  with it, so a key is admitted when it is ``<= max`` or starts with ``max``. Compared as code points, which is
  UTF-8 byte order, the order Delta's statistics use;
- dates: ISO ``YYYY-MM-DD``, exact;
- decimals: a JSON number a writer may have rounded through a double (delta-rs), so the bounds are widened by a
  relative 1e-12 and one unit of the column's scale before the keys, cast to double, are compared;
- anything else (timestamps, whose statistics are truncated to milliseconds, binary, floats): admitted.

Cost: one vectorised comparison of the keys' column per file, O(keys) in Arrow.
"""

from __future__ import annotations

import datetime
import decimal
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

# a double carries 15-17 significant digits: a bound rounded through one is off by less than this, relatively
DECIMAL_SLACK = 1e-12


def file_stats(add: dict[str, Any]) -> dict[str, Any] | None:
    """The ``stats`` of an ``add`` action, decimals kept exact (None when it has none or they do not parse)."""
    raw = add.get("stats")
    if not raw:
        return None
    try:
        out = json.loads(raw, parse_float=decimal.Decimal)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def may_hold(add: dict[str, Any], keys: pa.Table, column: str) -> bool:
    """Whether the file of ``add`` may hold a row whose ``column`` is one of ``keys``' (a column of that name):
    False only when its statistics exclude every key (see the module docstring for each type)."""
    stats = file_stats(add)
    if stats is None:
        return True
    if stats.get("numRecords") == 0:
        return False
    lo, hi = (stats.get("minValues") or {}).get(column), (stats.get("maxValues") or {}).get(column)
    if lo is None or hi is None or column not in keys.column_names:
        return True
    hit = _in_range(keys.column(column), lo, hi)
    return True if hit is None else hit


def _in_range(col: Any, lo: Any, hi: Any) -> bool | None:
    """Whether a value of ``col`` lies in the bounds ``[lo, hi]`` of its type; None when the type is not compared."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type

    def any_of(mask: Any) -> bool:
        return bool(pc.any(mask).as_py())

    if pa.types.is_integer(t):
        if isinstance(lo, int) and isinstance(hi, int) and not isinstance(lo, bool) and not isinstance(hi, bool):
            return any_of(pc.and_(pc.greater_equal(col, lo), pc.less_equal(col, hi)))
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if isinstance(lo, str) and isinstance(hi, str):
            upper = pc.or_(pc.less_equal(col, hi), pc.starts_with(col, pattern=hi))
            return any_of(pc.and_(pc.greater_equal(col, lo), upper))
        return None
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        try:
            d_lo, d_hi = datetime.date.fromisoformat(str(lo)), datetime.date.fromisoformat(str(hi))
        except ValueError:
            return None
        days = pc.cast(col, pa.date32())
        return any_of(pc.and_(pc.greater_equal(days, pa.scalar(d_lo, pa.date32())),
                              pc.less_equal(days, pa.scalar(d_hi, pa.date32()))))
    if pa.types.is_decimal(t):
        if not all(isinstance(b, (int, decimal.Decimal)) and not isinstance(b, bool) for b in (lo, hi)):
            return None
        unit = 10.0 ** -t.scale
        f_lo, f_hi = float(lo), float(hi)
        f_lo -= abs(f_lo) * DECIMAL_SLACK + unit
        f_hi += abs(f_hi) * DECIMAL_SLACK + unit
        as_double = pc.cast(col, pa.float64(), safe=False)
        return any_of(pc.and_(pc.greater_equal(as_double, f_lo), pc.less_equal(as_double, f_hi)))
    return None
