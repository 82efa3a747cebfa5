"""The task bodies of DAG ``cdcflow__maintenance``: what each task takes from Airflow -- its params, the Airflow
Variables that override the retention and the reconciliation interval -- handed to the engine's upkeep
(``cdc_core.changefeed.upkeep``, whose docstring says what each part does; the Delta tables' own work is the
``maintain`` Spark job). Each returns the upkeep's JSON summary, the task's XCom.

Module import is cheap (the DAG file imports it at parse time): the upkeep imports what it needs when it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdc_core.changefeed import upkeep

RECONCILE_INTERVAL_VARIABLE = "cdcflow_reconcile_interval_hours"  # Airflow Variable overriding the interval
RETENTION_VARIABLE = "cdcflow_retention_hours"  # Airflow Variable overriding the default retention


def _variable(name: str) -> Any:
    from airflow.sdk import Variable

    return Variable.get(name, default=None)


def retention_hours(value: Any) -> int:
    """The vacuum / bronze retention: ``value`` (a DAG param) if set, else the Airflow Variable
    ``cdcflow_retention_hours``, else ``upkeep.DEFAULT_RETENTION_HOURS``."""
    if value is None or value == "":
        value = _variable(RETENTION_VARIABLE)
    if value is None or value == "":
        return upkeep.DEFAULT_RETENTION_HOURS
    hours = int(value)
    if hours < 0:
        raise ValueError(f"retention must be >= 0 hours, got {hours}")
    return hours


def reconcile_interval_hours(value: Any) -> float:
    """The reconciliation interval: ``value`` (a DAG param) if set, else the Airflow Variable
    ``cdcflow_reconcile_interval_hours``, else ``reconcile.DEFAULT_INTERVAL_HOURS``."""
    if value is None or value == "":
        value = _variable(RECONCILE_INTERVAL_VARIABLE)
    if value is None or value == "":
        from cdc_core.changefeed.reconcile import DEFAULT_INTERVAL_HOURS

        return float(DEFAULT_INTERVAL_HOURS)
    hours = float(value)
    if hours < 0:
        raise ValueError(f"the reconciliation interval must be >= 0 hours, got {hours:g}")
    return hours


def maintain_table(table: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Task ``maintain_table`` (one per silver table): compact and vacuum it at the run's retention."""
    return upkeep.maintain_table(table, retention_hours(params.get("retention_hours")),
                                 enforce_retention_duration=bool(params["enforce_retention_duration"]))


def maintain_dq_results(changefeeds: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """Task ``maintain_dq_results``: each sink's data-quality result log, at the run's retention."""
    return upkeep.maintain_dq_results(changefeeds, retention_hours(params.get("retention_hours")),
                                      enforce_retention_duration=bool(params["enforce_retention_duration"]))


def prune_bronze(changefeeds: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """Task ``prune_bronze``: the bronze changelog beyond the run's retention."""
    return upkeep.prune_bronze(changefeeds, retention_hours(params.get("retention_hours")))


def remove_rebuild_trash(changefeeds: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """Task ``remove_rebuild_trash``: what rebuilds moved aside more than ``trash_retention_days`` ago."""
    return upkeep.remove_rebuild_trash(changefeeds, float(params["trash_retention_days"]))


def reconcile(changefeeds: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """Task ``reconcile``: the changefeeds due (every one with ``reconcile_now``) reconciled whole."""
    return upkeep.reconcile_changefeeds(changefeeds, reconcile_interval_hours(params.get("reconcile_interval_hours")),
                                        force=bool(params.get("reconcile_now")))


def refresh_gc_safe_points(changefeeds: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """Task ``refresh_gc_safe_points``: each changefeed's safe point held for ``gc_ttl_hours``."""
    return upkeep.refresh_gc_safe_points(changefeeds, int(params["gc_ttl_hours"]))
