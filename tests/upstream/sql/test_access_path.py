"""Access paths of the embedded upstream's SQL: a WHERE on the handle reads those keys, not the table, and returns
what a scan filtered by the same WHERE returns."""

from __future__ import annotations

import random
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from cdc_core.schema.model import Column, Index, TableInfo
from cdc_core.upstream.sql import access_path, sql_front
from cdc_core.upstream.sql.access_path import FULL, Access, plan


def _where(sql: str) -> Any:
    return sqlglot.parse_one(f"SELECT 1 FROM t WHERE {sql}", read="mysql").args["where"].this


INT_PK = TableInfo(1, "d", "t", (Column(1, "id", "bigint", nullable=False), Column(2, "v", "varchar", length=20)),
                   indexes=(Index("PRIMARY", ("id",), unique=True, primary=True, id=1),), pk_is_handle=True)
COMMON = TableInfo(2, "d", "c", (Column(1, "a", "varchar", nullable=False, length=10),
                                 Column(2, "b", "int", nullable=False), Column(3, "v", "int")),
                   indexes=(Index("PRIMARY", ("a", "b"), unique=True, primary=True, id=1),), is_common_handle=True)
ROWID = TableInfo(3, "d", "r", (Column(1, "v", "int"),))


@pytest.mark.parametrize("where, want", [
    ("id = 5", Access(points=(5,), exact=True)),  # the WHERE is the point read: no filter on the rows read
    ("id IN (3, -1, NULL, 2)", Access(points=(-1, 2, 3), exact=True)),
    ("id IN (3, '1')", Access(points=(1, 3))),  # '1' = id holds for a row id 1, but as MySQL converts: filtered
    ("id IN (3, TRUE)", Access(points=(1, 3), exact=True)),  # TRUE is the integer 1 (as in MySQL)
    ("id = 5.0", Access(points=(5,))),
    ("5 = id AND v = 'x'", Access(points=(5,))),
    ("id IN (3, 1, 2) AND id >= 2", Access(points=(2, 3))),
    ("id = 1 AND id = 2", Access(points=())),
    ("id >= 10 AND id < 20", Access(lo=10, hi=19)),
    ("id > 9.5 AND 20 >= id", Access(lo=10, hi=20)),
    ("id BETWEEN -3 AND 3", Access(lo=-3, hi=3)),
    ("(id >= 1) AND ((id <= 4))", Access(lo=1, hi=4)),
    ("(id) IN ((3), (1))", Access(points=(1, 3), exact=True)),  # a one-element row constructor is its element
    ("(5) = (id)", Access(points=(5,), exact=True)),
    ("id = 1 OR id = 2", FULL),
    ("v = 'x'", FULL),
    ("id >= '10'", FULL),  # a string bound compares as MySQL converts it: the scan and the filter decide
    ("id = 'abc'", FULL),
    ("id + 0 = 5", FULL),
])
def test_plans_on_an_integer_handle(where: str, want: Access) -> None:
    assert plan(INT_PK, _where(where)) == want


def test_plans_on_a_common_handle_and_on_the_row_id() -> None:
    p = plan(COMMON, _where("(a, b) IN (('x', 1), ('y', 2)) AND v > 3"))
    assert p.points is not None and len(p.points) == 2 and all(isinstance(h, bytes) for h in p.points)
    assert plan(COMMON, _where("b = 1 AND a = 'x'")).points == plan(COMMON, _where("(a, b) = ('x', 1)")).points
    assert plan(COMMON, _where("a = 'x'")) == FULL  # a prefix of the handle: not a point
    assert plan(ROWID, _where("_tidb_rowid IN (7, 8)")) == Access(points=(7, 8), exact=True)
    assert not plan(COMMON, _where("(a, b) IN (('x', 1))")).exact  # a common handle's values convert: filtered
    assert plan(ROWID, _where("_tidb_rowid > 100")) == Access(lo=101)
    # A non-clustered PK or a UNIQUE key: its index entries lead to the rows (TiDB's BatchPointGet on an index).
    nonclustered = TableInfo(4, "d", "n", COMMON.columns, indexes=COMMON.indexes)
    assert plan(nonclustered, _where("(b, a) IN ((1, 'x'))")) == Access(index="PRIMARY", index_values=(("x", 1),))
    assert plan(nonclustered, _where("a = 'x' AND b IN (1, NULL)")) == Access(index="PRIMARY",
                                                                              index_values=(("x", 1),))
    assert plan(nonclustered, _where("a = 'x'")) == FULL


def test_handle_reads_match_a_filtered_scan_and_decode_only_what_they_reach(
        upstream_client: Any, fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    q = upstream_client.query
    upstream_client.execute(
        f"CREATE TABLE {fresh_db}.t (id BIGINT PRIMARY KEY, v INT);"
        f"CREATE TABLE {fresh_db}.c (a VARCHAR(10), b INT, v INT, PRIMARY KEY (a, b) CLUSTERED);"
        f"CREATE TABLE {fresh_db}.r (v INT)")
    n = 3000
    upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES " + ",".join(f"({i * 3 - 900}, {i % 7})"
                                                                           for i in range(n)))
    upstream_client.execute(f"INSERT INTO {fresh_db}.c VALUES " + ",".join(f"('k{i % 50}', {i}, {i % 5})"
                                                                           for i in range(n)))
    upstream_client.execute(f"INSERT INTO {fresh_db}.r VALUES " + ",".join(f"({i})" for i in range(n)))
    decoded = 0
    real = access_path.decoded

    def counting(info: TableInfo, value: bytes) -> dict[str, Any]:
        nonlocal decoded
        decoded += 1
        return real(info, value)

    monkeypatch.setattr(access_path, "decoded", counting)
    filtered = 0
    real_compile = sql_front.compile_expr

    def compiling(node: Any) -> Any:
        run = real_compile(node)
        if not isinstance(node, exp.Predicate | exp.Connector):  # the WHERE, evaluated on a row read (not the output)
            return run

        def evaluating(row: Any) -> Any:
            nonlocal filtered
            filtered += 1
            return run(row)

        return evaluating

    monkeypatch.setattr(sql_front, "compile_expr", compiling)
    rng = random.Random(7)
    for _ in range(40):
        a, b = sorted(rng.randrange(-1000, 9000) for _ in range(2))
        ids = ", ".join(str(rng.randrange(-1000, 9000)) for _ in range(rng.randrange(1, 30)))
        mixed = ", ".join(rng.choice([str(i), f"'{i}'", f"{i}.0", "NULL"]) for i in map(int, ids.split(", ")))
        for where, reach in [(f"id >= {a} AND id < {b} AND v <> 3", (b - a) // 3 + 2),
                             (f"id IN ({ids}) AND id > {a}", ids.count(",") + 1),
                             (f"id IN ({ids})", ids.count(",") + 1),  # exact: no row filter
                             (f"id IN ({mixed})", ids.count(",") + 1),
                             (f"id BETWEEN {a} AND {b}", (b - a) // 3 + 2)]:
            decoded = filtered = 0
            got = q(f"SELECT id, v FROM {fresh_db}.t WHERE {where} ORDER BY id")
            assert decoded <= reach, where
            assert filtered == 0 if where == f"id IN ({ids})" else filtered >= decoded, where  # each row read
            decoded = 0
            want = q(f"SELECT id, v FROM {fresh_db}.t WHERE ({where}) OR id IS NULL ORDER BY id")  # OR: a scan
            assert decoded == n
            assert got == want, where
    decoded = 0
    assert q(f"SELECT v FROM {fresh_db}.c WHERE (a, b) IN (('k3', 53), ('k3', 54), ('zz', 1))") == [{"v": 3}]
    assert q(f"SELECT v FROM {fresh_db}.r WHERE _tidb_rowid IN (1, 3000, 99999) ORDER BY v") == [
        {"v": 0}, {"v": n - 1}]
    assert decoded == 3
    upstream_client.execute(
        f"CREATE TABLE {fresh_db}.u (k VARCHAR(20) PRIMARY KEY NONCLUSTERED, e INT NOT NULL, UNIQUE KEY ue (e));"
        f"INSERT INTO {fresh_db}.u VALUES " + ",".join(f"('u{i}', {i})" for i in range(n)))
    decoded = 0
    assert q(f"SELECT e FROM {fresh_db}.u WHERE k IN ('u5', 'u7', 'nope') ORDER BY e") == [{"e": 5}, {"e": 7}]
    assert q(f"SELECT k FROM {fresh_db}.u WHERE e = 9") == [{"k": "u9"}]
    assert decoded == 3
    decoded = 0
    upstream_client.execute(f"UPDATE {fresh_db}.t SET v = 100 WHERE id = 0; DELETE FROM {fresh_db}.t WHERE id = 3")
    assert decoded == 2
    assert q(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": n - 1}]
    assert decoded == 2  # COUNT(*) counts keys
    assert q(f"SELECT v FROM {fresh_db}.t WHERE id IN (0, 3)") == [{"v": 100}]
