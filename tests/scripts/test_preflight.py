"""scripts/preflight.py: what `make demo` / `make test` need from the machine, checked before anything runs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import debian_packages
import local_postgres
import preflight
import pytest


def test_a_missing_package_this_user_cannot_install_is_named_with_the_command(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    gone = preflight.Package("chromium", "the browser test drives it", lambda: False)
    monkeypatch.setitem(preflight.NEEDS, "test", [gone])
    monkeypatch.setattr(debian_packages, "installer", lambda: None)
    assert preflight.main(["test"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == ("preflight: make test needs Debian packages that are missing here: chromium (the browser "
                           "test drives it). Install them as root: apt-get install -y chromium")


def test_root_only_packages_are_not_asked_of_an_ordinary_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(debian_packages, "installer", lambda: None)
    preflight.ensure_packages([preflight.Package("postgresql", "x", lambda: False, root_only=True)], "make demo")


def test_a_taken_airflow_db_port_stops_the_demo_before_it_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        monkeypatch.setenv("CDCFLOW_AIRFLOW_PG_PORT", str(s.getsockname()[1]))
        monkeypatch.setenv("CDCFLOW_AIRFLOW_PG_DIR", str(tmp_path / "pg"))
        monkeypatch.setenv("CDCFLOW_AIRFLOW_DB", "postgres")
        monkeypatch.setattr(preflight, "NEEDS", {"demo": []})
        monkeypatch.setattr(local_postgres, "missing_server_fix", lambda: None)
        assert preflight.main(["demo"]) == 1
    assert "the Airflow DB's port, is taken by another program: set CDCFLOW_AIRFLOW_PG_PORT" in capsys.readouterr().err


def test_a_running_upstream_stops_the_demo_before_it_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("CDCFLOW_AIRFLOW_DB", "sqlite")
    monkeypatch.setattr(preflight, "NEEDS", {"demo": []})
    (tmp_path / "upstream.json").write_text(json.dumps({"pd_addr": "127.0.0.1:1", "pid": os.getpid()}))
    assert preflight.main(["demo"]) == 1
    err = capsys.readouterr().err
    assert "the demo starts its own embedded upstream, but an upstream is already running" in err
    assert "cdcflow upstream stop" in err
    (tmp_path / "upstream.json").unlink()
    assert preflight.main(["demo"]) == 0
