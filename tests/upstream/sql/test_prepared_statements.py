"""Prepared statements as real drivers use them against the embedded upstream: PyMySQL's client-side parameters
(text protocol), mysql-connector-python's server-side prepared cursor (the binary protocol), and Go's
go-sql-driver/mysql (``tests/wire/go_mysql``), which prepares every query with arguments.
Every value must come back exactly, and a value is never SQL (mysql-mimic 3.0.5 pasted bound values into the text
unescaped: issue 54)."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import mysql.connector
import pytest
from fetch_go_modules import go_env
from wire.mysql_stmt import connect

from cdc_core.upstream.embedded import EmbeddedCluster

_GO_PROGRAM = Path(__file__).resolve().parents[2] / "wire" / "go_mysql"
_PROJECT = Path(__file__).resolve().parents[3]
_PAYLOADS = ["it's", "x'), (2, 'injected", "back\\slash'", '"quoted"', "?", "żółw"]


def _addr(ec: EmbeddedCluster) -> tuple[str, int]:
    host, _, port = ec.mysql_addr.rpartition(":")
    return host, int(port)


@pytest.fixture(scope="module")
def ec(upstream_cluster: EmbeddedCluster) -> EmbeddedCluster:
    conn = connect(upstream_cluster.mysql_addr)
    for sql in ("CREATE DATABASE pst", "CREATE TABLE pst.t (id INT PRIMARY KEY, s VARCHAR(100))",
                "CREATE TABLE pst.typed (id INT PRIMARY KEY, ti TINYINT, u BIGINT UNSIGNED, d DECIMAL(12,3), "
                "f DOUBLE, dt DATE, ts DATETIME(6), tm TIME(6), vb VARBINARY(20), s VARCHAR(40))",
                "CREATE TABLE pst.gt (id BIGINT PRIMARY KEY, s TEXT, n BIGINT, f DOUBLE, b BLOB)"):
        conn.query(sql)
    conn.close()
    return upstream_cluster


def test_pymysql_parameters_are_values(ec: EmbeddedCluster) -> None:
    conn = connect(ec.mysql_addr, database="pst")
    with conn.cursor() as cur:
        for i, s in enumerate(_PAYLOADS):
            assert cur.execute("INSERT INTO t (id, s) VALUES (%s, %s)", (i, s)) == 1
        cur.execute("SELECT id, s FROM t WHERE id < 100 ORDER BY id")
        assert cur.fetchall() == tuple(enumerate(_PAYLOADS))
        cur.execute("SELECT COUNT(*) FROM t WHERE s = %s", ("x' OR '1'='1",))
        assert cur.fetchone() == (0,)
    conn.close()


_TYPED = (1, -5, 2**64 - 2, Decimal("-123456789.125"), 0.1, date(2024, 2, 29),
          datetime(2024, 2, 29, 23, 59, 58, 123456), timedelta(hours=-26, minutes=-3, seconds=-4),
          b"\x00\xff'\\", "it's żółw")


def test_mysql_connector_prepared_cursor(ec: EmbeddedCluster) -> None:
    host, port = _addr(ec)
    # pure Python: the lock's wheel ships no C extension
    conn = mysql.connector.connect(host=host, port=port, user="root", database="pst", autocommit=True, use_pure=True)
    base = 1000
    cur = conn.cursor(prepared=True)
    for i, s in enumerate(_PAYLOADS):
        cur.execute("INSERT INTO t (id, s) VALUES (?, ?)", (base + i, s))
    cur.execute("SELECT s FROM t WHERE id >= ? AND id < ? ORDER BY id", (base, base + 100))
    assert [r[0] for r in cur.fetchall()] == _PAYLOADS
    cur.execute("INSERT INTO t (id, s) VALUES (?, ?), (?, ?)", (base + 50, None, base + 51, None))
    cur.execute("SELECT COUNT(*) FROM t WHERE id >= ? AND s IS NULL", (base,))
    assert cur.fetchall() == [(2,)]
    cur.execute("DELETE FROM typed WHERE id = ?", (base,))
    cur.execute("INSERT INTO typed VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (base, *_TYPED[1:]))
    cur.execute("SELECT * FROM typed WHERE id = ?", (base,))
    got = cur.fetchall()
    assert [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in got] == [(base, *_TYPED[1:])]
    for _ in range(50):  # the same statement again and again: the C API re-executes with the types it bound
        cur.execute("UPDATE typed SET ti = ti + ? WHERE id = ?", (1, base))
    cur.execute("SELECT ti FROM typed WHERE id = ?", (base,))
    assert cur.fetchall() == [(45,)]
    cur.close()
    conn.close()


def test_go_sql_driver_placeholders(ec: EmbeddedCluster, tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed")
    env = go_env(offline=True)  # the modules came with the bootstrap (scripts/fetch_go_modules.py), not now
    binary = tmp_path / "go_mysql"
    built = subprocess.run([go, "build", "-o", str(binary), "."], cwd=_GO_PROGRAM, env=env, capture_output=True,
                           text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr
    host, port = _addr(ec)
    # maxAllowedPacket=4096: the driver sends an argument past 4096/(params+1) bytes by COM_STMT_SEND_LONG_DATA
    dsn = f"root@tcp({host}:{port})/pst?maxAllowedPacket=4096"
    ran = subprocess.run([str(binary), dsn], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    long = "long-data " * 600
    assert out["updated"] == 1 and out["injected"] == 0 and out["long"] == len(long)
    assert out["rows"] == [
        {"id": 1, "s": "it's", "n": 15, "f": 1.5, "b": "AAEC/w=="},  # []byte as JSON: base64 of 00 01 02 ff
        {"id": 2, "s": None, "n": None, "f": None, "b": None},
        {"id": 3, "s": "x'), (99, 'injected", "n": -3, "f": -0.25, "b": "Yg=="},
        {"id": 4, "s": long, "n": 1 << 40, "f": 1e300, "b": None},
    ]
