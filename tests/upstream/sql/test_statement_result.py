"""A statement's result (``statement_result``): the names a client sees when two result columns share one."""

from __future__ import annotations

from typing import Any

from cdc_core.upstream.sql.statement_result import StatementResult


def test_display_names_are_the_columns_unless_two_share_a_name(upstream_cluster: Any, fresh_db: str) -> None:
    assert StatementResult("SELECT 1", columns=["a", "b"]).display_names == ["a", "b"]
    engine = upstream_cluster.cluster.sql
    res = upstream_cluster.run(engine.execute(
        f"CREATE TABLE {fresh_db}.t (id INT PRIMARY KEY, v INT); INSERT INTO {fresh_db}.t VALUES (1, 2);"
        f"SELECT v, v, id AS v FROM {fresh_db}.t"))[-1]
    assert res.display_names == ["v", "v", "v"]  # as the client sees them
    assert len(set(res.columns)) == 3  # the rows keep each apart
    assert [res.rows[0][c] for c in res.columns] == [2, 2, 1]
