"""How Airflow is told about cdcflow's changefeed bundle (``cdcflow_airflow.bundle``): the value of
``[dag_processor] dag_bundle_config_list``. Apart from the bundle so that whoever starts Airflow (the test
harnesses, the compose check) can read it without importing Airflow."""

from __future__ import annotations

import json

BUNDLE_NAME = "cdcflow-changefeeds"
CLASSPATH = "cdcflow_airflow.bundle.ChangefeedDagBundle"
ENV = "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"
REFRESH_INTERVAL_S = 10


def bundle_config_list() -> str:
    """The DAGs folder's bundle (the maintenance DAG) and the changefeeds' bundle, as JSON."""
    return json.dumps([
        {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}},
        # Refreshing costs a directory listing: a new config is a DAG within seconds, not the default 5 minutes.
        {"name": BUNDLE_NAME, "classpath": CLASSPATH, "kwargs": {"refresh_interval": REFRESH_INTERVAL_S}},
    ])
