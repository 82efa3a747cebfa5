"""SELECT's stages at the engine (``select_plan``): DISTINCT, GROUP BY, HAVING, ORDER BY / LIMIT / OFFSET, names and
TiDB's errors for them; NULLs as MySQL orders, groups and de-duplicates them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from cdc_core.upstream.sql import mysql_errors
from cdc_core.upstream.sql.errors import SqlError
from testkit.sql_engine import error, values


def run(cluster: Any, sql: str) -> list[dict[str, Any]]:
    return list(cluster.run(cluster.cluster.sql.execute(sql))[-1].rows)


@pytest.fixture
def t(upstream_cluster: Any, fresh_db: str) -> str:
    upstream_cluster.run(upstream_cluster.cluster.sql.execute(
        f"CREATE TABLE {fresh_db}.t (id INT PRIMARY KEY, g INT, c VARCHAR(10), k INT);"
        f"INSERT INTO {fresh_db}.t VALUES (1, 1, 'b', 10), (2, 1, NULL, 20), (3, 2, 'a', NULL), (4, 2, 'b', 40),"
        f" (5, NULL, 'a', 50), (6, NULL, NULL, 60)"))
    return f"{fresh_db}.t"


def test_distinct_treats_nulls_as_one_value(upstream_cluster: Any, t: str) -> None:
    assert values(upstream_cluster, f"SELECT DISTINCT c FROM {t} ORDER BY c") == [(None,), ("a",), ("b",)]
    assert values(upstream_cluster, f"SELECT DISTINCT g, c FROM {t} WHERE id BETWEEN 1 AND 4 ORDER BY g, c") == [
        (1, None), (1, "b"), (2, "a"), (2, "b")]


def test_group_by_with_the_common_aggregates_and_nulls(upstream_cluster: Any, t: str) -> None:
    rows = values(upstream_cluster, f"SELECT g, COUNT(*), COUNT(c), COUNT(DISTINCT c), SUM(k), AVG(k), MIN(c),"
                                    f" MAX(k), GROUP_CONCAT(c) FROM {t} GROUP BY g ORDER BY g")
    from decimal import Decimal
    assert rows == [
        (None, 2, 1, 1, 110, Decimal("55.0000"), "a", 60, "a"),  # NULLs group together, first ascending
        (1, 2, 1, 1, 30, Decimal("15.0000"), "b", 20, "b"),
        (2, 2, 2, 2, 40, Decimal("40.0000"), "a", 40, "a,b"),  # SUM / AVG skip the NULL k
    ]


def test_aggregates_over_no_rows(upstream_cluster: Any, t: str) -> None:
    assert values(upstream_cluster, f"SELECT COUNT(*), COUNT(k), SUM(k), AVG(k), MAX(c) FROM {t} WHERE id > 99") == [
        (0, 0, None, None, None)]
    assert values(upstream_cluster, f"SELECT g, COUNT(*) FROM {t} WHERE id > 99 GROUP BY g") == []


def test_having_alias_and_position(upstream_cluster: Any, t: str) -> None:
    assert values(upstream_cluster, f"SELECT g AS grp, SUM(k) AS s FROM {t} GROUP BY grp HAVING s > 35 "
                                    f"ORDER BY 2 DESC") == [(None, 110), (2, 40)]
    assert values(upstream_cluster, f"SELECT g, COUNT(*) FROM {t} GROUP BY 1 HAVING COUNT(*) >= 2 AND g > 1") == [
        (2, 2)]


def test_order_by_nulls_first_ascending_last_descending_and_limit_offset(upstream_cluster: Any, t: str) -> None:
    assert [r["k"] for r in run(upstream_cluster, f"SELECT k FROM {t} ORDER BY k")] == [None, 10, 20, 40, 50, 60]
    assert [r["k"] for r in run(upstream_cluster, f"SELECT k FROM {t} ORDER BY k DESC")] == [60, 50, 40, 20, 10, None]
    assert [r["id"] for r in run(upstream_cluster, f"SELECT id FROM {t} ORDER BY k DESC LIMIT 2, 2")] == [4, 2]
    assert [r["id"] for r in run(upstream_cluster, f"SELECT id FROM {t} ORDER BY k LIMIT 2 OFFSET 1")] == [1, 2]
    assert [r["id"] for r in run(upstream_cluster, f"SELECT id FROM {t} LIMIT 3, 2")] == [4, 5]
    # by an expression over columns not selected, by an alias
    assert [r["id"] for r in run(upstream_cluster, f"SELECT id, g * 10 + id AS x FROM {t} WHERE g IS NOT NULL "
                                                   f"ORDER BY x DESC")] == [4, 3, 2, 1]
    assert [r["id"] for r in run(upstream_cluster, f"SELECT id FROM {t} ORDER BY c DESC, id LIMIT 3")] == [1, 4, 3]


def test_names_as_written(upstream_cluster: Any, t: str) -> None:
    res = upstream_cluster.run(upstream_cluster.cluster.sql.execute(
        f"SELECT count(*), sum(k) AS total, 1+1, k FROM {t}  GROUP BY k ORDER BY k LIMIT 1"))[-1]
    assert res.display_names == ["count(*)", "total", "1+1", "k"]


def test_only_full_group_by(upstream_cluster: Any, t: str) -> None:
    db = t.split(".")[0]
    code, msg = error(upstream_cluster, f"SELECT c, COUNT(*) FROM {t} GROUP BY g")
    assert code == 1055
    assert msg == (f"Expression #1 of SELECT list is not in GROUP BY clause and contains nonaggregated column "
                   f"'{db}.t.c' which is not functionally dependent on columns in GROUP BY clause; this is "
                   "incompatible with sql_mode=only_full_group_by")
    code, msg = error(upstream_cluster, f"SELECT c, COUNT(*) FROM {t}")
    assert code == 1140 and "In aggregated query without GROUP BY, expression #1 of SELECT list" in msg
    # a column of a table whose primary key is grouped is functionally dependent on it
    assert len(run(upstream_cluster, f"SELECT id, c, COUNT(*) FROM {t} GROUP BY id")) == 6
    # without the mode, the group's first row
    assert values(upstream_cluster, f"SET sql_mode = ''; SELECT g, c FROM {t} WHERE g = 1 GROUP BY g") == [(1, "b")]


def test_errors_name_what_is_wrong(upstream_cluster: Any, t: str) -> None:
    assert error(upstream_cluster, f"SELECT nope FROM {t}") == (1054, "Unknown column 'nope' in 'field list'")
    assert error(upstream_cluster, f"SELECT id FROM {t} WHERE nope = 1") == (
        1054, "Unknown column 'nope' in 'where clause'")
    assert error(upstream_cluster, f"SELECT id FROM {t} ORDER BY nope") == (
        1054, "Unknown column 'nope' in 'order clause'")
    assert error(upstream_cluster, f"SELECT x.id FROM {t}") == (1054, "Unknown column 'x.id' in 'field list'")
    assert error(upstream_cluster, f"SELECT id FROM {t} a, {t} a")[0] == 1066
    assert error(upstream_cluster, f"SELECT id FROM {t} WHERE id IN (SELECT 1)")[0] == 1235
    assert error(upstream_cluster, f"SELECT GROUP_CONCAT(c ORDER BY c) FROM {t}")[0] == 1235
    assert error(upstream_cluster, f"SELECT UPPER(c) FROM {t}") == (1235, "unsupported expression 'UPPER(c)'")
    db = t.split(".")[0]
    assert error(upstream_cluster, f"SELECT DISTINCT c FROM {t} ORDER BY k") == (
        3065, f"Expression #1 of ORDER BY clause is not in SELECT list, references column '{db}.t.k' which is not "
              "in SELECT list; this is incompatible with DISTINCT")
    assert len(run(upstream_cluster, f"SELECT DISTINCT c, k FROM {t} ORDER BY k + 1, c")) == 6


def test_a_quota_stops_a_query_that_holds_too_much(upstream_cluster: Any, t: str) -> None:
    from cdc_core.upstream.sql.mem_quota import MEM_QUOTA_EXCEEDED_TEXT

    session = upstream_cluster.cluster.sql.session()
    session.mem_quota_query = 600  # a few rows' worth
    with pytest.raises(SqlError) as ei:
        upstream_cluster.run(session.run_script(f"SELECT c FROM {t} ORDER BY c"))
    assert mysql_errors.code_of(ei.value).code == 8175
    assert mysql_errors.strip_context(ei.value.message) == MEM_QUOTA_EXCEEDED_TEXT.format(conn=0)
    # a plain scan streams and holds nothing it is accounted for; a LIMIT keeps its heap of N
    assert len(upstream_cluster.run(session.run_script(f"SELECT c FROM {t}"))[-1].rows) == 6
    assert len(upstream_cluster.run(session.run_script(f"SELECT c FROM {t} ORDER BY c LIMIT 1"))[-1].rows) == 1
    with pytest.raises(SqlError):  # a LIMIT past the heap's bound sorts every row, accounted
        upstream_cluster.run(session.run_script(f"SELECT c FROM {t} ORDER BY c LIMIT 1000000"))


# --- sysbench oltp_read_write's reads, through real drivers ----------------------------------------------------
OLTP_READS = [  # sysbench's oltp_common.lua, as its prepared statements send them
    ("SELECT c FROM sbtest1 WHERE id=?", (7,)),
    ("SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ?", (10, 19)),
    ("SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN ? AND ?", (10, 19)),
    ("SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c", (10, 19)),
    ("SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c", (10, 19)),
]


@pytest.fixture
def sbtest(upstream_cluster: Any, fresh_db: str) -> str:
    rows = ", ".join(f"({i}, {i % 7}, 'c-{i % 5:03d}', 'pad')" for i in range(1, 101))
    upstream_cluster.run(upstream_cluster.cluster.sql.execute(
        f"CREATE TABLE {fresh_db}.sbtest1 (id INT NOT NULL AUTO_INCREMENT, k INT NOT NULL DEFAULT '0', "
        "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id), KEY k_1 (k));"
        f"INSERT INTO {fresh_db}.sbtest1 VALUES {rows}"))
    return fresh_db


def _expected() -> list[list[tuple[Any, ...]]]:
    ids = range(10, 20)
    cs = [f"c-{i % 5:03d}" for i in ids]
    return [[("c-002",)], [(c,) for c in cs], [(sum(i % 7 for i in ids),)], [(c,) for c in sorted(cs)],
            [(c,) for c in sorted(set(cs))]]


def test_oltp_read_write_reads_through_pymysql(upstream_cluster: Any, sbtest: str) -> None:
    import pymysql

    host, _, port = upstream_cluster.mysql_addr.rpartition(":")
    conn = pymysql.connect(host=host, port=int(port), user="root", database=sbtest, autocommit=True)
    try:
        with conn.cursor() as cur:
            got = []
            for sql, args in OLTP_READS:
                cur.execute(sql.replace("?", "%s"), args)
                got.append([tuple(int(v) if isinstance(v, Decimal) else v for v in r) for r in cur.fetchall()])
            assert got == _expected()
            cur.execute("SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 10 AND 19")
            assert [d[0] for d in cur.description] == ["SUM(k)"]
    finally:
        conn.close()


def test_oltp_read_write_reads_through_mysql_connector_s_prepared_cursor(upstream_cluster: Any, sbtest: str) -> None:
    import mysql.connector

    host, _, port = upstream_cluster.mysql_addr.rpartition(":")
    conn = mysql.connector.connect(host=host, port=int(port), user="root", database=sbtest, autocommit=True,
                                   use_pure=True)
    try:
        cur = conn.cursor(prepared=True)
        for _ in range(2):  # each statement executed again, as sysbench re-executes its prepared statements
            got = []
            for sql, args in OLTP_READS:
                cur.execute(sql, args)
                got.append([tuple(int(v) if isinstance(v, Decimal) else v for v in r) for r in cur.fetchall()])
            assert got == _expected()
        cur.execute("SELECT ?, count(*) FROM sbtest1 WHERE id < ?", ("x", 5))
        assert cur.fetchall() == [("x", 4)] and cur.column_names == ("?", "count(*)")
        cur.close()
    finally:
        conn.close()


def test_group_by_over_50000_rows_within_the_quota(upstream_cluster: Any, fresh_db: str) -> None:
    import time

    n = 50_000
    engine = upstream_cluster.cluster.sql
    upstream_cluster.run(engine.execute(f"CREATE TABLE {fresh_db}.big (id INT PRIMARY KEY, g INT, v INT)"))
    for start in range(0, n, 10_000):
        rows = ", ".join(f"({i}, {i % 5000}, {i})" for i in range(start, start + 10_000))
        upstream_cluster.run(engine.execute(f"INSERT INTO {fresh_db}.big VALUES {rows}"))
    began = time.perf_counter()
    res = upstream_cluster.run(engine.execute(
        f"SELECT g, COUNT(*), SUM(v) FROM {fresh_db}.big GROUP BY g ORDER BY g DESC LIMIT 3"))[-1]
    took = time.perf_counter() - began
    assert [tuple(r[c] for c in res.columns) for r in res.rows] == [
        (4999, 10, sum(range(4999, n, 5000))), (4998, 10, sum(range(4998, n, 5000))),
        (4997, 10, sum(range(4997, n, 5000)))]
    print(f"GROUP BY over {n} rows into 5000 groups: {took:.2f} s")
    assert took < 30
