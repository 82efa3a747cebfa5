"""Fixtures of the plugin tests: Airflow imported with a temp AIRFLOW_HOME (as in tests/dags), a temp CDCFLOW_HOME
per test, and a fabricated changefeed (config, state, recorded metrics) to show in the view."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit import airflow_import  # noqa: F401  (airflow imported with a temp AIRFLOW_HOME, plugins on sys.path)

ROOT = Path(__file__).resolve().parents[2]

CHANGEFEED_ID = "orders"


@pytest.fixture
def cdcflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cdcflow"
    (home / "changefeeds").mkdir(parents=True)
    monkeypatch.setenv("CDCFLOW_HOME", str(home))
    return home


def _check(expectation: str, success: bool, details: str = "") -> dict[str, Any]:
    return {"expectation": expectation, "success": success, "details": details, "observed": None,
            "expected": None, "sample_keys": []}


@pytest.fixture
def fabricated_changefeed(cdcflow_home: Path, tmp_path: Path) -> dict[str, Any]:
    """Changefeed ``orders``: in error (a failed check on ``shop.items``), 3 published windows, one pull observed."""
    from cdc_core.changefeed import metrics_history
    from cdc_core.changefeed.config import ChangefeedConfig, save_config
    from cdc_core.changefeed.state import create_state, locked_state
    from cdc_core.codec import tso

    now = time.time()
    sink = tmp_path / "lake"
    save_config(ChangefeedConfig(changefeed_id=CHANGEFEED_ID, sink_uri=f"file://{sink}", start_ts=1,
                                 schedule="*/5 * * * *"))
    checkpoints = [tso.compose(int((now - lag) * 1000), 7) for lag in (900, 600, 42)]
    create_state(CHANGEFEED_ID, checkpoints[0] - 1)
    for i, cp in enumerate(checkpoints):
        with locked_state(CHANGEFEED_ID) as st:
            st.checkpoint_ts = cp
            st.resolved_ts = cp + 5
        metrics_history.record_publish(CHANGEFEED_ID, now=now - 300 * (len(checkpoints) - 1 - i))
    with locked_state(CHANGEFEED_ID) as st:
        st.state = "error"
        st.error = {"message": "data-quality check failed: shop.items <b>count</b> mismatch", "step": "check",
                    "at": now}
        st.last_checks = {"ts": checkpoints[-1], "mode": "checksum", "where": "window end", "tables": {
            "shop.orders": {"table": "shop.orders", "passed": True, "results": [
                _check("expect_row_count_to_equal", True), _check("expect_primary_key_unique", True),
                _check("expect_checksum_to_equal", True)]},
            "shop.items": {"table": "shop.items", "passed": False, "results": [
                _check("expect_row_count_to_equal", False, "3 != 4"), _check("expect_primary_key_unique", True)]},
        }}
    metrics_history.record_pull_memory(CHANGEFEED_ID, metrics_history.PullMemory(
        peak_pending_bytes=3 << 20, max_pending_bytes=1 << 30, paused=False, samples=50, seconds=1.0, at=now))
    return {"changefeed_id": CHANGEFEED_ID, "checkpoints": checkpoints, "now": now, "sink": sink}


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """Airflow's API server app (the core API with the plugin's apps mounted), in process."""
    import airflow.settings
    from airflow.api_fastapi.app import create_app
    from airflow.models.revoked_token import RevokedToken
    from fastapi.testclient import TestClient

    # A valid JWT is checked against the revoked-token table of the metadata DB (a temp SQLite here).
    RevokedToken.__table__.create(airflow.settings.engine, checkfirst=True)
    with TestClient(create_app("core")) as c:
        yield c
