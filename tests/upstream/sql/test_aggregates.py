"""Aggregate accumulators (``aggregates``): MySQL's NULL handling, DISTINCT, AVG's scale, GROUP_CONCAT, and what
DISTINCT holds accounted against the query's memory."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from cdc_core.upstream.sql.aggregates import Aggregate, fold_aggregates
from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.mem_quota import QueryMemory

ROWS: list[dict[str, Any]] = [{"a": 1, "s": "x"}, {"a": None, "s": "y"}, {"a": 3, "s": None}, {"a": 1, "s": "x"}]


def agg(text: str) -> exp.Expression:
    return sqlglot.parse_one(f"SELECT {text}", read="mysql").expressions[0]


def fold(text: str, rows: list[dict[str, Any]] = ROWS) -> Any:
    return fold_aggregates([("v", agg(text))], rows)["v"]


@pytest.mark.parametrize(("text", "want"), [
    ("COUNT(*)", 4), ("COUNT(a)", 3), ("COUNT(DISTINCT a)", 2), ("COUNT(DISTINCT a, s)", 1),
    ("SUM(a)", 5), ("SUM(DISTINCT a)", 4), ("AVG(a)", Decimal("1.6667")), ("MIN(a)", 1), ("MAX(s)", "y"),
    ("BIT_XOR(a)", 3), ("GROUP_CONCAT(s)", "x,y,x"), ("GROUP_CONCAT(DISTINCT s SEPARATOR '|')", "x|y"),
])
def test_aggregates_skip_nulls(text: str, want: Any) -> None:
    assert fold(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("COUNT(*)", 0), ("COUNT(a)", 0), ("SUM(a)", None), ("AVG(a)", None), ("MIN(a)", None), ("BIT_XOR(a)", 0),
    ("GROUP_CONCAT(s)", None)])
def test_over_no_rows(text: str, want: Any) -> None:
    assert fold(text, []) == want


def test_avg_keeps_the_argument_s_scale_and_four_more_digits() -> None:
    assert fold("AVG(a)", [{"a": Decimal("1.50")}, {"a": Decimal("2.25")}]) == Decimal("1.875000")
    assert fold("SUM(a)", [{"a": "1.5"}, {"a": 2}]) == 3.5  # a string sums as a DOUBLE, as MySQL


def test_group_concat_order_by_is_refused_by_name() -> None:
    with pytest.raises(SqlError, match="unsupported in GROUP_CONCAT: ORDER BY clause"):
        Aggregate(agg("GROUP_CONCAT(s ORDER BY s)"))


def test_distinct_values_are_accounted() -> None:
    memory = QueryMemory(quota=0)
    a = Aggregate(agg("COUNT(DISTINCT s)"), memory)
    state = a.start()
    for row in ROWS:
        a.step(state, row)
    assert a.result(state) == 2 and memory.used > 0
    tight = QueryMemory(quota=100)
    b = Aggregate(agg("COUNT(DISTINCT a)"), tight)
    state = b.start()
    with pytest.raises(SqlError, match="tidb_mem_quota_query"):
        for i in range(100):
            b.step(state, {"a": i})
