"""The starting schema from TiDB's meta snapshot, against the session's upstream: it equals the schema a replay of
the whole DDL history gives (TiDB's two records of one schema agree), it holds what the filter matches, it is not
stopped by an old job nobody can decode, and it fails naming a replicated table whose TableInfo cannot be read."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from cdc_core.changefeed.ddl_puller import SchemaLog
from cdc_core.changefeed.schema_loader import SNAPSHOT_JOB_ID, load_schema, load_schema_jobs
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import ChangefeedError
from cdc_core.filter.table_filter import TableFilter
from cdc_core.schema import ddl_history
from cdc_core.schema.model import SchemaError, TableInfo
from cdc_core.schema.storage import SchemaStorage
from testkit import odd_ddl_job


def replayed(c: UpstreamClient, ts: int, db: str) -> dict[int, TableInfo]:
    """The tables of ``db`` at ``ts`` by replaying both DDL job tables (what cdcflow did before)."""
    rows = [r for name in (ddl_history.HISTORY_TABLE_NAME, ddl_history.JOB_TABLE_NAME)
            for r in c.query(f"SELECT job_meta FROM mysql.{name} WHERE job_id >= 100", at_ts=ts)]
    storage = SchemaStorage.from_jobs(ddl_history.jobs_from_sql(rows, ts))
    return {t.id: _versionless(t) for t in storage.tables_at(ts) if t.db_name in (db, f"{db}_b")}


def _versionless(t: TableInfo) -> TableInfo:
    # A job's TableInfo carries its own schema version; the meta snapshot's tables carry the global one.
    return replace(t, schema_version=0)


def from_meta(c: UpstreamClient, ts: int, db: str, table_filter: TableFilter | None = None) -> dict[int, TableInfo]:
    return {t.id: _versionless(t) for t in load_schema(c, ts, table_filter).tables_at(ts)
            if t.db_name in (db, f"{db}_b")}


def test_the_meta_snapshot_is_the_replayed_history(upstream_client: Any, fresh_db: str) -> None:
    c, db = upstream_client, fresh_db
    script = [
        f"CREATE DATABASE {db}_b",
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10) DEFAULT 'd', n DECIMAL(8, 2), KEY (n))",
        "CREATE TABLE u (id BIGINT, k VARCHAR(4) NOT NULL, UNIQUE KEY uk (k)) ",
        "CREATE TABLE ch (a INT, b VARCHAR(8), PRIMARY KEY (a, b))",
        "ALTER TABLE t ADD COLUMN w INT DEFAULT 3, DROP INDEX n; ALTER TABLE t DROP COLUMN n",
        "ALTER TABLE t MODIFY COLUMN v VARCHAR(30); ALTER TABLE u RENAME COLUMN k TO kk",
        "TRUNCATE TABLE u",
        f"RENAME TABLE t TO t1, u TO t, t1 TO u; RENAME TABLE ch TO {db}_b.ch",
        "CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(8)) PARTITION BY RANGE (id) "
        "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20)); "
        "CREATE TABLE n (id INT PRIMARY KEY, v VARCHAR(8))",
        "ALTER TABLE r EXCHANGE PARTITION p0 WITH TABLE n; ALTER TABLE r ADD PARTITION "
        "(PARTITION p2 VALUES LESS THAN (30))",
        "ALTER TABLE n PARTITION BY HASH (id) PARTITIONS 2",
        "CREATE TABLE gone (id INT PRIMARY KEY); DROP TABLE gone",
    ]
    for sql in script:
        c.execute(f"USE {db}; {sql}")
        ts = c.get_ts()
        assert from_meta(c, ts, db) == replayed(c, ts, db), sql
    only = TableFilter([f"{db}.r", f"{db}.n"])
    assert sorted(t.name for t in from_meta(c, ts, db, only).values()) == ["n", "r"]


def test_the_synthetic_jobs_are_a_schema_log_at_the_ts(upstream_client: Any, fresh_db: str, tmp_path: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    c, db = upstream_client, fresh_db
    c.execute(f"USE {db}; CREATE TABLE a (id INT PRIMARY KEY); CREATE TABLE b (id INT PRIMARY KEY)")
    ts = c.get_ts()
    jobs = load_schema_jobs(c, ts, TableFilter([f"{db}.*"]))
    mine = [j for j in jobs if j.schema_name == db]
    assert [(j.job_type, j.table_name) for j in mine] == [("create schema", None), ("create table", "a"),
                                                          ("create table", "b")]
    assert {j.job_id for j in jobs} == {SNAPSHOT_JOB_ID} and {j.finished_ts for j in jobs} == {ts}
    assert len({j.key for j in jobs}) == len(jobs)  # never equal to each other's, nor to a real job's
    slog = SchemaLog("s", jobs, ts)
    slog.save()
    back = SchemaLog.load("s")
    back.gc(ts)  # collapsing at the ts keeps them: they are the schema there
    assert sorted(t.name for t in back.storage().tables_at(ts) if t.db_name == db) == ["a", "b"]
    assert back.storage().jobs_between(ts, ts + 10**9) == []  # nothing to apply at or after the start


def test_an_old_job_nobody_can_decode_does_not_matter(upstream_cluster: Any, upstream_client: Any,
                                                      fresh_db: str) -> None:
    c, db = upstream_client, fresh_db
    odd_ddl_job.write(upstream_cluster, db, "old_vectors")
    try:
        c.execute(f"USE {db}; CREATE TABLE live (id INT PRIMARY KEY)")
        ts = c.get_ts()
        with pytest.raises(SchemaError, match="unsupported column type"):  # the history replayed: stuck
            ddl_history.jobs_from_sql(c.query("SELECT job_meta FROM mysql.tidb_ddl_history", at_ts=ts), ts)
        assert [t.name for t in from_meta(c, ts, db).values()] == ["live"]
    finally:
        odd_ddl_job.remove(upstream_cluster)


def test_a_replicated_table_that_cannot_be_read_is_named(upstream_cluster: Any, upstream_client: Any,
                                                        fresh_db: str) -> None:
    from cdc_core.codec import meta_key
    from cdc_core.upstream.sql.txn import Transaction

    ec, c, db = upstream_cluster, upstream_client, fresh_db
    c.execute(f"USE {db}; CREATE TABLE fine (id INT PRIMARY KEY)")
    db_id = ec.call(lambda: ec.cluster.catalog.database(db)).id
    key = meta_key.hash_field_key(meta_key.db_field(db_id), meta_key.table_field(odd_ddl_job.ODD_JOB_ID + 1))
    # The odd job's TableInfo as a live table's meta (a cluster that has such a table now).
    import json
    info = json.loads(odd_ddl_job.undecodable_job_meta(db, "vectors"))["binlog"]["TableInfo"]

    def put(delete: bool) -> int:
        txn = Transaction(ec.cluster.store, ec.cluster.tso)
        txn.delete(key) if delete else txn.put(key, json.dumps(info).encode())
        return txn.commit_now()

    ts = ec.call(lambda: put(False))
    try:
        assert [t.name for t in from_meta(c, ts, db, TableFilter([f"{db}.fine"])).values()] == ["fine"]
        with pytest.raises(ChangefeedError, match=rf"table {db}\.vectors .*column 'embedding'.*Tp 199"):
            load_schema_jobs(c, ts, TableFilter([f"{db}.*"]))
    finally:
        ec.call(lambda: put(True))
