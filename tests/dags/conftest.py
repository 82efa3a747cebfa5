"""Airflow-side fixtures: importing airflow reads (and writes a default airflow.cfg into) $AIRFLOW_HOME, so
it is imported here first with a temp home, away from ~/airflow and the developer's .airflow, and the plugins
folder is put on sys.path as Airflow does (``cdcflow_airflow`` imports from it)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import airflow_import  # noqa: E402, F401  (airflow imported with a temp AIRFLOW_HOME, plugins on sys.path)
