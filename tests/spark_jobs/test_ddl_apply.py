"""DDL applied to real Delta tables at the barrier: every job kind, exactly once, clear errors, and
the barrier step versions (DML < b as b - 1, the DDL as b, DML <= T as T)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.changefeed.job_args.ddl_apply import DdlApplyArgs
from cdc_core.codec.sink_uri import app_id_for, table_path
from cdc_core.errors import ChangefeedError
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.apply_window import apply_window
from spark_jobs.ddl_apply import apply_ddl, run_job, swapped_column_ids
from spark_jobs.load.delta_writer import DeltaRsWriter, applied_version
from spark_jobs.load.table_moves import dropped_path, read_move
from spark_jobs.normalize.bronze import write_bronze
from spark_jobs.normalize.net_effect import OP_COL
from testkit.builders import Bronze, clustered_table, rowid_table

CF = "cf1"
APP = app_id_for(CF)


@pytest.fixture
def sink(tmp_path):
    return str(tmp_path / "lake")


def _job(kind: str, ts: int, info: TableInfo | None, *, job_id: int = 900, **kw) -> DDLJob:
    base = {"schema_id": 1, "table_id": info.id if info else None, "schema_name": info.db_name if info else None,
            "table_name": info.name if info else None}  # fmt: skip
    return DDLJob(job_id=job_id, job_type=kind, query=f"-- {kind}", schema_version=ts, table_info=info,
                  finished_ts=ts, **{**base, **kw})  # fmt: skip


def _seed(sink: str, t: TableInfo, rows: list[dict], version: int = 100) -> str:
    """Merge ``rows`` into the silver table of ``t`` with the real writer (no Spark needed)."""
    path = table_path(sink, t)
    data = pa.Table.from_pylist([{**r, OP_COL: "upsert"} for r in rows],
                                schema=pa.schema([*t.arrow_schema(), pa.field(OP_COL, pa.string())]))  # fmt: skip
    DeltaRsWriter().merge(path, t, data, app_id=APP, version=version)
    return path


def _rows(path: str, key: str = "a") -> list[dict]:
    return sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r[key])


def _schema(path: str) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in pa.schema(DeltaTable(path).schema().to_arrow())}


def _again_is_noop(sink, job, before, after, path):
    """Re-applying a DDL changes nothing: same Delta version, reported as skipped/already applied."""
    v = DeltaTable(path).version() if DeltaTable.is_deltatable(path) else None
    res = apply_ddl(sink, CF, job, before, after)
    assert res["skipped"] is True, res
    assert (DeltaTable(path).version() if DeltaTable.is_deltatable(path) else None) == v


C_ROWS = [{"a": 1, "b": 10}, {"a": 2, "b": 20}, {"a": 3, "b": None}]


# --- tables ---------------------------------------------------------------------------------------


def test_create_table(sink):
    t = rowid_table()
    job = _job("create table", 200, t)
    res = apply_ddl(sink, CF, job, None, t)
    path = table_path(sink, t)
    assert res["action"] == "created" and res["applied_version"] == 200
    assert _schema(path) == {"a": pa.int32(), "b": pa.string(), "_tidb_rowid": pa.int64()}
    assert _rows(path) == []
    _again_is_noop(sink, job, None, t, path)


def test_create_table_over_a_foreign_table_is_an_error(sink):
    t = clustered_table()
    _seed(sink, t, C_ROWS)
    other = replace(t, id=555)
    with pytest.raises(ChangefeedError, match="non-empty Delta table not written by this changefeed"):
        apply_ddl(sink, "other-cf", _job("create table", 200, other), None, other)


def test_drop_table_moves_it_to_the_dropped_area(sink):
    t = clustered_table()
    path = _seed(sink, t, C_ROWS)
    job = _job("drop table", 200, None, table_id=t.id, schema_name="test", table_name="c")
    res = apply_ddl(sink, CF, job, t, None)
    dst = dropped_path(sink, "test", "c", 200)
    assert dst == os.path.join(sink, "_cdcflow", "dropped", "test", "c@200")
    assert not os.path.exists(path) and res["paths"] == [path, dst]
    assert _rows(dst) == C_ROWS  # nothing users trusted is destroyed
    assert read_move(sink, "test", "c")["ts"] == 200
    res = apply_ddl(sink, CF, job, t, None)
    assert res["skipped"] is True and _rows(dst) == C_ROWS
    # Without a table info (the changefeed may only have the job's names) it is the same.
    assert apply_ddl(sink, CF, job, None, None)["skipped"] is True


def test_truncate_table_deletes_all_rows_in_one_commit(sink):
    t = clustered_table()
    path = _seed(sink, t, C_ROWS)
    new = replace(t, id=t.id + 50)
    job = _job("truncate table", 200, new, old_table_id=t.id)
    v = DeltaTable(path).version()
    res = apply_ddl(sink, CF, job, t, new)
    assert res["applied_version"] == 200 and DeltaTable(path).version() == v + 1
    assert _rows(path) == []
    _again_is_noop(sink, job, t, new, path)
    # An empty table is truncated by recording the version only.
    job2 = _job("truncate table", 300, replace(new, id=new.id + 1), old_table_id=new.id)
    apply_ddl(sink, CF, job2, new, job2.table_info)
    assert applied_version(path, APP) == 300 and _rows(path) == []


def test_rename_table_moves_the_directory(sink):
    t = clustered_table()
    path = _seed(sink, t, C_ROWS)
    new = replace(t, name="c2", db_name="other")
    job = _job("rename table", 200, new, old_table_id=t.id, old_schema_name="test", old_table_name="c")
    res = apply_ddl(sink, CF, job, t, new)
    new_path = table_path(sink, new)
    assert res["paths"] == [path, new_path] and not os.path.exists(path)
    assert _rows(new_path) == C_ROWS and applied_version(new_path, APP) == 100
    assert apply_ddl(sink, CF, job, t, new)["skipped"] is True
    assert apply_ddl(sink, CF, job, None, new)["skipped"] is True  # old names from the job
    # The table keeps taking DML under its new name.
    DeltaRsWriter().merge(new_path, new, pa.Table.from_pylist([{"a": 4, "b": 40, OP_COL: "upsert"}]),
                          app_id=APP, version=250)  # fmt: skip
    assert [r["a"] for r in _rows(new_path)] == [1, 2, 3, 4]


def test_rename_onto_an_existing_table_is_an_error(sink):
    t, u = clustered_table(), clustered_table(table_id=120, name="u")
    _seed(sink, t, C_ROWS)
    _seed(sink, u, C_ROWS)
    new = replace(t, name="u")
    with pytest.raises(ChangefeedError, match="cannot rename over a table"):
        apply_ddl(sink, CF, _job("rename table", 200, new, old_schema_name="test", old_table_name="c"), t, new)


def test_create_and_drop_database(sink):
    t, r = clustered_table(), rowid_table()
    _seed(sink, t, C_ROWS)
    _seed(sink, r, [{"a": 1, "b": "x", "_tidb_rowid": 7}])
    assert apply_ddl(sink, CF, _job("create schema", 150, None, schema_name="test"), None, None)["paths"] == []
    job = _job("drop schema", 200, None, schema_name="test")
    res = apply_ddl(sink, CF, job, None, None)
    assert "moved 2 table(s)" in res["action"]
    assert _rows(dropped_path(sink, "test", "c", 200)) == C_ROWS
    assert _rows(dropped_path(sink, "test", "r", 200)) == [{"a": 1, "b": "x", "_tidb_rowid": 7}]
    assert not DeltaTable.is_deltatable(table_path(sink, t))
    assert "moved 0 table(s)" in apply_ddl(sink, CF, job, None, None)["action"]


ODD_DB, ODD_T = "_cdcflow", "t`1 ./'\\ü"  # cdcflow's own directory's name, a table of every awkward character


def test_names_of_any_characters_are_created_dropped_and_renamed_within_the_sink(sink):
    """The silver table, its dropped copy and its move record live under the names' encoded components, inside
    the sink; a database named _cdcflow is not cdcflow's directory; DROP DATABASE reads its tables' names back."""
    t = replace(clustered_table(), db_name=ODD_DB, name=ODD_T)
    path = _seed(sink, t, C_ROWS)
    assert path == os.path.join(sink, "~5Fcdcflow", "t~601~20.~2F~27~5Cü")
    renamed = replace(t, name="a/b")
    apply_ddl(sink, CF, _job("rename table", 200, renamed, old_table_id=t.id, old_schema_name=ODD_DB,
                             old_table_name=ODD_T), t, renamed)
    assert _rows(table_path(sink, renamed)) == C_ROWS and not os.path.exists(path)
    assert read_move(sink, ODD_DB, ODD_T)["to"] == table_path(sink, renamed)
    res = apply_ddl(sink, CF, _job("drop schema", 300, None, schema_name=ODD_DB), None, None)
    assert "moved 1 table(s)" in res["action"]
    dst = dropped_path(sink, ODD_DB, "a/b", 300)
    assert dst == os.path.join(sink, "_cdcflow", "dropped", "~5Fcdcflow", "a~2Fb@300") and _rows(dst) == C_ROWS
    assert read_move(sink, ODD_DB, "a/b")["ts"] == 300
    assert sorted(os.listdir(sink)) == ["_cdcflow", "~5Fcdcflow"]  # nothing outside the sink, nothing over ours
    assert sorted(os.listdir(os.path.join(sink, "_cdcflow"))) == ["dropped", "moved"]


def test_a_ddl_that_brings_a_name_the_lake_cannot_hold_stops_with_the_table_and_job_named(sink):
    t = clustered_table()
    _seed(sink, t, C_ROWS)
    bad = _add(t, Column(3, "x\0y", "int"))
    with pytest.raises(ChangefeedError, match=r"ADD COLUMN on test\.c \(job 900, ts 200\).*NUL"):
        apply_ddl(sink, CF, _job("add column", 200, bad), t, bad)
    assert applied_version(table_path(sink, t), APP) == 100  # nothing applied
    long = replace(t, name="😀" * 64)
    with pytest.raises(ChangefeedError, match="more than the 255"):
        apply_ddl(sink, CF, _job("rename table", 300, long, old_schema_name="test", old_table_name="c"), t, long)


# --- columns --------------------------------------------------------------------------------------


def _add(t: TableInfo, col: Column) -> TableInfo:
    return replace(t, columns=(*t.columns, col), max_column_id=col.id, schema_version=t.schema_version + 1)


def test_add_column_null_default_is_metadata_only(sink):
    t = clustered_table()
    path = _seed(sink, t, C_ROWS)
    after = _add(t, Column(3, "c", "varchar", length=5))
    files = set(DeltaTable(path).file_uris())
    res = apply_ddl(sink, CF, job := _job("add column", 200, after), t, after)
    assert "metadata only" in res["action"] and res["applied_version"] == 200
    assert set(DeltaTable(path).file_uris()) == files  # no data file rewritten
    assert _schema(path) == {"a": pa.int32(), "b": pa.int32(), "c": pa.string()}
    assert _rows(path) == [{**r, "c": None} for r in C_ROWS]
    _again_is_noop(sink, job, t, after, path)


def test_add_column_backfills_the_origin_default(sink):
    t = clustered_table()
    path = _seed(sink, t, C_ROWS)
    # ADD COLUMN d DECIMAL(6,2) NOT NULL DEFAULT 1.50, positioned FIRST upstream.
    d = Column(3, "d", "decimal", nullable=False, precision=6, scale=2, default=Decimal("1.50"))
    after = replace(t, columns=(d, *t.columns), max_column_id=3)
    res = apply_ddl(sink, CF, job := _job("add column", 200, after), t, after)
    assert "rewrote" in res["action"] and DeltaTable(path).transaction_version(APP) == 200
    assert _rows(path) == [{"d": Decimal("1.50"), **r} for r in C_ROWS]
    assert _schema(path)["d"] == pa.decimal128(6, 2)
    _again_is_noop(sink, job, t, after, path)
    # DML under the new schema merges fine although the Delta column order differs from upstream's.
    DeltaRsWriter().merge(path, after, pa.Table.from_pylist(
        [{"d": Decimal("2.00"), "a": 4, "b": 40, OP_COL: "upsert"}]), app_id=APP, version=300)  # fmt: skip
    assert _rows(path)[-1] == {"d": Decimal("2.00"), "a": 4, "b": 40}


def test_add_column_to_an_empty_table_is_metadata_only_whatever_the_default(sink):
    t = clustered_table()
    path = _seed(sink, t, [])
    after = _add(t, Column(3, "c", "int", default=5))
    assert "metadata only" in apply_ddl(sink, CF, _job("add column", 200, after), t, after)["action"]
    assert _schema(path)["c"] == pa.int32()


def test_drop_column_rewrites_the_table(sink):
    t = _add(clustered_table(), Column(3, "c", "varchar", length=5))
    path = _seed(sink, t, [{**r, "c": f"x{r['a']}"} for r in C_ROWS])
    after = replace(t, columns=t.columns[:2])
    res = apply_ddl(sink, CF, job := _job("drop column", 200, after), t, after)
    assert "rewrote" in res["action"] and res["applied_version"] == 200
    assert _schema(path) == {"a": pa.int32(), "b": pa.int32()}
    assert _rows(path) == C_ROWS
    _again_is_noop(sink, job, t, after, path)
    # History still has the column (time travel), the current snapshot does not.
    assert "c" in DeltaTable(path, version=res["delta_version"] - 1).to_pyarrow_table().column_names


def test_rename_column_rewrites_the_table_keeping_values(sink):
    t = clustered_table()
    path = _seed(sink, t, C_ROWS)
    # RENAME COLUMN a TO id: the (clustered) key column keeps its id, so the Delta key is unchanged.
    after = replace(t, columns=(replace(t.columns[0], name="id"), t.columns[1]),
                    indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),))  # fmt: skip
    # TiDB runs RENAME COLUMN as a MODIFY COLUMN job.
    res = apply_ddl(sink, CF, job := _job("modify column", 200, after), t, after)
    assert res["applied_version"] == 200
    assert _schema(path) == {"id": pa.int32(), "b": pa.int32()}
    assert _rows(path, "id") == [{"id": r["a"], "b": r["b"]} for r in C_ROWS]
    _again_is_noop(sink, job, t, after, path)


def _typed() -> TableInfo:
    return TableInfo(
        id=130, db_name="test", name="m",
        columns=(Column(1, "a", "int", nullable=False), Column(2, "i", "int"), Column(3, "big", "bigint"),
                 Column(4, "d", "decimal", precision=6, scale=2), Column(5, "s", "varchar", length=10),
                 Column(6, "tx", "text")),
        indexes=(Index("PRIMARY", ("a",), unique=True, primary=True),), pk_is_handle=True, max_column_id=6,
    )  # fmt: skip


M_ROWS = [{"a": 1, "i": 2**31 - 1, "big": 2**40, "d": Decimal("9999.99"), "s": "hello", "tx": "t"},
          {"a": 2, "i": None, "big": None, "d": Decimal("-1.25"), "s": None, "tx": None}]  # fmt: skip


def _modify(t: TableInfo, name: str, **kw) -> TableInfo:
    return replace(t, columns=tuple(replace(c, **kw) if c.name == name else c for c in t.columns))


def test_modify_column_widening(sink):
    t = _typed()
    path = _seed(sink, t, M_ROWS)
    after = _modify(t, "i", type="bigint")
    apply_ddl(sink, CF, job := _job("modify column", 200, after, job_id=1), t, after)
    assert _schema(path)["i"] == pa.int64() and _rows(path) == M_ROWS
    _again_is_noop(sink, job, t, after, path)
    # 4 integer digits -> 6, 2 fraction -> 3: TiDB reorganizes the column under a new id (7) and swaps it in
    after2 = replace(_modify(after, "d", precision=9, scale=3, id=7), max_column_id=7)
    apply_ddl(sink, CF, _job("modify column", 210, after2, job_id=2), after, after2)
    assert _schema(path)["d"] == pa.decimal128(9, 3)
    assert [r["d"] for r in _rows(path)] == [Decimal("9999.990"), Decimal("-1.250")]
    assert applied_version(path, APP) == 210


def test_modify_column_into_and_within_decimals_held_as_text(sink):
    """DECIMAL(6,2) -> DECIMAL(50,4): the lake holds it as text from then on, each value printed with the new
    scale (as TiDB prints it); DECIMAL(50,4) -> DECIMAL(60,6) reprints them again; DECIMAL(60,6) -> DECIMAL(65,6)
    changes no text and is schema-only; narrowing stays an error."""
    t = _typed()
    path = _seed(sink, t, M_ROWS)
    wide = replace(_modify(t, "d", precision=50, scale=4, id=7), max_column_id=7)
    apply_ddl(sink, CF, _job("modify column", 200, wide, job_id=1), t, wide)
    assert _schema(path)["d"] == pa.string() and [r["d"] for r in _rows(path)] == ["9999.9900", "-1.2500"]
    wider = _modify(wide, "d", precision=60, scale=6)
    apply_ddl(sink, CF, _job("modify column", 210, wider, job_id=2), wide, wider)
    assert [r["d"] for r in _rows(path)] == ["9999.990000", "-1.250000"]
    v = DeltaTable(path).version()
    res = apply_ddl(sink, CF, _job("modify column", 220, (w65 := _modify(wider, "d", precision=65)), job_id=3),
                    wider, w65)
    assert res["action"].startswith("schema-only") and DeltaTable(path).version() == v
    with pytest.raises(ChangefeedError, match=r"DECIMAL\(65,6\) -> DECIMAL\(65,5\) narrows"):
        apply_ddl(sink, CF, _job("modify column", 230, _modify(w65, "d", scale=5), job_id=4), w65,
                  _modify(w65, "d", scale=5))


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("s", {"length": 20}),  # VARCHAR(10) -> VARCHAR(20)
        ("s", {"type": "text", "length": None}),  # VARCHAR -> TEXT
        ("tx", {"type": "varchar", "length": 5}),  # TEXT -> VARCHAR (upstream checked the values fit)
        ("i", {"nullable": False}),  # NOT NULL tightening
        ("big", {"default": 3}),
    ],
)
def test_modify_column_schema_only(sink, name, kw):
    t = _typed()
    path = _seed(sink, t, M_ROWS)
    v = DeltaTable(path).version()
    after = _modify(t, name, **kw)
    res = apply_ddl(sink, CF, _job("modify column", 200, after), t, after)
    assert res["action"].startswith("schema-only") and DeltaTable(path).version() == v
    # The next DML step validates against the new table info without complaint.
    DeltaRsWriter().merge(path, after, pa.Table.from_pylist([{**M_ROWS[0], "a": 3, OP_COL: "upsert"}],
                          schema=pa.schema([*after.arrow_schema(), pa.field(OP_COL, pa.string())])),
                          app_id=APP, version=300)  # fmt: skip
    assert len(_rows(path)) == 3


@pytest.mark.parametrize(
    ("name", "kw", "old", "new"),
    [
        ("big", {"type": "int"}, "BIGINT", "INT"),
        ("d", {"precision": 5, "scale": 2}, "DECIMAL(6,2)", "DECIMAL(5,2)"),
        ("d", {"precision": 6, "scale": 1}, "DECIMAL(6,2)", "DECIMAL(6,1)"),
        ("d", {"precision": 6, "scale": 3}, "DECIMAL(6,2)", "DECIMAL(6,3)"),  # loses an integer digit
        ("i", {"type": "varchar", "length": 20}, "INT", "VARCHAR(20)"),
        ("s", {"type": "int", "length": None}, "VARCHAR(10)", "INT"),
    ],
)
def test_modify_column_narrowing_is_a_clear_error(sink, name, kw, old, new):
    t = _typed()
    path = _seed(sink, t, M_ROWS)
    v = DeltaTable(path).version()
    after = _modify(t, name, **kw)
    with pytest.raises(ChangefeedError) as ei:
        apply_ddl(sink, CF, _job("modify column", 200, after), t, after)
    msg = str(ei.value)
    assert f"test.m.{name}" in msg and f"{old} -> {new}" in msg and "ts 200" in msg
    assert DeltaTable(path).version() == v


def test_ddl_on_a_table_never_written_creates_it_with_the_new_schema(sink):
    t = clustered_table()
    after = _add(t, Column(3, "c", "int", default=1))
    res = apply_ddl(sink, CF, _job("add column", 200, after), t, after)
    assert res["applied_version"] == 200 and set(_schema(table_path(sink, t))) == {"a", "b", "c"}


# --- indexes and keys -----------------------------------------------------------------------------


def _keyed_by_uk(r: TableInfo) -> TableInfo:
    """``r`` after ``ALTER TABLE r MODIFY a INT NOT NULL; ADD UNIQUE KEY (a)``: the Delta key becomes ``a``."""
    r2 = _modify(r, "a", nullable=False)
    return replace(r2, indexes=(Index("uk_a", ("a",), unique=True, id=1),))


def test_index_without_key_change_is_a_noop(sink):
    t = clustered_table()
    path = _seed(sink, t, C_ROWS)
    v = DeltaTable(path).version()
    after = replace(t, indexes=(*t.indexes, Index("ix_b", ("b",), id=2)))
    res = apply_ddl(sink, CF, _job("add index", 200, after), t, after)
    assert res["action"].startswith("schema-only") and DeltaTable(path).version() == v
    res = apply_ddl(sink, CF, _job("drop index", 210, t), after, t)
    assert res["action"].startswith("schema-only") and DeltaTable(path).version() == v


def test_a_key_change_to_columns_the_rows_hold_re_keys_the_table_in_place(sink):
    """_tidb_rowid -> a NOT NULL unique key: the rows stay, the _tidb_rowid column goes (one rewrite commit), and
    later windows merge by the new key."""
    r = rowid_table()
    path = _seed(sink, r, [{"a": 1, "b": "x", "_tidb_rowid": 1}, {"a": 2, "b": "y", "_tidb_rowid": 7}])
    after = _keyed_by_uk(r)
    res = apply_ddl(sink, CF, _job("add index", 200, after), r, after)
    assert res["applied_version"] == 200 and "rewrote" in res["action"]
    assert _schema(path) == {"a": pa.int32(), "b": pa.string()}
    assert sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda x: x["a"]) == [
        {"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    _again_is_noop(sink, _job("add index", 200, after), r, after, path)


def test_a_key_change_to_the_row_id_needs_the_upstream(sink):
    """The key becomes _tidb_rowid (the unique key dropped): the handles are only upstream, so the table is reloaded
    from there at the barrier (tests/e2e/test_key_changes.py); without the upstream's address, a clear error and the
    table as it was."""
    r = rowid_table()
    keyed = _keyed_by_uk(r)
    path = _seed(sink, keyed, [{"a": 1, "b": "x"}])
    with pytest.raises(ChangefeedError, match=r"DROP INDEX on test\.r .*re-keys the silver table by _tidb_rowid: the "
                                              r"upstream's address is required"):
        apply_ddl(sink, CF, _job("drop index", 200, r), keyed, r)
    assert _schema(path) == {"a": pa.int32(), "b": pa.string()}


def test_key_change_on_an_empty_table_is_applied(sink):
    r = rowid_table()
    path = _seed(sink, r, [])
    after = _keyed_by_uk(r)
    res = apply_ddl(sink, CF, _job("add index", 200, after), r, after)
    assert res["applied_version"] == 200 and _schema(path) == {"a": pa.int32(), "b": pa.string()}


def test_a_job_off_the_whitelist_is_applied_as_the_alter_it_is(sink):
    """The planner sends a job of a type off the whitelist only when it changes the silver table (barriers.applies):
    it is applied as an ALTER of its table before and after; one without its tables is refused."""
    t = clustered_table()
    path = _seed(sink, t, C_ROWS)
    after = _add(t, Column(3, "z", "int", default=None))
    res = apply_ddl(sink, CF, _job("alter table mode", 200, after), t, after)  # TiDB v8.5's ActionAlterTableMode
    assert res["applied_version"] == 200 and "z" in _schema(path)
    with pytest.raises(ChangefeedError, match="unsupported DDL 'alter table mode'"):
        apply_ddl(sink, CF, _job("alter table mode", 300, None), None, None)


def test_run_job_json(sink):
    t = clustered_table()
    out = run_job(DdlApplyArgs.from_dict({"sink_uri": f"file://{sink}", "changefeed_id": CF,
                                          "job": _job("create table", 200, t).to_json(), "before": None,
                                          "after": t.to_json()}))  # fmt: skip
    json.dumps(out)
    assert out["applied_version"] == 200 and out["job_type"] == "create table"


# --- the barrier flow -------------------------------------------------------------------------------


@pytest.mark.spark
def test_barrier_versions_with_ddl(spark, sink):
    """Window (0, 100] with ADD COLUMN at 50 and DROP TABLE of another table at 60."""
    c, r = clustered_table(), rowid_table()
    c2 = _add(c, Column(3, "z", "int", default=7))
    b = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(r, 1, 20, {1: 1, 2: "x"})
    b.put(c2, 2, 70, {1: 2, 2: 2, 3: 9}).put(c2, 1, 80, {1: 1, 2: 5}, old={1: 1, 2: 1})  # z absent -> origin 7
    write_bronze(sink, CF, 100, b.arrow())
    add = _job("add column", 50, c2)
    drop = _job("drop table", 60, None, job_id=901, table_id=r.id, schema_name="test", table_name="r")
    steps = [
        lambda: apply_window(sink, CF, 100, [c, r], after_ts=0, upto_ts=49, version=49, spark=spark),
        lambda: apply_ddl(sink, CF, add, c, c2),
        lambda: apply_window(sink, CF, 100, [c2, r], after_ts=49, upto_ts=59, version=59, spark=spark),
        lambda: apply_ddl(sink, CF, drop, r, None),
        lambda: apply_window(sink, CF, 100, [c2], after_ts=59, upto_ts=100, version=100, spark=spark),
    ]
    c_path, r_path = table_path(sink, c), table_path(sink, r)
    recorded = []
    for step in steps:
        step()
        recorded.append(applied_version(c_path, APP))
    # Strictly increasing per table where a step wrote; (49, 59] has no event of c, so nothing is recorded there.
    assert recorded == [49, 50, 50, 50, 100]
    assert _rows(c_path) == [{"a": 1, "b": 5, "z": 7}, {"a": 2, "b": 2, "z": 9}]
    assert _rows(dropped_path(sink, "test", "r", 60)) == [{"a": 1, "b": "x", "_tidb_rowid": 1}]
    # Re-running any step is a no-op, including DML steps of the dropped table (no resurrection).
    c_version = DeltaTable(c_path).version()
    for step in steps:
        out = step()
        if "test.c" in out:
            assert out["test.c"]["skipped"] is True
        if "test.r" in out:
            assert out["test.r"]["skipped"] is True and "left" in out["test.r"]["reason"]
        if "action" in out:
            assert out["skipped"] is True
    assert DeltaTable(c_path).version() == c_version and not os.path.exists(r_path)


def test_multi_schema_change_pairs_reorganized_columns_by_name_and_refuses_what_it_cannot_tell() -> None:
    t = TableInfo(id=70, db_name="test", name="m", pk_is_handle=True, max_column_id=3,
                  columns=(Column(1, "id", "int", nullable=False), Column(2, "p", "decimal", precision=6, scale=2),
                           Column(3, "b", "varchar", length=4)),
                  indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),))  # fmt: skip
    # ADD COLUMN n, DROP COLUMN b, MODIFY p DECIMAL(9,3) (reorganized: new id 5 under its name).
    after = replace(t, max_column_id=5, columns=(t.columns[0], Column(5, "p", "decimal", precision=9, scale=3),
                                                 Column(4, "n", "int", default=7)))  # fmt: skip
    job = _job("alter table multi-schema change", 300, after,
               sub_job_types=("add column", "drop column", "modify column"))
    assert swapped_column_ids(job, t, after) == {5: 2}
    assert swapped_column_ids(replace(job, job_type="add column", sub_job_types=()), t, after) == {}
    # CHANGE p q DECIMAL(9,3) with ADD n and DROP b: q and n are new, p and b gone; which is p's? Refused.
    renamed = replace(after, columns=(t.columns[0], Column(5, "q", "decimal", precision=9, scale=3),
                                      Column(4, "n", "int", default=7)))  # fmt: skip
    with pytest.raises(ChangefeedError, match=r"\['b', 'p'\] are gone and \['n', 'q'\] are new"):
        swapped_column_ids(replace(job, table_info=renamed), t, renamed)
    # CHANGE p q DECIMAL(9,3) with a RENAME of b and no ADD/DROP: the one surplus pair is p -> q.
    only = replace(t, max_column_id=5, columns=(t.columns[0], Column(5, "q", "decimal", precision=9, scale=3),
                                                replace(t.columns[2], name="b2")))  # fmt: skip
    assert swapped_column_ids(replace(job, sub_job_types=("modify column", "modify column")), t, only) == {5: 2}


def test_exchange_partition_survives_a_crash_between_its_commits_and_applies_once(sink, upstream_client,
                                                                                   fresh_db, pd_addr):
    """Both sides read upstream; the partitioned side deletes, then appends with the app transaction: a re-run
    after the delete alone (a crash between them) ends the same, a re-run after both changes nothing."""
    from deltalake import write_deltalake

    from cdc_core.changefeed.job_args.ddl_apply import Exchange
    from cdc_core.schema import ddl_history
    from cdc_core.schema.storage import SchemaStorage
    from spark_jobs.load.delta_writer import create_silver_table
    from spark_jobs.upstream_read import upstream_reader

    c = upstream_client
    c.execute(f"""USE {fresh_db};
        CREATE TABLE x (id INT PRIMARY KEY, v VARCHAR(8))
            PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE);
        CREATE TABLE n (id INT PRIMARY KEY, v VARCHAR(8));
        INSERT INTO x VALUES (1, 'x1'), (2, 'x2'), (20, 'x20'); INSERT INTO n VALUES (3, 'n3'), (2, 'n2')""")
    before_ts = c.get_ts()
    c.execute(f"USE {fresh_db}; ALTER TABLE x EXCHANGE PARTITION p0 WITH TABLE n")
    after_ts = c.get_ts()
    # the jobs of the two tables, as the DDL puller would have taken them (the storage replays them)
    rows = c.query(f"SELECT job_meta FROM mysql.tidb_ddl_history WHERE db_name = '{fresh_db}'", at_ts=after_ts)
    storage = SchemaStorage.from_jobs(ddl_history.jobs_from_sql(rows, after_ts))
    (job,) = storage.jobs_between(before_ts, after_ts)
    b = job.finished_ts
    pt_before, pt_after = storage.table_at(job.table_id, b - 1), storage.table_at(job.table_id, b)
    nt_before, nt_after = storage.table_at(job.old_table_id, b - 1), storage.table_at(job.partition_id, b)
    for t in (pt_before, nt_before):  # the Delta tables as the barrier finds them: the upstream at b - 1
        create_silver_table(table_path(sink, t), t, mode="error")
        write_deltalake(table_path(sink, t), upstream_reader(pd_addr, None, b - 1, t), mode="append")
    ex = Exchange(nt_before, nt_after, nt_after, True, pd_addr)

    def rows(name: str) -> list[tuple[int, str]]:
        return sorted((r["id"], r["v"]) for r in DeltaTable(os.path.join(sink, fresh_db, name)).to_pyarrow_table()
                      .to_pylist())

    DeltaTable(table_path(sink, pt_after)).delete("id < 10")  # the first commit of a run that then crashed
    out = apply_ddl(sink, CF, job, pt_before, pt_after, ex)
    assert not out["skipped"] and "partition p0 now holds" in out["action"]
    assert rows("x") == [(2, "n2"), (3, "n3"), (20, "x20")] and rows("n") == [(1, "x1"), (2, "x2")]
    assert applied_version(table_path(sink, pt_after), APP) == b == applied_version(table_path(sink, nt_after), APP)
    again = apply_ddl(sink, CF, job, pt_before, pt_after, ex)
    assert again["skipped"] and rows("x") == [(2, "n2"), (3, "n3"), (20, "x20")] and len(rows("n")) == 2
    # Without its other side (the normal table, the upstream) the job cannot run.
    with pytest.raises(ChangefeedError, match="the normal table and the upstream are required"):
        apply_ddl(sink, CF, job, pt_before, pt_after)
