"""``cdcflow__maintenance``: daily upkeep of every changefeed's Delta tables, bronze changelog, rebuild trash and
GC safe point.

Thin on purpose: each task calls the engine's upkeep (``cdc_core.changefeed.upkeep``, whose docstring says what
each part does), through ``cdcflow_airflow.maintenance`` (in ``plugins/``) where the task's params and Airflow
Variables decide its arguments. Parsing this file imports nothing heavy.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, get_current_context, task

from cdc_core.changefeed import upkeep

try:
    from cdcflow_airflow import maintenance
except ModuleNotFoundError as exc:  # plugins folder not on sys.path (a DagBag built outside Airflow)
    if exc.name != "cdcflow_airflow":
        raise
    sys.path.append(str(Path(__file__).resolve().parent.parent / "plugins"))
    from cdcflow_airflow import maintenance

DOC_MD = f"""\
### cdcflow maintenance

Daily, for every changefeed in `$CDCFLOW_HOME/changefeeds`:

| task | does |
| --- | --- |
| `list_changefeeds` | reads the changefeed configs and states |
| `find_silver_tables` | finds the Delta tables `<sink>/<db>/<table>` of their sinks |
| `maintain_table` (mapped, one per table) | delta-rs `optimize.compact()`, then `vacuum(retention_hours)`; a \
table with deletion vectors first has the files they hollowed out purged, and its vacuum deletes the vector \
files no live file names |
| `maintain_dq_results` | per sink, compacts, checkpoints and vacuums the data-quality result log (rows kept) |
| `prune_bronze` | drops bronze changelog windows older than `checkpoint - retention` that no rebuild needs |
| `remove_rebuild_trash` | deletes the tables rebuilds moved aside more than `trash_retention_days` ago |
| `reconcile` | per running changefeed whose last full reconciliation is older than `reconcile_interval_hours`: \
every table compared whole with the upstream at the checkpoint; a difference puts the changefeed in error |
| `refresh_gc_safe_points` | refreshes each changefeed's PD service GC safe point (`cdcflow-<id>`) at its \
checkpoint; removes those of finished changefeeds |

**Retention:** the `retention_hours` param, else the Airflow Variable `{maintenance.RETENTION_VARIABLE}`, else \
{upkeep.DEFAULT_RETENTION_HOURS} h. Vacuuming removes Delta time travel to versions older than it.
Each task returns (and logs) a JSON summary of what it did.
"""

with DAG(
    dag_id="cdcflow__maintenance",
    description="cdcflow: compact and vacuum the Delta tables, prune the changelog and rebuild trash, refresh "
                "GC safe points",
    doc_md=DOC_MD,
    schedule="@daily",
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["cdcflow", "maintenance"],
    default_args={"owner": "cdcflow", "retries": 1, "retry_delay": timedelta(minutes=10)},
    params={
        "retention_hours": Param(None, type=["null", "integer"], minimum=0, title="Retention (hours)",
                                 description="Vacuum and bronze retention. Empty: the Variable "
                                             f"{maintenance.RETENTION_VARIABLE}, else "
                                             f"{upkeep.DEFAULT_RETENTION_HOURS}."),
        "enforce_retention_duration": Param(True, type="boolean", title="Enforce the table's retention",
                                            description="Refuse a vacuum retention below the Delta table's "
                                                        "delta.deletedFileRetentionDuration (7 days by default)."),
        "trash_retention_days": Param(upkeep.DEFAULT_TRASH_RETENTION_DAYS, type="number", minimum=0,
                                      title="Rebuild trash retention (days)",
                                      description="Tables a rebuild moved aside are deleted after this long."),
        "reconcile_interval_hours": Param(None, type=["null", "number"], minimum=0,
                                          title="Reconciliation interval (hours)",
                                          description="How often each changefeed is reconciled whole. Empty: "
                                                      f"the Variable {maintenance.RECONCILE_INTERVAL_VARIABLE}, "
                                                      "else a week."),
        "reconcile_now": Param(False, type="boolean", title="Reconcile now",
                               description="Reconcile every running changefeed in this run, due or not."),
        "gc_ttl_hours": Param(upkeep.DEFAULT_GC_TTL_HOURS, type="integer", minimum=1, title="GC safe point TTL",
                              description="How long a refreshed GC safe point holds if nothing refreshes it again."),
    },
) as dag:

    @task
    def list_changefeeds() -> list[dict[str, Any]]:
        return upkeep.list_changefeeds()

    @task
    def find_silver_tables(changefeeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return upkeep.find_silver_tables(changefeeds)

    @task(map_index_template="{{ cdcflow_table }}")
    def maintain_table(table: dict[str, Any], **context: Any) -> dict[str, Any]:
        get_current_context()["cdcflow_table"] = table["name"]  # type: ignore[typeddict-unknown-key]  # UI name
        return maintenance.maintain_table(table, context["params"])

    @task
    def maintain_dq_results(changefeeds: list[dict[str, Any]], **context: Any) -> dict[str, Any]:
        return maintenance.maintain_dq_results(changefeeds, context["params"])

    @task
    def prune_bronze(changefeeds: list[dict[str, Any]], **context: Any) -> dict[str, Any]:
        return maintenance.prune_bronze(changefeeds, context["params"])

    @task
    def remove_rebuild_trash(changefeeds: list[dict[str, Any]], **context: Any) -> dict[str, Any]:
        return maintenance.remove_rebuild_trash(changefeeds, context["params"])

    @task
    def reconcile(changefeeds: list[dict[str, Any]], **context: Any) -> dict[str, Any]:
        return maintenance.reconcile(changefeeds, context["params"])

    @task
    def refresh_gc_safe_points(changefeeds: list[dict[str, Any]], **context: Any) -> dict[str, Any]:
        return maintenance.refresh_gc_safe_points(changefeeds, context["params"])

    changefeeds = list_changefeeds()
    maintain_table.expand(table=find_silver_tables(changefeeds))
    maintain_dq_results(changefeeds)
    prune_bronze(changefeeds)
    remove_rebuild_trash(changefeeds)
    reconcile(changefeeds)
    refresh_gc_safe_points(changefeeds)
