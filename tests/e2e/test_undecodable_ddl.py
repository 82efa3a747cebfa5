"""A DDL job cdcflow cannot decode (a column type of next year) committed while two changefeeds run (issue 52): the
one that replicates the job's table goes to error before it, naming the job, the table, the column and the type,
its checkpoint below the job; the other skips the job and keeps replicating, its Delta tables equal to the upstream.
The DDL puller reads a job's names and ids before its TableInfo (``ddl_puller.decode_jobs``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import ChangefeedError
from testkit import odd_ddl_job
from testkit.e2e import cli as _cli
from testkit.e2e import typed_rows_match

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

JOB_ID = 44  # below the catalog's first id, clear of testkit.odd_ddl_job's history row (42)


def _create(cdc_home: Path, cid: str, db: str, start: int) -> Path:
    sink = cdc_home / f"lake-{cid}"
    cfg = cdc_home / f"{cid}.toml"
    cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                   f'initial-snapshot = true\n[filter]\nrules = ["{db}.*"]\n')
    _cli("changefeed", "create", "--config", str(cfg))
    return sink


def test_a_job_nobody_can_decode_stops_only_the_changefeed_that_replicates_its_table(
        cdc_home: Path, upstream_cluster: Any) -> None:
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        for db in ("e2e_odd_a", "e2e_odd_b"):
            c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT); "
                      f"INSERT INTO {db}.t VALUES (1, 1), (2, 2)")
        start = c.get_ts()
        sink_a, _ = _create(cdc_home, "odd-a", "e2e_odd_a", start), _create(cdc_home, "odd-b", "e2e_odd_b", start)
        try:
            c.execute("UPDATE e2e_odd_a.t SET v = 10 WHERE id = 1; UPDATE e2e_odd_b.t SET v = 10 WHERE id = 1")
            job_ts = odd_ddl_job.write_done(upstream_cluster, "e2e_odd_b", "x", job_id=JOB_ID)
            c.execute("INSERT INTO e2e_odd_a.t VALUES (3, 3); INSERT INTO e2e_odd_b.t VALUES (3, 3)")
            t = c.get_ts()
            runner.run_until("odd-a", t)  # not its table: skipped, one log line
            assert load_state("odd-a").checkpoint_ts == t
            typed_rows_match(c, sink_a, "e2e_odd_a", "t", t)
            with pytest.raises(ChangefeedError) as ei:
                runner.run_until("odd-b", t)
            msg = str(ei.value)
            assert f"DDL job {JOB_ID} (create table) on e2e_odd_b.x at commit ts {job_ts} cannot be decoded" in msg
            assert "column 'embedding'" in msg and f"Tp {odd_ddl_job.FUTURE_TP}" in msg
            st = load_state("odd-b")
            assert st.state == "error" and st.checkpoint_ts < job_ts and "cannot be decoded" in (st.error or {})[
                "message"]
            # the other changefeed goes on
            c.execute("UPDATE e2e_odd_a.t SET v = 30 WHERE id = 3")
            t2 = c.get_ts()
            runner.run_until("odd-a", t2)
            typed_rows_match(c, sink_a, "e2e_odd_a", "t", t2)
        finally:
            odd_ddl_job.remove_done(upstream_cluster, job_id=JOB_ID)
