"""Debian's stock ``sysbench`` against the embedded upstream's MySQL front, as TiDB's sysbench guide runs it: its
``oltp_point_select`` with the stock options, prepared statements on (the default), through libmariadb -- which
re-executes each statement with the new-params-bound-flag 0 (issue 54: every re-execute used to fail with 1235).
``scripts/preflight.py test`` installs ``sysbench``."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pymysql
import pytest

from cdc_core.upstream.embedded import EmbeddedCluster

pytestmark = [pytest.mark.load,
              pytest.mark.skipif(shutil.which("sysbench") is None, reason="sysbench: python scripts/preflight.py test")]


def _sysbench(ec: EmbeddedCluster, db: str, *args: str, timeout: float) -> str:
    host, _, port = ec.mysql_addr.rpartition(":")
    cmd = ["sysbench", "oltp_point_select", f"--mysql-host={host}", f"--mysql-port={port}", "--mysql-user=root",
           f"--mysql-db={db}", "--tables=2", "--table-size=1000", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_oltp_point_select_stock_options(upstream_cluster: Any) -> None:
    host, _, port = upstream_cluster.mysql_addr.rpartition(":")
    conn = pymysql.connect(host=host, port=int(port), user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE sbtest_point")
    _sysbench(upstream_cluster, "sbtest_point", "prepare", timeout=120)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM sbtest_point.sbtest1")
        assert cur.fetchone() == (1000,)
    conn.close()
    out = _sysbench(upstream_cluster, "sbtest_point", "--threads=2", "--time=10", "run", timeout=120)
    total = re.search(r"total:\s+(\d+)", out)
    errors = re.search(r"ignored errors:\s+(\d+)", out)
    assert total and errors, out
    assert int(total.group(1)) > 0 and int(errors.group(1)) == 0, out
    print(re.search(r"queries:.*", out).group(0))  # type: ignore[union-attr]  # the figure, with -s
