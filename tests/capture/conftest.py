"""Capture fixtures: a private CDCFLOW_HOME pointed at the session's embedded upstream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def cdc_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream_cluster: Any) -> Path:
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CDCFLOW_UPSTREAM", upstream_cluster.pd_addr)
    return tmp_path
