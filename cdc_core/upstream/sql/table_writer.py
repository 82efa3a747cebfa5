"""Row-level reads and writes of the embedded upstream, with PK / UNIQUE / NOT NULL checks.

The formats are ``cdc_core.codec``'s (TiDB's): rows live at ``t{id}_r{handle}`` with a rowcodec v2 value of
every column (``codec.row``), unique-index entries at ``codec.datum_key.index_entry_key``. The handle is the
integer PK of a clustered table (``pk_is_handle``), the memcomparable datums of the PK of a clustered table with
another PK (TiDB's common handle, ``is_common_handle``: ``t{id}_r{datums}``, as ``tablecodec.EncodeRowKey`` with
a ``CommonHandle`` builds it) and a hidden ``_tidb_rowid`` otherwise. Every unique index
(the PK of a non-clustered table, every UNIQUE KEY) has an entry ``t{id}_i{index id}{datums}`` -> handle, so
uniqueness is a point read and two transactions inserting the same key conflict in prewrite. Index ids are
``Index.id`` (TiDB's ``IndexInfo.ID``: stable across ADD/DROP INDEX).
Index entries lie outside the row span, so the change feed of a table's row span carries rows only. A NULL in a
unique index column means "no entry" (MySQL allows many). A partitioned table's rows and index entries live under
the id of the partition its partitioning columns put them in (``schema.partition_rule``); a row whose update moves it to
another partition is deleted from one and put into the other, as TiDB does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cdc_core.codec import key as keycodec
from cdc_core.codec.datum_key import encode_key, index_entry_key
from cdc_core.codec.row import decode_row, encode_values
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import ROWID_COLUMN, Index, SchemaError, TableInfo
from cdc_core.schema.partition import PartitionError
from cdc_core.schema.partition_rule import rule_of
from cdc_core.upstream.sql.errors import DuplicateKeyError, ErrorKind, SqlError
from cdc_core.upstream.sql.txn import Transaction

AUTO_INCREMENT_KEY = "auto_increment"  # TableInfo.extra: the name of the AUTO_INCREMENT column


class RowIdAllocator(Protocol):
    """Where a table's ``_tidb_rowid`` and AUTO_INCREMENT values come from: TiDB's table layer takes them from an
    ``autoid.Allocator`` (``pkg/meta/autoid``, an interface below both the tables and the DDL that creates them);
    here the DDL's catalog is the one (``ddl.catalog.Catalog``)."""

    def alloc_row_ids(self, table_id: int, n: int = 1) -> int: ...

    def rebase_row_id(self, table_id: int, used: int) -> None: ...


@dataclass
class StoredRow:
    handle: int | bytes  # the integer handle, or a common handle's datums
    values: dict[str, Any]  # column name -> typed value (schema's column names)
    physical_id: int = 0  # the partition's id of a partitioned table's row (0: the table's own id)


def read_rows(txn: Transaction, info: TableInfo) -> list[StoredRow]:
    """Every row of the table as the transaction sees it, in handle order (partition after partition)."""
    out = []
    for physical_id in info.physical_ids:
        start, end = keycodec.table_span(physical_id)
        for k, v in txn.scan(start, end):
            handle = keycodec.record_handle(k, info.is_common_handle)
            out.append(StoredRow(handle, info.decode_values(decode_row(info, v)), physical_id))
    return out


class TableWriter:
    """Row operations on one table inside a transaction, with PK / UNIQUE / NOT NULL checks."""

    def __init__(self, txn: Transaction, info: TableInfo, row_ids: RowIdAllocator) -> None:
        self.txn = txn
        self.info = info
        self.row_ids = row_ids
        self._unique = [
            ix for ix in info.indexes if (ix.unique or ix.primary) and not (ix.primary and info.clustered)
        ]
        txn.tables_written.setdefault(info.id, info.schema_version)

    # --- reads --------------------------------------------------------------------------------
    def rows(self) -> list[StoredRow]:
        return read_rows(self.txn, self.info)

    # --- checks -------------------------------------------------------------------------------
    def _dup(self, ix: Index, values: Mapping[str, Any], key: bytes) -> SqlError:
        shown = "-".join(str(self.info.column(c).to_json_value(values.get(self.info.column(c).name)))
                         for c in ix.columns)
        return DuplicateKeyError(f"Duplicate entry '{shown}' for key '{self.info.name}.{ix.name}'", key)

    def check_not_null(self, values: Mapping[str, Any]) -> None:
        for c in self.info.columns:
            if values.get(c.name) is None and not c.nullable:
                raise SqlError(f"Column '{c.name}' cannot be null", ErrorKind.CONSTRAINT)

    def _handle_of(self, values: Mapping[str, Any]) -> int | bytes:
        if self.info.is_common_handle:
            return common_handle(self.info, values)
        col = self.info.handle_column
        assert col is not None
        return int(values[self.info.column(col).name])

    def _key(self, handle: int | bytes, physical_id: int) -> bytes:
        return keycodec.record_key(physical_id, handle)

    def physical_id(self, values: Mapping[str, Any]) -> int:
        """The id a row with ``values`` is keyed under: its partition's, or the table's."""
        part = self.info.partition
        if part is None:
            return self.info.id
        try:
            return rule_of(part, self.info.columns).locate(values).id
        except PartitionError as exc:
            raise SqlError(str(exc), ErrorKind.CONSTRAINT) from exc

    def _put_index_entries(self, values: Mapping[str, Any], handle: int | bytes, physical_id: int) -> None:
        for ix in self._unique:
            k = index_entry_key(self.info, ix, values, physical_id)
            if k is None:
                continue
            if self.txn.get(k) is not None:
                raise self._dup(ix, values, k)
            self.txn.put(k, index_value(handle))

    def _delete_index_entries(self, values: Mapping[str, Any], physical_id: int) -> None:
        for ix in self._unique:
            k = index_entry_key(self.info, ix, values, physical_id)
            if k is not None:
                self.txn.delete(k)

    # --- writes -------------------------------------------------------------------------------
    def fill_auto_increment(self, values: dict[str, Any]) -> None:
        col = self.info.extra.get(AUTO_INCREMENT_KEY)
        if not col:
            return
        if values.get(col) is None:
            values[col] = self.info.column(col).convert(self.row_ids.alloc_row_ids(self.info.id))
        else:
            self.row_ids.rebase_row_id(self.info.id, int(values[col]))

    def insert(self, values: dict[str, Any]) -> int | bytes:
        """Insert one row (``values`` complete and converted); returns its handle."""
        self.fill_auto_increment(values)
        self.check_not_null(values)
        handle: int | bytes
        pid = self.physical_id(values)
        if self.info.clustered:
            handle = self._handle_of(values)
            rk = self._key(handle, pid)
            if self.txn.get(rk) is not None:
                pk = next(ix for ix in self.info.indexes if ix.primary)
                raise self._dup(pk, values, rk)
        else:
            handle = self.row_ids.alloc_row_ids(self.info.id)
            rk = self._key(handle, pid)
        self._put_index_entries(values, handle, pid)
        self.txn.put(rk, encode_values(self.info, values))
        return handle

    def delete(self, row: StoredRow) -> None:
        pid = row.physical_id or self.info.id
        self._delete_index_entries(row.values, pid)
        self.txn.delete(self._key(row.handle, pid))

    def update(self, row: StoredRow, new_values: dict[str, Any]) -> bool:
        """Update one row; False when nothing changed.

        Clustered table (either handle) and the PK changes: DELETE of the old row key + PUT of the new one.
        Otherwise one PUT on the same key (the change feed carries the old value).
        """
        if new_values == row.values:
            return False
        self.check_not_null(new_values)
        pid = row.physical_id or self.info.id
        new_pid = self.physical_id(new_values)
        moved = new_pid != pid or (self.info.clustered and self._handle_of(new_values) != row.handle)
        if moved:  # another row key (a new handle, or another partition): delete, then put
            self.delete(row)
            new_handle = self._handle_of(new_values) if self.info.clustered else row.handle
            if self.txn.get(self._key(new_handle, new_pid)) is not None:
                pk = next(ix for ix in self.info.indexes if ix.primary)
                raise self._dup(pk, new_values, self._key(new_handle, new_pid))
            self._put_index_entries(new_values, new_handle, new_pid)
            self.txn.put(self._key(new_handle, new_pid), encode_values(self.info, new_values))
            return True
        changed = [
            ix for ix in self._unique
            if any(row.values.get(self.info.column(c).name) != new_values.get(self.info.column(c).name)
                   for c in ix.columns)
        ]
        for ix in changed:
            k = index_entry_key(self.info, ix, row.values, pid)
            if k is not None:
                self.txn.delete(k)
        for ix in changed:
            k = index_entry_key(self.info, ix, new_values, pid)
            if k is None:
                continue
            if self.txn.get(k) is not None:
                raise self._dup(ix, new_values, k)
            self.txn.put(k, index_value(row.handle))
        self.txn.put(self._key(row.handle, pid), encode_values(self.info, new_values))
        return True


def common_handle(info: TableInfo, values: Mapping[str, Any]) -> bytes:
    """The common handle of a row: its PK columns' memcomparable datums, in PK order (``values`` by column name)."""
    cols = [info.column(c) for c in info.primary_key]
    return encode_key([(c.field_type(), c.to_stored(values.get(c.name))) for c in cols])


def index_value(handle: int | bytes) -> bytes:
    """What a unique-index entry points at: the 8-byte integer handle, or the common handle's datums. (TiDB's index
    value also carries restored data and flags; only this upstream reads its index values, for uniqueness.)"""
    return handle if isinstance(handle, bytes) else keycodec.encode_int(handle)


def convert_value(info: TableInfo, column: str, value: Any, dates: ct.DateRules = ct.STRICT_DATES) -> Any:
    """Convert a SQL value for ``column`` (a date by ``dates``, the session's ``sql_mode``); a bad value is an
    INVALID_ARGUMENT error."""
    try:
        return info.column(column).convert(value, dates)
    except SchemaError as exc:
        raise SqlError(str(exc)) from exc


def row_with_rowid(info: TableInfo, row: StoredRow) -> dict[str, Any]:
    """Lower-case name -> value, including ``_tidb_rowid`` (evaluation context for expressions)."""
    ctx = {k.lower(): v for k, v in row.values.items()}
    ctx[ROWID_COLUMN] = row.handle
    return ctx
