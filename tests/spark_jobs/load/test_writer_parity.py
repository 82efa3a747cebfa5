"""Writer parity: the same bronze windows through delta-rs and delta-spark give the same silver tables -- rows,
app-transaction versions, the commit ts every reader resolves a version by, replays skipped -- and each Delta table
one writer made is readable and writable by the other."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core.changefeed.versions import commit_ts, version_as_of
from cdc_core.codec.sink_uri import app_id_for, table_path
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.apply_window import apply_window
from spark_jobs.ddl_apply import apply_ddl
from spark_jobs.load.delta_writer import DeltaRsWriter, DeltaSparkWriter, DeltaWriter
from spark_jobs.normalize.bronze import write_bronze
from testkit.builders import Bronze, clustered_table, nonclustered_table, rowid_table, typed_table

pytestmark = pytest.mark.spark

C, NC, R, T = clustered_table(), nonclustered_table(), rowid_table(), typed_table()
TABLES = [C, NC, R, T]
LAST = {"c": 80, "nc": 80, "r": 60, "typed": 40}


def _typed(i: int, x: int) -> dict[int, Any]:
    return {1: i, 2: x, 3: x * 10**12, 4: f"s{x}", 5: Decimal(f"{x}.125"), 6: datetime(2024, 1, 1, 0, 0, x % 60, 5),
            7: None if x % 2 else "t" * x}


def _windows() -> list[tuple[int, Bronze]]:
    """Inserts; updates with PK and UK moves (seed 002's swap) and a delete; deletes only, one of a key Delta
    never had (a merge that changes no row); a row inserted and deleted within one window."""
    w1 = Bronze()
    for i in range(1, 6):
        w1.put(C, i, 10, {1: i, 2: i}).put(NC, 100 + i, 10, {1: i, 2: f"u{i}", 3: i})
        w1.put(R, i, 10, {1: i, 2: f"r{i}"}).put(T, i, 10, _typed(i, i))
    w2 = Bronze()
    w2.put(C, 2, 30, {1: 2, 2: 1}, old={1: 2, 2: 2}).put(C, 1, 30, {1: 1, 2: 2}, old={1: 1, 2: 1})
    w2.put(NC, 102, 30, {1: 1, 2: "u2", 3: 2}, old={1: 2, 2: "u2", 3: 2})  # PK 2 -> 1 ...
    w2.put(NC, 101, 30, {1: 2, 2: "u1", 3: 1}, old={1: 1, 2: "u1", 3: 1})  # ... and 1 -> 2 in one transaction
    w2.put(NC, 103, 31, {1: 3, 2: "u9", 3: 3}, old={1: 3, 2: "u3", 3: 3})  # a UK move
    w2.delete(C, 5, 32, {1: 5, 2: 5}).put(R, 3, 32, {1: 33, 2: "r3"}, old={1: 3, 2: "r3"})
    w2.put(T, 2, 33, _typed(2, 7), old=_typed(2, 2)).put(T, 6, 33, _typed(6, 6)).delete(T, 1, 34, _typed(1, 1))
    w3 = Bronze().delete(C, 99, 50, {1: 99, 2: 0}).delete(R, 4, 51, {1: 4, 2: "r4"})
    w4 = Bronze().put(NC, 110, 70, {1: 10, 2: "u10", 3: 0}).delete(NC, 110, 71, {1: 10, 2: "u10", 3: 0})
    w4.put(C, 7, 72, {1: 7, 2: 7})
    return [(15, w1), (40, w2), (60, w3), (80, w4)]


def _rows(path: str, table: TableInfo) -> list[dict[str, Any]]:
    key = list(table.delta_key())
    return sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: tuple(r[k] for k in key))


def _run(spark: Any, sink: str, *writers: DeltaWriter) -> list[dict[str, dict[str, Any]]]:
    """The windows in order, the i-th through ``writers[i % len(writers)]``."""
    out = []
    for i, (end, bronze) in enumerate(_windows()):
        write_bronze(sink, "cf", end, bronze.arrow())
        out.append(apply_window(sink, "cf", end, TABLES, spark=spark, writer=writers[i % len(writers)]))
    return out


def test_the_same_windows_give_the_same_tables(spark, tmp_path):
    """Through delta-rs, through delta-spark, and alternating (a changefeed that moves from a local machine to a
    cluster and back: each writer continues the table and the app transaction the other left)."""
    rs_sink, sp_sink, mixed = f"file://{tmp_path}/rs", f"file://{tmp_path}/sp", f"file://{tmp_path}/mixed"
    rs_res = _run(spark, rs_sink, DeltaRsWriter())
    sp_res = _run(spark, sp_sink, DeltaSparkWriter(spark))
    _run(spark, mixed, DeltaSparkWriter(spark), DeltaRsWriter())
    for a, b in zip(rs_res, sp_res, strict=True):  # the same rows upserted and deleted per table and window
        assert {n: (s["rows_upserted"], s["rows_deleted"], s["skipped"]) for n, s in a.items()} == \
            {n: (s["rows_upserted"], s["rows_deleted"], s["skipped"]) for n, s in b.items()}
    app = app_id_for("cf")
    for t in TABLES:
        rs, sp = table_path(rs_sink, t), table_path(sp_sink, t)
        assert _rows(rs, t) == _rows(sp, t) == _rows(table_path(mixed, t), t), t.qualified_name
        assert DeltaTable(table_path(mixed, t)).transaction_version(app) == LAST[t.name]
        # the last window with row events of the table (a window without any commits nothing, through both)
        assert DeltaTable(rs).transaction_version(app) == DeltaTable(sp).transaction_version(app) == LAST[t.name]
        # every window that changed the table is one commit whose cdcflow ts readers resolve versions by
        assert [commit_ts(h) for h in DeltaTable(sp).history() if commit_ts(h)] == \
            [commit_ts(h) for h in DeltaTable(rs).history() if commit_ts(h)]
        for ts in (15, 40, 59, 80):
            assert _rows_at(rs, t, ts) == _rows_at(sp, t, ts), (t.qualified_name, ts)
    nc = _rows(table_path(sp_sink, NC), NC)
    assert [(r["a"], r["u"]) for r in nc] == [(1, "u2"), (2, "u1"), (3, "u9"), (4, "u4"), (5, "u5")]
    assert [r["a"] for r in _rows(table_path(sp_sink, C), C)] == [1, 2, 3, 4, 7]
    # a replayed window changes nothing through either writer
    for sink, writer in ((rs_sink, DeltaRsWriter()), (sp_sink, DeltaSparkWriter(spark))):
        again = apply_window(sink, "cf", 80, TABLES, spark=spark, writer=writer)
        assert all(s["skipped"] for s in again.values())


def _rows_at(path: str, table: TableInfo, ts: int) -> list[dict[str, Any]]:
    version = version_as_of(path, ts)
    if version is None:
        return []
    key = list(table.delta_key())
    rows = DeltaTable(path, version=version).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: tuple(r[k] for k in key))


def _ddl(kind: str, ts: int, info: TableInfo) -> DDLJob:
    return DDLJob(job_id=ts, job_type=kind, query=f"-- {kind}", schema_version=ts, table_info=info, finished_ts=ts,
                  schema_id=1, table_id=info.id, schema_name=info.db_name, table_name=info.name)


def test_ddl_between_windows_gives_the_same_tables(spark, tmp_path):
    """DDL at barriers (its Delta commits made by ddl_apply) between windows each writer merges, the later ones
    under the new schema: ADD COLUMN with a default (rewrite, FIRST upstream), DROP COLUMN."""
    c0 = clustered_table()
    d = Column(3, "d", "decimal", nullable=False, precision=6, scale=2, default=Decimal("1.50"))
    c1 = replace(c0, columns=(d, *c0.columns), max_column_id=3)
    c2 = replace(c1, columns=(d, c0.columns[0]), max_column_id=3)  # b dropped
    steps: list[tuple[str, Any]] = [
        ("window", (10, c0, Bronze().put(c0, 1, 5, {1: 1, 2: 10}).put(c0, 2, 6, {1: 2, 2: 20}))),
        ("ddl", ("add column", 20, c0, c1)),
        ("window", (30, c1, Bronze().put(c1, 3, 25, {1: 3, 2: 30, 3: Decimal("2.25")})
                    .put(c1, 1, 26, {1: 1, 2: 11, 3: Decimal("1.50")}, old={1: 1, 2: 10, 3: Decimal("1.50")}))),
        ("ddl", ("drop column", 40, c1, c2)),
        ("window", (50, c2, Bronze().delete(c2, 2, 45, {1: 2, 3: Decimal("1.50")}).put(c2, 4, 46, {1: 4, 3: 0}))),
    ]
    paths = {}
    for name, writer in (("rs", DeltaRsWriter()), ("sp", DeltaSparkWriter(spark))):
        sink = f"file://{tmp_path}/{name}"
        for kind, step in steps:
            if kind == "window":
                end, t, bronze = step
                write_bronze(sink, "cf", end, bronze.arrow())
                apply_window(sink, "cf", end, [t], after_ts=end - 10, spark=spark, writer=writer)
            else:
                job, ts, before, after = step
                apply_ddl(sink, "cf", _ddl(job, ts, after), before, after)
        paths[name] = table_path(sink, c2)
    assert _rows(paths["rs"], c2) == _rows(paths["sp"], c2) == [
        {"d": Decimal("1.50"), "a": 1}, {"d": Decimal("2.25"), "a": 3}, {"d": Decimal("0.00"), "a": 4}]
    for ts in (10, 20, 30, 40, 50):
        assert _rows_at(paths["rs"], c2, ts) == _rows_at(paths["sp"], c2, ts), ts
    assert DeltaTable(paths["rs"]).transaction_version(app_id_for("cf")) == \
        DeltaTable(paths["sp"]).transaction_version(app_id_for("cf")) == 50


ODD = TableInfo(id=140, db_name="_cdcflow", name="a b/c`'\\中",
                columns=(Column(1, "k`.ey", "int", nullable=False), Column(2, "v a,l=u;e{}", "varchar", length=9),
                         Column(3, "w.x`y(\t)", "int")),
                indexes=(Index("PRIMARY", ("k`.ey",), unique=True, primary=True),), pk_is_handle=True)


def test_names_of_any_characters_go_through_both_writers(spark, tmp_path):
    """Column names with backticks, dots and what delta-spark refuses in a table it creates (" ,;{}()\\n\\t=") -- it
    merges into the table delta-rs creates for it -- and a database named _cdcflow, through both writers alike."""
    def windows() -> list[tuple[int, Bronze]]:
        w1 = Bronze().put(ODD, 1, 10, {1: 1, 2: "a'b\\c", 3: 1}).put(ODD, 2, 10, {1: 2, 2: "x", 3: 2})
        # a key move (a clustered handle's: a delete and a put, as TiDB writes it), then an update
        w2 = Bronze().delete(ODD, 1, 20, {1: 1, 2: "a'b\\c", 3: 1}).put(ODD, 3, 20, {1: 3, 2: "moved", 3: 3})
        w2.put(ODD, 2, 21, {1: 2, 2: None, 3: 20}, old={1: 2, 2: "x", 3: 2})
        return [(15, w1), (25, w2)]

    rows = {}
    for kind, writer in (("rs", DeltaRsWriter()), ("sp", DeltaSparkWriter(spark))):
        sink = f"file://{tmp_path}/{kind}"
        for end, bronze in windows():
            write_bronze(sink, "cf", end, bronze.arrow())
            apply_window(sink, "cf", end, [ODD], spark=spark, writer=writer)
        path = table_path(sink, ODD)
        assert path == f"{tmp_path}/{kind}/~5Fcdcflow/a~20b~2Fc~60~27~5C中"
        assert DeltaTable(path).transaction_version(app_id_for("cf")) == 25
        rows[kind] = _rows(path, ODD)
    assert rows["rs"] == rows["sp"] == [
        {"k`.ey": 2, "v a,l=u;e{}": None, "w.x`y(\t)": 20}, {"k`.ey": 3, "v a,l=u;e{}": "moved", "w.x`y(\t)": 3}]
