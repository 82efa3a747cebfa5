"""Import airflow for the tests with a temp AIRFLOW_HOME (importing it reads, and writes a default airflow.cfg
into, $AIRFLOW_HOME: away from ~/airflow and the developer's .airflow), and put the plugins folder on sys.path as
Airflow does (``cdcflow_airflow`` imports from it). The environment is restored after the import, so that later
tests and their subprocesses see it as it was. Imported by the conftests of tests/dags and tests/plugins."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_AIRFLOW_ENV = {
    "AIRFLOW_HOME": tempfile.mkdtemp(prefix="cdcflow-test-airflow-"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
    "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
}
atexit.register(shutil.rmtree, _AIRFLOW_ENV["AIRFLOW_HOME"], ignore_errors=True)
_saved = {k: os.environ.get(k) for k in _AIRFLOW_ENV}
os.environ.update(_AIRFLOW_ENV)
try:
    import airflow.settings  # noqa: F401
finally:
    for _k, _v in _saved.items():
        if _v is None:
            os.environ.pop(_k, None)
        else:
            os.environ[_k] = _v
if str(ROOT / "plugins") not in sys.path:
    sys.path.append(str(ROOT / "plugins"))
