"""The DDL executor (TiDB's ``pkg/ddl`` executor and job worker): CREATE/DROP/TRUNCATE/RENAME/ALTER turned into
catalog changes plus TiDB's DDL job rows.

Each job, like TiDB's, bumps the schema version and is written as ``model.Job`` JSON (``schema.tidb_json``): its
``mysql.tidb_ddl_job`` row in state done, in the transaction whose commit ts is the DDL's (the barrier TiCDC
takes), then moved to ``mysql.tidb_ddl_history`` in state synced. The done row, the catalog change and the
region split for a new table all happen in one event-loop step, so the change feed sees the job at exactly the
ts the new schema takes effect. Dropped tables' data stays in the store (TiDB leaves it to GC's delete-range); a
new table id gets new regions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from cdc_core.codec import key as keycodec
from cdc_core.codec.datum_key import index_entry_key
from cdc_core.codec.row import encode_values
from cdc_core.schema import column_type as ct
from cdc_core.schema import ddl_history, partition_rule
from cdc_core.schema.ddl_job import MULTI_SCHEMA_CHANGE, DDLJob
from cdc_core.schema.model import ROWID_COLUMN, Column, Index, SchemaError, TableInfo
from cdc_core.schema.partition import HASH, KEY, LIST, RANGE, PartitionError, PartitionInfo
from cdc_core.upstream.pd.regions import RegionManager, table_split_keys
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.sql.ddl import ddl_alter, schema_meta
from cdc_core.upstream.sql.ddl.catalog import Catalog, DatabaseInfo
from cdc_core.upstream.sql.ddl.column_def import ColumnSpec, build_column, parse_column_def
from cdc_core.upstream.sql.ddl.partition_clause import PartitionSpec, build_definitions, build_partitions
from cdc_core.upstream.sql.errors import ErrorKind, SqlError
from cdc_core.upstream.sql.expr import column_name
from cdc_core.upstream.sql.table_writer import AUTO_INCREMENT_KEY, StoredRow, index_value, read_rows
from cdc_core.upstream.sql.txn import Transaction
from cdc_core.upstream.store.mvcc import MvccStore

# tidb_enable_clustered_index = ON (TiDB's default): a primary key of any type is clustered unless NONCLUSTERED.
CLUSTERED_INDEX_DEFAULT_ON = True
# How long a DDL statement waits, after its job's commit, for the schema to sync before the job moves to the history
# table (``DdlExecutor.wait_synced``)
SCHEMA_SYNC_S = 0.01

_IGNORED_PROPERTIES = (exp.EngineProperty, exp.CharacterSetProperty, exp.CollateProperty, exp.SchemaCommentProperty)


def _move_index_entries(txn: Transaction, before: TableInfo, after: TableInfo, old: Column, new: Column,
                        row: StoredRow, converted: object) -> None:
    """Unique-index entries of ``row`` re-keyed for the column's new type (its datums may encode differently)."""
    new_values = {k: v for k, v in row.values.items() if k != old.name}
    new_values[new.name] = converted
    for pos, ix in enumerate(before.indexes):
        if not (ix.unique or ix.primary) or (ix.primary and before.clustered):
            continue
        if not any(c.lower() == old.name.lower() for c in ix.columns):
            continue
        old_key = index_entry_key(before, ix, row.values, row.physical_id)
        new_key = index_entry_key(after, after.indexes[pos], new_values, row.physical_id)
        if old_key is not None:
            txn.delete(old_key)
        if new_key is not None:
            if txn.get(new_key) is not None and new_key != old_key:
                raise SqlError(f"Duplicate entry '{converted}' for key '{before.name}.{ix.name}'", ErrorKind.CONSTRAINT)
            txn.put(new_key, index_value(row.handle))


def partition_info(info: TableInfo, spec: PartitionSpec, ids: list[int]) -> PartitionInfo:
    """The partitions of ``info`` as ``spec`` defines them, with ``ids``; TiDB's rules checked
    (``partition_clause.build_partitions``: column types, bounds, every unique key holding the columns)."""
    return build_partitions(spec, info, ids)


def validated_partitions(part: PartitionInfo, info: TableInfo) -> PartitionInfo:
    """``part``, the new partitioning of table ``info``, once it passes TiDB's partition rules (else the rule's error
    as a ``SqlError``)."""
    try:
        partition_rule.validate(part, info.columns, info.name)
    except PartitionError as exc:
        raise SqlError(str(exc)) from exc
    return part


def _next_index_id(indexes: list[Index]) -> int:
    return max((ix.id for ix in indexes), default=0) + 1


def table_info_from_create(
    node: exp.Create, *, table_id: int, db: DatabaseInfo, schema_version: int, clustered: bool | None
) -> TableInfo:
    """Build the TableInfo of ``CREATE TABLE`` (``clustered``: CLUSTERED / NONCLUSTERED / unspecified)."""
    schema = node.this
    assert isinstance(schema, exp.Schema)
    name = str(schema.this.name)
    props = node.args.get("properties")
    for p in props.expressions if props else []:
        if not isinstance(p, _IGNORED_PROPERTIES):
            raise SqlError(f"unsupported table option {p.sql(dialect='mysql')!r}")
    cols: list[ColumnSpec] = []
    pk: tuple[str, ...] = ()
    uniques: list[tuple[str | None, tuple[str, ...]]] = []
    plain: list[tuple[str | None, tuple[str, ...]]] = []
    auto_inc: str | None = None

    def set_pk(columns: tuple[str, ...]) -> None:
        nonlocal pk
        if pk:
            raise SqlError(f"table {name!r}: multiple primary keys defined")
        pk = columns

    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            spec = parse_column_def(item)
            if spec.position is not None:
                raise SqlError(f"column {spec.name!r}: FIRST/AFTER only apply to ALTER TABLE ... ADD COLUMN")
            if spec.primary:
                set_pk((spec.name,))
            if spec.unique:
                uniques.append((spec.name, (spec.name,)))
            if spec.auto_increment:
                if auto_inc:
                    raise SqlError(f"table {name!r}: there can be only one AUTO_INCREMENT column")
                auto_inc = spec.name
            cols.append(spec)
        elif isinstance(item, exp.PrimaryKey):
            set_pk(tuple(column_name(e) for e in item.expressions))
        elif isinstance(item, exp.UniqueColumnConstraint):
            sch = item.this
            ixname = str(sch.this.name) if isinstance(sch, exp.Schema) and sch.this is not None else None
            columns = tuple(column_name(e) for e in (sch.expressions if isinstance(sch, exp.Schema) else []))
            uniques.append((ixname, columns))
        elif isinstance(item, exp.IndexColumnConstraint):
            ixname = str(item.this.name) if item.this is not None else None
            plain.append((ixname, tuple(column_name(e) for e in item.expressions)))
        else:
            raise SqlError(f"table {name!r}: unsupported table element {item.sql(dialect='mysql')!r}")
    if not cols:
        raise SqlError(f"table {name!r} has no columns")
    by_name = {c.name.lower(): c.fields for c in cols}
    if len(by_name) != len(cols):
        raise SqlError(f"table {name!r}: duplicate column name")
    if ROWID_COLUMN in by_name:
        raise SqlError(f"table {name!r}: {ROWID_COLUMN} is a reserved column name")

    def resolve(columns: tuple[str, ...], what: str) -> tuple[str, ...]:
        if not columns:
            raise SqlError(f"table {name!r}: {what} has no columns")
        out = []
        for c in columns:
            if c.lower() not in by_name:
                raise SqlError(f"table {name!r}: {what} names unknown column {c!r}")
            out.append(by_name[c.lower()]["name"])
        return tuple(out)

    indexes: list[Index] = []
    used: set[str] = set()

    def ix_name(wanted: str | None, columns: tuple[str, ...]) -> str:
        base = wanted or columns[0]
        n, i = base, 2
        while n.lower() in used:
            n, i = f"{base}_{i}", i + 1
        used.add(n.lower())
        return n

    if pk:
        pk = resolve(pk, "PRIMARY KEY")
        for c in pk:
            by_name[c.lower()]["nullable"] = False
    int_pk = len(pk) == 1 and ct.is_handle_type(by_name[pk[0].lower()])
    # TiDB's ShouldBuildClusteredIndex (pkg/ddl/create_table.go): CLUSTERED / NONCLUSTERED as given, else the session's
    # tidb_enable_clustered_index (ON by default: DefTiDBEnableClusteredIndex, pkg/sessionctx/vardef/tidb_vars.go).
    is_clustered = bool(pk) and (clustered if clustered is not None else CLUSTERED_INDEX_DEFAULT_ON or int_pk)
    pk_is_handle = is_clustered and int_pk
    is_common_handle = is_clustered and not int_pk
    if pk:
        used.add("primary")
        # A clustered integer PK is the row handle, not an index (TiDB gives it no IndexInfo): id 0, and the
        # indexes number from 1 as TiDB's do.
        indexes.append(Index("PRIMARY", pk, unique=True, primary=True, id=0 if pk_is_handle else 1))
    for wanted, columns in uniques:
        columns = resolve(columns, "UNIQUE KEY")
        indexes.append(Index(ix_name(wanted, columns), columns, unique=True, id=_next_index_id(indexes)))
    for wanted, columns in plain:
        columns = resolve(columns, "KEY")
        indexes.append(Index(ix_name(wanted, columns), columns, id=_next_index_id(indexes)))
    if auto_inc and by_name[auto_inc.lower()]["type"] not in ct.INT_BITS:
        raise SqlError(f"table {name!r}: AUTO_INCREMENT column {auto_inc!r} must be an integer type")

    columns_out = [build_column(spec, i) for i, spec in enumerate(cols, start=1)]
    extra = {AUTO_INCREMENT_KEY: by_name[auto_inc.lower()]["name"]} if auto_inc else {}
    return TableInfo(
        id=table_id, db_name=db.name, name=name, columns=tuple(columns_out), indexes=tuple(indexes),
        pk_is_handle=pk_is_handle, is_common_handle=is_common_handle, schema_version=schema_version, db_id=db.id,
        max_column_id=len(columns_out), extra=extra,
    )


@dataclass(frozen=True)
class AlterChange:
    """One change of an ALTER TABLE: its job type, how it turns the table (and the job's txn), what it touches."""

    job_type: str
    make: Callable[[TableInfo, Transaction], TableInfo]
    columns: tuple[str, ...] = ()
    indexes: tuple[str, ...] = ()


def _check_multi_schema_change(changes: list[AlterChange]) -> None:
    """TiDB's rule for a multi-schema change: no column and no index is operated on twice
    (pkg/ddl/multi_schema_change.go checkOperateSameColumn / checkOperateDropIndexUseByForeignKey)."""
    seen_cols: set[str] = set()
    seen_ixs: set[str] = set()
    for c in changes:
        for col in {x.lower() for x in c.columns}:
            if col in seen_cols:
                raise SqlError(f"Unsupported operate same column '{col}'")
            seen_cols.add(col)
        for ix in {x.lower() for x in c.indexes}:
            if ix in seen_ixs:
                raise SqlError(f"Unsupported operate same index '{ix}'")
            seen_ixs.add(ix)


class DdlExecutor:
    def __init__(self, store: MvccStore, tso: TsoAllocator, catalog: Catalog, regions: RegionManager,
                 regions_per_table: int) -> None:
        self.store = store
        self.tso = tso
        self.catalog = catalog
        self.regions = regions
        self.regions_per_table = regions_per_table
        self._unsynced: list[tuple[bytes, list[DDLJob]]] = []  # jobs done, not yet in tidb_ddl_history (sync)
        self.schema_sync_s = SCHEMA_SYNC_S

    def _commit_job(self, job: DDLJob | list[DDLJob], apply: Callable[[], object],
                    txn: Transaction | None = None) -> int:
        """Commit the job as TiDB does, in this one event-loop step: its ``tidb_ddl_job`` row in state done with
        ``txn``'s writes (e.g. an index backfill) — that commit ts is the DDL's — and the change applied. Moving
        the job to ``tidb_ddl_history`` (the job row deleted, the synced job put) waits for :meth:`sync`: TiDB's
        owner moves it once every server has loaded the new schema (``pkg/ddl/job_worker.go`` finishDDLJob /
        ``addHistoryDDLJob``), a while after the commit, and the statement returns after that (the SQL front
        yields the event loop between the two). A list is the parts of one job of several tables (RENAME TABLES)."""
        self.sync()  # the owner runs jobs one at a time: the one before is synced first
        txn = txn or Transaction(self.store, self.tso)
        # The job's transaction reads the meta at its start ts (the schema version it bumps, meta.GenSchemaVersion),
        # which raises the store's max_ts: an async-commit or 1PC transaction that commits next without another
        # read takes max_ts + 1, the ts PD hands this job next, so it can share the DDL's commit ts (TiCDC orders
        # such DML before the DDL).
        self.store.update_max_ts(txn.start_ts)
        commit_ts = self.tso.next()
        parts = [replace(j, finished_ts=commit_ts) for j in (job if isinstance(job, list) else [job])]
        job_key = keycodec.row_key(ddl_history.JOB_TABLE_ID, parts[0].job_id)
        txn.put(job_key, ddl_history.job_table_value(parts))
        # TiDB's meta keys (databases, tables, schema version) change in the job's transaction, as the catalog
        # will by apply(): a snapshot of the meta at any ts is the schema there.
        schema_meta.write_job(txn, self.catalog, parts)
        txn.commit_now(commit_ts)
        apply()
        self._unsynced.append((job_key, parts))
        return commit_ts

    async def wait_synced(self) -> None:
        """What a DDL statement waits for before it returns: every server has loaded the new schema (TiDB's
        owner polls their versions in etcd, ``waitVersionSynced``: milliseconds on a quiet cluster), then the jobs
        move to the history table. Other sessions' transactions commit meanwhile."""
        if self._unsynced:
            await asyncio.sleep(self.schema_sync_s)
        self.sync()

    def sync(self) -> None:
        """Move every job committed since the last call to ``tidb_ddl_history``, one transaction each."""
        while self._unsynced:
            job_key, parts = self._unsynced.pop(0)
            synced = Transaction(self.store, self.tso)
            synced.delete(job_key)
            synced.put(keycodec.row_key(ddl_history.HISTORY_TABLE_ID, parts[0].job_id),
                       ddl_history.history_table_value(parts))
            synced.commit_now()

    def _job(self, job_type: str, query: str, **kw: Any) -> DDLJob:
        return DDLJob(job_id=self.catalog.alloc_id(), job_type=job_type, query=query,
                      schema_version=self.catalog.bump_schema_version(), finished_ts=0,
                      **{"schema_id": None, "table_id": None, "schema_name": None, "table_name": None,
                         "table_info": None, **kw})

    def _db(self, name: str) -> DatabaseInfo:
        db = self.catalog.database(name)
        if db is None:
            raise SqlError(f"Unknown database '{name}'", ErrorKind.NOT_FOUND)
        return db

    def _check_user_db(self, name: str) -> None:
        if name.lower() == ddl_history.DB_NAME:
            raise SqlError(f"database '{name}' is a system database and cannot be changed")

    # --- jobs ---------------------------------------------------------------------------------
    def create_database(self, name: str, if_not_exists: bool, query: str) -> int:
        if self.catalog.database(name) is not None:
            if if_not_exists:
                return 0
            raise SqlError(f"Can't create database '{name}'; database exists", ErrorKind.EXISTS)
        db = DatabaseInfo(self.catalog.alloc_id(), name)
        job = self._job("create schema", query, schema_id=db.id, schema_name=name)
        return self._commit_job(job, lambda: self.catalog.add_database(db))

    def drop_database(self, name: str, if_exists: bool, query: str) -> int:
        self._check_user_db(name)
        db = self.catalog.database(name)
        if db is None:
            if if_exists:
                return 0
            raise SqlError(f"Can't drop database '{name}'; database doesn't exist", ErrorKind.NOT_FOUND)
        job = self._job("drop schema", query, schema_id=db.id, schema_name=db.name)
        return self._commit_job(job, lambda: self.catalog.drop_database(db.name))

    def create_table(self, node: exp.Create, db_name: str, query: str, clustered: bool | None,
                     partition: PartitionSpec | None = None) -> int:
        self._check_user_db(db_name)
        db = self._db(db_name)
        schema = node.this
        if not isinstance(schema, exp.Schema):
            raise SqlError("unsupported CREATE TABLE form (only CREATE TABLE name (column definitions...))")
        name = str(schema.this.name)
        if self.catalog.table(db.name, name) is not None:
            if node.args.get("exists"):
                return 0
            raise SqlError(f"Table '{db.name}.{name}' already exists", ErrorKind.EXISTS)
        # Validate before allocating ids and a schema version so that a bad definition leaves no trace.
        checked = table_info_from_create(node, table_id=0, db=db, schema_version=0, clustered=clustered)
        if partition is not None:
            partition_info(checked, partition, list(range(len(partition.names))))
        table_id = self.catalog.alloc_id()
        ids = [self.catalog.alloc_id() for _ in partition.names] if partition is not None else []
        job = self._job("create table", query, schema_id=db.id, table_id=table_id, schema_name=db.name,
                        table_name=name)
        info = table_info_from_create(node, table_id=table_id, db=db, schema_version=job.schema_version,
                                      clustered=clustered)
        if partition is not None:
            info = replace(info, partition=partition_info(info, partition, ids))
        job = replace(job, table_info=info)

        def apply() -> None:
            for physical_id in info.physical_ids:
                self.regions.split(table_split_keys(physical_id, self.regions_per_table))
            self.catalog.add_table(info)

        return self._commit_job(job, apply)

    def _table(self, db_name: str, name: str) -> TableInfo | None:
        return self.catalog.table(db_name, name)

    def drop_table(self, db_name: str, name: str, if_exists: bool, query: str) -> int:
        self._check_user_db(db_name)
        info = self._table(db_name, name)
        if info is None:
            if if_exists:
                return 0
            raise SqlError(f"Unknown table '{db_name}.{name}'", ErrorKind.NOT_FOUND)
        job = self._job("drop table", query, schema_id=info.db_id, table_id=info.id,
                        schema_name=info.db_name, table_name=info.name)
        return self._commit_job(job, lambda: self.catalog.drop_table(info.id))

    def truncate_table(self, db_name: str, name: str, query: str) -> int:
        self._check_user_db(db_name)
        info = self._table(db_name, name)
        if info is None:
            raise SqlError(f"Table '{db_name}.{name}' doesn't exist", ErrorKind.NOT_FOUND)
        new_id = self.catalog.alloc_id()
        # A partitioned table's partitions get new ids too (TiDB's truncate table: every physical table is new).
        part = info.partition
        if part is not None:
            part = replace(part, definitions=tuple(replace(d, id=self.catalog.alloc_id()) for d in part.definitions))
        job = self._job("truncate table", query, schema_id=info.db_id, table_id=new_id,
                        schema_name=info.db_name, table_name=info.name, old_table_id=info.id)
        new_info = replace(info, id=new_id, schema_version=job.schema_version, partition=part)
        job = replace(job, table_info=new_info)

        def apply() -> None:
            for physical_id in new_info.physical_ids:
                self.regions.split(table_split_keys(physical_id, self.regions_per_table))
            self.catalog.replace_table(info.id, new_info)

        return self._commit_job(job, apply)

    def rename_table(self, old_db: str, old_name: str, new_db: str, new_name: str, query: str) -> int:
        return self.rename_tables([((old_db, old_name), (new_db, new_name))], query)

    def rename_tables(self, pairs: list[tuple[tuple[str, str], tuple[str, str]]], query: str) -> int:
        """``RENAME TABLE a TO b[, c TO d ...]``: one job, applied in order and atomically (``a TO tmp, b TO a,
        tmp TO b`` swaps); several pairs are TiDB's ActionRenameTables, one job of several tables."""
        names: dict[tuple[str, str], TableInfo | None] = {}  # (db, name) lower -> the table there after each step

        def at(db: str, name: str) -> TableInfo | None:
            k = (db.lower(), name.lower())
            return names[k] if k in names else self._table(db, name)

        moves: list[tuple[TableInfo, DatabaseInfo, str]] = []
        for (old_db, old_name), (new_db, new_name) in pairs:
            self._check_user_db(old_db)
            self._check_user_db(new_db)
            info = at(old_db, old_name)
            if info is None:
                raise SqlError(f"Table '{old_db}.{old_name}' doesn't exist", ErrorKind.NOT_FOUND)
            db = self._db(new_db)
            if at(db.name, new_name) is not None:
                raise SqlError(f"Table '{db.name}.{new_name}' already exists", ErrorKind.EXISTS)
            moves.append((info, db, new_name))
            names[(old_db.lower(), old_name.lower())] = None
            names[(db.name.lower(), new_name.lower())] = replace(info, name=new_name, db_name=db.name, db_id=db.id)
        job_type = "rename table"
        first = self._job(job_type, query)
        parts: list[DDLJob] = []
        final: dict[int, TableInfo] = {}
        for i, (info, db, new_name) in enumerate(moves):
            before = final.get(info.id, info)  # a table renamed twice in one statement moves on from its last name
            after = replace(before, name=new_name, db_name=db.name, db_id=db.id,
                            schema_version=first.schema_version)
            final[info.id] = after
            parts.append(replace(first, schema_id=db.id, table_id=info.id, schema_name=db.name, table_name=new_name,
                                 old_table_id=info.id, old_schema_name=before.db_name, old_table_name=before.name,
                                 old_schema_id=before.db_id, table_info=after, sub_index=i))

        return self._commit_job(parts if len(parts) > 1 else parts[0],
                                lambda: self.catalog.replace_tables(list(final.items())))

    # --- ALTER TABLE --------------------------------------------------------------------------
    def alter(self, db_name: str, name: str, changes: list[AlterChange], query: str) -> int:
        """Run one ALTER TABLE job: each change's ``make`` returns the table after it (and may add writes to the
        txn), in order. Several changes are TiDB's multi-schema change: one job (ActionMultiSchemaChange) whose
        sub-jobs are the changes, no column or index touched twice (``ErrOperateSameColumn``/``...SameIndex``)."""
        self._check_user_db(db_name)
        info = self._table(db_name, name)
        if info is None:
            raise SqlError(f"Table '{db_name}.{name}' doesn't exist", ErrorKind.NOT_FOUND)
        if len(changes) > 1:
            _check_multi_schema_change(changes)
        txn = Transaction(self.store, self.tso)
        after = info
        for change in changes:
            after = change.make(after, txn)  # validates before a schema version is spent
        job_type = changes[0].job_type if len(changes) == 1 else MULTI_SCHEMA_CHANGE
        job = self._job(job_type, query, schema_id=info.db_id, table_id=info.id, schema_name=info.db_name,
                        table_name=info.name,
                        sub_job_types=tuple(c.job_type for c in changes) if len(changes) > 1 else ())
        after = replace(after, schema_version=job.schema_version)
        job = replace(job, table_info=after)
        return self._commit_job(job, lambda: self.catalog.replace_table(info.id, after), txn)

    def partition_change(self, op: str, names: tuple[str, ...], spec: PartitionSpec | None = None) -> AlterChange:
        """``ADD PARTITION (...)`` / ``DROP PARTITION p, ...`` / ``TRUNCATE PARTITION p, ...`` of a RANGE or LIST
        table (TRUNCATE of any): TiDB's ActionAddTablePartition / ActionDropTablePartition /
        ActionTruncateTablePartition (HASH/KEY's ADD PARTITION is a reorganization, ``partition_ddl``). A dropped or
        truncated partition's rows are not deleted row by row: its id just leaves the table (TiDB removes the range
        later, and TiKV's change feed sees no row event for it); a truncated partition comes back under a new id."""

        def make(info: TableInfo, _txn: Transaction) -> TableInfo:
            part = info.partition
            if part is None:
                raise SqlError("Partition management on a not partitioned table is not possible")
            defs = list(part.definitions)
            lowered = {n.lower() for n in names}
            if op == "add":
                assert spec is not None
                if part.type in (HASH, KEY):
                    raise SqlError("Unsupported ADD PARTITION of HASH/KEY partitioned table")
                if part.type == LIST and any(d.is_default for d in defs):
                    raise SqlError("Unsupported ADD List partition, already contains DEFAULT partition. Please use "
                                   "REORGANIZE PARTITION instead")
                defs += build_definitions(spec, info, part.columns, [self.catalog.alloc_id() for _ in spec.names],
                                          part.by_columns)
            elif op == "drop":  # pkg/ddl/partition.go CheckDropTablePartition, in its order
                if part.type not in (RANGE, LIST):
                    raise SqlError("DROP PARTITION can only be used on RANGE/LIST partitions")
                if len(defs) <= len(names):
                    raise SqlError("Cannot remove all partitions, use DROP TABLE instead")
                if len(lowered) != len(names) or not lowered <= {d.name.lower() for d in defs}:
                    raise SqlError("Error in list of partitions to DROP")
                defs = [d for d in defs if d.name.lower() not in lowered]
            else:
                for n in names:
                    if part.find(n) is None:
                        raise SqlError(f"Unknown partition '{n}' in table '{info.name}'")
                defs = [replace(d, id=self.catalog.alloc_id()) if d.name.lower() in lowered else d for d in defs]
            new_part = validated_partitions(replace(part, definitions=tuple(defs)), info)
            for pid in set(new_part.ids) - set(part.ids):
                self.regions.split(table_split_keys(pid, self.regions_per_table))
            return replace(info, partition=new_part)

        return AlterChange(f"{op} partition", make)

    def add_column_change(self, spec: ColumnSpec) -> AlterChange:
        return AlterChange("add column", lambda info, _txn: ddl_alter.add_column(info, spec), columns=(spec.name,))

    def drop_column_change(self, column: str) -> AlterChange:
        return AlterChange("drop column", lambda info, _txn: ddl_alter.drop_column(info, column), columns=(column,))

    def rename_column_change(self, old: str, new: str) -> AlterChange:
        # TiDB runs RENAME COLUMN as a MODIFY COLUMN job (pkg/ddl/executor.go RenameColumn).
        return AlterChange("modify column", lambda info, _txn: ddl_alter.rename_column(info, old, new),
                           columns=(old, new))

    def add_column(self, db: str, table: str, spec: ColumnSpec, query: str) -> int:
        return self.alter(db, table, [self.add_column_change(spec)], query)

    def drop_column(self, db: str, table: str, column: str, query: str) -> int:
        return self.alter(db, table, [self.drop_column_change(column)], query)

    def rename_column(self, db: str, table: str, old: str, new: str, query: str) -> int:
        return self.alter(db, table, [self.rename_column_change(old, new)], query)

    def modify_column(self, db: str, table: str, spec: ColumnSpec, rename_from: str | None, query: str) -> int:
        return self.alter(db, table, [self.modify_column_change(spec, rename_from)], query)

    def modify_column_change(self, spec: ColumnSpec, rename_from: str | None) -> AlterChange:
        def make(info: TableInfo, txn: Transaction) -> TableInfo:
            after, old, new = ddl_alter.modify_column(info, spec, rename_from)
            reorg = new.id != old.id
            backfill = Transaction(self.store, self.tso)
            # Both ids during the backfill: the changing column under a name no user column can have.
            both = replace(info, columns=(*info.columns, replace(new, name="\0changing")))
            # Like TiDB's type-change reorg check: every existing value must fit the new definition.
            for row in read_rows(txn, info):
                value = row.values.get(old.name)
                if value is None:
                    if not new.nullable:
                        raise SqlError(f"Invalid use of NULL value: column {old.name!r} has NULLs (handle "
                                       f"{row.handle!r})", ErrorKind.CONSTRAINT)
                    converted = None
                else:
                    try:
                        converted = new.convert(value)
                    except SchemaError as exc:
                        raise SqlError(f"Data truncated for column {old.name!r} at row handle {row.handle!r}: {exc}",
                                       ErrorKind.CONSTRAINT) from exc
                if reorg:
                    # TiDB's backfill of the changing column: the row keeps every old id and gains the new one.
                    backfill.put(keycodec.record_key(row.physical_id or info.id, row.handle),
                                 encode_values(both, {**row.values, "\0changing": converted}))
                    _move_index_entries(txn, info, after, old, new, row, converted)
            # The backfill commits before the job, as TiDB's reorg runs before the column's last state change, in
            # the same event-loop step.
            backfill.commit_now()
            return after

        return AlterChange("modify column", make, columns=(spec.name, *([rename_from] if rename_from else [])))

    def add_index(self, db: str, table: str, name: str | None, columns: tuple[str, ...], unique: bool,
                  query: str) -> int:
        return self.alter(db, table, [self.add_index_change(name, columns, unique)], query)

    def add_index_change(self, name: str | None, columns: tuple[str, ...], unique: bool) -> AlterChange:
        def make(info: TableInfo, txn: Transaction) -> TableInfo:
            after, ix = ddl_alter.add_index(info, name, columns, unique)
            if unique:  # backfill the index entries in the job's transaction; a duplicate fails the job
                seen: dict[bytes, int | bytes] = {}
                for row in read_rows(txn, info):
                    k = index_entry_key(after, ix, row.values, row.physical_id)
                    if k is None:
                        continue
                    if k in seen:
                        shown = "-".join(str(row.values.get(c)) for c in ix.columns)
                        raise SqlError(f"Duplicate entry '{shown}' for key '{info.name}.{ix.name}'",
                                       ErrorKind.CONSTRAINT)
                    seen[k] = row.handle
                    txn.put(k, index_value(row.handle))
            return after

        return AlterChange("add index", make, indexes=(name or columns[0],))

    def add_primary_key_change(self, columns: tuple[str, ...]) -> AlterChange:
        """ADD PRIMARY KEY (non-clustered): the rows are checked (no NULL, no duplicate) and the key's index
        entries written in the job's transaction, as ADD UNIQUE INDEX's."""

        def make(info: TableInfo, txn: Transaction) -> TableInfo:
            after, ix = ddl_alter.add_primary_key(info, columns)
            seen: set[bytes] = set()
            for row in read_rows(txn, info):
                if any(row.values.get(c) is None for c in ix.columns):
                    raise SqlError("Invalid use of NULL value", ErrorKind.CONSTRAINT)
                k = index_entry_key(after, ix, row.values, row.physical_id)
                assert k is not None  # no NULL in the key
                if k in seen:
                    shown = "-".join(str(row.values.get(c)) for c in ix.columns)
                    raise SqlError(f"Duplicate entry '{shown}' for key '{info.name}.PRIMARY'", ErrorKind.CONSTRAINT)
                seen.add(k)
                txn.put(k, index_value(row.handle))
            return after

        return AlterChange("add primary key", make, indexes=("PRIMARY",), columns=columns)

    def drop_primary_key_change(self) -> AlterChange:
        def make(info: TableInfo, txn: Transaction) -> TableInfo:
            after, pk = ddl_alter.drop_primary_key(info)
            for pid in info.physical_ids:  # a partitioned table's indexes are local to each partition
                for k, _ in txn.scan(keycodec.index_key(pid, pk.id, b""), keycodec.index_key(pid, pk.id + 1, b"")):
                    txn.delete(k)
            return after

        return AlterChange("drop primary key", make, indexes=("PRIMARY",))

    def drop_index(self, db: str, table: str, name: str, query: str) -> int:
        return self.alter(db, table, [self.drop_index_change(name)], query)

    def drop_index_change(self, name: str) -> AlterChange:
        def make(info: TableInfo, txn: Transaction) -> TableInfo:
            after, ix, key_id = ddl_alter.drop_index(info, name)
            if ix.unique:
                start = keycodec.index_key(info.id, key_id, b"")
                for k, _ in txn.scan(start, keycodec.index_key(info.id, key_id + 1, b"")):
                    txn.delete(k)
            return after

        return AlterChange("drop index", make, indexes=(name,))
