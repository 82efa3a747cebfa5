"""delta-spark and cdcflow's deletion-vector writer on one table (issue 56 item 5): on a cluster the engine
switches to delta-spark, and users run their own Spark jobs against the silver tables. What cdcflow wrote with
vectors, checkpoints, a purge and a compaction, delta-spark reads (now and at old versions) and writes (its own
UPDATE, DELETE and MERGE, its own deletion vectors and checkpoints); cdcflow's writer then continues on top of
what delta-spark wrote, and each step's rows are the ones the changes give, read by both engines."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.checks.data_quality import version_as_of
from spark_jobs.load import merge_on_read, silver_read
from spark_jobs.load.delta_writer import DeltaRsWriter

pytestmark = pytest.mark.spark

TABLE = TableInfo(
    id=78, db_name="d", name="interop",
    columns=(Column(1, "id", "bigint", nullable=False), Column(2, "k", "int"), Column(3, "c", "varchar", length=80)),
    indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),),
)  # fmt: skip
SCHEMA = pa.schema([*TABLE.arrow_schema(), pa.field("_cdc_op", pa.string())])
APP = "cdcflow/cf"
Rows = dict[int, tuple[int | None, str | None]]


def _window(rng: random.Random, want: Rows, key_space: int, n: int, tag: int) -> pa.Table:
    """A window's net changes (upserts of present, deleted or new keys; deletes of present or absent ones),
    applied to ``want`` as the writer must apply them."""
    ids = rng.sample(range(key_space), n)
    ops = ["delete" if rng.random() < 0.3 else "upsert" for _ in ids]
    cs = [None if i % 11 == 0 else f"w{tag}-{i}" for i in ids]
    for i, op, c in zip(ids, ops, cs, strict=True):
        if op == "upsert":
            want[i] = (tag, c)
        else:
            want.pop(i, None)
    return pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array([tag] * n, pa.int32()), "c": cs,
                     "_cdc_op": ops}, schema=SCHEMA)


def _sorted(want: Rows) -> list[tuple[Any, ...]]:
    return sorted((i, k, c) for i, (k, c) in want.items())


def _delta_rs_rows(path: str) -> list[tuple[Any, ...]]:
    t = silver_read.read_table(DeltaTable(path), ["id", "k", "c"])
    return sorted(zip(*(t.column(n).to_pylist() for n in ("id", "k", "c")), strict=True))


def _spark_rows(spark: Any, path: str, version: int | None = None) -> list[tuple[Any, ...]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return sorted(tuple(r) for r in reader.load(path).select("id", "k", "c").collect())


def test_delta_spark_writes_between_cdcflow_s_vector_windows_and_cdcflow_continues(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(merge_on_read, "CHECKPOINT_INTERVAL", 5)  # both engines read a checkpoint cdcflow wrote
    monkeypatch.setattr(merge_on_read, "WINDOW_FILES_TO_COMPACT", 4)  # and a compaction's commit
    path = str(tmp_path / "interop")
    writer = DeltaRsWriter(deletion_vectors=True)
    writer.ensure_table(path, TABLE)
    rows = 20_000
    want: Rows = {}
    for ids in np.array_split(np.arange(rows, dtype=np.int64), 2):
        write_deltalake(path, pa.table({"id": ids, "k": (ids % 100).astype(np.int32),
                                        "c": [f"base-{i}" for i in ids.tolist()]}, schema=TABLE.arrow_schema()),
                        mode="append")
        want.update({int(i): (int(i) % 100, f"base-{i}") for i in ids.tolist()})
    rng = random.Random(56)
    at: dict[int, list[tuple[Any, ...]]] = {}
    for w in range(1, 8):
        writer.merge(path, TABLE, _window(rng, want, rows + rows // 4, 600, w), app_id=APP, version=w)
        at[version_as_of(DeltaTable(path), w)] = _sorted(want)
    assert DeltaTable(path).deletion_vectors().read_all().num_rows > 0
    # a hollowed-out file's rows dropped (the maintenance's purge), in a commit keeping the cdcflow ts
    writer.merge(path, TABLE, pa.table({"id": pa.array(range(0, 6_000), pa.int64()), "k": pa.array([0] * 6_000,
                                        pa.int32()), "c": [None] * 6_000, "_cdc_op": ["delete"] * 6_000},
                                       schema=SCHEMA), app_id=APP, version=8)
    for i in range(6_000):
        want.pop(i, None)
    assert merge_on_read.purge_deleted_rows(path, {"cdcflow.ts": "8"})["files_purged"] >= 1
    dt = DeltaTable(path)
    history = [h["operation"] for h in dt.history()]
    assert "OPTIMIZE" in history and "REORG" in history
    assert any(p.name.endswith(".checkpoint.parquet") for p in (Path(path) / "_delta_log").iterdir())
    assert _spark_rows(spark, path) == _delta_rs_rows(path) == _sorted(want)
    versions = sorted(at)
    for version in (versions[0], versions[-1]):  # time travel: before the compaction, and across it
        assert _spark_rows(spark, path, version) == at[version], f"VERSION AS OF {version}"

    # delta-spark's own writes: an UPDATE, a DELETE and a MERGE, with its own deletion vectors
    spark_from = DeltaTable(path).version()
    spark.sql(f"UPDATE delta.`{path}` SET c = concat('spark-', cast(id AS STRING)) WHERE id % 7 = 0")
    for i, (k, _c) in list(want.items()):
        if i % 7 == 0:
            want[i] = (k, f"spark-{i}")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id BETWEEN 10000 AND 10999")
    for i in range(10_000, 11_000):
        want.pop(i, None)
    spark.createDataFrame([(i, -1, f"merged-{i}") for i in range(24_000, 26_000)], "id long, k int, c string") \
        .createOrReplaceTempView("incoming")
    spark.sql(f"""MERGE INTO delta.`{path}` t USING incoming s ON t.id = s.id
                  WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *""")
    want.update({i: (-1, f"merged-{i}") for i in range(24_000, 26_000)})
    dt = DeltaTable(path)
    ops = [h["operation"] for h in dt.history()[: dt.version() - spark_from]]
    assert sorted(ops) == ["DELETE", "MERGE", "UPDATE"], ops
    assert dt.deletion_vectors().read_all().num_rows > 0
    assert _spark_rows(spark, path) == _delta_rs_rows(path) == _sorted(want)
    assert dt.transaction_version(APP) == 8  # delta-spark keeps cdcflow's app transaction

    # cdcflow continues on top: its windows, its checkpoints and compactions over delta-spark's files and vectors
    for w in range(9, 16):
        done = writer.merge(path, TABLE, _window(rng, want, 26_000, 600, w), app_id=APP, version=w)
        assert not done.skipped
        assert _delta_rs_rows(path) == _sorted(want), f"window {w}"
    dt = DeltaTable(path)
    assert dt.transaction_version(APP) == 15 and version_as_of(dt, 15) == dt.version()
    assert silver_read.log_row_count(dt) == len(want)
    assert _spark_rows(spark, path) == _sorted(want)
    # a window already applied is skipped, after delta-spark's commits as before them
    assert writer.merge(path, TABLE, _window(rng, {}, 26_000, 10, 99), app_id=APP, version=12).skipped
