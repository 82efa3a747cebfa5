"""The window checks' comparison on the driver of the rows at the changed keys, and the job's arguments
(spark_jobs.checks.window_checks)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa

from spark_jobs.checks.window_checks import same_rows


def test_same_rows_compares_multisets_of_rows_whatever_their_order_and_chunks() -> None:
    a = pa.table({"k": [1, 2, 2, None], "v": ["x", "y", "y", None]})
    shuffled = a.take([2, 3, 0, 1])
    assert same_rows(a, shuffled) and same_rows(pa.concat_tables([a.slice(0, 1), a.slice(1)]), shuffled)
    # the same set of rows with another multiplicity, and one value changed
    assert not same_rows(a, a.take([0, 0, 1, 3]))
    assert not same_rows(a, pa.table({"k": [1, 2, 2, None], "v": ["x", "y", "z", None]}))
    assert not same_rows(a, a.slice(1))
    typed = pa.table({"d": pa.array([Decimal("1.10"), Decimal("2.00")], pa.decimal128(5, 2)),
                      "t": pa.array([datetime(2020, 1, 1), None], pa.timestamp("us")),
                      "b": pa.array([b"\x00", b"\xff"]), "day": pa.array([date(2020, 1, 2), date(1970, 1, 1)])})
    assert same_rows(typed, typed.take([1, 0]))
    assert not same_rows(typed, typed.set_column(0, "d", pa.array([Decimal("1.10"), Decimal("2.01")],
                                                                   pa.decimal128(5, 2))))


def test_same_rows_is_false_without_exact_equality_and_compares_unsortable_types_as_tuples() -> None:
    nan = pa.table({"f": [1.0, float("nan")]})
    assert not same_rows(nan, nan)  # a NaN equals nothing: the table is compared again in Spark
    listed = pa.table({"l": pa.array([[1.5, 2.0], [2.0], []], pa.list_(pa.float32()))})  # a VECTOR's elements
    assert same_rows(listed, listed.take([2, 0, 1]))  # compared as tuples
    assert not same_rows(listed, pa.table({"l": pa.array([[1.5, 2.0], [2.0], [0.0]], pa.list_(pa.float32()))}))
    nested = pa.table({"s": pa.array([{"a": 1}, {"a": 2}])})
    assert same_rows(nested, nested.take([1, 0]))
    assert not same_rows(nested, pa.table({"s": pa.array([{"a": 1}, {"a": 3}])}))
