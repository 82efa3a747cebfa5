"""The embedded upstream's expressions compiled once and run on each row (``cdc_core/upstream/sql/expr.py``)."""

from __future__ import annotations

import zlib
from decimal import Decimal
from typing import Any

import pytest
import sqlglot

from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.expr import compile_expr, evaluate


def _parse(text: str) -> Any:
    return sqlglot.parse_one(text, read="mysql")


ROWS = [{"id": 1, "v": "a", "d": Decimal("1.50"), "n": None}, {"id": -7, "v": "", "d": Decimal("0.00"), "n": 3},
        {"id": 12, "v": None, "d": None, "n": None}]


@pytest.mark.parametrize(("text", "want"), [
    ("CAST(CRC32(CONCAT_WS(',', id, v, d, n, CONCAT(ISNULL(id), ISNULL(v), ISNULL(d), ISNULL(n)))) AS UNSIGNED)",
     [zlib.crc32(b"1,a,1.50,0001"), zlib.crc32(b"-7,,0.00,3,0000"), zlib.crc32(b"12,0111")]),
    ("id IN (1, 12, NULL)", [True, None, True]),
    ("id IN (1, '12')", [True, False, True]),
    ("n > 1 OR v = 'a'", [True, True, None]),
    ("NOT (d BETWEEN 1 AND 2) AND v IS NOT NULL", [False, True, False]),
    ("id * 2 + n", [None, -11, None]),
    ("v LIKE 'a%'", [True, False, None]),
    ("HEX(id)", ["1", "FFFFFFFFFFFFFFF9", "C"]),
])
def test_one_compiled_expression_evaluates_each_row_as_evaluating_it_alone(text: str, want: list[Any]) -> None:
    node = _parse(text)
    run = compile_expr(node)
    assert [run(r) for r in ROWS] == want
    assert [evaluate(node, r) for r in ROWS] == want  # compiled and run once


def test_an_unsupported_construct_fails_when_compiled_before_any_row() -> None:
    # TiDB's error for a function it does not have (1305 in a database; 1046 with none selected)
    with pytest.raises(SqlError, match="No database selected"):
        compile_expr(_parse("id = 1 OR FOOBAR(v) = 'x'"))  # even where a row would never reach it
    with pytest.raises(SqlError, match="unsupported expression"):
        compile_expr(_parse("id = ANY (SELECT 1)"))


def test_what_a_row_decides_is_an_error_of_the_evaluation_not_of_the_compilation() -> None:
    bad = compile_expr(_parse("id + 1"))  # a column where only constants may be (no row): an error per evaluation
    with pytest.raises(SqlError, match="column 'id' is not allowed here"):
        bad(None)
    with pytest.raises(SqlError, match="unknown column 'x'"):
        compile_expr(_parse("x = 1"))({"id": 1})
    assert compile_expr(_parse("1 + 2 * 3"))(None) == 7
    cast_date = compile_expr(_parse("CAST(n AS DATE)"))  # a CAST this engine lacks: NULL stays NULL
    assert cast_date(ROWS[0]) is None
    with pytest.raises(SqlError, match="unsupported CAST"):
        cast_date(ROWS[1])
    failing_item = compile_expr(_parse("n IN (1, 'x' + 1)"))  # an item that fails is evaluated on a row that needs it
    assert failing_item(ROWS[0]) is None
    with pytest.raises(SqlError, match="'x' is not a number"):
        failing_item(ROWS[1])


def test_one_off_values_take_no_compilation() -> None:
    assert [evaluate(_parse(t), None) for t in ("5", "-5", "NULL", "'s'", "-2.50")] == [5, -5, None, "s",
                                                                                          Decimal("-2.50")]


def test_count_star_counts_and_other_aggregates_of_star_are_unsupported(upstream_cluster: Any, fresh_db: str) -> None:
    execute = upstream_cluster.cluster.sql.execute
    upstream_cluster.run(execute(f"CREATE TABLE {fresh_db}.a (id INT PRIMARY KEY); "
                                 f"INSERT INTO {fresh_db}.a VALUES (1), (2)"))
    (r,) = upstream_cluster.run(execute(f"SELECT COUNT(*) AS n FROM {fresh_db}.a"))
    assert r.rows == [{"n": 2}]
    for agg in ("SUM", "MIN", "MAX", "BIT_XOR"):
        with pytest.raises(SqlError, match=r"unsupported expression '\*'"):
            upstream_cluster.run(execute(f"SELECT {agg}(*) FROM {fresh_db}.a"))


def test_a_where_the_engine_cannot_evaluate_fails_on_an_empty_table(upstream_cluster: Any, fresh_db: str) -> None:
    """The WHERE is compiled before the scan: an unsupported construct is reported though no row is read."""
    upstream_cluster.run(upstream_cluster.cluster.sql.execute(f"CREATE TABLE {fresh_db}.e (id INT PRIMARY KEY)"))
    with pytest.raises(SqlError, match=f"FUNCTION {fresh_db}.foobar does not exist"):
        upstream_cluster.run(upstream_cluster.cluster.sql.execute(
            f"USE {fresh_db}; SELECT * FROM {fresh_db}.e WHERE FOOBAR(id) = 'x'"))
