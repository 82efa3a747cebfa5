"""Removing the rows of KEY partitions (no SQL predicate) from a silver table: exactly the rows TiDB's hash puts in
them go, NULLs included, in one commit with the app transaction, streamed a batch at a time -- with and without
deletion vectors -- and a partition that holds no row makes no commit."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from cdc_core.schema.model import Column, Index, TableInfo
from cdc_core.schema.partition import KEY, PartitionDef, PartitionInfo
from cdc_core.schema.partition_rule import rule_of
from spark_jobs.load import partition_rows, silver_read
from spark_jobs.load.delta_writer import DeltaRsWriter

PART = PartitionInfo(KEY, ("k", "s"), tuple(PartitionDef(10 + i, f"p{i}") for i in range(4)))
TABLE = TableInfo(
    id=9, db_name="d", name="t",
    columns=(Column(1, "id", "bigint", nullable=False), Column(2, "k", "int"), Column(3, "s", "varchar", length=8)),
    indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), partition=PART,
)  # fmt: skip
ROWS = 5_000


def _key(k: int | None, s: str | None) -> int:
    """TiDB's LocateKeyPartition, spelled out: CRC-32 of each column's key (NULL: 0x00), mod 4."""
    data = (b"\x00" if k is None else str(k).encode()) + (b"\x00" if s is None else s.rstrip(" ").encode())
    return zlib.crc32(data) % 4


def _values(i: int) -> tuple[int | None, str | None]:
    return (None if i % 13 == 0 else i % 97), (None if i % 7 == 0 else f"s{i % 5}" + " " * (i % 3))


def _table(path: str, deletion_vectors: bool) -> list[int]:
    """A silver table of ROWS rows in 3 files; with deletion vectors, a merge deletes some through a vector."""
    DeltaRsWriter(deletion_vectors=deletion_vectors).ensure_table(path, TABLE)
    for ids in np.array_split(np.arange(ROWS, dtype=np.int64), 3):
        vals = [_values(int(i)) for i in ids]
        write_deltalake(path, pa.table({"id": ids, "k": pa.array([v[0] for v in vals], pa.int32()),
                                        "s": [v[1] for v in vals]}, schema=TABLE.arrow_schema()), mode="append")
    live = list(range(ROWS))
    if deletion_vectors:
        gone = list(range(0, ROWS, 10))
        changes = pa.table({"id": pa.array(gone, pa.int64()), "k": pa.nulls(len(gone), pa.int32()),
                            "s": pa.nulls(len(gone), pa.string()), "_cdc_op": ["delete"] * len(gone)})
        DeltaRsWriter(deletion_vectors=True).merge(path, TABLE, changes, app_id="cdcflow/x", version=5)
        assert DeltaTable(path).deletion_vectors().read_all().num_rows > 0
        live = [i for i in live if i % 10]
    return live


@pytest.mark.parametrize("deletion_vectors", [False, True])
def test_the_rows_of_key_partitions_leave_in_one_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        deletion_vectors: bool) -> None:
    monkeypatch.setattr(partition_rows, "BATCH_ROWS", 700)  # many batches: nothing holds the table at once
    path = str(tmp_path / "t")
    live = _table(path, deletion_vectors)
    rule = rule_of(PART, TABLE.columns)
    assert rule.rows_predicate([PART.definitions[1]]) is None  # no SQL for TiDB's CRC-32
    dt = DeltaTable(path)
    version = dt.version()
    props = CommitProperties(app_transactions=[Transaction(app_id="cdcflow/cf", version=77)])
    gone = [PART.definitions[1], PART.definitions[3]]
    assert partition_rows.remove_rows(dt, rule, gone, props)
    after = DeltaTable(path)
    assert after.version() == version + 1 and after.transaction_version("cdcflow/cf") == 77
    left = silver_read.read_table(after, ["id", "k", "s"])
    want = sorted(i for i in live if _key(*_values(i)) not in (1, 3))
    assert sorted(left.column("id").to_pylist()) == want
    assert {_key(*_values(i)) for i in want} == {0, 2} and any(_values(i)[0] is None for i in want)
    # The rows that stay are unchanged, trailing spaces and NULLs as they were.
    got = dict(zip(left.column("id").to_pylist(), zip(left.column("k").to_pylist(), left.column("s").to_pylist(),
                                                     strict=True), strict=True))
    assert all(got[i] == _values(i) for i in want)
    # Now partitions 1 and 3 hold nothing: removing them again reads, finds no row, and commits nothing.
    assert not partition_rows.remove_rows(after, rule, gone, props)
    assert DeltaTable(path).version() == after.version()
