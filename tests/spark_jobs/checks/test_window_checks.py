"""The window checks' comparison on the driver of the rows at the changed keys, and the job's arguments
(spark_jobs.checks.window_checks)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.checks import window_checks
from spark_jobs.checks.window_checks import same_rows
from testkit.builders import clustered_table


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


def test_the_job_arguments_are_checked_when_built_and_name_what_is_wrong() -> None:
    table = clustered_table()
    args: dict[str, Any] = {"sink_uri": "file:///lake", "changefeed_id": "cf", "window_end_ts": "18446744073709551615",
                            "tables": [{"table": table.to_json()}, {"table": table.to_dict(), "content": False}],
                            "after_ts": 5, "ts": 9, "pd_addr": "127.0.0.1:2379"}
    opts = window_checks.WindowChecksArgs.from_dict(args)
    assert opts.window_end_ts == 2**64 - 1 and opts.mode == "checksum" and opts.tidb is None  # a ts past 2**53
    assert opts.tables == ((table, True), (table, False)) and opts.reads_upstream
    # the read ahead finds a job's result by its arguments: equal arguments, equal keys; another ts, another key
    assert opts.key() == window_checks.WindowChecksArgs.from_dict(dict(args)).key()
    assert opts.key() != window_checks.WindowChecksArgs.from_dict({**args, "ts": 8}).key()
    with pytest.raises(ValueError, match=r"window_checks: unknown argument\(s\) \['tss'\]"):
        window_checks.WindowChecksArgs.from_dict({**args, "tss": 9})
    with pytest.raises(ValueError, match=r"window_checks: missing argument\(s\) \['after_ts'\]"):
        window_checks.WindowChecksArgs.from_dict({k: v for k, v in args.items() if k != "after_ts"})
    with pytest.raises(ValueError, match="window_checks: ts must be an integer ts, got 'soon'"):
        window_checks.WindowChecksArgs.from_dict({**args, "ts": "soon"})
    with pytest.raises(ValueError, match=r"window_checks: tables\[1\] must be"):
        window_checks.WindowChecksArgs.from_dict({**args, "tables": [{"table": table.to_json()}, table.to_json()]})
    for mode in ("sha1", None):
        with pytest.raises(ValueError, match="data-quality mode must be one of"):
            window_checks.WindowChecksArgs.from_dict({**args, "mode": mode})
        with pytest.raises(ValueError, match="data-quality mode must be one of"):
            window_checks.WindowChecksArgs.from_dict({**args, "mode": mode, "tables": []})
    with pytest.raises(ValueError, match="the changed-key checks need the upstream"):
        window_checks.WindowChecksArgs.from_dict({**args, "pd_addr": None})
    # without the upstream: mode "off", or only tables whose content is not checked
    assert not window_checks.WindowChecksArgs.from_dict({**args, "pd_addr": None, "mode": "off"}).reads_upstream
    only_structure = {**args, "pd_addr": None, "tables": [{"table": table.to_json(), "content": False}]}
    assert not window_checks.WindowChecksArgs.from_dict(only_structure).reads_upstream
