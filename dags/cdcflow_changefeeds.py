"""Where cdcflow's changefeed DAGs (``cdcflow__<id>``) come from: not this folder, but the DAG bundle
``cdcflow_airflow.bundle.ChangefeedDagBundle``, a DAG file per changefeed config, so that a broken config is an
import error of its own and no other changefeed's DAG goes with it.

This file builds no DAG. When the Airflow parsing it has not been given that bundle, it fails with what to set,
so that the missing changefeeds show in the UI as an import error instead of not at all.
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.configuration import conf

try:
    from cdcflow_airflow import bundle
except ModuleNotFoundError as exc:  # plugins folder not on sys.path (a DagBag built outside Airflow)
    if exc.name != "cdcflow_airflow":
        raise
    sys.path.append(str(Path(__file__).resolve().parent.parent / "plugins"))
    from cdcflow_airflow import bundle

if bundle.CLASSPATH not in conf.get("dag_processor", "dag_bundle_config_list", fallback=""):
    raise RuntimeError(
        f"cdcflow's changefeed DAGs come from the DAG bundle {bundle.CLASSPATH}, which this Airflow is not given: "
        f"set [dag_processor] dag_bundle_config_list (AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST) to "
        f"{bundle.bundle_config_list()}"
    )
