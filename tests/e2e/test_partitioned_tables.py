"""End to end: partitioned tables (RANGE, HASH, LIST, KEY, RANGE / LIST COLUMNS) replicate into one Delta table
each. TiKV keys each partition's rows by the partition's own id; the puller subscribes to every partition, the mount
takes them all as the logical table's. Rows that move between partitions (a delete in one, a put in another, at one
commit ts), a TRUNCATE (new ids for every partition), ADD / DROP / TRUNCATE PARTITION at their barriers (a dropped or
truncated partition's rows leave without a row event: the barrier deletes them by the partitioning rule) and an
initial snapshot all end in the same rows as the upstream's."""

from __future__ import annotations

import json
import zlib
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
            initial_snapshot: bool = False, dq_mode: str = "count") -> None:
    """A changefeed over ``db.*`` from ``start``, checked at its barriers (by count unless ``dq_mode``)."""
    cfg = cdc_home / f"{cid}.toml"
    cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                   f'initial-snapshot = {str(initial_snapshot).lower()}\n[filter]\nrules = ["{db}.*"]\n'
                   f'[data-quality]\nmode = "{dq_mode}"\n')
    assert f'"matched_tables": {matched}' in _cli("changefeed", "create", "--config", str(cfg))


def _same_tables(c: UpstreamClient, sink: Path, db: str, tables: tuple[str, ...], ts: int) -> None:
    for table in tables:
        assert delta_rows(sink, db, table, "id") == upstream_rows(c, db, table, "id", ts), f"{db}.{table} at {ts}"


STAGED = 200_000  # rows of a table the changefeed does not replicate, exchanged into a partition
BULK = 20_000  # of them moved to another partition, and as many changed in place, after the exchange


def test_exchange_partition_swaps_rows_between_tables_at_its_barrier(cdc_home: Path, upstream_cluster: Any) -> None:
    """EXCHANGE PARTITION moves no row upstream (the two key ranges swap table ids), so no row event says which
    rows changed tables: at the barrier the partition's rows leave the partitioned table's Delta table and the
    normal table's (read upstream just before the job) arrive, and the normal table's Delta table takes the
    partition's. Once with both tables replicated, once with a 200,000-row staging table outside the filter, 40,000
    of whose rows then go through the pull and apply of a partitioned table in bulk."""
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

        # Some of the exchanged-in rows through the ordinary pull and apply, in bulk: 20,000 move to p2 (a key
        # change across partitions: a delete under one id and a put under another, at one commit ts), 20,000
        # change in place. (The whole 200,000 cost the suite minutes for nothing a slice does not show: the
        # 220,000-row pull and apply are tests/e2e/test_real_sizes.py's.)
        moved = range(1000, 1000 + BULK)
        in_place = range(1000 + BULK, 1000 + 2 * BULK)
        c.execute(f"USE {db}; UPDATE x SET id = id + 1000000 WHERE id >= {moved.start} AND id < {moved.stop}; "
                  f"UPDATE x SET v = 'bulk' WHERE id >= {in_place.start} AND id < {in_place.stop}")
        t4 = c.get_ts()
        (r4,) = runner.run_until("exch", t4)
        assert r4["check"]["passed"] and load_state("exch").checkpoint_ts == t4
        same(t4)
        rows = delta_rows(sink, db, "x", "id")
        assert sum(1 for r in rows if r["id"] >= 1000000) == BULK + 1  # and 'top'
        assert sum(1 for r in rows if r["v"] == "bulk") == BULK
        assert sum(1 for r in rows if 1000 <= r["id"] < 1000000) == STAGED - BULK


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


KINDS_DB = "e2e_part_kinds"
# name -> (columns, partitioning); the keys of the silver tables: the PK, _tidb_rowid for lc
KINDS = {
    "k": "(id INT NOT NULL, tag VARCHAR(8) NOT NULL, n INT, PRIMARY KEY (id, tag)) PARTITION BY KEY () PARTITIONS 4",
    "rc": "(a INT NOT NULL, s VARCHAR(10) NOT NULL, v INT, PRIMARY KEY (a, s)) PARTITION BY RANGE COLUMNS (a, s) "
          "(PARTITION p0 VALUES LESS THAN (10, 'm'), PARTITION p1 VALUES LESS THAN (20, MAXVALUE), "
          "PARTITION p2 VALUES LESS THAN (MAXVALUE, MAXVALUE))",
    "rd": "(id INT NOT NULL, day DATE NOT NULL, v VARCHAR(8), PRIMARY KEY (id, day)) "
          "PARTITION BY RANGE COLUMNS (id, day) (PARTITION a VALUES LESS THAN (100, '2024-01-01'), "
          "PARTITION b VALUES LESS THAN (100, '2025-01-01'), PARTITION c VALUES LESS THAN (200, '2000-01-01'))",
    "lc": "(a INT, s VARCHAR(8), v INT NOT NULL) PARTITION BY LIST COLUMNS (a, s) "
          "(PARTITION x VALUES IN ((1, 'a'), (2, NULL)), PARTITION y VALUES IN ((NULL, 'b'), (3, 'c')), "
          "PARTITION z DEFAULT)",
    "kn": "(id INT NOT NULL, tag VARCHAR(8) NOT NULL, n INT, PRIMARY KEY (id, tag))",
    "rcn": "(a INT NOT NULL, s VARCHAR(10) NOT NULL, v INT, PRIMARY KEY (a, s))",
}


def _canon(rows: list[dict[str, Any]]) -> list[str]:
    """Rows in an order that does not depend on where they were read (composite keys, no key at all)."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def _kinds_same(c: UpstreamClient, sink: Path, ts: int) -> None:
    for table in KINDS:
        key = {"k": "id", "rc": "a", "rd": "id", "lc": "v", "kn": "id", "rcn": "a"}[table]
        got, want = _canon(delta_rows(sink, KINDS_DB, table, key)), _canon(upstream_rows(c, KINDS_DB, table, key, ts))
        assert got == want, f"{KINDS_DB}.{table} at {ts}: {len(got)} rows in Delta, {len(want)} upstream"


def _partition_of(upstream_cluster: Any, table: str) -> Any:
    cluster = upstream_cluster.cluster
    return upstream_cluster.call(lambda: cluster.catalog.table(KINDS_DB, table)).partition


def test_key_and_column_list_partitions_replicate_through_their_partition_ddl(cdc_home: Path,
                                                                               upstream_cluster: Any) -> None:
    """KEY() over a composite primary key, RANGE COLUMNS over (INT, VARCHAR) and over (INT, DATE), LIST COLUMNS
    with NULLs and a DEFAULT partition: an initial snapshot, then windows of DML that moves rows between
    partitions and of the partition DDL TiDB v8.5 runs on them -- TRUNCATE and DROP PARTITION (rows gone without
    a row event: the barrier deletes them by the rule, KEY's by TiDB's hash), ADD PARTITION, ADD / COALESCE
    PARTITION of the KEY table (every partition reorganized), REORGANIZE, EXCHANGE with and without validation.
    The window checks (checksum mode) pass at every barrier and each Delta table equals the upstream's."""
    sink = cdc_home / "lake-kinds"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {KINDS_DB}; USE {KINDS_DB}; " +
                  "; ".join(f"CREATE TABLE {t} {d}" for t, d in KINDS.items()))
        tags = ["a", "b ", "c  ", "d"]  # trailing spaces: KEY hashes a VARCHAR without them (utf8mb4_bin)
        c.execute(f"""USE {KINDS_DB};
            INSERT INTO k VALUES {", ".join(f"({i}, '{tags[i % 4]}', {i})" for i in range(200))};
            INSERT INTO rc VALUES {", ".join(f"({i % 30}, '{'kmnz'[i % 4]}{i}', {i})" for i in range(120))};
            INSERT INTO rd VALUES {", ".join(f"({50 + i % 100}, '20{23 + i % 3}-0{1 + i % 9}-1{i % 9}', 'r{i}')"
                                              for i in range(90))};
            INSERT INTO lc VALUES (1, 'a', 1), (2, NULL, 2), (NULL, 'b', 3), (3, 'c', 4), (NULL, NULL, 5),
                                  (9, 'q', 6), (1, 'a ', 7), (2, 'x', 8);
            INSERT INTO kn VALUES {", ".join(f"({1000 + i}, 'n', {i})" for i in range(30))};
            INSERT INTO rcn VALUES (1, 'a', 1), (9, 'lz', 2), (10, 'a', 3), (10, 'l', 4)""")
        start = c.get_ts()
        _create(cdc_home, "kinds", sink, KINDS_DB, start, matched=len(KINDS), initial_snapshot=True,
                dq_mode="checksum")

        def window(tag: str) -> None:
            ts = c.get_ts()
            results = runner.run_until("kinds", ts)
            assert all(r["check"]["passed"] for r in results), tag
            assert load_state("kinds").checkpoint_ts == ts, tag
            _kinds_same(c, sink, ts)

        window("snapshot")
        c.execute(f"""USE {KINDS_DB};
            UPDATE k SET id = id + 1000 WHERE id < 20;           -- KEY columns change: another partition
            UPDATE k SET tag = 'moved' WHERE id BETWEEN 40 AND 49;
            DELETE FROM k WHERE id BETWEEN 50 AND 59;
            UPDATE rc SET s = 'a10' WHERE a = 10 AND s = 'n10';  -- p1 -> p0: (10, 'a10') < (10, 'm')
            UPDATE rc SET a = a + 100 WHERE a = 25;               -- p2's own
            UPDATE rd SET day = '2024-06-01' WHERE id = 99 AND day < '2024-01-01';
            UPDATE lc SET s = 'b', a = NULL WHERE v = 8;          -- default z -> y
            UPDATE lc SET a = 2, s = NULL WHERE v = 6;            -- z -> x
            INSERT INTO lc VALUES (NULL, NULL, 9), (3, 'c', 10)""")
        window("dml")

        c.execute(f"""USE {KINDS_DB};
            ALTER TABLE k TRUNCATE PARTITION p1;                 -- KEY: no predicate, TiDB's hash decides
            INSERT INTO k VALUES (5000, 'a', 1), (5001, 'b', 2);
            ALTER TABLE rc DROP PARTITION p1;                    -- (10, 'm') <= (a, s) < (20, MAXVALUE)
            INSERT INTO rc VALUES (5, 'zz', 1), (25, 'a', 2);
            ALTER TABLE rd ADD PARTITION (PARTITION d VALUES LESS THAN (300, '2000-01-01'));
            INSERT INTO rd VALUES (250, '2024-01-01', 'new');
            ALTER TABLE rd TRUNCATE PARTITION b;
            ALTER TABLE lc TRUNCATE PARTITION z;                 -- the DEFAULT partition: every tuple not listed
            ALTER TABLE lc DROP PARTITION x;                     -- (1, 'a') incl. 'a ' and (2, NULL)
            INSERT INTO lc VALUES (NULL, 'b', 11), (7, 'seven', 12)""")
        window("truncate and drop")
        assert {r["a"] for r in c.query(f"SELECT a FROM {KINDS_DB}.rc")} & set(range(10, 20)) <= {10}
        key_part = _partition_of(upstream_cluster, "k")
        assert [d.name for d in key_part.definitions] == ["p0", "p1", "p2", "p3"]

        c.execute(f"""USE {KINDS_DB};
            ALTER TABLE k ADD PARTITION PARTITIONS 2;            -- a reorganization: every row under a new id
            UPDATE k SET n = -n WHERE id < 100;
            ALTER TABLE k COALESCE PARTITION 1;
            INSERT INTO k VALUES (6000, 'c  ', 6);
            ALTER TABLE k TRUNCATE PARTITION p3;                 -- five partitions now: hashed mod 5
            ALTER TABLE rc REORGANIZE PARTITION p0 INTO (PARTITION p0a VALUES LESS THAN (5, ''),
                                                         PARTITION p0b VALUES LESS THAN (10, 'm'));
            UPDATE rc SET v = 0 WHERE a < 5;
            ALTER TABLE rc TRUNCATE PARTITION p0a;
            ALTER TABLE lc REORGANIZE PARTITION y INTO (PARTITION y1 VALUES IN ((NULL, 'b')),
                                                        PARTITION y2 VALUES IN ((3, 'c'), (4, 'd')));
            INSERT INTO lc VALUES (4, 'd', 13)""")
        window("reorganize")
        assert len(_partition_of(upstream_cluster, "k").definitions) == 5
        left = {r["id"] for r in c.query(f"SELECT id FROM {KINDS_DB}.k")}
        assert left and all(zlib.crc32(str(i).encode() + t.rstrip(" ").encode()) % 5 != 3
                            for i, t in ((r["id"], r["tag"]) for r in c.query(f"SELECT id, tag FROM {KINDS_DB}.k")))

        c.execute(f"""USE {KINDS_DB};
            DELETE FROM rcn WHERE a >= 5;                         -- p0a holds (a, s) < (5, '')
            ALTER TABLE rc EXCHANGE PARTITION p0a WITH TABLE rcn; -- validated over (a, s)
            INSERT INTO rcn VALUES (2, 'after', 9);
            ALTER TABLE k EXCHANGE PARTITION p0 WITH TABLE kn WITHOUT VALIDATION;
            UPDATE kn SET n = n + 1""")
        window("exchange")
        assert sorted(r["a"] for r in c.query(f"SELECT a FROM {KINDS_DB}.rc WHERE a < 5")) == [1]
