"""ALTER TABLE jobs: columns and indexes change the table info, existing rows and the history."""

from __future__ import annotations

import json
from typing import Any

import pytest
from wire.eventfeed import table_id

from cdc_core.codec import key as keycodec
from cdc_core.codec.rowcodec import parse_row_v2
from cdc_core.errors import UpstreamError
from cdc_core.schema import ddl_history
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column


def _stored(upstream_cluster: Any, key: bytes) -> bytes | None:
    """The key's value in the MVCC store, read at a ts from the TSO (a read raises the store's max_ts)."""
    c = upstream_cluster.cluster
    return upstream_cluster.call(lambda: c.store.get(key, c.tso.next()))  # type: ignore[no-any-return]


def _jobs(client: Any, table: int) -> list[DDLJob]:
    rows = client.query(f"SELECT job_meta FROM mysql.tidb_ddl_history WHERE table_ids = '{table}' ORDER BY job_id")
    return ddl_history.jobs_from_sql(rows, 0)


def test_column_jobs_keep_ids_and_rows_read_through_them(upstream_cluster: Any, upstream_client: Any,
                                                          fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(4)); "
              "INSERT INTO t VALUES (1, 10, 'x'), (2, NULL, 'y')")
    c.execute(f"USE {fresh_db}; ALTER TABLE t ADD COLUMN c DECIMAL(6,2) NOT NULL DEFAULT 1.5")
    c.execute(f"USE {fresh_db}; ALTER TABLE t ADD COLUMN z INT NOT NULL AFTER id")  # implicit default 0
    assert c.query(f"SELECT * FROM {fresh_db}.t ORDER BY id") == [
        {"id": 1, "z": 0, "a": 10, "b": "x", "c": "1.50"}, {"id": 2, "z": 0, "a": None, "b": "y", "c": "1.50"}]
    c.execute(f"USE {fresh_db}; ALTER TABLE t RENAME COLUMN a TO aa; ALTER TABLE t DROP COLUMN b")
    # The dropped column's value is still in the old row; it simply has no column any more.
    tid = table_id(upstream_cluster, fresh_db, "t")
    raw = _stored(upstream_cluster, keycodec.row_key(tid, 1))
    assert parse_row_v2(raw).value(3) == b"x"
    # INT -> BIGINT keeps the column id; DECIMAL(6,2) -> (8,2) is reorganized under a new id (TiDB's rule).
    c.execute(f"USE {fresh_db}; ALTER TABLE t MODIFY COLUMN aa BIGINT; "
              "ALTER TABLE t CHANGE COLUMN c cc DECIMAL(8,2) NOT NULL")
    # CHANGE COLUMN redefines the column: without a DEFAULT clause it no longer has one.
    with pytest.raises(UpstreamError, match="Field 'cc' doesn't have a default value"):
        c.execute(f"INSERT INTO {fresh_db}.t (id, aa) VALUES (3, 30)")
    c.execute(f"INSERT INTO {fresh_db}.t (id, aa, cc) VALUES (3, 30, 7)")
    assert c.query(f"SELECT * FROM {fresh_db}.t ORDER BY id") == [
        {"id": 1, "z": 0, "aa": 10, "cc": "1.50"}, {"id": 2, "z": 0, "aa": None, "cc": "1.50"},
        {"id": 3, "z": 0, "aa": 30, "cc": "7.00"}]
    jobs = _jobs(c, table_id(upstream_cluster, fresh_db, "t"))
    # RENAME COLUMN runs as a MODIFY COLUMN job, as in TiDB.
    assert [j.job_type for j in jobs] == ["create table", "add column", "add column", "modify column", "drop column",
                                          "modify column", "modify column"]
    final = jobs[-1].table_info
    assert final is not None
    assert [(col.name, col.id, col.type) for col in final.columns] == [
        ("id", 1, "int"), ("z", 5, "int"), ("aa", 2, "bigint"), ("cc", 6, "decimal")]
    assert final.max_column_id == 6
    # The backfill rewrote the row with the public columns and the changing one (the dropped id 3 is gone).
    raw = _stored(upstream_cluster, keycodec.row_key(tid, 1))
    assert parse_row_v2(raw).not_null_ids == (1, 2, 4, 5, 6)


def test_type_change_backfills_a_new_column_id_before_the_job(upstream_cluster: Any, upstream_client: Any,
                                                              fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, a INT, UNIQUE KEY ua (a)); "
              "INSERT INTO t VALUES (1, 10), (2, NULL), (3, -7)")
    tid = table_id(upstream_cluster, fresh_db, "t")
    [res] = c.execute(f"USE {fresh_db}; ALTER TABLE t MODIFY COLUMN a VARCHAR(5)")[1:]
    [job] = [j for j in _jobs(c, tid) if j.job_type == "modify column"]
    assert job.finished_ts == res.commit_ts and job.table_info is not None
    assert [(col.name, col.id, col.type) for col in job.table_info.columns] == [("id", 1, "int"), ("a", 3, "varchar")]
    store = upstream_cluster.cluster.store
    before = upstream_cluster.call(lambda: store.get(keycodec.row_key(tid, 1), job.finished_ts - 1))
    # The backfill committed below the job's ts: the row has the old id (INT 10) and the new one ("10").
    assert parse_row_v2(before).value(2) == b"\x0a" and parse_row_v2(before).value(3) == b"10"
    assert c.query(f"SELECT * FROM {fresh_db}.t ORDER BY id") == [
        {"id": 1, "a": "10"}, {"id": 2, "a": None}, {"id": 3, "a": "-7"}]
    # The unique index now holds the strings; writes after the job store only the new id.
    with pytest.raises(UpstreamError, match=r"Duplicate entry '10' for key 't\.ua'"):
        c.execute(f"INSERT INTO {fresh_db}.t VALUES (4, '10')")
    c.execute(f"UPDATE {fresh_db}.t SET a = 'x' WHERE id = 1")
    after = _stored(upstream_cluster, keycodec.row_key(tid, 1))
    assert parse_row_v2(after).not_null_ids == (1, 3) and parse_row_v2(after).value(3) == b"x"
    # TiDB refuses to reorganize a primary-key column (ErrUnsupportedModifyColumn).
    c.execute(f"USE {fresh_db}; CREATE TABLE n (p INT PRIMARY KEY NONCLUSTERED, v INT)")
    with pytest.raises(UpstreamError, match=r"Unsupported modify column: 'p' .* primary key flag"):
        c.execute(f"USE {fresh_db}; ALTER TABLE n MODIFY COLUMN p VARCHAR(5)")


def test_new_not_null_column_takes_its_default_on_insert(upstream_client: Any, fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY); ALTER TABLE t ADD COLUMN s VARCHAR(3) "
              "NOT NULL DEFAULT 'n'; INSERT INTO t (id) VALUES (1)")
    assert c.query(f"SELECT * FROM {fresh_db}.t") == [{"id": 1, "s": "n"}]


@pytest.mark.parametrize(
    "setup, alter, message",
    [
        ("INSERT INTO t (id, a, b) VALUES (1, 300, 'abc')", "ALTER TABLE t MODIFY COLUMN b VARCHAR(2)",
         "Data truncated"),
        ("INSERT INTO t (id, a, b) VALUES (1, NULL, 'a')", "ALTER TABLE t MODIFY COLUMN a INT NOT NULL", "NULL"),
        ("", "ALTER TABLE t MODIFY COLUMN id VARCHAR(8)", "must stay an integer"),
        ("", "ALTER TABLE t DROP COLUMN nope", "Unknown column"),
        ("", "ALTER TABLE t ADD COLUMN a INT", "Duplicate column"),
        ("", "ALTER TABLE t ADD COLUMN d DATETIME NOT NULL", "needs a DEFAULT"),
        ("", "ALTER TABLE t ADD COLUMN u INT UNIQUE", "not supported on a new column"),
        ("", "ALTER TABLE t ADD COLUMN x INT, DROP COLUMN x", "Unsupported operate same column 'x'"),
        ("", "ALTER TABLE t ADD COLUMN x INT, ADD COLUMN a INT", "Duplicate column"),  # a later change fails it all
        ("INSERT INTO t (id, a, b) VALUES (1, 5, 'a'), (2, 5, 'b')", "ALTER TABLE t ADD UNIQUE KEY ua (a)",
         "Duplicate entry"),
        ("", "ALTER TABLE t DROP INDEX nope", "check that column/key exists"),
        ("", "ALTER TABLE t DROP COLUMN ub", "used by index ub"),
        ("", "ALTER TABLE t DROP PRIMARY KEY", "Unsupported drop primary key when the table is using clustered index"),
    ],
)
def test_alter_errors_are_clear_and_leave_no_job(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                                 setup: str, alter: str, message: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(8), ub INT, "
              "UNIQUE KEY ub (ub))" + (f"; {setup}" if setup else ""))
    before = len(_jobs(c, table_id(upstream_cluster, fresh_db, "t")))
    with pytest.raises(UpstreamError, match=message):
        c.execute(f"USE {fresh_db}; {alter}")
    assert len(_jobs(c, table_id(upstream_cluster, fresh_db, "t"))) == before


def test_unique_index_is_backfilled_enforced_and_dropped(upstream_cluster: Any, upstream_client: Any,
                                                         fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT); "
              "INSERT INTO t VALUES (1, 1, 1), (2, 2, 2), (3, NULL, 3)")
    c.execute(f"USE {fresh_db}; CREATE UNIQUE INDEX ua ON t (a); ALTER TABLE t ADD INDEX ib (b)")
    with pytest.raises(UpstreamError, match=r"Duplicate entry '1' for key 't\.ua'"):
        c.execute(f"INSERT INTO {fresh_db}.t VALUES (4, 1, 4)")
    c.execute(f"INSERT INTO {fresh_db}.t VALUES (4, NULL, 4)")  # NULLs never collide
    c.execute(f"USE {fresh_db}; DROP INDEX ua ON t; INSERT INTO t VALUES (5, 1, 5)")
    assert len(c.query(f"SELECT * FROM {fresh_db}.t WHERE a = 1")) == 2
    jobs = _jobs(c, table_id(upstream_cluster, fresh_db, "t"))
    assert [j.job_type for j in jobs] == ["create table", "add index", "add index", "drop index"]
    after_add = jobs[2].table_info
    assert after_add is not None
    assert [(ix.name, ix.unique, ix.id) for ix in after_add.indexes] == [
        ("PRIMARY", True, 0), ("ua", True, 1), ("ib", False, 2)]  # a clustered PK is no index: TiDB's ids
    assert [ix.name for ix in jobs[3].table_info.indexes] == ["PRIMARY", "ib"]  # type: ignore[union-attr]
    # A unique index added later, after another was dropped, gets a fresh id (no stale entries).
    c.execute(f"USE {fresh_db}; DELETE FROM t WHERE id = 5; ALTER TABLE t ADD UNIQUE (a)")
    with pytest.raises(UpstreamError, match="Duplicate entry"):
        c.execute(f"INSERT INTO {fresh_db}.t VALUES (6, 2, 6)")


def test_snapshot_reads_use_the_schema_of_their_ts(upstream_client: Any, fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, qty INT); INSERT INTO t VALUES (1, 5)")
    before = c.get_ts()
    c.execute(f"USE {fresh_db}; ALTER TABLE t DROP COLUMN qty")
    middle = c.get_ts()
    c.execute(f"USE {fresh_db}; ALTER TABLE t ADD COLUMN note VARCHAR(4) DEFAULT 'n'; RENAME TABLE t TO t2")
    for _ in range(2):  # one session going back and forth between snapshots: each read gets the schema of its ts
        assert c.query(f"SELECT * FROM {fresh_db}.t", at_ts=before) == [{"id": 1, "qty": 5}]
        assert c.query(f"SELECT * FROM {fresh_db}.t", at_ts=middle) == [{"id": 1}]
        assert c.query(f"SELECT * FROM {fresh_db}.t2") == [{"id": 1, "note": "n"}]
        with pytest.raises(UpstreamError, match="doesn't exist"):
            c.query(f"SELECT * FROM {fresh_db}.t2", at_ts=before)


def test_several_changes_in_one_alter_are_one_multi_schema_change_job(upstream_cluster: Any, upstream_client: Any,
                                                                      fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE m (id INT PRIMARY KEY, a INT, b VARCHAR(4), p DECIMAL(6,2));"
              "INSERT INTO m VALUES (1, 10, 'x', 1.25), (2, 20, 'y', NULL)")
    tid = table_id(upstream_cluster, fresh_db, "m")
    [res] = c.execute(f"ALTER TABLE {fresh_db}.m ADD COLUMN n INT NOT NULL DEFAULT 7, DROP COLUMN b, "
                      "MODIFY COLUMN p DECIMAL(9,3), RENAME COLUMN a TO aa, ADD UNIQUE KEY un (aa)")
    assert c.query(f"SELECT * FROM {fresh_db}.m ORDER BY id") == [
        {"id": 1, "aa": 10, "p": "1.250", "n": 7}, {"id": 2, "aa": 20, "p": None, "n": 7}]
    job = _jobs(c, tid)[-1]
    assert (job.job_type, job.finished_ts) == ("alter table multi-schema change", res.commit_ts)
    assert job.sub_job_types == ("add column", "drop column", "modify column", "modify column", "add index")
    [row] = c.query(f"SELECT job_meta FROM mysql.tidb_ddl_history WHERE job_id = {job.job_id}")
    meta = json.loads(Column(1, "job_meta", "longblob").convert(row["job_meta"]))
    assert meta["type"] == 61 and [s["type"] for s in meta["multi_schema_info"]["sub_jobs"]] == [5, 6, 12, 12, 7]
    before = _jobs(c, tid)[0].table_info
    assert before is not None and job.table_info is not None
    assert job.table_info.column("p").id != before.column("p").id  # reorganized (TiDB's rule), under its name
    # A failing change fails the whole statement: nothing of it applies, no job is written.
    with pytest.raises(UpstreamError, match=r"Duplicate entry '7' for key 'm\.un2'"):
        c.execute(f"ALTER TABLE {fresh_db}.m ADD COLUMN q INT, ADD UNIQUE KEY un2 (n)")
    # TiDB's rule: one column, one change per statement.
    with pytest.raises(UpstreamError, match="Unsupported operate same column 'n'"):
        c.execute(f"ALTER TABLE {fresh_db}.m ADD COLUMN z INT, MODIFY COLUMN n BIGINT, DROP COLUMN n")
    assert list(c.query(f"SELECT * FROM {fresh_db}.m WHERE id = 1")[0]) == ["id", "aa", "p", "n"]
    assert _jobs(c, tid)[-1].job_id == job.job_id


def test_a_non_clustered_primary_key_is_dropped_and_added_as_tidb_does(upstream_cluster: Any, upstream_client: Any,
                                                                       fresh_db: str) -> None:
    """TiDB's ActionDropPrimaryKey / ActionAddPrimaryKey on a NONCLUSTERED key: the rows keep their _tidb_rowid
    handles, the key's uniqueness goes and comes back (checked against the rows when added), and the jobs carry the
    table after them. A clustered key can be neither dropped nor added."""
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE t (id INT, u INT NOT NULL, v INT, PRIMARY KEY (id) NONCLUSTERED, "
              "UNIQUE KEY uu (u)); INSERT INTO t VALUES (1, 10, NULL), (2, 20, 2)")
    tid = table_id(upstream_cluster, fresh_db, "t")
    with pytest.raises(UpstreamError, match=r"Duplicate entry '1' for key 't\.PRIMARY'.*1062"):
        c.execute(f"INSERT INTO {fresh_db}.t VALUES (1, 30, 3)")
    [drop] = c.execute(f"ALTER TABLE {fresh_db}.t DROP PRIMARY KEY")
    c.execute(f"INSERT INTO {fresh_db}.t VALUES (1, 30, 3)")  # the old key may repeat now
    dup = c.query(f"SELECT _tidb_rowid AS h, u FROM {fresh_db}.t WHERE id = 1 ORDER BY _tidb_rowid")
    assert [r["u"] for r in dup] == [10, 30] and dup[0]["h"] == 1 < dup[1]["h"]  # two rows, two handles
    job = _jobs(c, tid)[-1]
    assert (job.job_type, job.finished_ts) == ("drop primary key", drop.commit_ts)
    assert job.table_info is not None and job.table_info.primary_key == () and job.table_info.delta_key() == ("u",)
    with pytest.raises(UpstreamError, match=r"Duplicate entry '1' for key 't\.PRIMARY'"):
        c.execute(f"ALTER TABLE {fresh_db}.t ADD PRIMARY KEY (id)")
    with pytest.raises(UpstreamError, match=r"Invalid use of NULL value.*1138"):
        c.execute(f"ALTER TABLE {fresh_db}.t ADD PRIMARY KEY (v)")
    with pytest.raises(UpstreamError, match=r"Adding clustered primary key is not supported.*8200"):
        c.execute(f"ALTER TABLE {fresh_db}.t ADD PRIMARY KEY (u) CLUSTERED")
    c.execute(f"DELETE FROM {fresh_db}.t WHERE u = 30; ALTER TABLE {fresh_db}.t ADD PRIMARY KEY (id) NONCLUSTERED")
    job = _jobs(c, tid)[-1]
    assert job.job_type == "add primary key" and job.table_info is not None
    assert job.table_info.primary_key == ("id",) and not job.table_info.column("id").nullable
    assert not job.table_info.clustered and job.table_info.delta_key() == ("id",)
    with pytest.raises(UpstreamError, match=r"Duplicate entry '2' for key 't\.PRIMARY'"):
        c.execute(f"INSERT INTO {fresh_db}.t VALUES (2, 40, 4)")
    with pytest.raises(UpstreamError, match=r"Multiple primary key defined.*1068"):
        c.execute(f"ALTER TABLE {fresh_db}.t ADD PRIMARY KEY (u)")
    c.execute(f"CREATE TABLE {fresh_db}.k (a INT PRIMARY KEY)")
    with pytest.raises(UpstreamError, match=r"Unsupported drop primary key when the table is using clustered index"):
        c.execute(f"ALTER TABLE {fresh_db}.k DROP PRIMARY KEY")
    with pytest.raises(UpstreamError, match=r"Can't DROP 'PRIMARY'; check that column/key exists.*1091"):
        c.execute(f"CREATE TABLE {fresh_db}.b (a INT); ALTER TABLE {fresh_db}.b DROP INDEX `PRIMARY`")
