"""``CREATE TABLE ... PARTITION BY`` read apart from the statement, and the partitioned tables it makes: rows keyed
by their partition's id, a row moving between partitions, TiDB's errors 1503 / 1526, PARTITIONS in
information_schema, TRUNCATE giving every partition a new id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cdc_core.codec import key as keycodec
from cdc_core.errors import UpstreamError
from cdc_core.schema import tidb_json
from cdc_core.schema.ddl_history import jobs_from_sql
from cdc_core.schema.model import Column
from cdc_core.schema.partition import HASH, LIST, RANGE
from cdc_core.upstream.errors import SqlError
from cdc_core.upstream.partition_clause import PartitionSpec, cut_partition_clause, parse_partition_clause


def test_the_clause_is_cut_at_depth_zero_outside_literals() -> None:
    text = ("CREATE TABLE t (a INT COMMENT 'PARTITION BY x', b INT) ENGINE=InnoDB "
            "PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (5), PARTITION p1 VALUES LESS THAN MAXVALUE)")
    head, clause = cut_partition_clause(text)
    assert head == "CREATE TABLE t (a INT COMMENT 'PARTITION BY x', b INT) ENGINE=InnoDB"
    assert parse_partition_clause(clause or "") == PartitionSpec(RANGE, "a", ("p0", "p1"), less_than=(5, None))
    assert cut_partition_clause("CREATE TABLE t (a INT)") == ("CREATE TABLE t (a INT)", None)
    assert parse_partition_clause("PARTITION BY HASH (`a`) PARTITIONS 3") == PartitionSpec(HASH, "a", ("p0", "p1",
                                                                                                     "p2"))
    assert parse_partition_clause("partition by list (k) (partition x values in (1, NULL), partition y values in "
                                  "(2))") == PartitionSpec(LIST, "k", ("x", "y"), in_values=((1, None), (2,)))
    for bad in ("PARTITION BY RANGE COLUMNS (a, b) (PARTITION p VALUES LESS THAN (1, 2))",
                "PARTITION BY HASH (YEAR(d)) PARTITIONS 2", "PARTITION BY KEY (a) PARTITIONS 2",
                "PARTITION BY RANGE (a) (PARTITION p VALUES IN (1))"):
        with pytest.raises(SqlError, match="unsupported"):
            parse_partition_clause(bad)


def test_partitioned_rows_live_under_their_partition_ids(upstream_cluster: Any, upstream_client: Any,
                                                         fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
              "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))")
    c.execute(f"INSERT INTO {fresh_db}.p VALUES (1, 1), (15, 2)")
    info = upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.table(fresh_db, "p"))
    p0, p1 = info.physical_ids
    assert info.id not in (p0, p1)

    def keys(pid: int) -> list[bytes]:
        start, end = keycodec.table_span(pid)
        cluster = upstream_cluster.cluster
        return [k for k, _ in upstream_cluster.call(lambda: cluster.store.scan(start, end, cluster.tso.next()))]

    assert keys(p0) == [keycodec.row_key(p0, 1)] and keys(p1) == [keycodec.row_key(p1, 15)] and keys(info.id) == []
    c.execute(f"UPDATE {fresh_db}.p SET id = 11 WHERE id = 1")  # p0 -> p1
    assert keys(p0) == [] and keys(p1) == [keycodec.row_key(p1, 11), keycodec.row_key(p1, 15)]
    with pytest.raises(UpstreamError, match=r"Table has no partition for value 20 \(MySQL error 1526\)"):
        c.execute(f"INSERT INTO {fresh_db}.p VALUES (20, 3)")
    with pytest.raises(UpstreamError, match="A PRIMARY KEY must include all columns"):
        c.execute(f"CREATE TABLE {fresh_db}.bad (id INT PRIMARY KEY, k INT) PARTITION BY HASH (k) PARTITIONS 2")
    rows = c.query("SELECT PARTITION_NAME, PARTITION_METHOD, PARTITION_DESCRIPTION, TIDB_PARTITION_ID FROM "
                   f"information_schema.PARTITIONS WHERE TABLE_SCHEMA = '{fresh_db}' AND TABLE_NAME = 'p'")
    assert [tuple(r.values()) for r in rows] == [("p0", "RANGE", "10", p0), ("p1", "RANGE", "20", p1)]
    c.execute(f"TRUNCATE TABLE {fresh_db}.p")
    after = upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.table(fresh_db, "p"))
    assert not set(after.physical_ids) & {p0, p1} and len(after.physical_ids) == 2
    rows = c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1")
    (job,) = jobs_from_sql(rows, 0)  # the truncate's job, read back from TiDB's job JSON
    assert job.table_info is not None and job.table_info.physical_ids == after.physical_ids
    part = tidb_json.table_to_tidb(after)["partition"]
    assert part["type"] == RANGE and [d["id"] for d in part["definitions"]] == list(after.physical_ids)


def test_partition_ddl_jobs_and_their_errors(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE r (id INT PRIMARY KEY) PARTITION BY RANGE (id) "
              "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20)); "
              "CREATE TABLE h (id INT) PARTITION BY HASH (id) PARTITIONS 2; CREATE TABLE n (id INT)")
    c.execute(f"USE {fresh_db}; INSERT INTO r VALUES (1), (15); ALTER TABLE r ADD PARTITION "
              "(PARTITION p2 VALUES LESS THAN (30)); INSERT INTO r VALUES (25)")
    c.execute(f"USE {fresh_db}; ALTER TABLE r DROP PARTITION p0; ALTER TABLE r TRUNCATE PARTITION p2")
    assert c.query(f"SELECT id FROM {fresh_db}.r") == [{"id": 15}]  # p0's and p2's rows are gone
    rows = c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 3")
    jobs = sorted(jobs_from_sql(rows, 0), key=lambda j: j.job_id)
    assert [j.job_type for j in jobs] == ["add partition", "drop partition", "truncate partition"]
    assert [[d.name for d in j.table_info.partition.definitions] for j in jobs if j.table_info and
            j.table_info.partition] == [["p0", "p1", "p2"], ["p1", "p2"], ["p1", "p2"]]
    assert jobs[1].table_info and jobs[2].table_info and jobs[1].table_info.physical_ids[1] not in \
        jobs[2].table_info.physical_ids  # a truncated partition comes back under a new id
    for sql, message in (
            ("ALTER TABLE r DROP PARTITION nope", "Unknown partition 'nope' in table 'r'"),
            ("ALTER TABLE r DROP PARTITION p1, p2", "Cannot remove all partitions, use DROP TABLE instead"),
            ("ALTER TABLE r ADD PARTITION (PARTITION p3 VALUES LESS THAN (5))", "strictly increasing"),
            ("ALTER TABLE h DROP PARTITION p0", "DROP PARTITION can only be used on RANGE/LIST partitions"),
            ("ALTER TABLE h ADD PARTITION PARTITIONS 2", "HASH partitions are reorganized"),
            ("ALTER TABLE n TRUNCATE PARTITION p0", "Partition management on a not partitioned table")):
        with pytest.raises(UpstreamError, match=message):
            c.execute(f"USE {fresh_db}; {sql}")


def test_exchange_partition_swaps_ids_without_moving_a_row(upstream_cluster: Any, upstream_client: Any,
                                                          fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"""USE {fresh_db};
        CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(8), UNIQUE KEY uv (id, v))
            PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20));
        CREATE TABLE n (id INT PRIMARY KEY, v VARCHAR(8), UNIQUE KEY uv (id, v));
        CREATE TABLE wide (id INT PRIMARY KEY, v VARCHAR(8), w INT, UNIQUE KEY uv (id, v));
        INSERT INTO r VALUES (1, 'r1'), (2, 'r2'), (15, 'r15'); INSERT INTO n VALUES (3, 'n3'), (4, 'n4')""")
    before = upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.table(fresh_db, "r"))
    nt_id = upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.table(fresh_db, "n")).id
    p0, p1 = before.physical_ids

    def keys(physical_id: int) -> list[bytes]:
        start, end = keycodec.table_span(physical_id)
        cluster = upstream_cluster.cluster
        return [k for k, _ in upstream_cluster.call(lambda: cluster.store.scan(start, end, cluster.tso.next()))
                if k[9:11] == b"_r"]  # row keys (t{id}_r...), not index entries

    held = {p0: keys(p0), nt_id: keys(nt_id)}
    c.execute(f"USE {fresh_db}; ALTER TABLE r EXCHANGE PARTITION p0 WITH TABLE n")
    assert {p0: keys(p0), nt_id: keys(nt_id)} == held  # no row moved
    after = upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.table(fresh_db, "r"))
    assert after.physical_ids == (nt_id, p1)
    assert upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.table(fresh_db, "n")).id == p0
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.r")) == [3, 4, 15]
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.n")) == [1, 2]
    # Rows written after it go where the tables now are; the unique index follows the rows.
    c.execute(f"USE {fresh_db}; INSERT INTO r VALUES (5, 'r5'); INSERT INTO n VALUES (7, 'n7')")
    assert keycodec.row_key(nt_id, 5) in keys(nt_id) and keycodec.row_key(p0, 7) in keys(p0)
    with pytest.raises(UpstreamError, match="Duplicate entry"):
        c.execute(f"INSERT INTO {fresh_db}.r VALUES (3, 'x')")
    # The job as TiDB writes it: the normal table's, the partitioned table in its args and binlog.
    (row,) = c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1")
    meta = json.loads(Column(1, "job_meta", "longblob").convert(row["job_meta"]))
    assert (meta["type"], meta["table_id"], meta["table_name"], meta["raw_args"]) == (
        42, nt_id, "n", [p0, before.db_id, before.id, "p0", True])
    assert [d["id"] for d in meta["binlog"]["TableInfo"]["partition"]["definitions"]] == [nt_id, p1]
    (job,) = jobs_from_sql([row], 0)
    assert (job.job_type, job.table_id, job.old_table_id, job.partition_id) == ("exchange partition", before.id,
                                                                                 nt_id, p0)
    for sql, message in (
            ("ALTER TABLE r EXCHANGE PARTITION p1 WITH TABLE n", "Found a row that does not match the partition"),
            ("ALTER TABLE r EXCHANGE PARTITION p0 WITH TABLE wide", "Tables have different definitions"),
            ("ALTER TABLE r EXCHANGE PARTITION nope WITH TABLE n", "Unknown partition 'nope' in table 'r'"),
            ("ALTER TABLE n EXCHANGE PARTITION p0 WITH TABLE r", "Partition management on a not partitioned"),
            ("ALTER TABLE r EXCHANGE PARTITION p0 WITH TABLE r", "Table to exchange with partition is partitioned")):
        with pytest.raises(UpstreamError, match=message):
            c.execute(f"USE {fresh_db}; {sql}")
    # WITHOUT VALIDATION takes the rows as they are (n's ids 1, 2, 7 now sit in p1, whose range is 10..19).
    c.execute(f"USE {fresh_db}; ALTER TABLE r EXCHANGE PARTITION p1 WITH TABLE n WITHOUT VALIDATION")
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.r")) == [1, 2, 3, 4, 5, 7]
    assert [r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.n")] == [15]


def test_reorganize_partition_by_and_remove_partitioning_copy_rows_under_new_ids(
        upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    c = upstream_client
    cluster = upstream_cluster.cluster
    c.execute(f"""USE {fresh_db};
        CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(8)) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10),
            PARTITION p1 VALUES LESS THAN (20), PARTITION p2 VALUES LESS THAN MAXVALUE);
        CREATE TABLE n (id INT PRIMARY KEY, k INT, UNIQUE KEY uk (k));
        INSERT INTO r VALUES (1, 'a'), (5, 'b'), (15, 'c'), (25, 'd')""")

    def table(name: str) -> Any:
        return upstream_cluster.call(lambda: cluster.catalog.table(fresh_db, name))

    def handles(physical_id: int) -> list[int]:
        start, end = keycodec.table_span(physical_id)
        return [keycodec.record_handle(k, False) for k, _ in
                upstream_cluster.call(lambda: cluster.store.scan(start, end, cluster.tso.next())) if k[9:11] == b"_r"]

    def last_job() -> dict[str, Any]:
        (row,) = c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1")
        return json.loads(Column(1, "job_meta", "longblob").convert(row["job_meta"]))

    before = table("r")
    c.execute(f"USE {fresh_db}; ALTER TABLE r REORGANIZE PARTITION p0, p1 INTO "
              "(PARTITION a VALUES LESS THAN (3), PARTITION b VALUES LESS THAN (20))")
    after = table("r")
    a, b, p2 = after.physical_ids
    assert after.id == before.id and p2 == before.physical_ids[2] and not {a, b} & set(before.physical_ids)
    assert [d.name for d in after.partition.definitions] == ["a", "b", "p2"]
    assert handles(a) == [1] and handles(b) == [5, 15] and handles(p2) == [25]  # copied; p2 untouched
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.r")) == [1, 5, 15, 25]
    meta = last_job()
    assert (meta["type"], meta["table_id"], meta["raw_args"]) == (64, before.id, [list(before.physical_ids[:2])])
    (job,) = jobs_from_sql(c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1"), 0)
    assert job.job_type == "alter table reorganize partition" and job.old_physical_ids == before.physical_ids[:2]

    c.execute(f"USE {fresh_db}; ALTER TABLE r REMOVE PARTITIONING")
    flat = table("r")
    assert flat.partition is None and flat.id not in (before.id, a, b, p2) and handles(flat.id) == [1, 5, 15, 25]
    meta = last_job()
    assert (meta["type"], meta["table_id"], meta["binlog"]["TableInfo"]["id"]) == (72, before.id, flat.id)
    c.execute(f"USE {fresh_db}; ALTER TABLE r PARTITION BY HASH (id) PARTITIONS 2; INSERT INTO r VALUES (8, 'e')")
    hashed = table("r")
    h0, h1 = hashed.physical_ids
    assert hashed.id != flat.id and handles(h0) == [8] and handles(h1) == [1, 5, 15, 25]
    assert last_job()["type"] == 71
    (job,) = jobs_from_sql(c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1"), 0)
    assert (job.job_type, job.old_table_id, job.table_id) == ("alter table partition by", flat.id, hashed.id)
    c.execute(f"USE {fresh_db}; ALTER TABLE r REMOVE PARTITIONING; ALTER TABLE r PARTITION BY RANGE (id) "
              "(PARTITION lo VALUES LESS THAN (10), PARTITION hi VALUES LESS THAN MAXVALUE)")
    for sql, message in (
            ("ALTER TABLE r REORGANIZE PARTITION lo INTO (PARTITION x VALUES LESS THAN (3))",
             "Table has no partition for value 5"),
            ("ALTER TABLE r REORGANIZE PARTITION nope INTO (PARTITION x VALUES LESS THAN (3))",
             "Unknown partition 'nope'"),
            ("ALTER TABLE n PARTITION BY HASH (id) PARTITIONS 2", "A UNIQUE INDEX must include all columns"),
            ("ALTER TABLE n REMOVE PARTITIONING", "Partition management on a not partitioned table")):
        with pytest.raises(UpstreamError, match=message):
            c.execute(f"USE {fresh_db}; {sql}")
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.r")) == [1, 5, 8, 15, 25]
