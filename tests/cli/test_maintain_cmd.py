"""``cdcflow maintain ID``: the maintenance DAG's work for one changefeed, now. Its silver tables, written with
deletion vectors by three windows, are purged of the rows the vectors mark and compacted; the vacuum at a zero
retention leaves what the latest version needs, the tables still equal the upstream, and windows go on after it.
A changefeed that does not exist is a clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from cdc_core.changefeed import runner
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import ConfigError
from testkit.e2e import cli, cli_app, typed_rows_match

pytestmark = [pytest.mark.e2e, pytest.mark.spark]


def test_maintain_purges_compacts_and_vacuums_one_changefeed(cdc_home: Path, upstream_cluster: Any) -> None:
    db, cid = "cli_maintain", "maintain"
    sink = cdc_home / "lake-maintain"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; "
                  f"CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, v INT)")
        start = c.get_ts()
        cfg = cdc_home / f"{cid}.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{db}.*"]\n[sink]\ndeletion-vectors = true\n[capture]\n'
                       f'auto-start = false\n')
        cli("changefeed", "create", "--config", str(cfg))
        c.execute(f"INSERT INTO {db}.t VALUES " + ", ".join(f"({i}, 0)" for i in range(1, 2001)))
        runner.run_until(cid, c.get_ts())
        for w in range(2):  # windows that mark rows of the first file in deletion vectors
            c.execute(f"UPDATE {db}.t SET v = {w + 1} WHERE id % 10 = {w}; DELETE FROM {db}.t WHERE id % 97 = {w}")
            runner.run_until(cid, c.get_ts())
        silver = sink / db / "t"
        before = DeltaTable(str(silver))
        vectors_before = before.deletion_vectors().read_all().num_rows
        assert vectors_before > 0  # the windows wrote vectors
        files_before = len(before.file_uris())

        printed = cli("maintain", cid, "--retention-hours", "0", "--allow-short-retention", "--json")
        out = json.loads(printed.strip().splitlines()[-1])  # (the log, in this process, prints above it)
        assert [t["table"] for t in out["tables"]] == [f"{db}.t"]
        done = out["tables"][0]
        assert done["leases"] == [cid]
        # the first window's file lost a fifth of its rows to vectors: rewritten without them
        purged = done["compact"]["purged"]
        assert purged["files_purged"] >= 1 and purged["rows_dropped"] >= 400, done
        after = DeltaTable(str(silver))
        assert after.deletion_vectors().read_all().num_rows < vectors_before
        assert len(after.file_uris()) <= files_before
        # at a zero retention the replaced files and their vectors go
        assert done["vacuum"]["files_deleted"] >= 2, done
        # nothing the latest version reads went: the table equals the upstream, and the next window applies
        t = c.get_ts()
        typed_rows_match(c, sink, db, "t", t)
        c.execute(f"UPDATE {db}.t SET v = 9 WHERE id < 50")
        t = c.get_ts()
        runner.run_until(cid, t)
        typed_rows_match(c, sink, db, "t", t)

    res = CliRunner().invoke(cli_app(), ["maintain", "nope"])
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "changefeed 'nope' does not exist" in str(res.exception)
