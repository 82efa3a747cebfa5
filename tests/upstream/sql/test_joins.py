"""Equi-joins (``joins``, planned by ``select_plan``): INNER, LEFT, RIGHT, USING, aliases, residual ON conditions,
NULL keys, the build side under the memory quota, and TiDB's errors for names in them."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_core.upstream.sql import mysql_errors
from cdc_core.upstream.sql.errors import SqlError
from testkit.sql_engine import error, result, values


@pytest.fixture
def db(upstream_cluster: Any, fresh_db: str) -> str:
    upstream_cluster.run(upstream_cluster.cluster.sql.execute(
        f"CREATE TABLE {fresh_db}.a (id INT PRIMARY KEY, k INT, v VARCHAR(5));"
        f"CREATE TABLE {fresh_db}.b (id INT PRIMARY KEY, k INT, w VARCHAR(5));"
        f"INSERT INTO {fresh_db}.a VALUES (1, 10, 'a1'), (2, 20, 'a2'), (3, NULL, 'a3'), (4, 40, 'a4');"
        f"INSERT INTO {fresh_db}.b VALUES (1, 10, 'b1'), (2, 10, 'b2'), (3, NULL, 'b3'), (5, 50, 'b5')"))
    return fresh_db


def test_inner_join_on_equi_keys_with_aliases(upstream_cluster: Any, db: str) -> None:
    assert values(upstream_cluster, f"SELECT x.id, y.id, y.w FROM {db}.a x JOIN {db}.b AS y ON x.k = y.k "
                                    f"ORDER BY x.id, y.id") == [(1, 1, "b1"), (1, 2, "b2")]  # NULL keys match nothing
    assert values(upstream_cluster, f"SELECT a.v, b.w FROM {db}.a INNER JOIN {db}.b ON a.id = b.id AND b.w <> 'b2' "
                                    f"ORDER BY a.v") == [("a1", "b1"), ("a3", "b3")]  # a residual ON condition
    assert values(upstream_cluster, f"SELECT COUNT(*) FROM {db}.a, {db}.b") == [(16,)]  # a cross join


def test_left_and_right_joins_keep_the_unmatched_side_with_nulls(upstream_cluster: Any, db: str) -> None:
    assert values(upstream_cluster, f"SELECT a.id, b.w FROM {db}.a LEFT JOIN {db}.b ON a.k = b.k AND b.w = 'b2' "
                                    f"ORDER BY a.id") == [(1, "b2"), (2, None), (3, None), (4, None)]
    assert values(upstream_cluster, f"SELECT a.v, b.id FROM {db}.a RIGHT JOIN {db}.b ON a.id = b.id "
                                    f"ORDER BY b.id") == [("a1", 1), ("a2", 2), ("a3", 3), (None, 5)]
    # WHERE filters after the join: the NULL-extended rows are there to filter
    assert values(upstream_cluster, f"SELECT a.id FROM {db}.a LEFT JOIN {db}.b ON a.id = b.id WHERE b.id IS NULL"
                  ) == [(4,)]


def test_using_merges_the_column(upstream_cluster: Any, db: str) -> None:
    res = result(upstream_cluster, f"SELECT * FROM {db}.a JOIN {db}.b USING (id) ORDER BY id")
    assert res.display_names == ["id", "k", "v", "k", "w"]
    assert [tuple(r[c] for c in res.columns) for r in res.rows] == [
        (1, 10, "a1", 10, "b1"), (2, 20, "a2", 10, "b2"), (3, None, "a3", None, "b3")]
    assert values(upstream_cluster, f"SELECT id, w FROM {db}.a RIGHT JOIN {db}.b USING (id) ORDER BY id") == [
        (1, "b1"), (2, "b2"), (3, "b3"), (5, "b5")]


def test_group_by_over_a_join(upstream_cluster: Any, db: str) -> None:
    assert values(upstream_cluster, f"SELECT a.id, COUNT(b.id) FROM {db}.a LEFT JOIN {db}.b ON a.k = b.k "
                                    f"GROUP BY a.id ORDER BY a.id") == [(1, 2), (2, 0), (3, 0), (4, 0)]


def test_names_in_a_join(upstream_cluster: Any, db: str) -> None:
    assert error(upstream_cluster, f"SELECT id FROM {db}.a JOIN {db}.b ON a.k = b.k") == (
        1052, "Column 'id' in field list is ambiguous")
    assert error(upstream_cluster, f"SELECT a.id FROM {db}.a JOIN {db}.b ON a.k = b.nope") == (
        1054, "Unknown column 'b.nope' in 'on clause'")
    assert error(upstream_cluster, f"SELECT 1 FROM {db}.a x JOIN {db}.b x ON x.id = x.id") == (
        1066, "Not unique table/alias: 'x'")
    assert error(upstream_cluster, f"SELECT 1 FROM {db}.a JOIN {db}.a ON a.id = a.id")[0] == 1066
    assert values(upstream_cluster, f"SELECT v, w FROM {db}.a JOIN {db}.b ON a.id = b.id WHERE a.id = 1") == [
        ("a1", "b1")]  # names only one table has need no qualifier


def test_the_build_side_is_held_under_the_quota(upstream_cluster: Any, db: str) -> None:
    session = upstream_cluster.cluster.sql.session()
    session.mem_quota_query = 300
    with pytest.raises(SqlError) as ei:
        upstream_cluster.run(session.run_script(f"SELECT a.id FROM {db}.a JOIN {db}.b ON a.id = b.id"))
    assert mysql_errors.code_of(ei.value).code == 8175


def test_a_where_on_one_table_is_pushed_into_its_read(upstream_cluster: Any, db: str) -> None:
    """A conjunct on one inner-joined table narrows that table's read (its access path), so the build side holds
    the rows it matches, not the table: under a quota the whole table's build side exceeds, it runs."""
    session = upstream_cluster.cluster.sql.session()
    session.mem_quota_query = 500
    sql = f"SELECT a.v, b.w FROM {db}.a JOIN {db}.b ON a.id = b.id"
    with pytest.raises(SqlError):
        upstream_cluster.run(session.run_script(sql))
    res = upstream_cluster.run(session.run_script(f"{sql} WHERE b.id = 2 AND a.v LIKE 'a%'"))[-1]
    assert [(r["v"], r["w"]) for r in res.rows] == [("a2", "b2")]
    # not into the table a LEFT join NULL-extends: there the WHERE is on the joined rows
    assert values(upstream_cluster, f"SELECT a.id, b.id FROM {db}.a LEFT JOIN {db}.b ON a.id = b.id "
                                    f"WHERE b.id IS NULL OR b.id = 1 ORDER BY a.id") == [(1, 1), (4, None)]
