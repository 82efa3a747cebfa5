"""The names cdcflow gives its Airflow objects: a changefeed's DAG id (which its asset alias shares)."""

from __future__ import annotations

DAG_ID_PREFIX = "cdcflow__"


def dag_id_for(changefeed_id: str) -> str:
    """The id of changefeed ``changefeed_id``'s DAG."""
    return f"{DAG_ID_PREFIX}{changefeed_id}"
