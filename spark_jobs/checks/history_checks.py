"""The check of a history table at the window end: its open rows are the silver table's rows.

A history table (:mod:`spark_jobs.load.history`) holds one open row (``__END_AT`` NULL) per key the silver table
holds, with the same values: the versions it closed and opened add up to the silver table's state. The
``history_open_rows_equal`` expectation compares them by key and value, whole tables read on the driver through
delta-rs (the sink side only; the upstream is not read), and names sample keys of those that differ. It is reported
with the table's other window-end checks (:mod:`spark_jobs.checks.window_checks`): a failure fails the window's
checks and names the table.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from cdc_core.codec.sink_uri import table_path
from cdc_core.schema.model import TableInfo
from spark_jobs.load import silver_read
from spark_jobs.load.history import history_path, open_rows

EXPECTATION = "history_open_rows_equal"
SAMPLE_KEYS = 5


def _silver_rows(sink: str, table: TableInfo) -> pa.Table:
    from deltalake import DeltaTable

    schema = table.arrow_schema()
    path = table_path(sink, table)
    if not DeltaTable.is_deltatable(path):
        return schema.empty_table()
    batches = [pa.Table.from_batches([b]).select(schema.names) for b in silver_read.scan(DeltaTable(path),
                                                                                          schema.names)]
    return pa.concat_tables(batches).cast(schema) if batches else schema.empty_table()


def differing_keys(a: pa.Table, b: pa.Table, key: list[str]) -> list[tuple[Any, ...]]:
    """The keys whose rows differ between ``a`` and ``b`` (rows as multisets per key), sorted."""

    def by_key(t: pa.Table) -> dict[tuple[Any, ...], list[str]]:
        out: dict[tuple[Any, ...], list[str]] = {}
        for r in t.to_pylist():
            out.setdefault(tuple(r[k] for k in key), []).append(repr(sorted(r.items())))
        return out

    x, y = by_key(a), by_key(b)
    return sorted((k for k in x.keys() | y.keys() if sorted(x.get(k, [])) != sorted(y.get(k, []))), key=repr)


def _result(success: bool, details: str = "", observed: Any = None, expected: Any = None,
            sample_keys: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An expectation result as the reports hold them (``data_quality.ExpectationResult`` as a dict)."""
    import json

    return json.loads(json.dumps({"expectation": EXPECTATION, "success": success, "details": details,
                                  "observed": observed, "expected": expected, "sample_keys": sample_keys or []},
                                 default=str))


def _equal(a: pa.Table, b: pa.Table) -> bool:
    """Same rows as multisets: both sorted on every column (what ``window_checks.same_rows`` does), else by key."""
    if a.num_rows != b.num_rows:
        return False
    order = [(n, "ascending") for n in a.column_names]
    try:
        return bool(a.sort_by(order).equals(b.sort_by(order)))
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # a type Arrow cannot sort (a VECTOR): by key below
        return False


def check_open_rows(sink: str, table: TableInfo) -> dict[str, Any]:
    """``history_open_rows_equal`` of ``table``'s history table against its silver table."""
    from deltalake import DeltaTable

    path = history_path(sink, table)
    schema = table.arrow_schema()
    # No history table yet: no open row (a table that gets history once it holds rows needs a rebuild or a snapshot
    # of it, which opens them; docs/history.md).
    hist = open_rows(path, table).select(schema.names).cast(schema) if DeltaTable.is_deltatable(path) \
        else schema.empty_table()
    silver = _silver_rows(sink, table)
    key = list(table.delta_key())
    if _equal(hist, silver) or not (bad := differing_keys(hist, silver, key)):
        return _result(True, observed=hist.num_rows, expected=silver.num_rows)
    return _result(
        False,
        details=f"{table.qualified_name}: {len(bad)} key(s) whose open rows in the history table {path} differ "
                "from the silver table's rows",
        observed=hist.num_rows, expected=silver.num_rows,
        sample_keys=[dict(zip(key, k, strict=True)) for k in bad[:SAMPLE_KEYS]])


def add_to_report(sink: str, table: TableInfo, report: dict[str, Any]) -> dict[str, Any]:
    """``report`` (a ``CheckReport.to_dict()``) with the history check appended; failed when it fails."""
    result = check_open_rows(sink, table)
    return {**report, "results": [*report.get("results", []), result],
            "passed": bool(report.get("passed")) and result["success"]}
