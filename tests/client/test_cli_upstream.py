"""End to end through the CLI in subprocesses: start --detach, sql, tso, stop (temp CDCFLOW_HOME)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_core.codec import tso

pytestmark = pytest.mark.e2e


def cdcflow(home: Path, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDCFLOW_HOME": str(home)}
    env.pop("CDCFLOW_UPSTREAM", None)
    proc = subprocess.run([sys.executable, "-m", "cdc_core.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"cdcflow {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    h = tmp_path / "home"
    yield h
    info = h / "upstream.json"
    if info.exists():  # never leave a server behind
        cdcflow(h, "upstream", "stop", check=False)


def test_start_sql_tso_stop(home: Path) -> None:
    started = cdcflow(home, "upstream", "start", "--detach", "--regions-per-table", "3", "--pd-members", "2",
                      "--control-addr", "127.0.0.1:0")
    info = json.loads(started.stdout)
    assert info["control_addr"].startswith("127.0.0.1:") and info["control_addr"] not in info["pd_members"]
    assert json.loads((home / "upstream.json").read_text()) == info
    assert info["pd_addr"].startswith("127.0.0.1:") and len(set(info["store_addrs"])) == 3  # 3 stores by default
    assert info["pd_members"][0] == info["pd_addr"] and len(set(info["pd_members"])) == 2

    st = json.loads(cdcflow(home, "upstream", "status", "--json").stdout)
    assert (st["pd"], st["mysql"], st["pid"]) == (info["pd_addr"], info["mysql_addr"], info["pid"])
    assert info["mysql_addr"].startswith("127.0.0.1:") and info["mysql_addr"] not in info["pd_members"]
    assert [(m["id"], m["address"], m["leader"]) for m in st["pd_members"]] == [
        (1, info["pd_members"][0], True), (2, info["pd_members"][1], False)]
    assert [(s["id"], s["address"], s["state"]) for s in st["stores"]] == [
        (i + 1, a, "Up") for i, a in enumerate(info["store_addrs"])]
    # each store's status server (TiKV's status-addr, in PD's store list) gives its change feed's counters
    assert all(s["status_address"].startswith("127.0.0.1:") and s["cdc"]["incremental_scans"] == 0
               for s in st["stores"])
    assert st["cdc"] == {"incremental_scans": 0, "registered_regions": 0}  # nothing has subscribed yet
    human = cdcflow(home, "upstream", "status").stdout
    assert f"PD      {info['pd_addr']}" in human and f"store 2 {info['store_addrs'][1]} (Up)" in human
    assert "0 regions registered, 0 incremental scans since start" in human

    again = cdcflow(home, "upstream", "start", "--detach", check=False)
    assert again.returncode == 1 and "already running" in again.stderr

    script = home / "s.sql"
    script.write_text("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY, b VARCHAR(5));\n"
                      "INSERT INTO t VALUES (1, 'x'), (2, NULL);\n")
    out = cdcflow(home, "upstream", "sql", "-f", str(script))
    assert out.stdout == "" and "2 row(s) affected" in out.stderr
    # A script of several MiB (the size that once hit gRPC's 4 MiB cap): read, run and printed piece by piece.
    big = home / "big.sql"
    with big.open("w") as f:
        f.write("CREATE TABLE d.big (id INT PRIMARY KEY, pad VARCHAR(100));\n")
        for lo in range(0, 50_000, 1000):
            f.write("INSERT INTO d.big VALUES " + ", ".join(f"({i}, '{'p' * 96}')" for i in range(lo, lo + 1000))
                    + ";\n")
        f.write("SELECT id FROM d.big WHERE id % 1000 = 7 ORDER BY id;\nSELECT * FROM d.big;\n")
    assert big.stat().st_size > 5_000_000
    out = cdcflow(home, "upstream", "sql", "-f", str(big))
    lines = out.stdout.splitlines()
    assert len(lines) == 50 + 50_000 and [json.loads(x)["id"] for x in lines[:3]] == [7, 1007, 2007]
    assert out.stderr.count("1000 row(s) affected") == 50 and "SELECT * FROM d.big: 50000 row(s)" in out.stderr
    before = int(cdcflow(home, "tso", "now").stdout)
    cdcflow(home, "upstream", "sql", "-e", "UPDATE d.t SET b = 'y' WHERE a = 1")
    rows = cdcflow(home, "upstream", "sql", "-e", "SELECT * FROM d.t ORDER BY a").stdout.splitlines()
    assert [json.loads(r) for r in rows] == [{"a": 1, "b": "y"}, {"a": 2, "b": None}]
    old = cdcflow(home, "upstream", "sql", "-e", "SELECT b FROM d.t WHERE a = 1", "--at-ts", str(before))
    assert json.loads(old.stdout) == {"b": "x"}

    bad = cdcflow(home, "upstream", "sql", "-e", "INSERT INTO d.t VALUES (1, 'z')", check=False)
    assert bad.returncode == 1 and "Duplicate entry '1'" in bad.stderr

    # PD's leadership moves: every command follows it (they know both members from upstream.json)
    moved = json.loads(cdcflow(home, "upstream", "fault", "pd-leader", "--member", "2").stdout)
    assert moved == {"member_id": 2, "address": info["pd_members"][1]}
    assert json.loads(cdcflow(home, "upstream", "status", "--json").stdout)["pd"] == info["pd_members"][1]
    assert int(cdcflow(home, "tso", "now").stdout) > before
    assert [json.loads(r) for r in cdcflow(home, "upstream", "sql", "-e", "SELECT a FROM d.t ORDER BY a")
            .stdout.splitlines()] == [{"a": 1}, {"a": 2}]
    nobody = cdcflow(home, "upstream", "fault", "pd-leader", "--member", "3", check=False)
    assert nobody.returncode == 1 and "PD member 3 does not exist (members: 1, 2)" in " ".join(nobody.stderr.split())

    # the SQL front answers a MySQL client on its own address
    import pymysql

    host, _, port = info["mysql_addr"].rpartition(":")
    with pymysql.connect(host=host, port=int(port), user="root", database="d") as conn, conn.cursor() as cur:
        cur.execute("SELECT a, b FROM t ORDER BY a")
        assert cur.fetchall() == ((1, "y"), (2, None))

    decoded = json.loads(cdcflow(home, "tso", "decode", str(before)).stdout)
    assert (decoded["physical_ms"], decoded["logical"]) == tso.parse(before)

    stopped = cdcflow(home, "upstream", "stop")
    assert f"pid {info['pid']}" in stopped.stderr and not (home / "upstream.json").exists()
    gone = cdcflow(home, "upstream", "status", "--json", check=False)
    assert gone.returncode == 1 and "no upstream running" in gone.stderr and gone.stdout == ""
    none = cdcflow(home, "upstream", "stop", check=False)
    assert none.returncode == 1 and "no upstream running" in none.stderr
    nothing = cdcflow(home, "upstream", "sql", "-e", "SELECT 1", check=False)
    assert nothing.returncode == 1 and "cdcflow upstream start --detach" in nothing.stderr
    assert (home / "logs" / "upstream.log").read_text().count("upstream serving") >= 1


def test_start_rejects_a_bad_store_count(home: Path) -> None:
    out = cdcflow(home, "upstream", "start", "--stores", "0", check=False)
    assert out.returncode == 1 and "the number of stores must be in 1.." in out.stderr
