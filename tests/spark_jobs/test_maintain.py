"""The maintain job on small Delta tables made with deltalake: compaction reduces the file count, vacuum deletes
the tombstoned files (and the deletion vectors no live file names), both keep time travel by cdcflow ts; the
data-quality result log is checkpointed and keeps its rows."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.changefeed import dq_results
from cdc_core.changefeed.job_args.maintain import MaintainArgs
from spark_jobs import maintain
from testkit.small_lake import data_files, make_lake, version_as_of


@pytest.fixture
def sink(tmp_path: Path) -> Path:
    return make_lake(tmp_path / "lake")


def test_compaction_and_vacuum_keep_the_data_and_time_travel(sink: Path) -> None:
    path = sink / "shop" / "orders"
    before_files = data_files(path)
    assert len(DeltaTable(str(path)).file_uris()) == 5 and len(before_files) == 5
    as_of = {ts: version_as_of(path, ts) for ts in range(100, 106)}

    out = maintain.run_job(MaintainArgs(path=str(path), retention_hours=0, enforce_retention_duration=False))
    assert out["compact"]["files_before"] == 5 and out["compact"]["files_after"] == 1
    assert out["compact"]["files_removed"] == 5 and out["compact"]["files_added"] == 1
    assert out["vacuum"]["files_deleted"] == 5 and "checkpoint_version" not in out
    after_files = data_files(path)
    assert len(after_files) == 1 and not after_files & before_files  # the tombstoned files are gone from disk
    dt = DeltaTable(str(path))
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2, 3, 4]
    # maintenance commits carry the last window's ts: time travel by cdcflow ts still finds each window's version
    ops = [(h["operation"], h.get("cdcflow.ts")) for h in dt.history(3)]
    assert ops == [("VACUUM END", "104"), ("VACUUM START", "104"), ("OPTIMIZE", "104")]
    assert {ts: version_as_of(path, ts) for ts in range(100, 104)} == {ts: as_of[ts] for ts in range(100, 104)}
    assert version_as_of(path, 104) == dt.version()  # same data as the last window's version


def test_a_table_with_deletion_vectors_is_compacted_and_its_replaced_vectors_vacuumed(sink: Path) -> None:
    """Merge-on-read windows (``[sink] deletion-vectors``) leave vectors that later windows replaced: compaction
    applies the live ones, vacuum deletes every vector file no live file names, and the rows stay."""
    from cdc_core.schema.model import Column, Index, TableInfo
    from spark_jobs.load.delta_writer import DeltaRsWriter
    from spark_jobs.load.silver_read import read_table

    info = TableInfo(id=9, db_name="shop", name="lines",
                     columns=(Column(1, "id", "bigint", nullable=False), Column(2, "v", "int")),
                     indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),))
    path = sink / "shop" / "lines"
    writer = DeltaRsWriter(deletion_vectors=True)
    schema = pa.schema([*info.arrow_schema(), pa.field("_cdc_op", pa.string())])
    writer.merge(str(path), info, pa.table({"id": list(range(100)), "v": [0] * 100, "_cdc_op": ["upsert"] * 100},
                                           schema=schema), app_id="cdcflow/orders", version=100)
    for w in range(1, 4):
        writer.merge(str(path), info, pa.table({"id": [w, 50 + w], "v": [w, w], "_cdc_op": ["upsert", "delete"]},
                                               schema=schema), app_id="cdcflow/orders", version=100 + w)
    vectors = {p.name for p in path.glob("deletion_vector_*.bin")}
    assert len(vectors) == 3  # each window after the first marked the first window's file anew
    want = sorted(read_table(DeltaTable(str(path)), ["id", "v"]).to_pylist(), key=lambda r: r["id"])
    out = maintain.run_job(MaintainArgs(path=str(path), retention_hours=0, enforce_retention_duration=False))
    assert out["compact"]["files_after"] == 1
    assert not list(path.glob("deletion_vector_*.bin")), os.listdir(path)
    assert set(out["vacuum"]["deleted"]) >= vectors
    dt = DeltaTable(str(path))
    assert sorted(read_table(dt, ["id", "v"]).to_pylist(), key=lambda r: r["id"]) == want
    assert len(want) == 97 and dt.transaction_version("cdcflow/orders") == 103


def test_the_dq_result_log_is_compacted_checkpointed_and_keeps_its_rows(sink: Path) -> None:
    sink_uri = f"file://{sink}"
    path = dq_results.results_path(sink_uri)
    shutil.rmtree(path)  # the lake's stand-in, another schema
    for ts in range(1, 13):  # a dozen barriers, a commit each
        dq_results.append(sink_uri, "orders", ts, "barrier", "count", {
            "shop.orders": {"results": [{"expectation": "row_count", "success": True, "observed": ts}]}})
    assert len(DeltaTable(path).file_uris()) == 12
    out = maintain.run_job(MaintainArgs(path=path, retention_hours=0, enforce_retention_duration=False,
                                        checkpoint=True))
    assert out["compact"]["files_after"] == 1 and out["vacuum"]["files_deleted"] == 12
    dt = DeltaTable(path)
    assert sorted(dt.to_pyarrow_table().column("ts").to_pylist()) == list(range(1, 13))
    assert (Path(path) / "_delta_log" / f"{out['checkpoint_version']:020d}.checkpoint.parquet").is_file()


def test_vacuum_enforces_the_tables_retention_unless_told_not_to(sink: Path) -> None:
    path = str(sink / "shop" / "orders")
    maintain.compact_table(path)
    with pytest.raises(Exception, match=r"(?i)retention"):
        maintain.vacuum_table(path, 0)
    assert maintain.vacuum_table(path, 168)["files_deleted"] == 0  # tombstones younger than a week stay
    assert maintain.last_cdcflow_ts(path) == "104"


def test_a_vector_stays_while_a_version_inside_the_retention_names_it(sink: Path) -> None:
    """A vector file is deleted by when the version that dropped it was committed, not by its file's age: a vector
    written a month ago and replaced now stays (time travel to the versions before still reads it) until its
    tombstone is older than the retention; a vector file no action names goes once the file is that old."""
    import time

    from cdc_core.schema.model import Column, Index, TableInfo
    from spark_jobs.load.delta_writer import DeltaRsWriter
    from spark_jobs.load.merge_on_read import unreferenced_vector_files
    from spark_jobs.load.silver_read import read_table

    info = TableInfo(id=9, db_name="shop", name="aged",
                     columns=(Column(1, "id", "bigint", nullable=False), Column(2, "v", "int")),
                     indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),))
    path = sink / "shop" / "aged"
    writer = DeltaRsWriter(deletion_vectors=True)
    schema = pa.schema([*info.arrow_schema(), pa.field("_cdc_op", pa.string())])

    def window(n: int, rows: dict[str, list]) -> None:
        writer.merge(str(path), info, pa.table(rows, schema=schema), app_id="cdcflow/aged", version=n)

    window(1, {"id": list(range(10)), "v": [0] * 10, "_cdc_op": ["upsert"] * 10})
    window(2, {"id": [3], "v": [0], "_cdc_op": ["delete"]})
    (old,) = path.glob("deletion_vector_*.bin")
    month_ago = time.time() - 30 * 86400
    os.utime(old, (month_ago, month_ago))
    before = DeltaTable(str(path)).version()
    window(3, {"id": [4], "v": [0], "_cdc_op": ["delete"]})  # marks the file anew: the old vector is replaced now
    DeltaTable(str(path)).create_checkpoint()  # the tombstone is then read from the checkpoint
    stray = path / "deletion_vector_00000000-0000-0000-0000-000000000000.bin"  # a writer died before its commit
    stray.write_bytes(b"x")
    os.utime(stray, (month_ago, month_ago))

    out = maintain.vacuum_table(str(path), 168)
    assert out["deleted"] == [stray.name] and old.exists()
    rows = read_table(DeltaTable(str(path), version=before), ["id"])["id"].to_pylist()
    assert sorted(rows) == [0, 1, 2, 4, 5, 6, 7, 8, 9]  # time travel inside the retention reads the old vector
    # once the window that replaced it is older than the retention, the old vector goes, the live one stays
    (live,) = set(path.glob("deletion_vector_*.bin")) - {old}
    assert unreferenced_vector_files(str(path), 168, now=time.time() + 8 * 86400) == [str(old)]
    assert live.exists()
