"""File pruning by statistics (``spark_jobs/load/file_pruning.py``): integer, string, date and decimal keys exclude
files whose range admits none of them, every bound only in its safe direction (a truncated string max, a decimal
rounded through a double); a merge-on-read window reads only the files that may hold its keys, whatever the key's
type, and lands what copy-on-write lands."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.load import merge_on_read, silver_read
from spark_jobs.load.delta_writer import DeltaRsWriter
from spark_jobs.load.file_pruning import may_hold


def _add(lo: Any, hi: Any, rows: int = 10) -> dict[str, Any]:
    stats = f'{{"numRecords":{rows},"minValues":{{"k":{lo}}},"maxValues":{{"k":{hi}}},"nullCount":{{"k":0}}}}'
    json.loads(stats)
    return {"path": "f.parquet", "stats": stats}


def _keys(values: list[Any], t: pa.DataType) -> pa.Table:
    return pa.table({"k": pa.array(values, t)})


def test_integer_keys_are_pruned_exactly() -> None:
    assert may_hold(_add(10, 20), _keys([5, 20], pa.int64()), "k")
    assert not may_hold(_add(10, 20), _keys([5, 21], pa.int64()), "k")
    assert not may_hold(_add(10, 20, rows=0), _keys([15], pa.int64()), "k")  # an empty file holds nothing


def test_string_keys_are_pruned_and_a_truncated_max_still_admits_what_it_cut() -> None:
    strings = pa.string()
    assert not may_hold(_add('"b"', '"d"'), _keys(["a", "e"], strings), "k")
    assert may_hold(_add('"b"', '"d"'), _keys(["da"], strings), "k")  # "d" may be the cut of a longer max
    assert may_hold(_add('"b"', '"d"'), _keys(["a", "cz"], strings), "k")
    # a writer kept 3 characters of the max "abcxyz": "abcx" is above "abc" yet may be in the file
    assert may_hold(_add('"aaa"', '"abc"'), _keys(["abcx"], pa.large_string()), "k")
    assert not may_hold(_add('"aaa"', '"abc"'), _keys(["abd", "a"], strings), "k")
    # code-point order is UTF-8 byte order, Delta's: "é" (U+00E9) sorts after "z"
    assert may_hold(_add('"z"', '"\\u00ff"'), _keys(["é"], strings), "k")
    assert not may_hold(_add('"a"', '"z"'), _keys(["é"], strings), "k")


def test_date_and_decimal_keys_are_pruned_with_decimal_bounds_widened() -> None:
    d = datetime.date
    assert not may_hold(_add('"2024-01-10"', '"2024-01-20"'), _keys([d(2024, 1, 9), d(2024, 1, 21)], pa.date32()),
                        "k")
    assert may_hold(_add('"2024-01-10"', '"2024-01-20"'), _keys([d(2024, 1, 20)], pa.date32()), "k")
    dec = pa.decimal128(38, 10)
    far = [Decimal("1.5"), Decimal("99.5")]
    assert not may_hold(_add("2.0", "3.0"), _keys(far, dec), "k")
    # 2.0000000000000000001 rounded through a double is 2.0: the bound admits the key it rounded away
    assert may_hold(_add("2.0", "2.0"), _keys([Decimal("2.0000000001")], dec), "k")
    assert may_hold(_add("12345678901234567890", "12345678901234567890"),
                    _keys([Decimal("12345678901234567891")], pa.decimal128(38, 0)), "k")


def test_what_is_not_compared_is_admitted() -> None:
    assert may_hold({"path": "f"}, _keys([1], pa.int64()), "k")  # no statistics
    assert may_hold(_add('"2024-01-01T00:00:00.000Z"', '"2024-01-01T00:00:00.000Z"'),
                    _keys([datetime.datetime(2030, 1, 1)], pa.timestamp("us")), "k")
    assert may_hold(_add('"x"', '"y"'), _keys(["a"], pa.string()), "other")  # no bound for the column


@pytest.mark.parametrize("kind", ["varchar", "date", "decimal"])
def test_a_window_reads_only_the_files_that_may_hold_its_keys(tmp_path: Path, kind: str) -> None:
    """Ten files of 1,000 keys each (written by delta-rs, its own statistics), a window changing keys of one file:
    one file's key columns are read, and the table equals what copy-on-write makes of the same window."""
    if kind == "varchar":
        col, values = Column(1, "k", "varchar", nullable=False, length=20), [f"key-{i:06d}" for i in range(10_000)]
    elif kind == "date":
        col = Column(1, "k", "date", nullable=False)
        values = [datetime.date(2000, 1, 1) + datetime.timedelta(days=i) for i in range(10_000)]
    else:
        col = Column(1, "k", "decimal", nullable=False, precision=30, scale=4)
        values = [Decimal(i) / 100 - Decimal(50) for i in range(10_000)]  # -50.00 .. 49.99
    info = TableInfo(id=5, db_name="d", name=kind, columns=(col, Column(2, "v", "int")),
                     indexes=(Index("PRIMARY", ("k",), unique=True, primary=True),))
    schema = info.arrow_schema()
    source_schema = pa.schema([*schema, pa.field("_cdc_op", pa.string())])
    changed = pa.table({"k": pa.array(values[3_100:3_110], schema.field("k").type), "v": [7] * 10,
                        "_cdc_op": ["upsert"] * 5 + ["delete"] * 5}, schema=source_schema)
    tables = {}
    for dv in (True, False):
        path = str(tmp_path / f"{kind}-{dv}")
        writer = DeltaRsWriter(deletion_vectors=dv)
        writer.ensure_table(path, info)
        for f in range(10):
            write_deltalake(path, pa.table({"k": pa.array(values[f * 1000:(f + 1) * 1000], schema.field("k").type),
                                            "v": pa.array([0] * 1000, pa.int32())}, schema=schema), mode="append")
        if dv:
            done = merge_on_read.merge(DeltaTable(path), path, info, changed, app_id="cdcflow/t", txn_version=1,
                                       metadata={})
            assert (done.files_read, done.files_marked, done.deleted) == (1, 1, 5)
        else:
            writer.merge(path, info, changed, app_id="cdcflow/t", version=1)
        rows = silver_read.read_table(DeltaTable(path), ["k", "v"])
        tables[dv] = sorted(zip(rows["k"].to_pylist(), rows["v"].to_pylist(), strict=True))
    assert tables[True] == tables[False] and len(tables[True]) == 9_995


def test_the_vector_writer_gives_decimals_bounds_only_where_a_double_holds_them_exactly() -> None:
    rows = pa.table({"a": pa.array([Decimal("-12345678901.2345"), Decimal("0.0100")], pa.decimal128(15, 4)),
                     "b": pa.array([Decimal("1" * 30), Decimal(1)], pa.decimal128(30, 0))})
    stats = json.loads(json.dumps(merge_on_read.file_stats(rows)), parse_float=Decimal)
    assert stats["minValues"] == {"a": Decimal("-12345678901.2345")} and stats["maxValues"] == {"a": Decimal("0.01")}
