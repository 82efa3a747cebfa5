"""The embedded upstream's speed as stock sysbench sees it (issue 54 item 5): ``oltp_point_select`` QPS and
``oltp_write_only`` TPS at 2 threads through its MySQL front, each without a changefeed and with one capturing
(``cdcflow changefeed run --until-ts now`` window after window, in its own processes, as in
``tests/e2e/test_sysbench_changefeed.py``), in interleaved rounds on one upstream, the best round of each kept.
The stand-in's speed bounds every end-to-end benchmark: these are the figures to hold the others against.

Printed: each script's rate each way and their ratio (with / without). ``make bench`` runs it; alone:
``.venv/bin/pytest tests/bench/test_sysbench_bench.py -q -p no:cacheprovider --override-ini addopts= -s``.
Env: ``CDCFLOW_BENCH_SYSBENCH_SECONDS`` (20 a run), ``CDCFLOW_BENCH_SYSBENCH_ROUNDS`` (2 rounds of each).
"""

from __future__ import annotations

import os
from pathlib import Path

import pymysql
import pytest

from cdc_core.client.upstream import UpstreamClient
from cdc_core.upstream.embedded import EmbeddedCluster
from testkit import sysbench
from testkit.e2e import cli

SECONDS = int(os.environ.get("CDCFLOW_BENCH_SYSBENCH_SECONDS", "20"))
ROUNDS = int(os.environ.get("CDCFLOW_BENCH_SYSBENCH_ROUNDS", "2"))
THREADS, TABLES, TABLE_SIZE = 2, 2, 10_000
DB, CID = "sbbench", "sysbench-bench"


@pytest.mark.skipif(not sysbench.AVAILABLE, reason=sysbench.WHY_MISSING)
def test_bench_sysbench_with_and_without_a_changefeed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedCluster() as ec:
        monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("CDCFLOW_UPSTREAM", ec.pd_addr)
        host, _, port = ec.mysql_addr.rpartition(":")
        conn = pymysql.connect(host=host, port=int(port), user="root", autocommit=True)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DB}")
        conn.close()
        sysbench.prepare(ec.mysql_addr, DB, tables=TABLES, table_size=TABLE_SIZE)
        with UpstreamClient(ec.pd_addr) as c:
            start = c.get_ts()
        cfg = tmp_path / "feed.toml"
        # the snapshot of the prepared tables loads in the first window, before any round
        cfg.write_text(f'changefeed-id = "{CID}"\nsink-uri = "file://{tmp_path / "lake"}"\nstart-ts = {start}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{DB}.*"]\n[data-quality]\nmode = "count"\n')
        cli("changefeed", "create", "--config", str(cfg))
        cli("changefeed", "run", CID, "--until-ts", "now")
        best: dict[tuple[str, bool], float] = {}
        windows: dict[str, int] = {}
        for _ in range(ROUNDS):
            for script, rate in (("oltp_point_select", "qps"), ("oltp_write_only", "tps")):
                for capturing in (False, True):
                    if capturing:
                        with sysbench.ChangefeedLoop(CID) as loop:
                            r = sysbench.run(script, ec.mysql_addr, DB, threads=THREADS, seconds=SECONDS,
                                             tables=TABLES, table_size=TABLE_SIZE)
                        windows[script] = windows.get(script, 0) + loop.runs
                    else:
                        r = sysbench.run(script, ec.mysql_addr, DB, threads=THREADS, seconds=SECONDS, tables=TABLES,
                                         table_size=TABLE_SIZE)
                    figure = r.qps if rate == "qps" else r.tps
                    best[script, capturing] = max(best.get((script, capturing), 0.0), figure)
        cli("changefeed", "run", CID, "--until-ts", "now")
        verified = cli("verify", CID)
    print(f"\nsysbench, {THREADS} threads, {TABLES} x {TABLE_SIZE:,} rows, best of {ROUNDS} x {SECONDS} s each way:")
    for script, rate in (("oltp_point_select", "QPS"), ("oltp_write_only", "TPS")):
        alone, beside = best[script, False], best[script, True]
        print(f"  {script:18} {rate} {alone:9,.1f} alone, {beside:9,.1f} with a changefeed capturing "
              f"({windows.get(script, 0)} windows): ratio {beside / alone:.2f}")
    assert all(v > 0 for v in best.values()), best
    assert '"passed": false' not in verified, verified
