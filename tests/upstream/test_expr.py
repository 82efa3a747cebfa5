"""The embedded upstream's expressions compiled once and run on each row (``cdc_core/upstream/expr.py``)."""

from __future__ import annotations

import zlib
from decimal import Decimal
from typing import Any

import pytest
import sqlglot

from cdc_core.upstream.errors import SqlError
from cdc_core.upstream.expr import compile_expr, evaluate


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
    with pytest.raises(SqlError, match=r"unsupported function 'FOOBAR\(v\)'"):
        compile_expr(_parse("id = 1 OR FOOBAR(v) = 'x'"))  # even where a row would never reach it
    with pytest.raises(SqlError, match="unsupported expression"):
        compile_expr(_parse("id = ANY (SELECT 1)"))


def test_a_constant_part_is_computed_once_and_its_error_raised_on_evaluation() -> None:
    bad = compile_expr(_parse("id + 1"))  # a column where only constants may be (no row): an error per evaluation
    with pytest.raises(SqlError, match="column 'id' is not allowed here"):
        bad(None)
    with pytest.raises(SqlError, match="unknown column 'x'"):
        compile_expr(_parse("x = 1"))({"id": 1})
    assert compile_expr(_parse("1 + 2 * 3"))(None) == 7


def test_a_where_the_engine_cannot_evaluate_fails_on_an_empty_table(upstream_cluster: Any, fresh_db: str) -> None:
    """The WHERE is compiled before the scan: an unsupported construct is reported though no row is read."""
    upstream_cluster.run(upstream_cluster.cluster.sql.execute(f"CREATE TABLE {fresh_db}.e (id INT PRIMARY KEY)"))
    with pytest.raises(SqlError, match="unsupported function"):
        upstream_cluster.run(upstream_cluster.cluster.sql.execute(
            f"SELECT * FROM {fresh_db}.e WHERE FOOBAR(id) = 'x'"))
