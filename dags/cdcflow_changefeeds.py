"""One Airflow DAG per cdcflow changefeed (``$CDCFLOW_HOME/changefeeds/*.toml``): ``cdcflow__<id>``.

Thin on purpose: the DAGs are built by ``cdcflow_airflow.dag_factory`` (in ``plugins/``). Parsing
this file reads the changefeed configs and nothing else.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from cdcflow_airflow.dag_factory import build_dags
except ModuleNotFoundError as exc:  # plugins folder not on sys.path (a DagBag built outside Airflow)
    if exc.name != "cdcflow_airflow":
        raise
    sys.path.append(str(Path(__file__).resolve().parent.parent / "plugins"))
    from cdcflow_airflow.dag_factory import build_dags

globals().update(build_dags())
