"""Fixtures of the spark_jobs tests: one session-scoped Spark session, a bronze builder."""

from __future__ import annotations

import pytest

from testkit.builders import Bronze


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.session import get_spark

    return get_spark("cdcflow-tests")


@pytest.fixture(params=["driver", "spark"])
def driver_or_spark(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """apply_window both ways: a small window's events on the driver, and in Spark (``DRIVER_EVENTS`` 0). A module
    takes it with ``pytest.mark.usefixtures("driver_or_spark")``."""
    from spark_jobs import apply_window as apply_window_module

    if request.param == "spark":
        monkeypatch.setattr(apply_window_module, "DRIVER_EVENTS", 0)
    return str(request.param)


@pytest.fixture
def bronze() -> Bronze:
    return Bronze()


@pytest.fixture(autouse=True)
def _quiet_pyspark_pandas_warning():
    """PySpark 4.2 warns about pandas 3 whenever its pandas helpers load; the jobs use Arrow."""
    import warnings

    warnings.filterwarnings("ignore", message=".*pandas >= 3.0.0.*", category=FutureWarning)
    yield


@pytest.fixture
def no_session_yet(spark, monkeypatch) -> list[str]:
    """This process as a fresh one (an Airflow task's, a `cdcflow changefeed run`'s) sees it: no Spark session
    yet, the local engine's default master. Returns the names of the sessions asked for; each ask gets the shared
    test session."""
    from pyspark import SparkContext

    import spark_jobs.session as session

    asked: list[str] = []
    context = SparkContext._active_spark_context

    def get_spark(name: str = "cdcflow", **_: object) -> object:
        asked.append(name)
        SparkContext._active_spark_context = context  # started, as far as the code asking can tell
        return spark

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.delenv("CDCFLOW_DELTA_WRITER", raising=False)
    monkeypatch.delenv(session.MASTER_ENV, raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(session, "get_spark", get_spark)
    return asked
