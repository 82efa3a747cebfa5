"""End-to-end fixtures: the session's Airflow standalone (``cdc_home`` is the suite's, tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

_STANDALONE: list[Any] = []  # the session's Airflow, for pytest_runtest_teardown


@pytest.fixture(scope="session")
def _airflow_standalone(upstream_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from testkit.airflow_server import AirflowServer

    work = tmp_path_factory.mktemp("airflow")
    cdc_home = work / "cdcflow"
    (cdc_home / "changefeeds").mkdir(parents=True)
    server = AirflowServer(work, {"CDCFLOW_HOME": str(cdc_home), "CDCFLOW_UPSTREAM": upstream_cluster.pd_addr})
    server.cdc_home = cdc_home  # type: ignore[attr-defined]
    _STANDALONE.append(server)
    try:
        yield server
    finally:
        server.remove()
        _STANDALONE.remove(server)


@pytest.fixture(scope="module")
def airflow_server(_airflow_standalone: Any) -> Any:
    """A real Airflow (standalone: API server, scheduler, triggerer, dag processor) on a loopback port, whose
    tasks use a session CDCFLOW_HOME and the session's upstream. Changefeeds a test creates in
    ``airflow_server.cdc_home`` become DAGs within seconds (the dag processor re-reads the configs).

    One per session, started on first use and stopped after the last test in a row that uses it (see
    ``pytest_runtest_teardown``): an idle Airflow would otherwise take CPU from the rest of the suite."""
    if not _airflow_standalone.running:
        _airflow_standalone.start()
    return _airflow_standalone


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if "airflow_server" not in getattr(item, "fixturenames", ()):
        return
    if nextitem is not None and "airflow_server" in getattr(nextitem, "fixturenames", ()):
        return
    for server in _STANDALONE:
        server.stop()
