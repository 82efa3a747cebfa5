"""TiDB's schema at a ts, read from its meta keys (``cdc_core.codec.meta_key``) through a snapshot of the store:
what TiCDC's schema store reads at a changefeed's start ts (``logservice/schemastore/disk_format.go``
``persistSchemaSnapshot``: ``ListDatabases``, then ``GetMetasByDBID`` per database, keeping the ``Table:`` fields).

The cost is the tables', not the DDL history's: one scan of ``DBs`` and one of each database's hash, read a page
at a time (the reader's), each table handed on as it is read. A table's name and id are read before its
``model.TableInfo`` is decoded (TiDB's ``meta.FastUnmarshalTableNameInfo`` reads only the top-level ``id`` and
``name``), so the caller's ``want(db, table)`` decides which tables are decoded at all: a table no one replicates is
never decoded, and one whose TableInfo cdcflow cannot decode (a column type newer than cdcflow) is only an error
when it is wanted, naming the table, the column and the type.

The reader is anything with ``get(key)`` and ``scan(start, end)`` at one ts (``cdc_core.client.kv_snapshot``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cdc_core.codec import meta_key
from cdc_core.schema import tidb_json
from cdc_core.schema.model import SchemaError, TableInfo


class SnapshotReader(Protocol):
    """Reads of one snapshot of the store."""

    async def get(self, key: bytes) -> bytes | None: ...

    def scan(self, start: bytes, end: bytes) -> AsyncIterator[tuple[bytes, bytes]]: ...


@dataclass(frozen=True)
class DatabaseMeta:
    id: int
    name: str


@dataclass(frozen=True)
class TableName:
    """What is read of a table before its TableInfo: its database, id and name."""

    db: DatabaseMeta
    id: int
    name: str


def parse_json(value: bytes, where: str) -> dict[str, Any]:
    """A meta value's JSON object; ``SchemaError`` naming ``where`` for anything else."""
    try:
        d = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{where}: not JSON: {exc}") from None
    if not isinstance(d, dict):
        raise SchemaError(f"{where}: not a JSON object")
    return d


def _name(d: dict[str, Any], key: str, where: str) -> str:
    name = d.get(key)
    if isinstance(name, dict) and isinstance(name.get("O"), str):
        return name["O"]
    raise SchemaError(f"{where}: no {key} {{\"O\", \"L\"}} in its JSON")


def database_of(field: bytes, value: bytes) -> DatabaseMeta:
    """The database of a ``DBs`` field and its ``model.DBInfo`` JSON (``id``, ``db_name``)."""
    db_id = meta_key.parse_db_field(field)
    where = f"database {db_id} (meta field {field.decode(errors='replace')})"
    d = parse_json(value, where)
    if d.get("id") != db_id:
        raise SchemaError(f"{where}: its DBInfo says id {d.get('id')!r}")
    return DatabaseMeta(db_id, _name(d, "db_name", where))


def table_name_of(db: DatabaseMeta, field: bytes, d: dict[str, Any]) -> TableName:
    """The id and name of a table's parsed TableInfo JSON, checked against its field, nothing else read."""
    table_id = meta_key.parse_table_field(field)
    where = f"table {table_id} of database {db.name}"
    if d.get("id") != table_id:
        raise SchemaError(f"{where}: its TableInfo says id {d.get('id')!r}")
    return TableName(db, table_id, _name(d, "name", where))


class MetaSnapshot:
    """The schema a reader's snapshot holds. ``skipped`` counts the tables ``want`` left undecoded."""

    def __init__(self, reader: SnapshotReader) -> None:
        self.reader = reader
        self.skipped = 0

    async def schema_version(self) -> int:
        """``SchemaVersionKey`` at the snapshot (0 when absent: a cluster that never ran a DDL)."""
        value = await self.reader.get(meta_key.string_key(meta_key.SCHEMA_VERSION))
        if value is None:
            return 0
        try:
            return int(value)
        except ValueError:
            raise SchemaError(f"SchemaVersionKey holds {value!r}, not an integer") from None

    async def databases(self) -> AsyncIterator[DatabaseMeta]:
        """Every database, in the order of its field (``meta.ListDatabases``)."""
        start, end = meta_key.hash_range(meta_key.DBS)
        async for key, value in self.reader.scan(start, end):
            _, field = meta_key.decode_hash_field_key(key)
            yield database_of(field, value)

    async def tables(self, db: DatabaseMeta, want: Callable[[str, str], bool], *,
                     schema_version: int = 0) -> AsyncIterator[TableInfo]:
        """The tables of ``db`` that ``want(db name, table name)``, decoded (``meta.IterTables``: the ``Table:``
        fields of the database's hash, other fields skipped). Raises ``SchemaError`` naming the table for a wanted
        table cdcflow cannot decode."""
        start, end = meta_key.hash_range(meta_key.db_field(db.id))
        async for key, value in self.reader.scan(start, end):
            _, field = meta_key.decode_hash_field_key(key)
            if not meta_key.is_table_field(field):
                continue
            d = parse_json(value, f"{field.decode(errors='replace')} of database {db.name}")
            name = table_name_of(db, field, d)
            if d.get("view") or d.get("sequence"):
                continue  # a view or a sequence holds no rows of its own (TiCDC replicates neither's data)
            if not want(db.name, name.name):
                self.skipped += 1
                continue
            try:
                yield tidb_json.table_from_tidb(d, db_name=db.name, db_id=db.id, schema_version=schema_version)
            except SchemaError as exc:
                raise SchemaError(f"table {db.name}.{name.name} (id {name.id}): its TableInfo cannot be read: "
                                  f"{exc}") from None
