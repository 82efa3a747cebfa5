"""The ``cdcflow`` Airflow plugin: what cdcflow adds to Airflow beyond its DAGs.

* **macros** ``{{ macros.cdcflow.tso_to_datetime(ts) }}``, ``{{ macros.cdcflow.datetime_to_tso(dt) }}``
  (:mod:`cdcflow_airflow.macros`);
* the **Changefeeds view**: a FastAPI app under ``/cdcflow`` (:mod:`cdcflow_airflow.views.changefeeds`, behind
  Airflow's authentication) and the "Changefeeds" entry of the UI's navigation, which shows its page in the UI;
* the **metrics endpoint** ``/cdcflow-metrics/metrics`` (:mod:`cdcflow_airflow.views.metrics`): every
  changefeed's metrics in Prometheus' text format, for a scraper with the bearer token ``$CDCFLOW_METRICS_TOKEN``;
* nothing for the trigger and the hook: Airflow 3 plugins have no slot for either. The triggerer imports
  ``cdcflow_airflow.triggers.ResolvedTsTrigger`` by the class path the deferring task serialized (Airflow puts the
  plugins folder on ``sys.path``), and hooks are found by import (``cdcflow_airflow.hooks``); a connection type
  only gets a form in the UI when a provider package declares it.

Every Airflow process imports this module at start-up (workers too, for the macros): it imports nothing heavy.
The FastAPI app, which needs Airflow's API security module, is built on first access of ``fastapi_apps``, which
only the API server makes. Only this module of the plugins folder is loaded by the plugin manager (see the
folder's ``.airflowignore``); the others are imported as ``cdcflow_airflow.*`` where they are used.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from cdcflow_airflow import macros as cdcflow_macros

# The UI resolves a relative href against Airflow's base URL, so the view also works under a sub-path.
CHANGEFEEDS_VIEW: dict[str, Any] = {
    "name": "Changefeeds",
    "href": "cdcflow/changefeeds",
    "url_route": "cdcflow-changefeeds",
    "destination": "nav",
    "nav_top_level": True,
}


class _FastAPIApps:
    """``CdcflowPlugin.fastapi_apps``, computed when read (by the API server) instead of at import."""

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        from cdcflow_airflow.views import changefeeds, metrics

        return [changefeeds.fastapi_app_spec(), metrics.fastapi_app_spec()]


class CdcflowPlugin(AirflowPlugin):
    name = "cdcflow"
    macros = [cdcflow_macros.tso_to_datetime, cdcflow_macros.datetime_to_tso]
    fastapi_apps = _FastAPIApps()  # type: ignore[assignment]
    external_views = [CHANGEFEEDS_VIEW]
