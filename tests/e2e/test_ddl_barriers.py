"""End to end, issue 6: a DDL sequence with DML between every step, several DDLs per window so that
barriers split the windows; after every window each replicated Delta table equals the upstream
snapshot at the window end, and tables that were truncated, renamed or dropped followed. The last window runs the
sequence on a common-handle table and a partitioned one (partition DDL included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.schema import ddl_history
from testkit.e2e import cli as _cli
from testkit.e2e import delta_rows, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.spark]


def _same(c: UpstreamClient, sink: Path, db: str, table: str, ts: int) -> None:
    assert delta_rows(sink, db, table, "id") == upstream_rows(c, db, table, "id", ts), table


def _run(cid: str, c: UpstreamClient) -> int:
    t = c.get_ts()
    runner.run_until(cid, t)
    assert load_state(cid).checkpoint_ts == t
    return t


def test_ddl_sequence_applies_at_barriers(cdc_home: Path, upstream_cluster: Any) -> None:
    db, sink = "e2e_ddl", cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}")
        start = c.get_ts()
        cfg = cdc_home / "ddl.toml"
        cfg.write_text(f'changefeed-id = "ddl"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{db}.*"]\n')
        _cli("changefeed", "create", "--config", str(cfg))

        # Window 1: the table is created inside the window; then ADD COLUMN with a default, with DML
        # before and after each DDL (rows before the ADD COLUMN must read its default).
        c.execute(f"""
            USE {db};
            CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(16), qty INT);
            INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30);
            UPDATE t SET qty = 11 WHERE id = 1;
            ALTER TABLE t ADD COLUMN price DECIMAL(8,2) NOT NULL DEFAULT 9.99;
            INSERT INTO t (id, name, qty, price) VALUES (4, 'd', 40, 1.25);
            UPDATE t SET price = 2.50 WHERE id = 2;
        """)
        t1 = _run("ddl", c)
        _same(c, sink, db, "t", t1)
        assert DeltaTable(str(sink / db / "t")).schema().to_arrow().names == ["id", "name", "qty", "price"]

        # Window 2: RENAME COLUMN, DROP COLUMN, MODIFY (widening), DML between each.
        c.execute(f"""
            USE {db};
            ALTER TABLE t RENAME COLUMN name TO label;
            UPDATE t SET label = 'bb' WHERE id = 2;
            ALTER TABLE t DROP COLUMN qty;
            DELETE FROM t WHERE id = 3;
            ALTER TABLE t MODIFY COLUMN price DECIMAL(12,3) NOT NULL;
            INSERT INTO t (id, label, price) VALUES (5, 'e', 5.125);
        """)
        t2 = _run("ddl", c)
        _same(c, sink, db, "t", t2)
        # DECIMAL(8,2) -> DECIMAL(12,3) is reorganized as TiDB does it: the column's values moved to a new id.
        jobs = ddl_history.jobs_from_sql(c.query(
            f"SELECT job_meta FROM mysql.tidb_ddl_history WHERE db_name = '{db}' ORDER BY job_id"), 0)
        price_ids = [j.table_info.column("price").id for j in jobs if j.table_info is not None
                     and j.job_type in ("add column", "modify column")]
        assert len(set(price_ids)) == 2, price_ids
        assert DeltaTable(str(sink / db / "t")).schema().to_arrow().names == ["id", "label", "price"]

        # Window 3: TRUNCATE (new table id; the old id's earlier rows were applied before the barrier),
        # RENAME TABLE (the Delta table follows), a second table created and dropped.
        c.execute(f"""
            USE {db};
            UPDATE t SET label = 'before-truncate' WHERE id = 1;
            TRUNCATE TABLE t;
            INSERT INTO t (id, label, price) VALUES (7, 'after', 7.000);
            RENAME TABLE t TO t2;
            UPDATE t2 SET label = 'renamed' WHERE id = 7;
            CREATE TABLE gone (id INT PRIMARY KEY);
            INSERT INTO gone VALUES (1);
        """)
        t3 = _run("ddl", c)
        _same(c, sink, db, "t2", t3)
        _same(c, sink, db, "gone", t3)
        assert not (sink / db / "t").exists()
        assert delta_rows(sink, db, "t2", "id") == [{"id": 7, "label": "renamed", "price": "7.000"}]

        c.execute(f"USE {db}; DROP TABLE gone; INSERT INTO t2 (id, label, price) VALUES (8, 'x', 1);"
                  "CREATE TABLE x (id INT PRIMARY KEY, label VARCHAR(20), price DECIMAL(12,3) NOT NULL DEFAULT 1);"
                  "INSERT INTO x (id, label) VALUES (100, 'x100')")
        t4 = _run("ddl", c)
        _same(c, sink, db, "t2", t4)
        assert not (sink / db / "gone").exists()
        assert list((sink / "_cdcflow" / "dropped" / db).iterdir())  # kept, not destroyed

        # Window 5: two tables swap names in one RENAME TABLES job (TiDB's ActionRenameTables, one job of three
        # parts at one ts); each Delta table follows its table, and rows written after land under the new names.
        c.execute(f"""
            USE {db};
            UPDATE x SET label = 'x-before' WHERE id = 100;
            RENAME TABLE t2 TO tmp, x TO t2, tmp TO x;
            INSERT INTO t2 (id, label) VALUES (101, 'now t2');
            UPDATE x SET label = 'now x' WHERE id = 7;
            ALTER TABLE x ADD COLUMN note VARCHAR(10) DEFAULT 'n', MODIFY COLUMN price DECIMAL(14,3) NOT NULL;
            UPDATE x SET note = 'u', price = 123456789.125 WHERE id = 8;
        """)
        t5 = _run("ddl", c)
        _same(c, sink, db, "t2", t5)
        _same(c, sink, db, "x", t5)
        assert sorted(r["id"] for r in delta_rows(sink, db, "x", "id")) == [7, 8]
        assert [r["label"] for r in delta_rows(sink, db, "t2", "id")] == ["x-before", "now t2"]
        assert not (sink / db / "tmp").exists()

        # Re-running the last window is a no-op; the checks at the barriers passed and were recorded.
        runner.run_until("ddl", t5)
        st = load_state("ddl")
        assert st.state == "normal" and st.checkpoint_ts == t5
        results = DeltaTable(str(sink / "_cdcflow" / "dq_results")).to_pyarrow_table().to_pylist()
        barrier_checks = {r["ts"] for r in results if r["where"].startswith("barrier")}
        assert barrier_checks, "checks ran at the barriers inside the windows"
        assert {r["ts"] for r in results if r["where"] == "window end"} == {t1, t2, t3, t4, t5}
        assert all(r["success"] for r in results)
        kinds = {r["expectation"] for r in results}
        assert kinds >= {"delta_key_unique", "row_count_equals", "rows_equal", "schema_equals", "not_null:id"}
        assert kinds - {"delta_key_unique", "row_count_equals", "rows_equal", "schema_equals"} == {
            "not_null:id", "not_null:price"}  # the NOT NULL columns the tables had (price: NOT NULL DEFAULT 9.99)
        _cli("verify", "ddl")

        # Window 6: the same kinds of DDL on a common-handle table (a composite VARCHAR + INT primary key, clustered
        # as TiDB clusters it by default) and on a RANGE-partitioned table: ADD COLUMN, a moved key, MODIFY COLUMN
        # reorganized (its backfill rewrites common-handle rows), ADD PARTITION, a multi-schema change, a row moved
        # across partitions, DROP PARTITION (its rows leave without row events: the barrier deletes them).
        c.execute(f"""
            USE {db};
            CREATE TABLE ch (k VARCHAR(8), id INT, v INT, PRIMARY KEY (k, id));
            INSERT INTO ch VALUES ('a', 1, 1), ('b', 2, 2), ('b', 3, 3);
            ALTER TABLE ch ADD COLUMN w VARCHAR(4) DEFAULT 'w';
            UPDATE ch SET k = 'c' WHERE id = 2;
            ALTER TABLE ch MODIFY COLUMN v BIGINT;
            UPDATE ch SET v = 9000000000 WHERE id = 3;
            CREATE TABLE pt (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id)
                (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20));
            INSERT INTO pt VALUES (1, 1), (11, 11), (12, 12);
            ALTER TABLE pt ADD PARTITION (PARTITION p2 VALUES LESS THAN (30));
            INSERT INTO pt VALUES (21, 21);
            ALTER TABLE pt ADD COLUMN w INT DEFAULT 5, DROP COLUMN v;
            UPDATE pt SET id = 25 WHERE id = 1;
            ALTER TABLE pt DROP PARTITION p1;
            INSERT INTO pt (id) VALUES (2);
        """)
        t6 = _run("ddl", c)
        _same(c, sink, db, "ch", t6)
        _same(c, sink, db, "pt", t6)
        assert [(r["k"], r["id"], r["w"]) for r in delta_rows(sink, db, "ch", "id")] == [
            ("a", 1, "w"), ("c", 2, "w"), ("b", 3, "w")]
        assert [r["id"] for r in delta_rows(sink, db, "pt", "id")] == [2, 21, 25]
        assert load_state("ddl").state == "normal"
