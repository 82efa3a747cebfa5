"""End-to-end fixtures: a private CDCFLOW_HOME pointed at the session's embedded upstream."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # e2elib


@pytest.fixture
def cdc_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream_cluster: Any) -> Path:
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CDCFLOW_UPSTREAM", upstream_cluster.pd_addr)
    return tmp_path


@pytest.fixture(scope="session")
def airflow_server(upstream_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real Airflow (standalone: API server, scheduler, triggerer, dag processor) on a loopback port, whose
    tasks use a session CDCFLOW_HOME and the session's upstream. Changefeeds a test creates in
    ``airflow_server.cdc_home`` become DAGs within seconds (the dag processor re-reads the configs)."""
    from airflow_server import AirflowServer

    work = tmp_path_factory.mktemp("airflow")
    cdc_home = work / "cdcflow"
    (cdc_home / "changefeeds").mkdir(parents=True)
    server = AirflowServer(work, {"CDCFLOW_HOME": str(cdc_home), "CDCFLOW_UPSTREAM": upstream_cluster.pd_addr})
    server.cdc_home = cdc_home  # type: ignore[attr-defined]
    try:
        server.start()
        yield server
    finally:
        server.stop()
