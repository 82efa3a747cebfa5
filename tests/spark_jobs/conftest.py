"""Fixtures of the spark_jobs tests: one session-scoped Spark session, a bronze builder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The builders module sits next to this file; test modules import it by name.
sys.path.insert(0, str(Path(__file__).parent))
from spark_jobs_builders import Bronze


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.session import get_spark

    return get_spark("cdcflow-tests")


@pytest.fixture
def bronze() -> Bronze:
    return Bronze()


@pytest.fixture(autouse=True)
def _quiet_pyspark_pandas_warning():
    """PySpark 4.2 warns about pandas 3 whenever its pandas helpers load; the jobs use Arrow."""
    import warnings

    warnings.filterwarnings("ignore", message=".*pandas >= 3.0.0.*", category=FutureWarning)
    yield
