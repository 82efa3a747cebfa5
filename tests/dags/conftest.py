"""Airflow-side fixtures: importing airflow reads (and writes a default airflow.cfg into) $AIRFLOW_HOME, so
it is imported here first with a temp home, away from ~/airflow and the developer's .airflow, and the plugins
folder is put on sys.path as Airflow does (``cdcflow_airflow`` imports from it)."""

from __future__ import annotations

from testkit import airflow_import  # noqa: F401  (airflow imported with a temp AIRFLOW_HOME, plugins on sys.path)
