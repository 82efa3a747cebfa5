"""IMPORT INTO (TiDB's physical import): rows land as an INSERT would store them, at one commit ts, without change
events; the table's regions are split by key count; bad input is refused with what and where; the workload's
bulk prepare loads through it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_core.codec import key as keycodec
from cdc_core.errors import UpstreamError
from cdc_core.upstream.sql.bulk_import import human_size, parse
from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.store.mvcc import Lock, VersionRecord
from cdc_core.upstream.workload import Workload, WorkloadConfig, check_consistency


class _Commits:
    """An MVCC observer counting commits (the change feed's source)."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []

    def on_prewrite(self, lock: Lock) -> None:
        pass

    def on_commit(self, record: VersionRecord) -> None:
        self.keys.append(record.key)

    def on_rollback(self, lock: Lock) -> None:
        pass


def test_parse_reads_tidb_syntax_and_refuses_what_it_cannot_do() -> None:
    st = parse("IMPORT INTO `d`.`t` (a, `b`) FROM 'file:///data/t.*.csv' FORMAT 'csv' "
               "WITH skip_rows=1, fields_terminated_by='|', thread=8")
    assert (st.table, st.columns, st.path, st.format, st.skip_rows, st.delimiter) == \
        ("`d`.`t`", ["a", "b"], "/data/t.*.csv", "csv", 1, "|")
    for bad, what in [("IMPORT INTO t FROM 'rel/t.csv'", "absolute"), ("IMPORT INTO t FROM 's3://b/t.csv'", "s3"),
                      ("IMPORT INTO t FROM '/t.csv' FORMAT 'sql'", "FORMAT 'sql'"),
                      ("IMPORT INTO t FROM '/t.csv' WITH bogus=1", "BOGUS"),
                      ("IMPORT INTO t FROM SELECT * FROM u", "FROM SELECT")]:
        with pytest.raises(SqlError, match=what):
            parse(bad)


def test_import_csv_stores_rows_as_inserts_without_change_events(upstream_cluster: Any, upstream_client: Any,
                                                                 fresh_db: str, tmp_path: Path) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL, "
                            "note VARCHAR(20) DEFAULT 'none', u INT, UNIQUE KEY uu (u));"
                            "CREATE TABLE ref (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL, "
                            "note VARCHAR(20) DEFAULT 'none', u INT, UNIQUE KEY uu (u))")
    lines = ["id|name|u"] + [f"{i}|n{i}|{i * 10 if i % 3 else chr(92) + 'N'}" for i in range(-50, 50)]
    (tmp_path / "t.1.csv").write_text("\n".join(lines[:60]) + "\n")
    (tmp_path / "t.2.csv").write_text("id|name|u\n" + "\n".join(lines[60:]) + "\n")
    commits = _Commits()
    store = upstream_cluster.cluster.store
    upstream_cluster.call(lambda: store.add_observer(commits))
    try:
        res = upstream_client.execute(f"USE {fresh_db}; IMPORT INTO t (id, name, u) FROM '{tmp_path}/t.*.csv' "
                                      "WITH SKIP_ROWS=1, FIELDS_TERMINATED_BY='|'")[-1]
    finally:
        upstream_cluster.call(lambda: store.remove_observer(commits))
    assert res.rows[0]["Imported_Rows"] == 100 and res.rows[0]["Status"] == "finished"
    assert res.rows[0]["Target_Table"] == f"`{fresh_db}`.`t`"
    size = sum(f.stat().st_size for f in tmp_path.glob("t.*.csv"))
    assert res.rows[0]["Source_File_Size"] == human_size(size) == f"{size / 1024:.4g}KiB"  # as TiDB prints it
    assert (human_size(16), human_size(12_408_337), human_size(5 << 30)) == ("16B", "11.83MiB", "5GiB")
    info = upstream_cluster.cluster.catalog.table(fresh_db, "t")
    lo, hi = keycodec.table_span(info.id)
    assert not [k for k in commits.keys if lo <= k < hi], "an import is not replicated by row events"
    # the same rows inserted one by one: the same values, and the same row bytes under the same keys
    upstream_client.execute(f"USE {fresh_db}; INSERT INTO ref (id, name, u) VALUES " + ", ".join(
        f"({i}, 'n{i}', {i * 10 if i % 3 else 'NULL'})" for i in range(-50, 50)))
    q = upstream_client.query
    assert q(f"SELECT * FROM {fresh_db}.t ORDER BY id") == q(f"SELECT * FROM {fresh_db}.ref ORDER BY id")
    assert q(f"SELECT note FROM {fresh_db}.t WHERE id = 7") == [{"note": "none"}]
    assert q(f"SELECT id FROM {fresh_db}.t WHERE u = 70") == [{"id": 7}]  # the unique index was written
    ref = upstream_cluster.cluster.catalog.table(fresh_db, "ref")
    now = upstream_cluster.cluster.tso.next()
    assert [v for _, v in store.scan(lo, hi, now)] == [v for _, v in store.scan(*keycodec.table_span(ref.id), now)]
    # what the import wrote is a table like any other: a duplicate is refused, an update is a change event
    with pytest.raises(UpstreamError, match="Duplicate entry '70'"):
        upstream_client.execute(f"USE {fresh_db}; INSERT INTO t (id, name, u) VALUES (1000, 'x', 70)")
    assert upstream_client.execute(f"USE {fresh_db}; UPDATE t SET name = 'y' WHERE id = -50")[-1].affected_rows == 1


def test_import_refuses_bad_input_naming_what_and_where(upstream_client: Any, fresh_db: str, tmp_path: Path) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL);"
                            "CREATE TABLE full (id INT PRIMARY KEY); INSERT INTO full VALUES (1)")
    (tmp_path / "dup.csv").write_text("1,1\n2,2\n1,3\n")
    (tmp_path / "null.csv").write_text("1,1\n2,\\N\n")
    (tmp_path / "text.csv").write_text("1,1\n2,abc\n")

    def error(sql: str) -> str:
        with pytest.raises(UpstreamError) as ei:
            upstream_client.execute(f"USE {fresh_db}; {sql}")
        return str(ei.value)

    assert "row 3" in (msg := error(f"IMPORT INTO t FROM '{tmp_path}/dup.csv'")) and "Duplicate entry '1'" in msg
    upstream_client.execute(f"USE {fresh_db}; TRUNCATE TABLE t")
    assert "row 2" in (msg := error(f"IMPORT INTO t FROM '{tmp_path}/null.csv'")) and "cannot be null" in msg
    upstream_client.execute(f"USE {fresh_db}; TRUNCATE TABLE t")
    assert "row 2" in error(f"IMPORT INTO t FROM '{tmp_path}/text.csv'")
    assert "not empty" in error(f"IMPORT INTO full FROM '{tmp_path}/dup.csv'")
    assert "no file matches" in error(f"IMPORT INTO t FROM '{tmp_path}/missing*.csv'")
    assert "explicit transaction" in error(f"BEGIN; IMPORT INTO t FROM '{tmp_path}/dup.csv'")
    assert "doesn't exist" in error(f"IMPORT INTO nope FROM '{tmp_path}/dup.csv'")


def test_import_splits_regions_by_key_count(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                            tmp_path: Path) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(10))")
    pq.write_table(pa.table({"id": pa.array(range(5000), pa.int64()), "v": [f"v{i}" for i in range(5000)]}),
                   tmp_path / "t.parquet")
    sql = upstream_cluster.cluster.sql
    info = upstream_cluster.cluster.catalog.table(fresh_db, "t")
    lo, hi = keycodec.table_span(info.id)
    regions = upstream_cluster.cluster.regions
    before = len(regions.scan(lo, hi))
    old, sql.import_region_keys = sql.import_region_keys, 1000
    try:
        upstream_client.execute(f"USE {fresh_db}; IMPORT INTO t FROM '{tmp_path}/t.parquet' FORMAT 'parquet'")
    finally:
        sql.import_region_keys = old
    spans = regions.scan(lo, hi)
    assert len(spans) >= before + 4
    now = upstream_cluster.cluster.tso.next()
    counts = [len(upstream_cluster.cluster.store.scan(max(r.start_key, lo), min(r.end_key or hi, hi), now))
              for r in spans]
    assert sum(counts) == 5000 and max(counts) <= 1000
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 5000}]


def test_workload_prepare_imports_parquet(upstream_client: Any, fresh_db: str, tmp_path: Path) -> None:
    cfg = WorkloadConfig(db=fresh_db, tables=2, id_range=30_000, initial_rows=25_000, txns=200, threads=2)

    def execute(script: str) -> list[tuple[int, int]]:
        return [(r.affected_rows, r.commit_ts) for r in upstream_client.execute(script)]

    w = Workload(cfg, execute)
    w.prepare(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["sbtest1.00000.parquet", "sbtest2.00000.parquet"]
    assert check_consistency(cfg, upstream_client.query) == {"sbtest1": 25_000, "sbtest2": 25_000}
    assert w.row_counts(upstream_client.query) == [25_000, 25_000]
    s = w.run()
    assert s.committed > 100 and set(s.errors) <= {"duplicate", "conflict"}, s.to_dict()
    check_consistency(cfg, upstream_client.query)
