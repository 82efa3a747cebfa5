"""The catalog (TiDB's meta layer): databases, tables, global ids, row-id allocators, schema version.

Owns the current schema only (history lives in ``mysql.tidb_ddl_history``, written by ``ddl``).
Table-list listeners (the catalog service's watchers) are called synchronously with the tables
added and removed by each change. Changes happen only through ``ddl``, inside the DDL's
transaction step, so a listener sees them in commit order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cdc_core.schema import ddl_history
from cdc_core.schema.model import TableInfo


@dataclass(frozen=True)
class DatabaseInfo:
    id: int
    name: str


TableListListener = Callable[[list[TableInfo], list[TableInfo]], None]  # (added, removed)


class Catalog:
    def __init__(self) -> None:
        self.schema_version = 0
        self._next_id = ddl_history.FIRST_USER_ID
        self._dbs: dict[str, DatabaseInfo] = {}
        self._tables: dict[int, TableInfo] = {}
        self._by_name: dict[tuple[str, str], int] = {}
        self._row_ids: dict[int, int] = {}
        self._listeners: list[TableListListener] = []
        self._dbs[ddl_history.DB_NAME] = DatabaseInfo(ddl_history.SYSTEM_DB_ID, ddl_history.DB_NAME)
        self._add(ddl_history.TABLE_INFO)

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

    def rebase_row_id(self, table_id: int, used: int) -> None:
        """An explicit auto-increment value was inserted: later allocations go above it."""
        if used + 1 > self._row_ids.get(table_id, 1):
            self._row_ids[table_id] = used + 1

    # --- listeners ----------------------------------------------------------------------------
    def add_listener(self, fn: TableListListener) -> None:
        self._listeners.append(fn)

    def remove_listener(self, fn: TableListListener) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def _notify(self, added: list[TableInfo], removed: list[TableInfo]) -> None:
        for fn in list(self._listeners):
            fn(added, removed)

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
        out = [t for t in self._tables.values() if db is None or t.db_name.lower() == db.lower()]
        return sorted(out, key=lambda t: t.id)

    # --- changes (called by ddl) --------------------------------------------------------------
    def add_database(self, db: DatabaseInfo) -> None:
        self._dbs[db.name.lower()] = db

    def drop_database(self, name: str) -> list[TableInfo]:
        db = self._dbs.pop(name.lower())
        dropped = [t for t in self._tables.values() if t.db_id == db.id]
        for t in dropped:
            self._remove(t.id)
        if dropped:
            self._notify([], dropped)
        return dropped

    def _add(self, info: TableInfo) -> None:
        self._tables[info.id] = info
        self._by_name[(info.db_name.lower(), info.name.lower())] = info.id

    def _remove(self, table_id: int) -> TableInfo:
        info = self._tables.pop(table_id)
        self._by_name.pop((info.db_name.lower(), info.name.lower()), None)
        self._row_ids.pop(table_id, None)
        return info

    def add_table(self, info: TableInfo) -> None:
        self._add(info)
        self._notify([info], [])

    def drop_table(self, table_id: int) -> TableInfo:
        info = self._remove(table_id)
        self._notify([], [info])
        return info

    def replace_table(self, old_id: int, info: TableInfo) -> None:
        """Swap a table for a new version (rename, truncate); listeners see remove + add."""
        old = self._remove(old_id) if old_id != info.id else self._tables[old_id]
        if old_id == info.id:
            self._by_name.pop((old.db_name.lower(), old.name.lower()), None)
        self._add(info)
        self._notify([info], [old])
