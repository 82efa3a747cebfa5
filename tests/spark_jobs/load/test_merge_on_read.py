"""The silver tables' merge-on-read (``[sink] deletion-vectors``): windows merged as deletion vectors plus a new file
give the rows, counts and app transactions the copy-on-write MERGE gives, readable by delta-rs's scan and by Spark;
the checks read them; the log's replay, commits and checkpoints are Delta's."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.load import delta_log, merge_on_read, silver_read
from spark_jobs.load.delta_writer import DeltaRsWriter

TABLE = TableInfo(
    id=77, db_name="d", name="t",
    columns=(Column(1, "id", "bigint", nullable=False), Column(2, "k", "int"), Column(3, "c", "varchar", length=80)),
    indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),),
)  # fmt: skip
SCHEMA = pa.schema([*TABLE.arrow_schema(), pa.field("_cdc_op", pa.string())])


def _base(path: str, rows: int, files: int, deletion_vectors: bool) -> None:
    DeltaRsWriter(deletion_vectors=deletion_vectors).ensure_table(path, TABLE)
    for ids in np.array_split(np.arange(rows, dtype=np.int64), files):
        write_deltalake(path, pa.table({"id": ids, "k": (ids % 100).astype(np.int32),
                                        "c": [f"base-{i}" for i in ids.tolist()]}, schema=TABLE.arrow_schema()),
                        mode="append")


def _window(rng: random.Random, seen: set[int], rows: int, n: int, tag: int) -> pa.Table:
    """A net change set: upserts of present, deleted or new keys and deletes of present or absent ones."""
    ids = rng.sample(range(rows + rows // 4), n)
    ops = ["delete" if rng.random() < 0.3 else "upsert" for _ in ids]
    for i, op in zip(ids, ops, strict=True):
        (seen.add if op == "upsert" else seen.discard)(i)
    return pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array([tag] * n, pa.int32()),
                     "c": [None if i % 11 == 0 else f"w{tag}-{i}" for i in ids], "_cdc_op": ops}, schema=SCHEMA)


def _rows(dt: DeltaTable) -> list[tuple]:
    t = silver_read.read_table(dt, ["id", "k", "c"])
    return sorted(zip(*(t.column(n).to_pylist() for n in ("id", "k", "c")), strict=True))


def test_windows_merged_as_deletion_vectors_equal_the_copy_on_write_merge(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(merge_on_read, "CHECKPOINT_INTERVAL", 4)  # a checkpoint is read back mid-way
    rows = 6_000
    cow, mor = str(tmp_path / "cow"), str(tmp_path / "mor")
    _base(cow, rows, 3, False)
    _base(mor, rows, 3, True)
    writers = {cow: DeltaRsWriter(), mor: DeltaRsWriter(deletion_vectors=True)}
    rng = random.Random(18)
    seen: set[int] = set()
    for w in range(1, 9):
        changes = _window(rng, seen, rows, 400, w)
        done = {p: writers[p].merge(p, TABLE, changes, app_id="cdcflow/cf", version=100 + w) for p in (cow, mor)}
        assert (done[mor].rows_upserted, done[mor].rows_deleted) == (done[cow].rows_upserted, done[cow].rows_deleted)
        a, b = DeltaTable(cow), DeltaTable(mor)
        assert _rows(b) == _rows(a), f"window {w}"
        assert silver_read.log_row_count(b) == len(_rows(a))
        assert b.transaction_version("cdcflow/cf") == 100 + w
    dt = DeltaTable(mor)
    assert merge_on_read.enabled(dt) and dt.deletion_vectors().read_all().num_rows > 0
    assert any(p.name.endswith(".checkpoint.parquet") for p in (tmp_path / "mor" / "_delta_log").iterdir())
    # no file was rewritten: the base files are still live, each with a deletion vector
    base_files = {json.loads(line)["add"]["path"]
                  for line in (tmp_path / "mor" / "_delta_log" / f"{1:020}.json").read_text().splitlines()
                  if '"add"' in line}
    live = delta_log.live_adds(mor, dt.version())
    assert base_files <= {p for p, _ in live}
    assert all(a.get("deletionVector") for a in live.values() if a["path"] in base_files)
    # a window already applied is skipped, as the copy-on-write writer skips it
    again = writers[mor].merge(mor, TABLE, _window(rng, set(), rows, 10, 99), app_id="cdcflow/cf", version=105)
    assert again.skipped and DeltaTable(mor).version() == dt.version()


@pytest.mark.spark
def test_spark_reads_what_merge_on_read_wrote(spark, tmp_path: Path):
    path = str(tmp_path / "mor")
    _base(path, 3_000, 2, True)
    rng, seen = random.Random(7), set()
    for w in range(1, 4):
        DeltaRsWriter(deletion_vectors=True).merge(path, TABLE, _window(rng, seen, 3_000, 300, w),
                                                   app_id="cdcflow/cf", version=w)
    got = sorted(tuple(r) for r in spark.read.format("delta").load(path).select("id", "k", "c").collect())
    assert got == _rows(DeltaTable(path))


def test_the_checks_read_the_live_rows_at_a_windows_keys(tmp_path: Path):
    """``rows_written_since`` on a table with deletion vectors: the rows at the keys are the window's, none of the
    rows its vectors removed, whether the key was updated, deleted or inserted."""
    from spark_jobs.checks.window_checks import rows_written_since

    path = str(tmp_path / "mor")
    _base(path, 5_000, 2, True)
    changes = pa.table({"id": pa.array([10, 20, 4_000, 9_000], pa.int64()), "k": pa.array([-1] * 4, pa.int32()),
                        "c": ["u", "u", "d", "i"], "_cdc_op": ["upsert", "upsert", "delete", "upsert"]}, schema=SCHEMA)
    DeltaRsWriter(deletion_vectors=True).merge(path, TABLE, changes, app_id="cdcflow/cf", version=50)
    keys = pa.table({"id": pa.array([10, 20, 4_000, 9_000], pa.int64())})
    at = rows_written_since(DeltaTable(path), path, TABLE, 49, keys)  # after the base, stamped ts 0
    assert sorted(zip(at.column("id").to_pylist(), at.column("k").to_pylist(), strict=True)) == \
        [(10, -1), (20, -1), (9_000, -1)]


def test_a_table_turns_deletion_vectors_on_and_off(tmp_path: Path):
    path = str(tmp_path / "t")
    _base(path, 2_000, 2, False)
    assert not merge_on_read.enabled(DeltaTable(path))
    w = pa.table({"id": pa.array([1, 2], pa.int64()), "k": pa.array([5, 5], pa.int32()), "c": ["a", "b"],
                  "_cdc_op": ["upsert", "delete"]}, schema=SCHEMA)
    DeltaRsWriter(deletion_vectors=True).merge(path, TABLE, w, app_id="a", version=1)
    dt = DeltaTable(path)
    assert merge_on_read.enabled(dt) and dt.deletion_vectors().read_all().num_rows == 1
    # off again: the copy-on-write MERGE drops the vectors of the files it rewrites
    w2 = pa.table({"id": pa.array([3], pa.int64()), "k": pa.array([6], pa.int32()), "c": ["c"],
                   "_cdc_op": ["upsert"]}, schema=SCHEMA)
    DeltaRsWriter().merge(path, TABLE, w2, app_id="a", version=2)
    dt = DeltaTable(path)
    assert not merge_on_read.enabled(dt)
    rows = dict((i, k) for i, k, _ in _rows(dt))
    assert len(rows) == 1_999 and rows[1] == 5 and 2 not in rows and rows[3] == 6


def test_a_commit_of_a_version_someone_else_committed_is_refused(tmp_path: Path):
    path = str(tmp_path / "t")
    _base(path, 10, 1, True)
    v = DeltaTable(path).version() + 1
    delta_log.commit(path, v, [delta_log.commit_info("WRITE", v - 1, {})])
    with pytest.raises(delta_log.CommitConflict, match=f"another writer committed version {v}"):
        delta_log.commit(path, v, [delta_log.commit_info("WRITE", v - 1, {})])
    assert DeltaTable(path).version() == v


def test_window_files_are_compacted_once_they_pile_up(tmp_path: Path, monkeypatch):
    """Each window adds a small file; once ``WINDOW_FILES_TO_COMPACT`` have piled up they are bin-packed (their
    deletion vectors applied) in a commit carrying the window's cdcflow ts, and the rows stay the copy-on-write
    MERGE's."""
    from spark_jobs.checks.data_quality import version_as_of

    monkeypatch.setattr(merge_on_read, "WINDOW_FILES_TO_COMPACT", 3)
    cow, mor = str(tmp_path / "cow"), str(tmp_path / "mor")
    _base(cow, 3_000, 1, False)
    _base(mor, 3_000, 1, True)
    rng, seen = random.Random(5), set()
    for w in range(1, 8):
        changes = _window(rng, seen, 3_000, 100, w)
        DeltaRsWriter().merge(cow, TABLE, changes, app_id="a", version=w)
        DeltaRsWriter(deletion_vectors=True).merge(mor, TABLE, changes, app_id="a", version=w)
        dt = DeltaTable(mor)
        assert len(dt.file_uris()) <= 3, f"window {w}: {len(dt.file_uris())} files"
        assert _rows(dt) == _rows(DeltaTable(cow)) and version_as_of(dt, w) == dt.version()
    assert "OPTIMIZE" in [h["operation"] for h in DeltaTable(mor).history()]


def test_a_rollback_restores_the_vectors_of_its_version(tmp_path: Path):
    """A failed check's rollback (``rollback.roll_back``: delta-rs's restore) of a table with deletion vectors gives
    back the rows of the version at the ts, vectors and all, and records the ts as the applied version."""
    from spark_jobs.rollback import roll_back

    sink = tmp_path / "lake"
    path = str(sink / TABLE.db_name / TABLE.name)
    _base(path, 4_000, 2, True)
    rng, seen = random.Random(9), set()
    at: dict[int, list[tuple]] = {}
    for w in (10, 20, 30):
        DeltaRsWriter(deletion_vectors=True).merge(path, TABLE, _window(rng, seen, 4_000, 300, w),
                                                   app_id="cdcflow/cf", version=w)
        at[w] = _rows(DeltaTable(path))
    done = roll_back(str(sink), "cf", [TABLE], 10, "a check failed")
    assert done[TABLE.qualified_name]["restored"] is True
    dt = DeltaTable(path)
    assert _rows(dt) == at[10] and silver_read.log_row_count(dt) == len(at[10])
    assert dt.transaction_version("cdcflow/cf") == 10


def test_a_file_hollowed_out_by_its_deletion_vector_is_purged(tmp_path: Path):
    """A large file keeps its vector through compaction (delta-rs's leaves files above its target size): the purge
    rewrites a file whose vector removes a fifth of its rows or more without them, a row group at a time, in a
    commit that keeps the table's cdcflow ts; a file below the share keeps its vector."""
    import pyarrow.parquet as pq
    from deltalake import WriterProperties

    from spark_jobs.checks.data_quality import version_as_of

    path = str(tmp_path / "t")
    DeltaRsWriter(deletion_vectors=True).ensure_table(path, TABLE)
    for ids in np.array_split(np.arange(20_000, dtype=np.int64), 2):  # row groups of 1,000 rows: the purge streams
        write_deltalake(path, pa.table({"id": ids, "k": (ids % 100).astype(np.int32),
                                        "c": [f"base-{i}" for i in ids.tolist()]}, schema=TABLE.arrow_schema()),
                        mode="append", writer_properties=WriterProperties(max_row_group_size=1_000))
    (first,) = [a for a in delta_log.live_adds(path, DeltaTable(path).version()).values()
                if json.loads(a["stats"])["minValues"]["id"] == 0]
    assert pq.ParquetFile(Path(path) / first["path"]).num_row_groups == 10
    ids = [*range(0, 10_000, 3), 12_000]  # a third of the first file, one row of the second
    DeltaRsWriter(deletion_vectors=True).merge(
        path, TABLE, pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array([0] * len(ids), pa.int32()),
                               "c": [None] * len(ids), "_cdc_op": ["delete"] * len(ids)}, schema=SCHEMA),
        app_id="a", version=40)
    want = _rows(DeltaTable(path))
    done = merge_on_read.purge_deleted_rows(path, {"cdcflow.ts": "40"})
    assert done == {"files_purged": 1, "rows_dropped": len(ids) - 1}
    dt = DeltaTable(path)
    assert _rows(dt) == want and silver_read.log_row_count(dt) == len(want) == 20_000 - len(ids)
    assert dt.deletion_vectors().read_all().num_rows == 1  # the second file's single row stays a vector
    assert dt.transaction_version("a") == 40 and version_as_of(dt, 40) == dt.version()
    purged = [a for a in delta_log.live_adds(path, dt.version()).values() if not a.get("deletionVector")]
    stats = json.loads(purged[0]["stats"])
    assert stats["numRecords"] == 10_000 - (len(ids) - 1) and stats["minValues"]["id"] == 1
    assert stats["maxValues"]["id"] == 9_998 and stats["nullCount"]["c"] == 0
    assert merge_on_read.purge_deleted_rows(path, {}) == {"files_purged": 0, "rows_dropped": 0}


@pytest.mark.spark
def test_the_delta_spark_writer_takes_the_option_too(spark, tmp_path: Path):
    """``[sink] deletion-vectors`` with the delta-spark writer: it creates the table with vectors and its own MERGEs
    write them; the counts and the checks' reads at keys go through them as for the delta-rs writer's, and the rows
    are the copy-on-write MERGE's."""
    from spark_jobs.checks.window_checks import rows_written_since
    from spark_jobs.load.delta_writer import DeltaSparkWriter

    cow, dvs = str(tmp_path / "cow"), str(tmp_path / "dvs")
    rng, seen = random.Random(11), set()
    base = pa.table({"id": pa.array(range(2_000), pa.int64()), "k": pa.array([0] * 2_000, pa.int32()),
                     "c": [f"b{i}" for i in range(2_000)], "_cdc_op": ["upsert"] * 2_000}, schema=SCHEMA)
    writer = DeltaSparkWriter(spark, deletion_vectors=True)
    for p, w in ((cow, DeltaRsWriter()), (dvs, writer)):
        w.merge(p, TABLE, base, app_id="cdcflow/cf", version=1)
    assert merge_on_read.enabled(DeltaTable(dvs))
    changes = _window(rng, seen, 2_000, 200, 2)
    DeltaRsWriter().merge(cow, TABLE, changes, app_id="cdcflow/cf", version=2)
    writer.merge(dvs, TABLE, changes, app_id="cdcflow/cf", version=2)
    dt = DeltaTable(dvs)
    assert dt.deletion_vectors().read_all().num_rows > 0, "delta-spark wrote no deletion vector"
    assert _rows(dt) == _rows(DeltaTable(cow)) and silver_read.log_row_count(dt) == len(_rows(dt))
    at = rows_written_since(dt, dvs, TABLE, 1, changes.select(["id"]))
    want = sorted(r for r in _rows(dt) if r[0] in set(changes.column("id").to_pylist()))
    assert sorted(zip(*(at.column(n).to_pylist() for n in ("id", "k", "c")), strict=True)) == want


def test_the_rows_at_keys_come_from_the_row_groups_that_hold_them(tmp_path: Path):
    """``silver_read.rows_at_keys`` on a file of ten row groups: the rows at keys in groups 0, 3 and 9 (one of them
    twice in a group), none at a key its vector removed or at a key no row has."""
    from deltalake import WriterProperties

    path = str(tmp_path / "t")
    DeltaRsWriter(deletion_vectors=True).ensure_table(path, TABLE)
    ids = np.arange(10_000, dtype=np.int64)
    write_deltalake(path, pa.table({"id": ids, "k": (ids % 100).astype(np.int32), "c": [f"b{i}" for i in ids]},
                                   schema=TABLE.arrow_schema()),
                    mode="append", writer_properties=WriterProperties(max_row_group_size=1_000))
    DeltaRsWriter(deletion_vectors=True).merge(
        path, TABLE, pa.table({"id": pa.array([3_500], pa.int64()), "k": pa.array([0], pa.int32()), "c": [None],
                               "_cdc_op": ["delete"]}, schema=SCHEMA), app_id="a", version=1)
    (base,) = [a for a in delta_log.live_adds(path, DeltaTable(path).version()).values() if a.get("deletionVector")]
    keys = pa.table({"id": pa.array([9_999, 5, 3_500, 3_001, 12, 20_000, 3_999], pa.int64())})
    got = pa.concat_tables(silver_read.rows_at_keys(path, [base], keys, ["id", "c"]))
    assert sorted(zip(got.column("id").to_pylist(), got.column("c").to_pylist(), strict=True)) == \
        [(i, f"b{i}") for i in (5, 12, 3_001, 3_999, 9_999)]
