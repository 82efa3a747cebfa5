"""``PARTITION BY`` read apart from the statement, and the partitioned tables the embedded upstream makes of it as
TiDB v8.5 does: KEY (over columns, KEY() over the primary key, LINEAR ignored), RANGE COLUMNS / LIST COLUMNS over
several columns of integer, string and date types; rows keyed by the id of the partition TiDB puts them in (KEY's
against TiDB's own test expectations), a row moving between partitions, the partition DDL on them with TiDB's job
types (ADD / COALESCE PARTITION of HASH/KEY as a reorganization, TRUNCATE, DROP, REORGANIZE, EXCHANGE), and TiDB's
error codes and texts for what it refuses."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest

from cdc_core.codec import key as keycodec
from cdc_core.errors import UpstreamError
from cdc_core.schema import tidb_json
from cdc_core.schema.ddl_history import jobs_from_sql
from cdc_core.schema.model import Column
from cdc_core.schema.partition import HASH, KEY, LIST, RANGE
from cdc_core.upstream.sql.ddl.partition_clause import (
    Default,
    Maxvalue,
    PartitionSpec,
    cut_partition_clause,
    parse_partition_clause,
)
from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.table_writer import read_rows
from cdc_core.upstream.sql.txn import Transaction


def test_the_clause_is_cut_at_depth_zero_outside_literals() -> None:
    text = ("CREATE TABLE t (a INT COMMENT 'PARTITION BY x', b INT) ENGINE=InnoDB "
            "PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (5), PARTITION p1 VALUES LESS THAN MAXVALUE)")
    head, clause = cut_partition_clause(text)
    assert head == "CREATE TABLE t (a INT COMMENT 'PARTITION BY x', b INT) ENGINE=InnoDB"
    assert parse_partition_clause(clause or "") == PartitionSpec(RANGE, ("a",), ("p0", "p1"),
                                                                 less_than=((5,), (Maxvalue,)))
    assert cut_partition_clause("CREATE TABLE t (a INT)") == ("CREATE TABLE t (a INT)", None)


def test_clauses_as_tidb_takes_them() -> None:
    assert parse_partition_clause("PARTITION BY HASH (`a`) PARTITIONS 3") == PartitionSpec(
        HASH, ("a",), ("p0", "p1", "p2"))
    assert parse_partition_clause("partition by list (k) (partition x values in (1, NULL), partition y values in "
                                  "(2))") == PartitionSpec(LIST, ("k",), ("x", "y"), in_values=(((1,), (None,)),
                                                                                                ((2,),)))
    assert parse_partition_clause("PARTITION BY KEY (a, `b c`) PARTITIONS 4") == PartitionSpec(
        KEY, ("a", "b c"), ("p0", "p1", "p2", "p3"), by_columns=True)
    # KEY() is the primary key's; LINEAR is taken and ignored (a warning in TiDB); ALGORITHM is parsed
    assert parse_partition_clause("PARTITION BY LINEAR KEY ALGORITHM = 2 () PARTITIONS 2").linear
    assert parse_partition_clause("PARTITION BY KEY () PARTITIONS 2").columns == ()
    assert parse_partition_clause("PARTITION BY KEY (a) (PARTITION x, PARTITION y COMMENT 'c')").names == ("x", "y")
    assert parse_partition_clause("PARTITION BY KEY (a)").names == ("p0",)  # no PARTITIONS: one partition
    spec = parse_partition_clause(
        "PARTITION BY RANGE COLUMNS (a, s) (PARTITION p0 VALUES LESS THAN (-5, 'it''s \\'x\\''), "
        "PARTITION p1 VALUES LESS THAN (10, MAXVALUE), PARTITION p2 VALUES LESS THAN (MAXVALUE, MAXVALUE))")
    assert spec.by_columns and spec.columns == ("a", "s")
    assert spec.less_than == ((-5, "it's 'x'"), (10, Maxvalue), (Maxvalue, Maxvalue))
    spec = parse_partition_clause(
        "PARTITION BY LIST COLUMNS (a, b) (PARTITION p0 VALUES IN ((1, X'6162'), (2, NULL)), PARTITION p1 VALUES IN "
        "((3, _binary 'c')), PARTITION pd DEFAULT)")
    assert spec.in_values == (((1, b"ab"), (2, None)), ((3, b"c"),), ((Default,),))


@pytest.mark.parametrize(("clause", "message"), [
    ("PARTITION BY HASH (YEAR(d)) PARTITIONS 2", "HASH by the expression"),
    ("PARTITION BY RANGE (a) (PARTITION p VALUES IN (1))", "Only LIST PARTITIONING can use VALUES IN"),
    ("PARTITION BY LIST (a) (PARTITION p VALUES LESS THAN (1))", "Only RANGE PARTITIONING can use VALUES LESS THAN"),
    ("PARTITION BY KEY (a) (PARTITION p VALUES IN (1))", "Only LIST PARTITIONING can use VALUES IN"),
    ("PARTITION BY RANGE (a) (PARTITION p)", "Syntax : RANGE PARTITIONING requires definition of VALUES LESS THAN"),
    ("PARTITION BY RANGE COLUMNS (a)", "For RANGE partitions each partition must be defined"),
    ("PARTITION BY KEY (a) PARTITIONS 0", "Number of partitions = 0 is not an allowed value"),
    ("PARTITION BY HASH (a) PARTITIONS 3 (PARTITION x, PARTITION y)", "Wrong number of partitions defined"),
    ("PARTITION BY LIST COLUMNS (a) (PARTITION p VALUES IN (abs(1)))", "a partition value must be a literal"),
    ("PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (5) (SUBPARTITION s))", "SUBPARTITION"),
    ("PARTITION BY LINEAR RANGE (a) (PARTITION p VALUES LESS THAN (5))", "LINEAR applies to HASH and KEY"),
    ("PARTITION BY SYSTEM_TIME", "expected RANGE, LIST, HASH or KEY"),
])
def test_clauses_it_refuses(clause: str, message: str) -> None:
    with pytest.raises(SqlError, match=message):
        parse_partition_clause(clause)


def _table(upstream_cluster: Any, db: str, name: str) -> Any:
    cluster = upstream_cluster.cluster
    return upstream_cluster.call(lambda: cluster.catalog.table(db, name))


def by_partition(upstream_cluster: Any, db: str, name: str, *cols: str) -> dict[str, list[Any]]:
    """Each partition's rows (the values of ``cols``), read from the keys under its id."""
    cluster = upstream_cluster.cluster

    def read() -> dict[str, list[Any]]:
        info = cluster.catalog.table(db, name)
        names = {d.id: d.name for d in info.partition.definitions}
        out: dict[str, list[Any]] = {n: [] for n in names.values()}
        for row in read_rows(Transaction(cluster.store, cluster.tso), info):
            vals = tuple(row.values[c] for c in cols)
            out[names[row.physical_id]].append(vals[0] if len(cols) == 1 else vals)
        return {n: sorted(v) for n, v in out.items()}

    return upstream_cluster.call(read)


def last_job_meta(c: Any) -> dict[str, Any]:
    (row,) = c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1")
    return dict(json.loads(Column(1, "job_meta", "longblob").convert(row["job_meta"])))


def test_partitioned_rows_live_under_their_partition_ids(upstream_cluster: Any, upstream_client: Any,
                                                         fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
              "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))")
    c.execute(f"INSERT INTO {fresh_db}.p VALUES (1, 1), (15, 2)")
    info = _table(upstream_cluster, fresh_db, "p")
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
    # checkPartitioningKeysConstraints: a clustered key is named CLUSTERED INDEX
    with pytest.raises(UpstreamError, match=r"A CLUSTERED INDEX must include all columns.*\(MySQL error 1503\)"):
        c.execute(f"CREATE TABLE {fresh_db}.bad (id INT PRIMARY KEY, k INT) PARTITION BY HASH (k) PARTITIONS 2")
    with pytest.raises(UpstreamError, match=r"A UNIQUE INDEX must include all columns"):
        c.execute(f"CREATE TABLE {fresh_db}.bad (id INT, k INT, UNIQUE KEY (k)) PARTITION BY KEY (id) PARTITIONS 2")
    rows = c.query("SELECT PARTITION_NAME, PARTITION_METHOD, PARTITION_DESCRIPTION, TIDB_PARTITION_ID FROM "
                   f"information_schema.PARTITIONS WHERE TABLE_SCHEMA = '{fresh_db}' AND TABLE_NAME = 'p'")
    assert [tuple(r.values()) for r in rows] == [("p0", "RANGE", "10", p0), ("p1", "RANGE", "20", p1)]
    c.execute(f"TRUNCATE TABLE {fresh_db}.p")
    after = _table(upstream_cluster, fresh_db, "p")
    assert not set(after.physical_ids) & {p0, p1} and len(after.physical_ids) == 2
    rows = c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1")
    (job,) = jobs_from_sql(rows, 0)  # the truncate's job, read back from TiDB's job JSON
    assert job.table_info is not None and job.table_info.physical_ids == after.physical_ids
    part = tidb_json.table_to_tidb(after)["partition"]
    assert part["type"] == RANGE and [d["id"] for d in part["definitions"]] == list(after.physical_ids)


CITIES = [(1, "nanjing", "025"), (2, "huaian", "0517"), (3, "zhenjiang", "0518"), (4, "changzhou", "0519"),
          (5, "wuxi", "0511"), (6, "suzhou", "0512"), (7, "xuzhou", "0513"), (8, "suqian", "0513"),
          (9, "lianyungang", "0514"), (10, "yangzhou", "0515"), (11, "taizhou", "0516"), (12, "nantong", "0520"),
          (13, "yancheng", "0521"), (14, "NANJING", "025"), (15, "HUAIAN", "0527"), (16, "ZHENJIANG", "0529"),
          (17, "CHANGZHOU", "0530"), (1, "beijing", "010"), (2, "beijing", "010"), (2, "zzzzwuhan", "027")]


def test_key_partitioned_rows_go_where_tidb_puts_them(upstream_cluster: Any, upstream_client: Any,
                                                      fresh_db: str) -> None:
    c = upstream_client
    # TiDB's TestKeyPartitionTableBasic tkey0 and tkey9 (pkg/table/tables/partition_test.go); tkey9 as KEY(): the
    # primary key's columns.
    c.execute(f"""USE {fresh_db};
        CREATE TABLE k0 (col1 INT NOT NULL, col2 DATE NOT NULL, col3 INT NOT NULL, col4 INT NOT NULL,
                         UNIQUE KEY (col3)) PARTITION BY KEY(col3) PARTITIONS 4;
        CREATE TABLE k9 (JYRQ INT NOT NULL, KHH VARCHAR(12) NOT NULL, ZJZH CHAR(14) NOT NULL,
                         PRIMARY KEY (JYRQ, KHH, ZJZH)) PARTITION BY LINEAR KEY () PARTITIONS 4;
        INSERT INTO k0 VALUES (1, '2023-02-22', 1, 1), (2, '2023-02-22', 2, 2), (3, '2023-02-22', 3, 3),
                              (4, '2023-02-22', 4, 4);
        INSERT INTO k9 VALUES {", ".join(f"({j}, '{k}', '{z}')" for j, k, z in CITIES)}""")
    assert by_partition(upstream_cluster, fresh_db, "k0", "col3") == {"p0": [4], "p1": [2], "p2": [], "p3": [1, 3]}
    k9 = by_partition(upstream_cluster, fresh_db, "k9", "JYRQ", "KHH", "ZJZH")
    assert [len(k9[p]) for p in ("p0", "p1", "p2", "p3")] == [6, 3, 3, 8]
    assert (2, "huaian", "0517") in k9["p0"]
    info = _table(upstream_cluster, fresh_db, "k9")
    assert info.partition.columns == ("JYRQ", "KHH", "ZJZH") and info.partition.empty_columns
    # An update that changes the KEY columns moves the row: a delete under one id, a put under another.
    c.execute(f"UPDATE {fresh_db}.k0 SET col3 = 5 WHERE col3 = 1")  # crc32('5') % 4 == 2
    assert by_partition(upstream_cluster, fresh_db, "k0", "col3") == {"p0": [4], "p1": [2], "p2": [5], "p3": [3]}
    assert sorted(r["col3"] for r in c.query(f"SELECT col3 FROM {fresh_db}.k0")) == [2, 3, 4, 5]
    assert c.query(f"SELECT col1 FROM {fresh_db}.k0 WHERE col3 = 4") == [{"col1": 4}]
    # The job as TiDB writes it: type 4, the columns, num, is_empty_columns for KEY().
    (row,) = c.query("SELECT job_meta FROM mysql.tidb_ddl_history WHERE job_meta LIKE '%\"k9\"%' ORDER BY job_id "
                     "DESC LIMIT 1")
    meta = json.loads(Column(1, "job_meta", "longblob").convert(row["job_meta"]))
    part = meta["binlog"]["TableInfo"]["partition"]
    assert (part["type"], part["expr"], part["num"], part["is_empty_columns"]) == (4, "", 4, True)
    assert [x["L"] for x in part["columns"]] == ["jyrq", "khh", "zjzh"]
    (job,) = jobs_from_sql([row], 0)
    assert job.table_info is not None and job.table_info.partition == info.partition
    rows = c.query("SELECT PARTITION_METHOD, PARTITION_EXPRESSION, PARTITION_DESCRIPTION FROM "
                   f"information_schema.PARTITIONS WHERE TABLE_SCHEMA = '{fresh_db}' AND TABLE_NAME = 'k9'")
    assert {tuple(r.values()) for r in rows} == {("KEY", "`JYRQ`,`KHH`,`ZJZH`", None)}
    with pytest.raises(UpstreamError, match=r"Table partition metadata not correct"):
        c.execute(f"CREATE TABLE {fresh_db}.nopk (a INT) PARTITION BY KEY () PARTITIONS 2")
    with pytest.raises(UpstreamError, match=r"Field 'j' is of a not allowed type for this type of partitioning "
                                            r"\(MySQL error 1659\)"):
        c.execute(f"CREATE TABLE {fresh_db}.kj (j TEXT) PARTITION BY KEY (j) PARTITIONS 2")
    with pytest.raises(UpstreamError, match=r"Field in list of fields for partition function not found in table "
                                            r"\(MySQL error 1488\)"):
        c.execute(f"CREATE TABLE {fresh_db}.kx (a INT) PARTITION BY KEY (b) PARTITIONS 2")


def test_range_and_list_columns_over_several_columns(upstream_cluster: Any, upstream_client: Any,
                                                     fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"""USE {fresh_db};
        CREATE TABLE rc (a INT NOT NULL, s VARCHAR(8) NOT NULL, d DATE, PRIMARY KEY (a, s))
            PARTITION BY RANGE COLUMNS (a, s) (PARTITION p0 VALUES LESS THAN (10, 'm'),
                PARTITION p1 VALUES LESS THAN (10, MAXVALUE), PARTITION p2 VALUES LESS THAN (20, 'it''s'));
        CREATE TABLE rd (id INT, d DATE, PRIMARY KEY (id, d)) PARTITION BY RANGE COLUMNS (d)
            (PARTITION y2023 VALUES LESS THAN ('2024-01-01'), PARTITION y2024 VALUES LESS THAN ('2025-01-01'));
        CREATE TABLE lc (a INT, s VARCHAR(8), v INT) PARTITION BY LIST COLUMNS (a, s)
            (PARTITION x VALUES IN ((1, 'a'), (2, NULL)), PARTITION y VALUES IN ((NULL, 'b')),
             PARTITION other DEFAULT);
        INSERT INTO rc VALUES (1, 'zz', NULL), (10, 'a', NULL), (10, 'm', NULL), (10, 'z', NULL), (11, 'a', NULL),
                              (20, 'it', NULL);
        INSERT INTO rd VALUES (1, '2023-12-31'), (2, '2024-01-01'), (3, '2024-12-31');
        INSERT INTO lc VALUES (1, 'a  ', 1), (2, NULL, 2), (NULL, 'b', 3), (NULL, NULL, 4), (9, 'a', 5)""")
    assert by_partition(upstream_cluster, fresh_db, "rc", "a", "s") == {
        "p0": [(1, "zz"), (10, "a")], "p1": [(10, "m"), (10, "z")], "p2": [(11, "a"), (20, "it")]}
    assert by_partition(upstream_cluster, fresh_db, "rd", "id") == {"y2023": [1], "y2024": [2, 3]}
    assert by_partition(upstream_cluster, fresh_db, "lc", "v") == {"x": [1, 2], "y": [3], "other": [4, 5]}
    with pytest.raises(UpstreamError, match=r"Table has no partition for value from column_list \(MySQL error 1526"):
        c.execute(f"INSERT INTO {fresh_db}.rc VALUES (20, 'its', NULL)")
    c.execute(f"UPDATE {fresh_db}.rc SET s = 'b' WHERE a = 10 AND s = 'z'")  # p1 -> p0
    assert (10, "b") in by_partition(upstream_cluster, fresh_db, "rc", "a", "s")["p0"]
    rc = _table(upstream_cluster, fresh_db, "rc").partition.to_tidb()
    assert (rc["expr"], [x["O"] for x in rc["columns"]]) == ("", ["a", "s"])
    assert [d["less_than"] for d in rc["definitions"]] == [["10", "'m'"], ["10", "MAXVALUE"], ["20", "'it''s'"]]
    lc = _table(upstream_cluster, fresh_db, "lc").partition.to_tidb()
    assert [d["in_values"] for d in lc["definitions"]] == [[["1", "'a'"], ["2", "NULL"]], [["NULL", "'b'"]],
                                                          [["DEFAULT"]]]
    rows = c.query("SELECT PARTITION_NAME, PARTITION_METHOD, PARTITION_EXPRESSION, PARTITION_DESCRIPTION FROM "
                   f"information_schema.PARTITIONS WHERE TABLE_SCHEMA = '{fresh_db}' AND TABLE_NAME = 'rd'")
    assert [tuple(r.values()) for r in rows] == [("y2023", "RANGE COLUMNS", "`d`", "'2024-01-01'"),
                                                  ("y2024", "RANGE COLUMNS", "`d`", "'2025-01-01'")]
    for sql, message in (
            ("CREATE TABLE e (a INT, b INT) PARTITION BY RANGE COLUMNS (a, b) (PARTITION p VALUES LESS THAN (1))",
             r"Inconsistency in usage of column lists for partitioning \(MySQL error 1653\)"),
            ("CREATE TABLE e (a INT, b INT) PARTITION BY RANGE COLUMNS (a, b) (PARTITION p VALUES LESS THAN (1, 5),"
             " PARTITION q VALUES LESS THAN (1, 5))", r"strictly increasing for each partition \(MySQL error 1493\)"),
            ("CREATE TABLE e (a INT, d DATE) PARTITION BY RANGE COLUMNS (d) (PARTITION p VALUES LESS THAN (5))",
             r"Partition column values of incorrect type \(MySQL error 1654\)"),
            ("CREATE TABLE e (a INT, f FLOAT) PARTITION BY RANGE COLUMNS (f) (PARTITION p VALUES LESS THAN (5))",
             r"Field 'f' is of a not allowed type"),
            ("CREATE TABLE e (a INT, s VARCHAR(4)) PARTITION BY LIST COLUMNS (s) (PARTITION p VALUES IN ('a'), "
             "PARTITION q VALUES IN ('a '))", r"Multiple definition of same constant in list partitioning"),
            ("CREATE TABLE e (a INT) PARTITION BY RANGE COLUMNS (a, a) (PARTITION p VALUES LESS THAN (1, 2))",
             r"Duplicate partition field name 'a' \(MySQL error 1652\)"),
            ("CREATE TABLE e (a INT) PARTITION BY RANGE COLUMNS (a) (PARTITION p VALUES LESS THAN (NULL))",
             r"Not allowed to use NULL value in VALUES LESS THAN \(MySQL error 1566\)"),
            ("CREATE TABLE e (a INT) PARTITION BY LIST (a) (PARTITION p VALUES IN ((1, 2)))",
             r"Row expressions in VALUES IN only allowed"),
            ("CREATE TABLE e (a INT) PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN ('x'))",
             r"VALUES value for partition 'p' must have type INT \(MySQL error 1697\)")):
        with pytest.raises(UpstreamError, match=message):
            c.execute(f"USE {fresh_db}; {sql}")


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
            ("ALTER TABLE r DROP PARTITION nope", r"Error in list of partitions to DROP \(MySQL error 1507\)"),
            ("ALTER TABLE r DROP PARTITION p1, p2", r"Cannot remove all partitions, use DROP TABLE instead"),
            ("ALTER TABLE r TRUNCATE PARTITION nope", r"Unknown partition 'nope' in table 'r' \(MySQL error 1735\)"),
            ("ALTER TABLE r ADD PARTITION (PARTITION p3 VALUES LESS THAN (5))", r"strictly increasing"),
            ("ALTER TABLE r ADD PARTITION (PARTITION p2 VALUES LESS THAN (50))", r"Duplicate partition name p2"),
            ("ALTER TABLE h DROP PARTITION p0",
             r"DROP PARTITION can only be used on RANGE/LIST partitions \(MySQL error 1512\)"),
            ("ALTER TABLE r COALESCE PARTITION 1", r"PARTITION can only be used on HASH/KEY partitions \(MySQL error "
                                                   r"1509\)"),
            ("ALTER TABLE h COALESCE PARTITION 0", r"At least one partition must be coalesced \(MySQL error 1515\)"),
            ("ALTER TABLE h COALESCE PARTITION 2", r"Cannot remove all partitions, use DROP TABLE instead"),
            ("ALTER TABLE h REORGANIZE PARTITION p0 INTO (PARTITION x)", r"Unsupported reorganize partition "
                                                                         r"\(MySQL error 8200\)"),
            ("ALTER TABLE n TRUNCATE PARTITION p0", "Partition management on a not partitioned table")):
        with pytest.raises(UpstreamError, match=message):
            c.execute(f"USE {fresh_db}; {sql}")


def test_add_and_coalesce_partitions_of_hash_and_key_reorganize_them_all(upstream_cluster: Any,
                                                                          upstream_client: Any,
                                                                          fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"""USE {fresh_db};
        CREATE TABLE k (id INT PRIMARY KEY, v VARCHAR(8)) PARTITION BY KEY (id) PARTITIONS 4;
        CREATE TABLE h (id INT PRIMARY KEY) PARTITION BY HASH (id) PARTITIONS 2;
        INSERT INTO k VALUES {", ".join(f"({i}, 'v{i}')" for i in range(1, 41))};
        INSERT INTO h VALUES {", ".join(f"({i})" for i in range(-5, 6))}""")
    before = _table(upstream_cluster, fresh_db, "k")
    c.execute(f"USE {fresh_db}; ALTER TABLE k ADD PARTITION PARTITIONS 2")
    after = _table(upstream_cluster, fresh_db, "k")
    assert [d.name for d in after.partition.definitions] == ["p0", "p1", "p2", "p3", "p4", "p5"]
    assert not set(after.physical_ids) & set(before.physical_ids)  # every partition reorganized
    meta = last_job_meta(c)
    assert (meta["type"], meta["raw_args"]) == (64, [list(before.physical_ids)])  # ActionReorganizePartition
    rows = by_partition(upstream_cluster, fresh_db, "k", "id")
    assert rows == {f"p{i}": [v for v in range(1, 41) if zlib.crc32(str(v).encode()) % 6 == i]
                    for i in range(6)}
    c.execute(f"USE {fresh_db}; ALTER TABLE k COALESCE PARTITION 3; ALTER TABLE k ADD PARTITION (PARTITION extra)")
    final = _table(upstream_cluster, fresh_db, "k")
    assert [d.name for d in final.partition.definitions] == ["p0", "p1", "p2", "extra"]
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.k")) == list(range(1, 41))
    c.execute(f"USE {fresh_db}; ALTER TABLE k TRUNCATE PARTITION p1, extra")
    left = {r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.k")}
    assert left == {v for v in range(1, 41) if zlib.crc32(str(v).encode()) % 4 in (0, 2)}
    c.execute(f"USE {fresh_db}; ALTER TABLE h ADD PARTITION PARTITIONS 1; ALTER TABLE k TRUNCATE PARTITION ALL")
    assert by_partition(upstream_cluster, fresh_db, "h", "id") == {
        "p0": [-3, 0, 3], "p1": [-4, -1, 1, 4], "p2": [-5, -2, 2, 5]}  # |id % 3|, Go's remainder
    assert c.query(f"SELECT id FROM {fresh_db}.k") == []


def test_exchange_partition_swaps_ids_without_moving_a_row(upstream_cluster: Any, upstream_client: Any,
                                                          fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"""USE {fresh_db};
        CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(8), UNIQUE KEY uv (id, v))
            PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20));
        CREATE TABLE n (id INT PRIMARY KEY, v VARCHAR(8), UNIQUE KEY uv (id, v));
        CREATE TABLE wide (id INT PRIMARY KEY, v VARCHAR(8), w INT, UNIQUE KEY uv (id, v));
        INSERT INTO r VALUES (1, 'r1'), (2, 'r2'), (15, 'r15'); INSERT INTO n VALUES (3, 'n3'), (4, 'n4')""")
    before = _table(upstream_cluster, fresh_db, "r")
    nt_id = _table(upstream_cluster, fresh_db, "n").id
    p0, p1 = before.physical_ids

    def keys(physical_id: int) -> list[bytes]:
        start, end = keycodec.table_span(physical_id)
        cluster = upstream_cluster.cluster
        return [k for k, _ in upstream_cluster.call(lambda: cluster.store.scan(start, end, cluster.tso.next()))
                if k[9:11] == b"_r"]  # row keys (t{id}_r...), not index entries

    held = {p0: keys(p0), nt_id: keys(nt_id)}
    c.execute(f"USE {fresh_db}; ALTER TABLE r EXCHANGE PARTITION p0 WITH TABLE n")
    assert {p0: keys(p0), nt_id: keys(nt_id)} == held  # no row moved
    after = _table(upstream_cluster, fresh_db, "r")
    assert after.physical_ids == (nt_id, p1)
    assert _table(upstream_cluster, fresh_db, "n").id == p0
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


def test_exchange_partition_of_column_lists_and_key(upstream_cluster: Any, upstream_client: Any,
                                                   fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"""USE {fresh_db};
        CREATE TABLE rc (a INT NOT NULL, s VARCHAR(8) NOT NULL) PARTITION BY RANGE COLUMNS (a, s)
            (PARTITION p0 VALUES LESS THAN (10, 'm'), PARTITION p1 VALUES LESS THAN (MAXVALUE, MAXVALUE));
        CREATE TABLE rcn (a INT NOT NULL, s VARCHAR(8) NOT NULL);
        CREATE TABLE k (id INT PRIMARY KEY) PARTITION BY KEY (id) PARTITIONS 2;
        CREATE TABLE kn (id INT PRIMARY KEY);
        INSERT INTO rcn VALUES (10, 'a'), (10, 'n'); INSERT INTO kn VALUES (1), (2)""")
    # (10, 'n') is p1's: the whole tuple is checked, not only the first column
    with pytest.raises(UpstreamError, match=r"Found a row that does not match the partition \(MySQL error 1737\)"):
        c.execute(f"USE {fresh_db}; ALTER TABLE rc EXCHANGE PARTITION p0 WITH TABLE rcn")
    c.execute(f"USE {fresh_db}; DELETE FROM rcn WHERE s = 'n'; ALTER TABLE rc EXCHANGE PARTITION p0 WITH TABLE rcn")
    assert c.query(f"SELECT a, s FROM {fresh_db}.rc") == [{"a": 10, "s": "a"}]
    # TiDB does not check KEY's rule: WITH VALIDATION is refused, WITHOUT takes the rows
    with pytest.raises(UpstreamError, match=r"Unsupported partition type of table k when exchanging partition "
                                            r"\(MySQL error 8200\)"):
        c.execute(f"USE {fresh_db}; ALTER TABLE k EXCHANGE PARTITION p0 WITH TABLE kn")
    c.execute(f"USE {fresh_db}; ALTER TABLE k EXCHANGE PARTITION p0 WITH TABLE kn WITHOUT VALIDATION")
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.k")) == [1, 2]


def test_reorganize_partition_by_and_remove_partitioning_copy_rows_under_new_ids(
        upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    c = upstream_client
    cluster = upstream_cluster.cluster
    c.execute(f"""USE {fresh_db};
        CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(8)) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10),
            PARTITION p1 VALUES LESS THAN (20), PARTITION p2 VALUES LESS THAN MAXVALUE);
        CREATE TABLE n (id INT PRIMARY KEY, k INT, UNIQUE KEY uk (k));
        INSERT INTO r VALUES (1, 'a'), (5, 'b'), (15, 'c'), (25, 'd')""")

    def handles(physical_id: int) -> list[int]:
        start, end = keycodec.table_span(physical_id)
        return [keycodec.record_handle(k, False) for k, _ in
                upstream_cluster.call(lambda: cluster.store.scan(start, end, cluster.tso.next())) if k[9:11] == b"_r"]

    before = _table(upstream_cluster, fresh_db, "r")
    c.execute(f"USE {fresh_db}; ALTER TABLE r REORGANIZE PARTITION p0, p1 INTO "
              "(PARTITION a VALUES LESS THAN (3), PARTITION b VALUES LESS THAN (20))")
    after = _table(upstream_cluster, fresh_db, "r")
    a, b, p2 = after.physical_ids
    assert after.id == before.id and p2 == before.physical_ids[2] and not {a, b} & set(before.physical_ids)
    assert [d.name for d in after.partition.definitions] == ["a", "b", "p2"]
    assert handles(a) == [1] and handles(b) == [5, 15] and handles(p2) == [25]  # copied; p2 untouched
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.r")) == [1, 5, 15, 25]
    meta = last_job_meta(c)
    assert (meta["type"], meta["table_id"], meta["raw_args"]) == (64, before.id, [list(before.physical_ids[:2])])
    (job,) = jobs_from_sql(c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1"), 0)
    assert job.job_type == "alter table reorganize partition" and job.old_physical_ids == before.physical_ids[:2]

    c.execute(f"USE {fresh_db}; ALTER TABLE r REMOVE PARTITIONING")
    flat = _table(upstream_cluster, fresh_db, "r")
    assert flat.partition is None and flat.id not in (before.id, a, b, p2) and handles(flat.id) == [1, 5, 15, 25]
    meta = last_job_meta(c)
    assert (meta["type"], meta["table_id"], meta["binlog"]["TableInfo"]["id"]) == (72, before.id, flat.id)
    c.execute(f"USE {fresh_db}; ALTER TABLE r PARTITION BY HASH (id) PARTITIONS 2; INSERT INTO r VALUES (8, 'e')")
    hashed = _table(upstream_cluster, fresh_db, "r")
    h0, h1 = hashed.physical_ids
    assert hashed.id != flat.id and handles(h0) == [8] and handles(h1) == [1, 5, 15, 25]
    assert last_job_meta(c)["type"] == 71
    (job,) = jobs_from_sql(c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1"), 0)
    assert (job.job_type, job.old_table_id, job.table_id) == ("alter table partition by", flat.id, hashed.id)
    c.execute(f"USE {fresh_db}; ALTER TABLE r PARTITION BY KEY (id) PARTITIONS 3")
    assert _table(upstream_cluster, fresh_db, "r").partition.method == "KEY"
    c.execute(f"USE {fresh_db}; ALTER TABLE r REMOVE PARTITIONING; ALTER TABLE r PARTITION BY RANGE (id) "
              "(PARTITION lo VALUES LESS THAN (10), PARTITION hi VALUES LESS THAN MAXVALUE)")
    for sql, message in (
            # not the last partition: the new ones must end where lo did (checkReorgPartitionDefs)
            ("ALTER TABLE r REORGANIZE PARTITION lo INTO (PARTITION x VALUES LESS THAN (3))", "strictly increasing"),
            ("ALTER TABLE r REORGANIZE PARTITION hi INTO (PARTITION x VALUES LESS THAN (20))",
             r"Table has no partition for value 25 \(MySQL error 1526\)"),
            ("ALTER TABLE r REORGANIZE PARTITION nope INTO (PARTITION x VALUES LESS THAN (3))",
             r"Incorrect partition name \(MySQL error 1567\)"),
            ("ALTER TABLE n PARTITION BY HASH (id) PARTITIONS 2", "A UNIQUE INDEX must include all columns"),
            ("ALTER TABLE n REMOVE PARTITIONING", "Partition management on a not partitioned table")):
        with pytest.raises(UpstreamError, match=message):
            c.execute(f"USE {fresh_db}; {sql}")
    assert sorted(r["id"] for r in c.query(f"SELECT id FROM {fresh_db}.r")) == [1, 5, 8, 15, 25]


def test_reorganize_column_lists(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"""USE {fresh_db};
        CREATE TABLE rc (a INT NOT NULL, d DATE NOT NULL, PRIMARY KEY (a, d)) PARTITION BY RANGE COLUMNS (a, d)
            (PARTITION p0 VALUES LESS THAN (10, '2024-01-01'), PARTITION p1 VALUES LESS THAN (20, '2024-01-01'),
             PARTITION p2 VALUES LESS THAN (MAXVALUE, MAXVALUE));
        CREATE TABLE lc (a INT, s VARCHAR(4)) PARTITION BY LIST COLUMNS (a, s)
            (PARTITION x VALUES IN ((1, 'a')), PARTITION y VALUES IN ((2, 'b')), PARTITION z VALUES IN ((3, 'c')));
        INSERT INTO rc VALUES (5, '2030-01-01'), (10, '2023-01-01'), (15, '2024-01-01'), (30, '2020-01-01');
        INSERT INTO lc VALUES (1, 'a'), (2, 'b'), (3, 'c')""")
    c.execute(f"USE {fresh_db}; ALTER TABLE rc REORGANIZE PARTITION p0, p1 INTO "
              "(PARTITION a VALUES LESS THAN (10, '2023-06-01'), PARTITION b VALUES LESS THAN (20, '2024-01-01'))")
    assert by_partition(upstream_cluster, fresh_db, "rc", "a") == {"a": [5, 10], "b": [15], "p2": [30]}
    # LIST: the replaced ones need not be adjacent; the new ones take the first one's place
    c.execute(f"USE {fresh_db}; ALTER TABLE lc REORGANIZE PARTITION x, z INTO (PARTITION xz VALUES IN ((1, 'a'), "
              "(3, 'c'), (4, 'd')))")
    assert [d.name for d in _table(upstream_cluster, fresh_db, "lc").partition.definitions] == ["xz", "y"]
    assert by_partition(upstream_cluster, fresh_db, "lc", "a") == {"xz": [1, 3], "y": [2]}
    with pytest.raises(UpstreamError, match=r"Table has no partition for value from column_list"):
        c.execute(f"USE {fresh_db}; ALTER TABLE lc REORGANIZE PARTITION xz INTO (PARTITION w VALUES IN ((1, 'a')))")
    with pytest.raises(UpstreamError, match=r"not adjacent partitions \(MySQL error 8200\)"):
        c.execute(f"USE {fresh_db}; ALTER TABLE rc REORGANIZE PARTITION a, p2 INTO "
                  "(PARTITION q VALUES LESS THAN (MAXVALUE, MAXVALUE))")
