"""End to end: partitioned tables (RANGE, HASH, LIST) replicate into one Delta table each. TiKV keys each
partition's rows by the partition's own id; the puller subscribes to every partition, the mount takes them all as
the logical table's. Rows that move between partitions (a delete in one, a put in another, at one commit ts),
a TRUNCATE (new ids for every partition), ADD / DROP / TRUNCATE PARTITION at their barriers (a dropped or truncated
partition's rows leave without a row event: the barrier deletes them by the partitioning rule) and an initial
snapshot all end in the same rows as the upstream's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from testkit.e2e import cli as _cli
from testkit.e2e import delta_rows, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

TABLES = {"r": "id", "h": "id", "l": "v"}


def _same(c: UpstreamClient, sink: Path, db: str, ts: int) -> None:
    for table, key in TABLES.items():
        assert delta_rows(sink, db, table, key) == upstream_rows(c, db, table, key, ts), f"{db}.{table} at {ts}"


def test_partitioned_tables_replicate_into_one_delta_table_each(cdc_home: Path, upstream_cluster: Any) -> None:
    db = "e2e_part"
    sink = cdc_home / "lake-part"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"""
            CREATE DATABASE {db}; USE {db};
            CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(16), amt DECIMAL(8,2))
                PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN (1000),
                                         PARTITION pmax VALUES LESS THAN MAXVALUE);
            CREATE TABLE h (id INT NOT NULL, tag VARCHAR(8) NOT NULL, n INT, PRIMARY KEY (id, tag))
                PARTITION BY HASH (id) PARTITIONS 4;
            CREATE TABLE l (k INT, v INT NOT NULL) PARTITION BY LIST (k) (PARTITION a VALUES IN (1, 2, NULL),
                                                                          PARTITION b VALUES IN (3, 4));
        """)
        rows = ", ".join(f"({i * 7}, 'v{i}', {i}.5)" for i in range(300))  # across all three RANGE partitions
        c.execute(f"USE {db}; INSERT INTO r VALUES {rows}; "
                  "INSERT INTO h VALUES (1, 'a', 1), (2, 'a', 2), (-3, 'b', 3), (4, 'c', 4); "
                  "INSERT INTO l VALUES (1, 10), (3, 30), (NULL, 40)")
        start = c.get_ts()
        c.execute(f"""
            USE {db};
            UPDATE r SET id = 5000 WHERE id = 7;      -- p0 -> pmax: a delete in one partition, a put in another
            UPDATE r SET v = 'same partition' WHERE id = 700;
            DELETE FROM r WHERE id = 14;
            UPDATE h SET id = 6 WHERE id = 1;        -- hash partition 1 -> 2
            UPDATE l SET k = 4 WHERE v = 10;         -- list a -> b
            INSERT INTO l VALUES (2, 20);
        """)
        cfg = cdc_home / "part.toml"
        cfg.write_text(f'changefeed-id = "part"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{db}.*"]\n[data-quality]\nmode = "count"\n')
        assert '"matched_tables": 3' in _cli("changefeed", "create", "--config", str(cfg))

        t1 = c.get_ts()
        (r1,) = runner.run_until("part", t1)
        assert r1["check"]["passed"] and load_state("part").checkpoint_ts == t1
        assert r1["pull"]["snapshot"]["tables"][f"{db}.r"]["rows"] == 300
        _same(c, sink, db, t1)

        c.execute(f"""
            USE {db};
            UPDATE r SET id = id + 1000 WHERE id < 50; -- several rows leave p0 at one commit ts
            UPDATE h SET n = n * 10;
            DELETE FROM l WHERE k = 3;
            TRUNCATE TABLE h;
            INSERT INTO h VALUES (9, 'z', 9);
        """)
        t2 = c.get_ts()
        runner.run_until("part", t2)
        assert load_state("part").checkpoint_ts == t2
        _same(c, sink, db, t2)
        assert [row["id"] for row in delta_rows(sink, db, "h", "id")] == [9]

        c.execute(f"""
            USE {db};
            ALTER TABLE l ADD PARTITION (PARTITION c VALUES IN (5, 6));
            INSERT INTO l VALUES (5, 50), (1, 11), (NULL, 41);
            ALTER TABLE l DROP PARTITION a;         -- k IN (1, 2, NULL): gone without row events
            INSERT INTO l VALUES (6, 60);
            ALTER TABLE r TRUNCATE PARTITION p1;    -- 100 <= id < 1000
            INSERT INTO r VALUES (150, 'back', 1);
            INSERT INTO h VALUES (10, 'y', 10), (11, 'y', 11), (-1, 'y', 1);
            ALTER TABLE h TRUNCATE PARTITION p2;    -- abs(id % 4) = 2: id 10
        """)
        t3 = c.get_ts()
        (r3,) = runner.run_until("part", t3)
        assert r3["check"]["passed"] and load_state("part").checkpoint_ts == t3
        _same(c, sink, db, t3)
        assert sorted(row["k"] for row in delta_rows(sink, db, "l", "v")) == [4, 5, 6]
        assert sorted(row["id"] for row in delta_rows(sink, db, "h", "id")) == [-1, 9, 11]
        assert [row["v"] for row in delta_rows(sink, db, "r", "id") if 100 <= row["id"] < 1000] == ["back"]


def _create(cdc_home: Path, cid: str, sink: Path, db: str, start: int, *, matched: int,
            initial_snapshot: bool = False) -> None:
    """A changefeed over ``db.*`` from ``start``, checked by count at its barriers."""
    cfg = cdc_home / f"{cid}.toml"
    cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                   f'initial-snapshot = {str(initial_snapshot).lower()}\n[filter]\nrules = ["{db}.*"]\n'
                   '[data-quality]\nmode = "count"\n')
    assert f'"matched_tables": {matched}' in _cli("changefeed", "create", "--config", str(cfg))


def _same_tables(c: UpstreamClient, sink: Path, db: str, tables: tuple[str, ...], ts: int) -> None:
    for table in tables:
        assert delta_rows(sink, db, table, "id") == upstream_rows(c, db, table, "id", ts), f"{db}.{table} at {ts}"


STAGED = 200_000  # rows of a table the changefeed does not replicate, exchanged into a partition


def test_exchange_partition_swaps_rows_between_tables_at_its_barrier(cdc_home: Path, upstream_cluster: Any) -> None:
    """EXCHANGE PARTITION moves no row upstream (the two key ranges swap table ids), so no row event says which
    rows changed tables: at the barrier the partition's rows leave the partitioned table's Delta table and the
    normal table's (read upstream just before the job) arrive, and the normal table's Delta table takes the
    partition's. Once with both tables replicated, once with a 200,000-row staging table outside the filter, whose
    rows then go through the pull and apply of a partitioned table in bulk."""
    db, out = "e2e_exch", "e2e_exch_out"
    sink = cdc_home / "lake-exch"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"""
            CREATE DATABASE {db}; CREATE DATABASE {out}; USE {db};
            CREATE TABLE x (id INT PRIMARY KEY, v VARCHAR(16))
                PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (1000), PARTITION p1 VALUES LESS THAN
                                         (1000000), PARTITION p2 VALUES LESS THAN MAXVALUE);
            CREATE TABLE xn (id INT PRIMARY KEY, v VARCHAR(16));
            CREATE TABLE {out}.stage (id INT PRIMARY KEY, v VARCHAR(16));
        """)
        # ids 1000..200999, all in p1's range, by TiDB's bulk load (IMPORT INTO: no SQL to parse for 200,000 rows)
        for f, lo in enumerate(range(0, STAGED, 10_000)):
            staged = range(lo, min(lo + 10_000, STAGED))
            pq.write_table(pa.table({"id": pa.array([1000 + i for i in staged], pa.int32()),
                                     "v": [f"s{i}" for i in staged]}), cdc_home / f"stage.{f:05d}.parquet")
        c.execute(f"IMPORT INTO {out}.stage FROM '{cdc_home}/stage.*.parquet' FORMAT 'parquet'")
        start = c.get_ts()
        _create(cdc_home, "exch", sink, db, start, matched=2)

        def same(ts: int) -> None:
            _same_tables(c, sink, db, ("x", "xn"), ts)

        # x: ids 0, 5, ..., 1995 (200 in p0, 200 in p1) and one in p2; xn: odd ids below 100 (p0's range).
        c.execute(f"USE {db}; INSERT INTO x VALUES " + ", ".join(f"({i * 5}, 'x{i}')" for i in range(400)) +
                  ", (2000000, 'top'); INSERT INTO xn VALUES " + ", ".join(f"({i * 2 + 1}, 'n{i}')" for i in range(50)))
        t1 = c.get_ts()
        runner.run_until("exch", t1)
        same(t1)

        c.execute(f"""
            USE {db};
            INSERT INTO x VALUES (101, 'p0 before');
            ALTER TABLE x EXCHANGE PARTITION p0 WITH TABLE xn;   -- both replicated
            INSERT INTO xn VALUES (103, 'xn after');             -- under p0's old id now
            INSERT INTO x VALUES (105, 'x p0 after');            -- under xn's old id now
            UPDATE xn SET v = 'was x' WHERE id = 0;
        """)
        t2 = c.get_ts()
        (r2,) = runner.run_until("exch", t2)
        assert r2["check"]["passed"] and load_state("exch").checkpoint_ts == t2
        same(t2)
        assert len(delta_rows(sink, db, "xn", "id")) == 200 + 2  # p0's rows (id < 1000), 101 and 103
        assert [r["id"] for r in delta_rows(sink, db, "x", "id") if r["id"] < 1000] == [*range(1, 100, 2), 105]

        c.execute(f"""
            USE {db};
            ALTER TABLE x EXCHANGE PARTITION p1 WITH TABLE {out}.stage;   -- 200,000 rows in, p1's 200 out
            UPDATE x SET v = 'staged, updated' WHERE id = 1000;
        """)
        t3 = c.get_ts()
        (r3,) = runner.run_until("exch", t3)
        assert r3["check"]["passed"] and load_state("exch").checkpoint_ts == t3
        same(t3)
        assert sum(1 for r in delta_rows(sink, db, "x", "id") if 1000 <= r["id"] < 1000000) == STAGED

        # The exchanged-in rows through the ordinary pull and apply, in bulk: half of them move to p2 (a key
        # change across partitions: a delete under one id and a put under another, at one commit ts), the
        # other half change in place.
        half = 1000 + STAGED // 2
        c.execute(f"USE {db}; UPDATE x SET id = id + 1000000 WHERE id >= 1000 AND id < {half}; "
                  f"UPDATE x SET v = 'bulk' WHERE id >= {half} AND id < 1000000")
        t4 = c.get_ts()
        (r4,) = runner.run_until("exch", t4)
        assert r4["check"]["passed"] and load_state("exch").checkpoint_ts == t4
        same(t4)
        rows = delta_rows(sink, db, "x", "id")
        assert sum(1 for r in rows if r["id"] >= 1000000) == STAGED // 2 + 1  # and 'top'
        assert sum(1 for r in rows if r["v"] == "bulk") == STAGED // 2


def test_reorganize_partition_by_and_remove_partitioning_leave_the_rows_as_they_are(
        cdc_home: Path, upstream_cluster: Any) -> None:
    """REORGANIZE PARTITION, PARTITION BY and REMOVE PARTITIONING copy rows to new physical ids before their commit
    ts (puts the puller sees under ids the table does not have yet) and drop the old ranges without row events: the
    Delta table keeps its rows, and row changes after the barrier come under the new ids."""
    db = "e2e_relayout"
    sink = cdc_home / "lake-relayout"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"""
            CREATE DATABASE {db}; USE {db};
            CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(16)) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN
                (100), PARTITION p1 VALUES LESS THAN (1000), PARTITION pmax VALUES LESS THAN MAXVALUE);
            CREATE TABLE f (id INT PRIMARY KEY, v VARCHAR(16));
            INSERT INTO r VALUES {", ".join(f"({i * 5}, 'r{i}')" for i in range(300))};
            INSERT INTO f VALUES {", ".join(f"({i}, 'f{i}')" for i in range(50))};
        """)
        start = c.get_ts()
        _create(cdc_home, "relayout", sink, db, start, matched=2, initial_snapshot=True)

        def same(ts: int) -> None:
            _same_tables(c, sink, db, ("r", "f"), ts)

        c.execute(f"""
            USE {db};
            UPDATE r SET v = 'before' WHERE id = 5;
            ALTER TABLE r REORGANIZE PARTITION p0, p1 INTO
                (PARTITION a VALUES LESS THAN (500), PARTITION b VALUES LESS THAN (1000));
            UPDATE r SET v = 'after' WHERE id = 10;   -- under a's id now
            DELETE FROM r WHERE id = 700;             -- under b's id now
            ALTER TABLE f PARTITION BY HASH (id) PARTITIONS 3;
            INSERT INTO f VALUES (1000, 'new');
            UPDATE f SET v = 'hashed' WHERE id = 3;
        """)
        t1 = c.get_ts()
        (r1,) = runner.run_until("relayout", t1)
        assert r1["check"]["passed"] and load_state("relayout").checkpoint_ts == t1
        same(t1)
        assert len(delta_rows(sink, db, "r", "id")) == 299 and len(delta_rows(sink, db, "f", "id")) == 51

        c.execute(f"""
            USE {db};
            ALTER TABLE r REMOVE PARTITIONING;
            INSERT INTO r VALUES (99999, 'flat');
            DELETE FROM r WHERE id = 0;
            ALTER TABLE f REMOVE PARTITIONING;
            ALTER TABLE f PARTITION BY RANGE (id) (PARTITION lo VALUES LESS THAN (10), PARTITION hi VALUES LESS THAN
                MAXVALUE);
            UPDATE f SET v = 'ranged' WHERE id < 20;
        """)
        t2 = c.get_ts()
        (r2,) = runner.run_until("relayout", t2)
        assert r2["check"]["passed"] and load_state("relayout").checkpoint_ts == t2
        same(t2)
        assert sum(1 for r in delta_rows(sink, db, "f", "id") if r["v"] == "ranged") == 20
