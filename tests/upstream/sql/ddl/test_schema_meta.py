"""The embedded upstream keeps TiDB's meta keys: after every DDL, in the DDL's own transaction, the store's
``DBs`` / ``DB:<id>`` / ``Table:<id>`` / ``SchemaVersionKey`` at any ts hold exactly the catalog's schema at that
ts, as ``model.DBInfo`` / ``model.TableInfo`` JSON (the job rows' JSON); the system tables are there from the start
and tables made in bulk are ingested; reads at a ts (``@@tidb_snapshot``) take their schema from them."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_core.codec import meta_key
from cdc_core.errors import UpstreamError
from cdc_core.schema import ddl_history
from cdc_core.schema.model import Column
from cdc_core.upstream.sql.ddl import schema_meta
from testkit import odd_ddl_job


def _scan(ec: Any, start: bytes, end: bytes, ts: int) -> list[tuple[bytes, bytes]]:
    store = ec.cluster.store
    return ec.call(lambda: store.scan(start, end, ts))  # type: ignore[no-any-return]


def meta_tables(ec: Any, db_id: int, ts: int) -> dict[int, bytes]:
    """``{table id: TableInfo JSON}`` of database ``db_id``'s hash at ``ts`` (its other fields left out)."""
    out = {}
    for key, value in _scan(ec, *meta_key.hash_range(meta_key.db_field(db_id)), ts):
        hash_key, field = meta_key.decode_hash_field_key(key)
        assert hash_key == meta_key.db_field(db_id)
        if meta_key.is_table_field(field):
            out[meta_key.parse_table_field(field)] = value
    return out


def meta_dbs(ec: Any, ts: int) -> dict[int, bytes]:
    return {meta_key.parse_db_field(meta_key.decode_hash_field_key(k)[1]): v
            for k, v in _scan(ec, *meta_key.hash_range(meta_key.DBS), ts)}


def catalog_tables(ec: Any, db: str) -> dict[int, bytes]:
    """What the meta must say now: the catalog's tables of ``db``, in TiDB's JSON."""
    tables = ec.call(lambda: ec.cluster.catalog.tables(db))
    return {t.id: schema_meta.table_value(t) for t in tables}


def schema_version(ec: Any, ts: int) -> int:
    store = ec.cluster.store
    return int(ec.call(lambda: store.get(meta_key.string_key(meta_key.SCHEMA_VERSION), ts)))


def now(ec: Any) -> int:
    return ec.call(lambda: ec.cluster.tso.next())  # type: ignore[no-any-return]


def test_the_system_tables_are_there_from_the_start(upstream_cluster: Any) -> None:
    ec, ts = upstream_cluster, now(upstream_cluster)
    assert meta_dbs(ec, ts)[ddl_history.SYSTEM_DB_ID] == schema_meta.db_value(ddl_history.SYSTEM_DB_ID, "mysql")
    assert meta_tables(ec, ddl_history.SYSTEM_DB_ID, ts) == {
        t.id: schema_meta.table_value(t) for t in ddl_history.SYSTEM_TABLES}


def test_every_ddl_leaves_the_meta_equal_to_the_schema_at_its_ts(upstream_cluster: Any, upstream_client: Any,
                                                              fresh_db: str) -> None:
    ec, c, db = upstream_cluster, upstream_client, fresh_db
    db_id = ec.call(lambda: ec.cluster.catalog.database(db)).id
    other = f"{db}_o"
    steps = [
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10)); CREATE TABLE u (id BIGINT, k INT, UNIQUE KEY (k))",
        "ALTER TABLE t ADD COLUMN w INT DEFAULT 3, ADD INDEX iv (v)",
        "ALTER TABLE t MODIFY COLUMN v VARCHAR(20); ALTER TABLE u RENAME COLUMN k TO kk",
        "TRUNCATE TABLE u",
        "RENAME TABLE t TO t1, u TO t, t1 TO u",
        f"CREATE DATABASE {other}; RENAME TABLE u TO {other}.moved",
        "CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(8)) PARTITION BY RANGE (id) "
        "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20)); "
        "CREATE TABLE n (id INT PRIMARY KEY, v VARCHAR(8)); INSERT INTO n VALUES (1, 'a')",
        "ALTER TABLE r EXCHANGE PARTITION p0 WITH TABLE n",
        "ALTER TABLE r ADD PARTITION (PARTITION p2 VALUES LESS THAN (30)); ALTER TABLE r TRUNCATE PARTITION p1",
        "ALTER TABLE n PARTITION BY HASH (id) PARTITIONS 2",
        "ALTER TABLE n REMOVE PARTITIONING",
        "DROP TABLE t",
    ]
    seen: list[tuple[int, dict[int, bytes], int]] = [(now(ec), catalog_tables(ec, db), schema_version(ec, now(ec)))]
    for sql in steps:
        c.execute(f"USE {db}; {sql}")
        ts = now(ec)
        want = catalog_tables(ec, db)
        assert meta_tables(ec, db_id, ts) == want, sql
        assert schema_version(ec, ts) == ec.call(lambda: ec.cluster.catalog.schema_version), sql
        seen.append((ts, want, schema_version(ec, ts)))
    other_id = ec.call(lambda: ec.cluster.catalog.database(other)).id
    assert meta_tables(ec, other_id, now(ec)) == catalog_tables(ec, other)
    # MVCC: the meta read at each earlier ts is the schema there.
    for ts, want, version in seen:
        assert meta_tables(ec, db_id, ts) == want
        assert schema_version(ec, ts) == version
    # EXCHANGE PARTITION: the normal table went on under the partition's id, the partition under the table's.
    r = ec.call(lambda: ec.cluster.catalog.table(db, "r"))
    assert r.partition is not None and len(r.partition.definitions) == 3

    before_drop = now(ec)
    c.execute(f"DROP DATABASE {other}")
    after = now(ec)
    assert other_id in meta_dbs(ec, before_drop) and meta_tables(ec, other_id, before_drop)
    assert other_id not in meta_dbs(ec, after) and meta_tables(ec, other_id, after) == {}


def test_a_database_is_created_and_dropped_in_the_meta(upstream_cluster: Any, upstream_client: Any) -> None:
    ec, c = upstream_cluster, upstream_client
    before = now(ec)
    c.execute("CREATE DATABASE meta_db_life; CREATE TABLE meta_db_life.a (id INT PRIMARY KEY)")
    created = now(ec)
    db_id = ec.call(lambda: ec.cluster.catalog.database("meta_db_life")).id
    c.execute("DROP DATABASE meta_db_life")
    dropped = now(ec)
    assert db_id not in meta_dbs(ec, before)
    assert meta_dbs(ec, created)[db_id] == schema_meta.db_value(db_id, "meta_db_life")
    assert len(meta_tables(ec, db_id, created)) == 1
    assert db_id not in meta_dbs(ec, dropped) and meta_tables(ec, db_id, dropped) == {}


def test_tables_made_in_bulk_are_ingested_as_tidb_writes_them(upstream_cluster: Any, upstream_client: Any,
                                                              fresh_db: str) -> None:
    ec = upstream_cluster
    cols = (Column(1, "id", "bigint", nullable=False), Column(2, "note", "varchar", length=20))
    names = [f"bulk_{i:04d}" for i in range(300)] + ["Mixed<&>Case"]
    created = ec.call(lambda: ec.cluster.catalog.bulk_create_tables(fresh_db, names, cols))
    db_id = created[0].db_id
    got = meta_tables(ec, db_id, now(ec))
    # The one-render-per-batch JSON is byte for byte each table's own (Go's escapes of <, >, & included).
    assert got == {t.id: schema_meta.table_value(t) for t in created}
    assert schema_version(ec, now(ec)) == created[0].schema_version


def test_reads_at_a_ts_take_their_schema_from_the_meta_there(upstream_cluster: Any, upstream_client: Any,
                                                             fresh_db: str) -> None:
    ec, c, db = upstream_cluster, upstream_client, fresh_db
    c.execute(f"USE {db}; CREATE TABLE a (id INT PRIMARY KEY, v INT); INSERT INTO a VALUES (1, 10)")
    t1 = c.get_ts()
    c.execute(f"USE {db}; RENAME TABLE a TO b; ALTER TABLE b ADD COLUMN w INT DEFAULT 7; INSERT INTO b VALUES "
              "(2, 20, 8); TRUNCATE TABLE b; INSERT INTO b VALUES (3, 30, 9)")
    t2 = c.get_ts()
    odd_ddl_job.write(ec, db, "old_vectors")  # the history is not replayed for them: it cannot stop them
    try:
        assert c.query(f"SELECT * FROM {db}.a", at_ts=t1) == [{"id": 1, "v": 10}]
        with pytest.raises(UpstreamError, match="doesn't exist"):
            c.query(f"SELECT * FROM {db}.b", at_ts=t1)
        assert c.query(f"SELECT * FROM {db}.b", at_ts=t2) == [{"id": 3, "v": 30, "w": 9}]
        listed = c.query(f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}'", at_ts=t1)
        assert listed == [{"TABLE_NAME": "a"}]
    finally:
        odd_ddl_job.remove(ec)
