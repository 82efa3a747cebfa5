"""The data-quality result log: every expectation checked at every barrier, as a Delta table.

``<sink>/_cdcflow/dq_results`` (append-only, one row per table x expectation x check) is where
operators and dashboards look for history; the changefeed state keeps only the last results (what
``cdcflow changefeed query`` shows).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from cdc_core.changefeed.config import DqMode
from cdc_core.codec.sink_uri import local_path

SCHEMA = pa.schema([
    pa.field("changefeed_id", pa.string()),
    pa.field("ts", pa.int64()),
    pa.field("where", pa.string()),
    pa.field("table", pa.string()),
    pa.field("mode", pa.string()),
    pa.field("expectation", pa.string()),
    pa.field("success", pa.bool_()),
    pa.field("details", pa.string()),
    pa.field("observed", pa.string()),
    pa.field("expected", pa.string()),
    pa.field("sample_keys", pa.string()),
    pa.field("checked_at", pa.timestamp("us", tz="UTC")),
])


def results_path(sink_uri: str) -> str:
    return str(local_path(sink_uri) / "_cdcflow" / "dq_results")


def exists(sink_uri: str) -> bool:
    """Whether the sink has a result log yet (a check wrote to it)."""
    return bool(DeltaTable.is_deltatable(results_path(sink_uri)))


def _text(v: Any) -> str | None:
    return None if v is None else (v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))


def append(sink_uri: str, changefeed_id: str, ts: int, where: str, mode: DqMode, reports: dict[str, Any]) -> int:
    """Append the reports of one check (``{table: CheckReport dict}``); returns the rows written."""
    now = int(time.time() * 1_000_000)
    rows = [
        {
            "changefeed_id": changefeed_id, "ts": ts, "where": where, "table": table, "mode": mode,
            "expectation": r.get("expectation"), "success": bool(r.get("success")), "details": r.get("details") or "",
            "observed": _text(r.get("observed")), "expected": _text(r.get("expected")),
            "sample_keys": _text(r.get("sample_keys") or []), "checked_at": now,
        }
        for table, rep in sorted(reports.items())
        for r in rep.get("results", [])
    ]
    if rows:
        write_deltalake(results_path(sink_uri), pa.Table.from_pylist(rows, schema=SCHEMA), mode="append")
    return len(rows)


# the expectation of a count of values the lake holds as NULL (spark_jobs.normalize.mapped_values)
MAPPED = "values_mapped"


def mapped_reports(mapped: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Reports (as :func:`append` takes them) of ``{table: {column: values}}`` written as NULL because Delta cannot
    hold them: one passing ``values_mapped:<column>`` row per table and column, ``observed`` the count."""
    return {table: {"results": [
        {"expectation": f"{MAPPED}:{column}", "success": True, "observed": n,
         "details": f"{n} value(s) of {column} Delta cannot hold (a zero or invalid date) written as NULL"}
        for column, n in sorted(by_column.items())]}
        for table, by_column in mapped.items()}


def record_mapped(sink_uri: str, changefeed_id: str, mode: DqMode, ts: int, where: str, tables: dict[str, Any],
                  total: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Append, per table and column, the values a load or a step wrote as NULL because Delta cannot hold them
    (``tables``: a job's per-table results, each with its ``mapped`` counts, ``spark_jobs.normalize.mapped_values``; a
    table skipped as done counts none), add them to ``total`` (``{table: {column: values}}``) and return what this one
    mapped. A window's apply, a snapshot load and a rebuild's replay all record them so."""
    mapped = {name: dict(r["mapped"]) for name, r in tables.items() if not r.get("skipped") and r.get("mapped")}
    if not mapped:
        return {}
    append(sink_uri, changefeed_id, ts, where, mode, mapped_reports(mapped))
    for name, by_column in mapped.items():
        for column, n in by_column.items():
            total.setdefault(name, {})[column] = total.get(name, {}).get(column, 0) + int(n)
    return mapped


def ddl_tables(result: dict[str, Any] | None) -> dict[str, Any]:
    """A ``ddl_apply`` result's mapped values as a job's per-table results (:func:`record_mapped` takes them): a
    re-key by ``_tidb_rowid`` reloads its table from the upstream and says what it mapped (``mapped``)."""
    return {name: {"mapped": by_column} for name, by_column in ((result or {}).get("mapped") or {}).items()}


def failure_message(failed: dict[str, Any], ts: int) -> str:
    """The error of failed reports (``{table: report}``): each failed expectation with its details and sample keys."""
    parts = []
    for name, r in failed.items():
        for e in r.get("results", []):
            if not e.get("success", True):
                sample = e.get("sample_keys") or []
                parts.append(f"{name} at ts {ts}: {e.get('expectation')} failed {e.get('details', '')}"
                             + (f" (sample keys: {sample[:5]})" if sample else ""))
    return "data-quality check failed: " + "; ".join(parts or [f"{n} at ts {ts}" for n in failed])
