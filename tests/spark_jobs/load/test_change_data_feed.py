"""``[sink] change-data-feed``: each writer (delta-rs, delta-spark) with and without deletion vectors writes every
window's net changes per key into Delta's change data feed, which delta-rs's ``load_cdf`` and Spark's
``readChangeFeed`` both read back as the window's inserts, update pre/post images and deletes, one commit version
per window; delta-spark writes to the table afterwards and cdcflow then continues it."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.load import change_data, merge_on_read, silver_read
from spark_jobs.load.delta_writer import DeltaRsWriter, DeltaSparkWriter

TABLE = TableInfo(
    id=91, db_name="d", name="feed",
    columns=(Column(1, "id", "bigint", nullable=False), Column(2, "k", "int"), Column(3, "c", "varchar", length=40)),
    indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),),
)  # fmt: skip
SCHEMA = pa.schema([*TABLE.arrow_schema(), pa.field("_cdc_op", pa.string())])
Row = tuple[int, int | None, str | None]
Change = tuple[str, int, int | None, str | None]  # (_change_type, id, k, c)

# The net change sets of five windows, (id, k, c, op): inserts; updates, a delete, an insert; a key-changing update
# (upstream's UPDATE of id 4 to 40, split into a delete of 4 and an insert of 40) with an update and a delete of a
# key no row has; only deletes of absent keys (no row changes); a re-insert of a deleted key, a delete, a NULL.
WINDOWS: list[list[tuple[int, int | None, str | None, str]]] = [
    [(i, 1, f"v{i}", "upsert") for i in range(1, 7)],
    [(1, 2, "one", "upsert"), (2, 2, "two", "upsert"), (3, None, None, "delete"), (7, 2, "seven", "upsert")],
    [(4, None, None, "delete"), (40, 3, "v4", "upsert"), (5, 3, None, "upsert"), (99, None, None, "delete")],
    [(98, None, None, "delete"), (97, None, None, "delete")],
    [(3, 5, "back", "upsert"), (40, None, None, "delete"), (6, None, "six", "upsert")],
]


def _changes(window: list[tuple[int, int | None, str | None, str]]) -> pa.Table:
    return pa.table({"id": [r[0] for r in window], "k": [r[1] for r in window], "c": [r[2] for r in window],
                     "_cdc_op": [r[3] for r in window]}, schema=SCHEMA)


def _expected(state: dict[int, Row], window: list[tuple[int, int | None, str | None, str]]) -> set[Change]:
    """What the feed must hold for a window applied to ``state`` (updated in place): Delta's MERGE semantics of a
    net change set, per key."""
    out: set[Change] = set()
    for i, k, c, op in window:
        old = state.get(i)
        if op == "delete":
            if old is not None:
                out.add(("delete", *old))
                del state[i]
        elif old is None:
            out.add(("insert", i, k, c))
            state[i] = (i, k, c)
        else:
            out |= {("update_preimage", *old), ("update_postimage", i, k, c)}
            state[i] = (i, k, c)
    return out


def _by_version(rows: list[dict[str, Any]]) -> dict[int, set[Change]]:
    out: dict[int, set[Change]] = {}
    for r in rows:
        out.setdefault(int(r["_commit_version"]), set()).add((r["_change_type"], r["id"], r["k"], r["c"]))
    return out


def _delta_rs_feed(path: str, start: int) -> tuple[dict[int, set[Change]], list[dict[str, Any]]]:
    rows = pa.table(DeltaTable(path).load_cdf(starting_version=start)).to_pylist()
    return _by_version(rows), rows


def _spark_feed(spark: Any, path: str, start: int) -> tuple[dict[int, set[Change]], list[dict[str, Any]]]:
    df = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start).load(path)
    rows = [r.asDict() for r in df.collect()]
    return _by_version(rows), rows


def _check_timestamps(rows: list[dict[str, Any]]) -> None:
    """One ``_commit_timestamp`` per version, not decreasing with the version."""
    stamps: dict[int, set[datetime.datetime]] = {}
    for r in rows:
        assert isinstance(r["_commit_timestamp"], datetime.datetime)
        stamps.setdefault(int(r["_commit_version"]), set()).add(r["_commit_timestamp"])
    assert all(len(s) == 1 for s in stamps.values()), stamps
    ordered = [next(iter(stamps[v])) for v in sorted(stamps)]
    assert ordered == sorted(ordered)


def _vectors_written(path: str) -> int:
    """``add`` actions with a deletion vector in the table's commits (delta-spark replaces a small file all of whose
    rows a window touches, so the last version need not have one left)."""
    log = Path(path) / "_delta_log"
    return sum(1 for f in log.glob("*.json") for line in f.read_text().splitlines()
               if line.strip() and (json.loads(line).get("add") or {}).get("deletionVector"))


def _writer(kind: str, spark: Any, deletion_vectors: bool) -> Any:
    if kind == "delta-rs":
        return DeltaRsWriter(deletion_vectors=deletion_vectors, change_data_feed=True)
    return DeltaSparkWriter(spark, deletion_vectors=deletion_vectors, change_data_feed=True)


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
@pytest.mark.parametrize("kind", ["delta-rs", "delta-spark"])
def test_each_window_s_net_changes_are_the_change_feed(spark, tmp_path: Path, kind: str, deletion_vectors: bool):
    path = str(tmp_path / "feed")
    writer = _writer(kind, spark, deletion_vectors)
    writer.ensure_table(path, TABLE)
    dt = DeltaTable(path)
    assert change_data.enabled(dt) and merge_on_read.enabled(dt) == deletion_vectors
    first = dt.version() + 1
    state: dict[int, Row] = {}
    want: dict[int, set[Change]] = {}
    for n, window in enumerate(WINDOWS, start=1):
        res = writer.merge(path, TABLE, _changes(window), app_id="cdcflow/cf", version=100 + n)
        assert not res.skipped and res.delta_version is not None
        expected = _expected(state, window)
        if expected:
            want[res.delta_version] = expected
    assert len(want) == len(WINDOWS) - 1  # the window of absent keys' deletes put nothing in the feed
    dt = DeltaTable(path)
    live = silver_read.read_table(dt, ["id", "k", "c"])
    assert sorted(zip(*(live.column(n).to_pylist() for n in ("id", "k", "c")), strict=True)) == sorted(state.values())
    if deletion_vectors:
        assert _vectors_written(path), "no window marked a row deleted"
    rs, rs_rows = _delta_rs_feed(path, first)
    sp, sp_rows = _spark_feed(spark, path, first)
    assert rs == want
    assert sp == want
    _check_timestamps(rs_rows)
    _check_timestamps(sp_rows)

    if kind != "delta-rs":
        return  # delta-spark continuing its own table is delta-spark's business
    # delta-spark writes to the table cdcflow wrote (its own UPDATE, with the feed on), then cdcflow continues it
    spark.sql(f"UPDATE delta.`{path}` SET c = 'by spark' WHERE id = 1")
    by_spark = DeltaTable(path).version()
    after = writer.merge(path, TABLE, _changes([(1, 9, "again", "upsert"), (2, None, None, "delete")]),
                         app_id="cdcflow/cf", version=200)
    old_one = state[1]
    assert after.delta_version == by_spark + 1
    tail = {by_spark: {("update_preimage", *old_one), ("update_postimage", 1, old_one[1], "by spark")},
            by_spark + 1: {("update_preimage", 1, old_one[1], "by spark"), ("update_postimage", 1, 9, "again"),
                           ("delete", *state[2])}}
    assert _delta_rs_feed(path, by_spark)[0] == tail
    assert _spark_feed(spark, path, by_spark)[0] == tail


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_an_existing_table_takes_the_feed_from_the_next_window(spark, tmp_path: Path, deletion_vectors: bool):
    """A table written before ``change-data-feed = true``: the next window turns the feed on (a commit of its own)
    and the feed starts there; no change data is made up for the versions before it."""
    path = str(tmp_path / "late")
    DeltaRsWriter(deletion_vectors=deletion_vectors).merge(path, TABLE, _changes(WINDOWS[0]), app_id="a", version=1)
    assert not change_data.property_on(DeltaTable(path))
    before = DeltaTable(path).version()
    res = DeltaRsWriter(deletion_vectors=deletion_vectors, change_data_feed=True).merge(
        path, TABLE, _changes(WINDOWS[1]), app_id="a", version=2)
    dt = DeltaTable(path)
    assert change_data.enabled(dt) and res.delta_version == before + 2  # the property's commit, then the window's
    state = {i: (i, k, c) for i, k, c, _ in WINDOWS[0]}
    want = {res.delta_version: _expected(state, WINDOWS[1])}
    assert _delta_rs_feed(path, before + 1)[0] == want
    assert _spark_feed(spark, path, before + 1)[0] == want


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_an_overwrite_puts_the_old_rows_deleted_and_the_new_inserted(spark, tmp_path: Path, deletion_vectors: bool):
    """What a snapshot (re)load (``snapshot_load.load_base``) and a DDL rewrite (``ddl_apply.rewrite_table``) commit:
    one delta-rs overwrite with ``schema_mode="overwrite"``, no change data file (as delta-spark's overwrite), so a
    reader takes the live rows of the files it removes as deletes and those it adds as inserts (PROTOCOL.md, "Add
    CDC File"). Spark reads that right with deletion vectors too; deltalake 1.6.6's ``load_cdf`` reads a removed
    file's vector inverted (the rows it had deleted come back as deletes, its live rows are missing; deletion
    vectors in the CDF reader came with delta-io/delta-rs#4639), so delta-rs is held to it without vectors only."""
    from deltalake import write_deltalake

    path = str(tmp_path / "rewrite")
    writer = DeltaRsWriter(deletion_vectors=deletion_vectors, change_data_feed=True)
    state: dict[int, Row] = {}
    for n, window in enumerate(WINDOWS[:3], start=1):
        writer.merge(path, TABLE, _changes(window), app_id="a", version=n)
        _expected(state, window)
    before = DeltaTable(path).version()
    new = pa.table({"id": pa.array([1, 2, 8], pa.int64()), "k": pa.array([7, 7, 7], pa.int32()), "c": ["x", "y", None]})
    write_deltalake(path, new, mode="overwrite", schema_mode="overwrite")
    version = DeltaTable(path).version()
    assert version == before + 1 and not (Path(path) / "_delta_log" / f"{version:020}.json").read_text().count('"cdc"')
    want = {version: {("delete", *r) for r in state.values()} | {("insert", 1, 7, "x"), ("insert", 2, 7, "y"),
                                                                  ("insert", 8, 7, None)}}
    assert _spark_feed(spark, path, version)[0] == want
    if not deletion_vectors:
        assert _delta_rs_feed(path, version)[0] == want


def test_the_option_reaches_the_writer_the_apply_job_picks() -> None:
    """``ApplyArgs.change_data_feed`` (from ``[sink] change-data-feed``) is what ``apply_window.run_job`` hands
    ``get_writer``; a writer made without it leaves the feed off."""
    from spark_jobs.load.delta_writer import get_writer

    assert get_writer("delta-rs", change_data_feed=True).change_data_feed is True  # type: ignore[attr-defined]
    assert get_writer("delta-rs").change_data_feed is False  # type: ignore[attr-defined]
