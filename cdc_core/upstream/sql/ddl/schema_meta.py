"""The embedded upstream's meta keys: the schema as TiDB keeps it in TiKV, written where TiDB writes it.

TiDB's DDL changes its meta in the same transaction as the job's last schema change (``pkg/ddl``: the job worker's
``runOneJobStep`` and ``updateVersionAndTableInfo`` run in the transaction that also writes the job row), through
``pkg/meta/meta.go``: ``CreateDatabase`` puts ``DBs``/``DB:<id>`` (``model.DBInfo`` JSON), ``DropDatabase`` clears
the database's hash and deletes that field, ``CreateTableOrView`` / ``UpdateTable`` / ``DropTableOrView`` put or
delete ``DB:<db id>``/``Table:<id>`` (``model.TableInfo`` JSON), and ``GenSchemaVersion`` bumps
``SchemaVersionKey``. TRUNCATE and PARTITION BY / REMOVE PARTITIONING drop the old table id and create the new
one, RENAME TABLE across databases moves the field (``onRenameTable``), EXCHANGE PARTITION drops the normal
table's id and creates it under the partition's (``onExchangeTablePartition``). Keys: ``cdc_core.codec.meta_key``;
JSON: ``cdc_core.schema.tidb_json``, the same TableInfo JSON the job rows carry.

:func:`write_job` puts a job's meta writes in its transaction (``ddl.DdlExecutor._commit_job``), from the
catalog as it was before the job. The catalog's own tables (the ``mysql`` database, TiDB's bootstrap) and tables
made in bulk (``Catalog.bulk_create_tables``) are ingested (:class:`MetaIngest`), without a transaction per table.

The SQL front reads the schema back at a ts for ``@@tidb_snapshot`` reads, as TiDB loads a snapshot's schema from
the meta at that ts (``pkg/domain`` ``GetSnapshotInfoSchema``): :func:`table_at` finds one table in O(1) when the
catalog's current table of that name is the one it was (its field read at the ts), else by scanning its database's
hash; :func:`tables_at` lists them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol

from cdc_core.codec import meta_key
from cdc_core.schema import ddl_history, tidb_json
from cdc_core.schema.ddl_job import REPARTITION_JOB_TYPES, DDLJob
from cdc_core.schema.meta_snapshot import DatabaseMeta, database_of, parse_json, table_name_of
from cdc_core.schema.model import TableInfo
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.sql.txn import Transaction
from cdc_core.upstream.store.mvcc import MvccStore

KeyValue = tuple[bytes, bytes]


def db_value(db_id: int, name: str) -> bytes:
    """A database's ``model.DBInfo`` JSON, as ``meta.CreateDatabase`` stores it."""
    return tidb_json.go_json(tidb_json.db_to_tidb(db_id, name))


def table_value(info: TableInfo) -> bytes:
    """A table's ``model.TableInfo`` JSON, as ``meta.CreateTableOrView`` / ``UpdateTable`` store it."""
    return tidb_json.go_json(tidb_json.table_to_tidb(info))


def db_key(db_id: int) -> bytes:
    return meta_key.hash_field_key(meta_key.DBS, meta_key.db_field(db_id))


def table_key(db_id: int, table_id: int) -> bytes:
    return meta_key.hash_field_key(meta_key.db_field(db_id), meta_key.table_field(table_id))


def version_pair(version: int) -> KeyValue:
    """``SchemaVersionKey`` at ``version`` (an int64 string, as ``structure.Inc`` writes it)."""
    return meta_key.string_key(meta_key.SCHEMA_VERSION), str(version).encode()


class _Tables(Protocol):
    """What a job sees of the catalog before it: tables by id (``catalog.Catalog``)."""

    def table_by_id(self, table_id: int) -> TableInfo | None: ...


class _Current(Protocol):
    """The catalog's current schema, where a read at a ts looks first (``catalog.Catalog``)."""

    def database(self, name: str) -> Any: ...

    def table(self, db: str, name: str) -> TableInfo | None: ...


def write_job(txn: Transaction, catalog: _Tables, parts: Sequence[DDLJob]) -> None:
    """Put the meta writes of a finished job (its parts, for RENAME TABLES) into ``txn``, the transaction that
    commits the job. ``catalog`` is the schema before the job; the parts carry the tables after it."""
    for job in parts:
        if job.job_type == "create schema":
            assert job.schema_id is not None and job.schema_name is not None
            txn.put(db_key(job.schema_id), db_value(job.schema_id, job.schema_name))
        elif job.job_type == "drop schema":
            assert job.schema_id is not None
            _drop_database(txn, job.schema_id)
        else:
            _table_job(txn, catalog, job)
    txn.put(*version_pair(max(j.schema_version for j in parts)))


def _drop_database(txn: Transaction, db_id: int) -> None:
    # meta.DropDatabase: HClear of the database's hash (every field, found by scanning it), then its DBs field.
    start, end = meta_key.hash_range(meta_key.db_field(db_id))
    for key, _ in txn.iter_scan(start, end):
        txn.delete(key)
    txn.delete(db_key(db_id))


def _table_job(txn: Transaction, catalog: _Tables, job: DDLJob) -> None:
    after = job.table_info
    gone: list[int] = []
    if job.job_type == "drop table" and job.table_id is not None:
        gone.append(job.table_id)
    # TRUNCATE, PARTITION BY / REMOVE PARTITIONING (a new table id) and EXCHANGE PARTITION (the normal table)
    # drop the id the table had.
    if job.old_table_id is not None and (after is None or job.old_table_id != after.id):
        gone.append(job.old_table_id)
    moved = None
    for table_id in gone:
        before = catalog.table_by_id(table_id)
        if before is None:
            raise ValueError(f"DDL job {job.job_id} ({job.job_type}): table {table_id} is not in the catalog")
        txn.delete(table_key(before.db_id, table_id))
        if job.job_type == "exchange partition" and table_id == job.old_table_id:
            moved = before
    if job.job_type == "rename table" and after is not None and job.old_schema_id is not None \
            and job.old_schema_id != after.db_id:
        txn.delete(table_key(job.old_schema_id, after.id))
    if after is not None:
        txn.put(table_key(after.db_id, after.id), table_value(after))
    if moved is not None:
        # The normal table continues under the partition's id, with its own schema.
        if job.partition_id is None:
            raise ValueError(f"DDL job {job.job_id} (exchange partition): without the partition's id")
        nt_after = replace(moved, id=job.partition_id, schema_version=job.schema_version)
        txn.put(table_key(nt_after.db_id, nt_after.id), table_value(nt_after))
    elif job.job_type in REPARTITION_JOB_TYPES and after is None:
        raise ValueError(f"DDL job {job.job_id} ({job.job_type}): without the table after it")


def bulk_table_pairs(tables: Iterable[TableInfo]) -> Iterator[KeyValue]:
    """The ``Table:<id>`` fields of tables that share their columns and indexes (``Catalog.bulk_create_tables``),
    each value byte for byte :func:`table_value`: the JSON is rendered once, and each table's id and name put in
    front of the rest (``table_to_tidb`` starts with them), which keeps a million tables to seconds."""
    rest: bytes | None = None
    for info in tables:
        if rest is None:
            d = tidb_json.table_to_tidb(info)
            if list(d)[:2] != ["id", "name"]:
                raise AssertionError("table_to_tidb no longer starts with id and name")
            rest = tidb_json.go_json({k: v for k, v in d.items() if k not in ("id", "name")})[1:]
        name = tidb_json.go_json({"O": info.name, "L": info.name.lower()})
        yield table_key(info.db_id, info.id), b'{"id":%d,"name":%s,%s' % (info.id, name, rest)


class MetaIngest:
    """Writes meta keys straight into the store (TiDB's bootstrap and BR-like bulk loads), each batch at one new
    commit ts: no locks, no change events (nothing subscribes to the meta range)."""

    def __init__(self, store: MvccStore, tso: TsoAllocator) -> None:
        self.store = store
        self.tso = tso

    def ingest(self, pairs: Iterable[KeyValue]) -> int:
        return self.store.ingest(pairs, self.tso.next())


def bootstrap_pairs(db_id: int, db_name: str, tables: Iterable[TableInfo]) -> Iterator[KeyValue]:
    """The system database and its tables, as TiDB's bootstrap leaves them (``CreateMySQLDatabaseIfNotExists``,
    then a ``CreateTableOrView`` per system table)."""
    yield db_key(db_id), db_value(db_id, db_name)
    for info in tables:
        yield table_key(db_id, info.id), table_value(info)


# --- the schema at a ts ---------------------------------------------------------------------------------------


def schema_version_at(store: MvccStore, ts: int) -> int:
    value = store.get(meta_key.string_key(meta_key.SCHEMA_VERSION), ts)
    return int(value) if value is not None else 0


def _database_at(store: MvccStore, ts: int, name: str, current: _Current) -> DatabaseMeta | None:
    now = current.database(name)
    if now is not None:
        value = store.get(db_key(now.id), ts)
        if value is not None:
            db = database_of(meta_key.db_field(now.id), value)
            if db.name.lower() == name.lower():
                return db
    for key, value in store.iter_scan(*meta_key.hash_range(meta_key.DBS), ts):
        db = database_of(meta_key.decode_hash_field_key(key)[1], value)
        if db.name.lower() == name.lower():
            return db
    return None


def _decode(db: DatabaseMeta, d: dict[str, Any], version: int) -> TableInfo:
    return tidb_json.table_from_tidb(d, db_name=db.name, db_id=db.id, schema_version=version)


def table_at(store: MvccStore, ts: int, db_name: str, name: str, current: _Current) -> TableInfo | None:
    """Table ``db_name.name`` as the meta holds it at ``ts`` (None: there was none), names compared as TiDB's
    lower-case forms; the system tables are the catalog's own."""
    if db_name.lower() == ddl_history.DB_NAME:
        return next((t for t in ddl_history.SYSTEM_TABLES if t.name.lower() == name.lower()), None)
    db = _database_at(store, ts, db_name, current)
    if db is None:
        return None
    version = schema_version_at(store, ts)
    now = current.table(db_name, name)
    if now is not None and now.db_id == db.id:
        value = store.get(table_key(db.id, now.id), ts)
        if value is not None:
            field = meta_key.table_field(now.id)
            d = parse_json(value, f"{field.decode()} of database {db.name}")
            if table_name_of(db, field, d).name.lower() == name.lower():
                return _decode(db, d, version)
    for key, value in store.iter_scan(*meta_key.hash_range(meta_key.db_field(db.id)), ts):
        field = meta_key.decode_hash_field_key(key)[1]
        if not meta_key.is_table_field(field):
            continue
        d = parse_json(value, f"{field.decode(errors='replace')} of database {db.name}")
        if table_name_of(db, field, d).name.lower() == name.lower():
            return _decode(db, d, version)
    return None


def databases_at(store: MvccStore, ts: int) -> list[DatabaseMeta]:
    """Every database the meta holds at ``ts``, those without tables too (TiDB's ``SHOW DATABASES`` at a snapshot)."""
    return [database_of(meta_key.decode_hash_field_key(key)[1], value)
            for key, value in store.iter_scan(*meta_key.hash_range(meta_key.DBS), ts)]


def tables_at(store: MvccStore, ts: int) -> Iterator[TableInfo]:
    """Every table the meta holds at ``ts``, database by database; the system tables are the catalog's own."""
    version = schema_version_at(store, ts)
    yield from ddl_history.SYSTEM_TABLES
    for key, value in store.iter_scan(*meta_key.hash_range(meta_key.DBS), ts):
        db = database_of(meta_key.decode_hash_field_key(key)[1], value)
        if db.id == ddl_history.SYSTEM_DB_ID:
            continue
        for tkey, tvalue in store.iter_scan(*meta_key.hash_range(meta_key.db_field(db.id)), ts):
            field = meta_key.decode_hash_field_key(tkey)[1]
            if meta_key.is_table_field(field):
                d = parse_json(tvalue, f"{field.decode(errors='replace')} of database {db.name}")
                table_name_of(db, field, d)
                yield _decode(db, d, version)
