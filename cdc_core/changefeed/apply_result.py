"""The per-table entry of an apply step's result (what ``spark_jobs.apply_window`` returns for each table), built in
one place for the Spark job and for the driver's idle steps, which skip every table without running the job."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_core.schema.model import TableInfo


def no_events_reason(after_ts: int | None, upto_ts: int) -> str:
    """Why a table a step has no row events of is skipped."""
    return f"no row events in ({after_ts}, {upto_ts}]"


def skipped(table: TableInfo, path: str, reason: str, delta_version: int | None,
            applied_version: int | None) -> dict[str, Any]:
    """A table the step committed nothing to: ``reason`` says why, the versions are the table's as it stands."""
    return {
        "table_id": table.id, "rows_upserted": 0, "rows_deleted": 0, "delta_version": delta_version,
        "skipped": True, "applied_version": applied_version, "reason": reason, "changes": 0, "path": path,
    }  # fmt: skip
