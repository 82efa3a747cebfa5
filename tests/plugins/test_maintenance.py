"""The maintenance DAG and its task bodies (``cdcflow_airflow.maintenance``): what each task takes from its params
and the Airflow Variables, handed to the engine's upkeep (tested in tests/changefeed/test_upkeep.py, the Delta
tables' job in tests/spark_jobs/test_maintain.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cdcflow_airflow import maintenance

from cdc_core.changefeed import upkeep

ROOT = Path(__file__).resolve().parents[2]

PARAMS = {"retention_hours": None, "enforce_retention_duration": False, "trash_retention_days": 2.5,
          "reconcile_interval_hours": None, "reconcile_now": True, "gc_ttl_hours": 6}


def test_retention_hours_from_param_variable_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_VAR_CDCFLOW_RETENTION_HOURS", raising=False)
    assert maintenance.retention_hours(None) == 168
    assert maintenance.retention_hours(24) == 24
    monkeypatch.setenv("AIRFLOW_VAR_CDCFLOW_RETENTION_HOURS", "72")
    assert maintenance.retention_hours(None) == 72 and maintenance.retention_hours(0) == 0
    with pytest.raises(ValueError):
        maintenance.retention_hours(-1)


def test_reconcile_interval_from_param_variable_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.changefeed.reconcile import DEFAULT_INTERVAL_HOURS

    monkeypatch.delenv("AIRFLOW_VAR_CDCFLOW_RECONCILE_INTERVAL_HOURS", raising=False)
    assert maintenance.reconcile_interval_hours(None) == DEFAULT_INTERVAL_HOURS
    assert maintenance.reconcile_interval_hours("12") == 12.0
    monkeypatch.setenv("AIRFLOW_VAR_CDCFLOW_RECONCILE_INTERVAL_HOURS", "0.5")
    assert maintenance.reconcile_interval_hours("") == 0.5
    with pytest.raises(ValueError, match="must be >= 0 hours"):
        maintenance.reconcile_interval_hours(-1)


def test_each_task_hands_its_params_to_the_upkeep(monkeypatch: pytest.MonkeyPatch) -> None:
    """The params (and, for the retention, the Variable behind an empty param) become the upkeep's arguments."""
    calls: list[tuple[str, tuple, dict]] = []

    def recorder(name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> dict[str, Any]:
            calls.append((name, args, kwargs))
            return {"did": name}
        return record

    for name in ("maintain_table", "maintain_dq_results", "prune_bronze", "remove_rebuild_trash",
                 "reconcile_changefeeds", "refresh_gc_safe_points"):
        monkeypatch.setattr(upkeep, name, recorder(name))
    monkeypatch.setenv("AIRFLOW_VAR_CDCFLOW_RETENTION_HOURS", "72")
    monkeypatch.setenv("AIRFLOW_VAR_CDCFLOW_RECONCILE_INTERVAL_HOURS", "24")
    table, cfs = {"path": "/lake/shop/orders", "name": "shop.orders", "changefeed_ids": ["orders"]}, [{"id": 1}]
    assert maintenance.maintain_table(table, PARAMS) == {"did": "maintain_table"}
    maintenance.maintain_dq_results(cfs, PARAMS)
    maintenance.prune_bronze(cfs, {**PARAMS, "retention_hours": 5})
    maintenance.remove_rebuild_trash(cfs, PARAMS)
    maintenance.reconcile(cfs, PARAMS)
    maintenance.refresh_gc_safe_points(cfs, PARAMS)
    assert calls == [
        ("maintain_table", (table, 72), {"enforce_retention_duration": False}),
        ("maintain_dq_results", (cfs, 72), {"enforce_retention_duration": False}),
        ("prune_bronze", (cfs, 5), {}),
        ("remove_rebuild_trash", (cfs, 2.5), {}),
        ("reconcile_changefeeds", (cfs, 24.0), {"force": True}),
        ("refresh_gc_safe_points", (cfs, 6), {}),
    ]


def test_the_dag(cdcflow_home: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags" / "cdcflow_maintenance.py"), safe_mode=False)
    assert bag.import_errors == {}
    dag = bag.dags["cdcflow__maintenance"]
    assert dag.catchup is False and dag.owner == "cdcflow" and sorted(dag.tags) == ["cdcflow", "maintenance"]
    assert dag.max_active_runs == 1 and "retention" in dag.doc_md
    assert dag.timetable.expression == "0 0 * * *"  # @daily
    up = {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}
    assert up == {"list_changefeeds": [], "find_silver_tables": ["list_changefeeds"],
                  "maintain_table": ["find_silver_tables"], "maintain_dq_results": ["list_changefeeds"],
                  "prune_bronze": ["list_changefeeds"],
                  "remove_rebuild_trash": ["list_changefeeds"], "reconcile": ["list_changefeeds"],
                  "refresh_gc_safe_points": ["list_changefeeds"]}
    assert dag.params["retention_hours"] is None and dag.params["gc_ttl_hours"] == 48
    from airflow.serialization.serialized_objects import DagSerialization

    DagSerialization.to_dict(dag)  # the scheduler can take it
