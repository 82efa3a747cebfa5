"""The window's changed keys read on the driver (spark_jobs.normalize.changed_keys) against the Spark reading the checks
used alone before (window_checks.changed_keys), and the driver's key budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_core.errors import ChangefeedError
from spark_jobs.checks.window_checks import changed_keys
from spark_jobs.normalize.bronze import write_bronze
from spark_jobs.normalize.changed_keys import changed_keys_arrow
from testkit.builders import Bronze, clustered_table, nonclustered_table, rowid_table

CID, END = "keys", 100


def _window(tmp_path: Path, bronze: Bronze) -> str:
    sink = str(tmp_path / "sink")
    write_bronze(sink, CID, END, bronze.arrow())
    return sink


def _events(bronze: Bronze) -> Bronze:
    c, nc, r = clustered_table(), nonclustered_table(), rowid_table()
    bronze.put(c, 1, 10, {1: 1, 2: 5})  # before the checked range
    bronze.put(c, 2, 20, {1: 2, 2: 6}, old={1: 2, 2: 0})
    bronze.delete(c, 3, 21, {1: 3, 2: 1})
    bronze.delete(c, 4, 22, None)  # known by its handle alone
    bronze.put(c, -7, 23, {1: -7, 2: 1})
    bronze.put(c, 5, 90, {1: 5, 2: 1})  # after it
    # Non-clustered: the handle is _tidb_rowid, the Delta key the PK; an update moving the PK has both keys.
    bronze.put(nc, 1, 20, {1: 10, 2: "x", 3: 1}, old={1: 11, 2: "x", 3: 1})
    bronze.delete(nc, 2, 21, {1: 12, 2: "y", 3: None})
    bronze.put(nc, 3, 22, {1: 10, 2: "z", 3: 2})  # the same key again
    bronze.put(r, 1, 20, {1: 1, 2: "a"})
    bronze.delete(r, 2, 21, None)
    bronze.put(clustered_table(999, "other"), 1, 20, {1: 1, 2: 1})
    return bronze


def _keys(t) -> set[tuple]:
    return set(zip(*(c.to_pylist() for c in t.columns), strict=True))


def test_the_driver_reads_the_keys_spark_does(spark, tmp_path: Path, bronze: Bronze) -> None:
    sink = _window(tmp_path, _events(bronze))
    tables = [clustered_table(), nonclustered_table(), rowid_table()]
    got = changed_keys_arrow(sink, CID, END, tables, 15, 80, limit=1000)
    assert _keys(got["test.c"]) == {(2,), (3,), (4,), (-7,)}
    assert _keys(got["test.nc"]) == {(10,), (11,), (12,)}
    assert _keys(got["test.r"]) == {(1,), (2,)}
    for t in tables:
        want = changed_keys(spark, sink, CID, END, t, 15, 80)
        assert _keys(got[t.qualified_name]) == {tuple(r) for r in want.collect()}, t.qualified_name
        assert got[t.qualified_name].schema.names == list(t.delta_key())


def test_past_the_budget_the_table_with_most_keys_is_left_to_spark(tmp_path: Path, bronze: Bronze) -> None:
    c, r = clustered_table(), rowid_table()
    for i in range(300):
        bronze.put(c, i, 20, {1: i, 2: 0})
    for i in range(50):
        bronze.put(r, i, 20, {1: i, 2: "a"})
    sink = _window(tmp_path, bronze)
    got = changed_keys_arrow(sink, CID, END, [c, r], 0, 80, limit=200)
    assert got["test.c"] is None and got["test.r"] is not None and got["test.r"].num_rows == 50
    assert changed_keys_arrow(sink, CID, END, [c, r], 0, 80, limit=350)["test.c"].num_rows == 300


def test_the_budget_counts_distinct_keys(tmp_path: Path, bronze: Bronze) -> None:
    """An update holds its key twice (both images): 150 updated rows are 150 keys of the budget, not 300."""
    c, r = clustered_table(), rowid_table()
    for i in range(150):
        bronze.put(c, i, 20, {1: i, 2: 1}, old={1: i, 2: 0})
    for i in range(50):
        bronze.put(r, i, 20, {1: i, 2: "a"})
    got = changed_keys_arrow(_window(tmp_path, bronze), CID, END, [c, r], 0, 80, limit=200)
    assert got["test.c"] is not None and got["test.c"].num_rows == 150
    assert got["test.r"] is not None and got["test.r"].num_rows == 50


def test_a_window_without_the_tables_events_has_no_keys(tmp_path: Path, bronze: Bronze) -> None:
    sink = _window(tmp_path, bronze.put(clustered_table(999, "other"), 1, 20, {1: 1, 2: 1}))
    got = changed_keys_arrow(sink, CID, END, [clustered_table()], 0, 80, limit=10)
    assert got["test.c"] is not None and got["test.c"].num_rows == 0


def test_a_corrupt_value_names_table_and_key(tmp_path: Path, bronze: Bronze) -> None:
    bronze.put(clustered_table(), 1, 20, {1: 1, 2: 1})
    bronze.rows[-1]["value"] = b"\x80\x00\x02"  # rowcodec v2 header cut short
    sink = _window(tmp_path, bronze)
    with pytest.raises(ChangefeedError, match=r"test\.c .*key"):
        changed_keys_arrow(sink, CID, END, [clustered_table()], 0, 80, limit=10)


def test_a_table_with_many_keys_is_regrouped_a_logarithmic_number_of_times(
        tmp_path: Path, bronze: Bronze, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 8 events, 480 events on 120 keys: the keys are all found, de-duplicated a handful of times
    (each time they pass twice what the last de-duplication left), not once for each of the 60 batches."""
    from spark_jobs.normalize import changed_keys as ck

    c = clustered_table()
    for i in range(480):
        bronze.put(c, i % 120, 20 + i, {1: i % 120, 2: i})
    sink = _window(tmp_path, bronze)
    monkeypatch.setattr(ck, "BATCH_ROWS", 8)
    calls: list[int] = []
    distinct = ck._distinct

    def counted(t):  # type: ignore[no-untyped-def]
        calls.append(t.num_rows)
        return distinct(t)

    monkeypatch.setattr(ck, "_distinct", counted)
    got = changed_keys_arrow(sink, CID, END, [c], 0, 1000, limit=10_000)
    assert sorted(got["test.c"].column(0).to_pylist()) == list(range(120))
    assert 3 <= len(calls) <= 8, calls
