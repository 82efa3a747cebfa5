"""The catalog (TiDB's meta layer): databases, tables, global ids, row-id allocators, schema version.

Owns the current schema only (history lives in TiDB's ``mysql.tidb_ddl_job`` / ``tidb_ddl_history``, written
by ``ddl``). The store keeps the same schema as TiDB's meta keys (``schema_meta``): a DDL writes them in its
transaction; the system tables at start and :meth:`Catalog.bulk_create_tables` ingest theirs.
Changes happen only through ``ddl`` (inside the DDL's transaction step) or through
:meth:`Catalog.bulk_create_tables`; a client learns of them from the DDL jobs, as from TiDB.

Scale: tables are also indexed per schema, so listing one schema costs O(tables in that schema),
never O(all tables); a schema of 1,000,000 tables is supported (issue 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain

from cdc_core.schema import ddl_history
from cdc_core.schema.model import Column, Index, TableInfo
from cdc_core.upstream.sql.ddl import schema_meta


@dataclass(frozen=True)
class DatabaseInfo:
    id: int
    name: str


class Catalog:
    def __init__(self, meta: schema_meta.MetaIngest | None = None) -> None:
        # Where the meta keys of the tables not made by a DDL job go (None: a catalog without a store).
        self.meta = meta
        self.schema_version = 0
        self._next_id = ddl_history.FIRST_USER_ID
        self._dbs: dict[str, DatabaseInfo] = {}
        self._tables: dict[int, TableInfo] = {}
        self._by_name: dict[tuple[str, str], int] = {}
        # lower-case schema name -> {table id: info}, in insertion order (ids grow, so mostly id order).
        self._by_db: dict[str, dict[int, TableInfo]] = {}
        self._row_ids: dict[int, int] = {}
        self._dbs[ddl_history.DB_NAME] = DatabaseInfo(ddl_history.SYSTEM_DB_ID, ddl_history.DB_NAME)
        for info in ddl_history.SYSTEM_TABLES:
            self._add(info)
        if meta is not None:
            meta.ingest(schema_meta.bootstrap_pairs(ddl_history.SYSTEM_DB_ID, ddl_history.DB_NAME,
                                                    ddl_history.SYSTEM_TABLES))

    # --- ids and versions ---------------------------------------------------------------------
    def alloc_id(self) -> int:
        """A global id for a database, a table or a DDL job (as TiDB's meta allocator)."""
        v = self._next_id
        self._next_id += 1
        return v

    def bump_schema_version(self) -> int:
        self.schema_version += 1
        return self.schema_version

    def alloc_row_ids(self, table_id: int, n: int = 1) -> int:
        """Reserve ``n`` consecutive ``_tidb_rowid`` / auto-increment values; return the first."""
        first = self._row_ids.get(table_id, 1)
        self._row_ids[table_id] = first + n
        return first

    def next_row_id(self, table_id: int) -> int:
        """The value the table's allocator hands out next."""
        return self._row_ids.get(table_id, 1)

    def rebase_row_id(self, table_id: int, used: int) -> None:
        """An explicit auto-increment value was inserted: later allocations go above it."""
        if used + 1 > self._row_ids.get(table_id, 1):
            self._row_ids[table_id] = used + 1

    # --- lookups ------------------------------------------------------------------------------
    def database(self, name: str) -> DatabaseInfo | None:
        return self._dbs.get(name.lower())

    def databases(self) -> list[DatabaseInfo]:
        return sorted(self._dbs.values(), key=lambda d: d.id)

    def table(self, db: str, name: str) -> TableInfo | None:
        tid = self._by_name.get((db.lower(), name.lower()))
        return None if tid is None else self._tables[tid]

    def table_by_id(self, table_id: int) -> TableInfo | None:
        return self._tables.get(table_id)

    def tables(self, db: str | None = None) -> list[TableInfo]:
        """The tables of ``db`` (all when None), sorted by id. O(tables of ``db``), plus the sort."""
        out = self._tables.values() if db is None else self._by_db.get(db.lower(), {}).values()
        return sorted(out, key=lambda t: t.id)

    def iter_tables(self, db: str) -> Iterator[TableInfo]:
        """The tables of ``db`` in insertion order, without copying; do not change the catalog meanwhile."""
        return iter(self._by_db.get(db.lower(), {}).values())

    def table_count(self, db: str | None = None) -> int:
        """How many tables ``db`` (all schemas when None) has. O(1)."""
        return len(self._tables) if db is None else len(self._by_db.get(db.lower(), ()))

    # --- changes (called by ddl) --------------------------------------------------------------
    def add_database(self, db: DatabaseInfo) -> None:
        self._dbs[db.name.lower()] = db

    def drop_database(self, name: str) -> list[TableInfo]:
        db = self._dbs.pop(name.lower())
        dropped = list(self._by_db.get(db.name.lower(), {}).values())
        for t in dropped:
            self._remove(t.id)
        return dropped

    def _add(self, info: TableInfo) -> None:
        self._tables[info.id] = info
        self._by_name[(info.db_name.lower(), info.name.lower())] = info.id
        self._by_db.setdefault(info.db_name.lower(), {})[info.id] = info

    def _remove(self, table_id: int) -> TableInfo:
        info = self._tables.pop(table_id)
        self._by_name.pop((info.db_name.lower(), info.name.lower()), None)
        self._row_ids.pop(table_id, None)
        schema = self._by_db.get(info.db_name.lower())
        if schema is not None:
            schema.pop(table_id, None)
            if not schema:
                del self._by_db[info.db_name.lower()]
        return info

    def add_table(self, info: TableInfo) -> None:
        self._add(info)

    def drop_table(self, table_id: int) -> TableInfo:
        return self._remove(table_id)

    def replace_table(self, old_id: int, info: TableInfo) -> None:
        """Swap a table for a new version (rename, truncate)."""
        self.replace_tables([(old_id, info)])

    def replace_tables(self, changes: list[tuple[int, TableInfo]]) -> None:
        """Swap several tables at once (RENAME TABLES: names may pass from one table to another, so every old
        version goes before any new one comes)."""
        row_ids = {old_id: self._row_ids.get(old_id) for old_id, _ in changes}
        for old_id, _ in changes:
            self._remove(old_id)
        for old_id, info in changes:
            if old_id == info.id and row_ids[old_id] is not None:  # a rename keeps the table's row-id allocator
                self._row_ids[old_id] = row_ids[old_id]  # type: ignore[assignment]
            self._add(info)

    def bulk_create_tables(
        self, schema: str, names: Iterable[str], columns: tuple[Column, ...], *, indexes: tuple[Index, ...] = ()
    ) -> list[TableInfo]:
        """Create many tables of one shape at once (catalog-scale tests and benchmarks); return them.

        Each table is a real catalog entry: its own global id and ``TableInfo`` (sharing the ``columns``
        and ``indexes`` tuples), listed by ``information_schema.TABLES``. All of them take effect at one new
        schema version.

        Their meta keys (``schema_meta``) are ingested in one batch at one commit ts, so a snapshot of TiDB's
        meta lists them as it lists tables made by SQL.

        What it does *not* do, unlike ``CREATE TABLE`` through SQL (which costs a DDL job row and a
        region split per table, too slow for a million tables): it writes no
        ``mysql.tidb_ddl_job`` rows, so a changefeed's DDL puller never sees these tables being
        created, and it splits no regions - a bulk table's rows live in whatever region covers its
        span (the region map always covers the whole key space, so reads and writes still work; a
        per-table split would happen on first write if ever needed).

        :raises ValueError: if ``schema`` does not exist or a name is taken (nothing is created then).
        """
        db = self.database(schema)
        if db is None:
            raise ValueError(f"Unknown database '{schema}'")
        names = list(names)
        seen: set[str] = set()
        for name in names:
            key = name.lower()
            if key in seen or (db.name.lower(), key) in self._by_name:
                raise ValueError(f"Table '{db.name}.{name}' already exists")
            seen.add(key)
        version = self.bump_schema_version()
        max_column_id = max((c.id for c in columns), default=0)
        first = self._next_id
        self._next_id += len(names)
        created = [
            TableInfo(id=first + i, db_name=db.name, name=name, columns=columns, indexes=indexes,
                      schema_version=version, db_id=db.id, max_column_id=max_column_id)
            for i, name in enumerate(names)
        ]
        for info in created:
            self._add(info)
        if self.meta is not None:
            self.meta.ingest(chain(schema_meta.bulk_table_pairs(created), [schema_meta.version_pair(version)]))
        return created
