"""End to end, issue 52 item 7: a changefeed starts from TiDB's meta snapshot at its start ts, not from the DDL
history. The upstream holds a long DDL history (hundreds of jobs on tables long gone) and an old job cdcflow cannot
decode (a column type newer than cdcflow, in ``mysql.tidb_ddl_history``): replaying the history fails on it, yet
``changefeed create``, an initial-snapshot window, an incremental window with DDL and ``verify`` all work, and every
Delta table equals the upstream at the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc_core.changefeed import runner
from cdc_core.changefeed.ddl_puller import SchemaLog
from cdc_core.changefeed.schema_loader import SNAPSHOT_JOB_ID
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.schema import ddl_history
from cdc_core.schema.model import SchemaError
from testkit import odd_ddl_job
from testkit.e2e import cli as _cli
from testkit.e2e import delta_rows, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

DB = "e2e_meta_start"
SCRATCH = 40  # scratch tables, four jobs each: a history of 160 jobs and more before the start


def _same(c: UpstreamClient, sink: Path, tables: dict[str, str], ts: int) -> None:
    for table, key in tables.items():
        assert delta_rows(sink, DB, table, key) == upstream_rows(c, DB, table, key, ts), f"{DB}.{table} at {ts}"


def test_a_long_history_with_an_odd_old_job_does_not_stop_a_changefeed(cdc_home: Path,
                                                                      upstream_cluster: Any) -> None:
    sink = cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {DB}")
        c.execute(f"USE {DB}; " + "; ".join(
            f"CREATE TABLE s{i} (id INT PRIMARY KEY); ALTER TABLE s{i} ADD COLUMN v INT; "
            f"ALTER TABLE s{i} ADD INDEX iv (v); DROP TABLE s{i}" for i in range(SCRATCH)))
        # Live tables shaped by DDL before the start: renamed, altered, truncated, partitioned and exchanged.
        c.execute(f"""USE {DB};
            CREATE TABLE t0 (id INT PRIMARY KEY, v VARCHAR(10));
            INSERT INTO t0 VALUES (1, 'gone'); TRUNCATE TABLE t0; RENAME TABLE t0 TO t;
            ALTER TABLE t ADD COLUMN n INT NOT NULL DEFAULT 5;
            INSERT INTO t (id, v) VALUES (2, 'b'), (3, 'c');
            CREATE TABLE ch (a INT, b VARCHAR(8), w INT, PRIMARY KEY (a, b));
            INSERT INTO ch VALUES (1, 'x', 10), (2, 'y', 20);
            CREATE TABLE p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id)
                (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (100));
            CREATE TABLE pn (id INT PRIMARY KEY, v INT);
            INSERT INTO p VALUES (1, 1), (50, 50); INSERT INTO pn VALUES (5, 5);
            ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE pn""")
        odd_ddl_job.write(upstream_cluster, DB, "old_vectors")
        try:
            start = c.get_ts()
            history = c.query("SELECT job_meta FROM mysql.tidb_ddl_history", at_ts=start)
            assert len(history) > 4 * SCRATCH
            with pytest.raises(SchemaError, match="unsupported column type"):  # what replaying the history met
                ddl_history.jobs_from_sql(history, start)

            cfg = cdc_home / "meta.toml"
            cfg.write_text(f'changefeed-id = "meta"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                           f'initial-snapshot = true\n[filter]\nrules = ["{DB}.*"]\n'
                           '[data-quality]\nmode = "checksum"\n')
            _cli("changefeed", "create", "--config", str(cfg))
            slog = SchemaLog.load("meta")
            assert {j.job_id for j in slog.jobs} == {SNAPSHOT_JOB_ID}  # the snapshot, no job of the history
            assert sorted(t.name for t in slog.storage().tables_at(start)) == ["ch", "p", "pn", "t"]

            tables = {"t": "id", "ch": "a", "p": "id", "pn": "id"}
            t1 = c.get_ts()
            runner.run_until("meta", t1)  # the initial snapshot window
            assert load_state("meta").checkpoint_ts == t1
            _same(c, sink, tables, t1)

            c.execute(f"""USE {DB};
                UPDATE t SET v = 'bb', n = 6 WHERE id = 2; DELETE FROM t WHERE id = 3;
                ALTER TABLE t ADD COLUMN note VARCHAR(8) DEFAULT 'n';
                INSERT INTO t (id, v, note) VALUES (4, 'd', 'x');
                UPDATE ch SET w = 21 WHERE a = 2; INSERT INTO p VALUES (2, 2), (60, 60);
                CREATE TABLE fresh (id INT PRIMARY KEY); INSERT INTO fresh VALUES (1)""")
            t2 = c.get_ts()
            runner.run_until("meta", t2)
            assert load_state("meta").checkpoint_ts == t2
            _same(c, sink, {**tables, "fresh": "id"}, t2)
            assert delta_rows(sink, DB, "t", "id")[-1] == {"id": 4, "v": "d", "n": 5, "note": "x"}
            _cli("verify", "meta")
        finally:
            odd_ddl_job.remove(upstream_cluster)
