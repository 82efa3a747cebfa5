"""scripts/spark_connect.py: the local Spark Connect server that Airflow's tasks use as their Spark.

The windows run in a ``cdcflow`` process of their own (as an Airflow task is), connected with
``CDCFLOW_SPARK_MASTER=sc://...``: apply, the data-quality checks and a snapshot's parallel fetch (``mapInArrow``
on the server's Python workers) all go over Spark Connect, and Delta ends equal to the upstream.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import spark_connect as sc

from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import changelog

ROOT = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    d, port = tmp_path_factory.mktemp("spark-connect"), _port()
    sc.start(d, port)
    yield d, port
    sc.stop(d)


def test_start_is_idempotent(server: tuple[Path, int]) -> None:
    d, port = server
    pid = (d / sc.PID_FILE).read_text()
    assert sc.running(d) and sc.main(["status", "--dir", str(d)]) == 0
    assert sc.start(d, port) == f"sc://127.0.0.1:{port}"
    assert (d / sc.PID_FILE).read_text() == pid  # the running server, not a second one


def _cdcflow(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "cdcflow"), *args], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"cdcflow {' '.join(args)}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.e2e
@pytest.mark.spark
def test_windows_run_over_spark_connect(server: tuple[Path, int], upstream_cluster: Any, tmp_path: Path) -> None:
    """A window that loads an initial snapshot of a table of three regions (four chunks, fetched on the
    server's Python workers) and then applies the changes made since (a primary key moved, a delete): Delta
    equals the upstream, and the checks at its end passed."""
    _, port = server
    env = {**os.environ, "CDCFLOW_HOME": str(tmp_path / "home"), "CDCFLOW_UPSTREAM": upstream_cluster.pd_addr,
           "CDCFLOW_SPARK_MASTER": sc.url(port), "CDCFLOW_SPARK_ENGINE": "local",
           "CDCFLOW_SNAPSHOT_DRIVER_ROWS": "0"}  # read by Spark tasks however small the table
    db, sink = "sconn", tmp_path / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        rows = ", ".join(f"({i}, 'v{i}', {i}.5)" for i in range(300))
        c.execute(f"CREATE DATABASE {db}; USE {db}; CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(8), "
                  f"amt DECIMAL(8,1)); INSERT INTO t VALUES {rows}; SPLIT TABLE t BETWEEN (0) AND (300) REGIONS 3")
        start = c.get_ts()
        cfg = tmp_path / "sconn.toml"
        cfg.write_text(f'changefeed-id = "sconn"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{db}.*"]\n[data-quality]\nmode = "checksum"\n')
        _cdcflow(env, "changefeed", "create", "--config", str(cfg))
        c.execute(f"USE {db}; UPDATE t SET id = 1000 WHERE id = 3; DELETE FROM t WHERE id = 4")
        t1 = c.get_ts()
        _cdcflow(env, "changefeed", "run", "sconn", "--until-ts", str(t1))
        base = changelog.snapshot_table_dir(f"file://{sink}", "sconn", start, db, "t")
        assert json.loads((base / changelog.TABLE_META).read_text())["chunks"] == 4
        assert len(changelog.snapshot_part_files(base)) >= 3  # written by parallel Spark tasks
        _same_at(c, env, t1)


def _same_at(c: UpstreamClient, env: dict[str, str], ts: int) -> None:
    state = json.loads(_cdcflow(env, "changefeed", "query", "sconn"))
    assert state["state"] == "normal" and int(state["checkpoint_ts"]) == ts, state
    checks = state["last_checks"]
    assert checks["ts"] == ts and checks["tables"] and all(r["passed"] for r in checks["tables"].values()), checks
    verify = [json.loads(line) for line in _cdcflow(env, "verify", "sconn").splitlines() if line.strip()]
    assert verify and all(v["passed"] for v in verify), verify
    assert {v["row_count"] for v in verify} == {len(c.query("SELECT id FROM sconn.t", at_ts=ts))}


def test_stop_ends_the_server(server: tuple[Path, int]) -> None:
    d, port = server
    assert sc.main(["stop", "--dir", str(d)]) == 0
    assert not sc.running(d) and sc.main(["status", "--dir", str(d)]) == 3
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    sc.stop(d)  # nothing to stop: no error


def test_a_server_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    with pytest.raises(sc.SparkConnectError, match=r"(?s)exited.*Invalid maximum heap size"):
        sc.start(tmp_path, _port(), driver_memory="lots")
    assert not sc.running(tmp_path)


def test_a_taken_port_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(sc.SparkConnectError, match=f"port {port} .* taken"):
            sc.start(tmp_path, port)
        assert sc.main(["start", "--dir", str(tmp_path), "--port", str(port)]) == 1
    assert capsys.readouterr().err.startswith(f"spark_connect: port {port} on 127.0.0.1 is taken")
