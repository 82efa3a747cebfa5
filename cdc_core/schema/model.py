"""The table-info model: columns by id, keys, and how values map to Arrow/Spark types.

A ``TableInfo`` is what a DDL job records "after" it (TiDB's ``model.TableInfo`` in the job's JSON, read and
written by ``tidb_json``) and what decoding a row value at a commit ts needs. cdcflow's own state (schema logs,
snapshots) serializes it with ``to_json`` / ``from_json``; every other component reads it through this module.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from cdc_core.codec import mysql_type as mt
from cdc_core.codec.value_text import json_value
from cdc_core.schema import column_type as ct
from cdc_core.schema.partition import PartitionInfo

if TYPE_CHECKING:
    import pyarrow as pa

# The hidden handle of non-clustered tables, as TiDB names it.
ROWID_COLUMN = "_tidb_rowid"



class SchemaError(ValueError):
    """A value or definition that does not fit the table schema."""


def spark_type_of(t: pa.DataType) -> str:
    """The Spark SQL type of an Arrow type the row decoder produces (Spark's own Arrow mapping): a VECTOR's
    ``list<float>`` is ``ARRAY<FLOAT>``."""
    import pyarrow as pa

    simple = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
              pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.string(): "STRING", pa.binary(): "BINARY",
              pa.date32(): "DATE", pa.timestamp("us"): "TIMESTAMP_NTZ", pa.timestamp("us", tz="UTC"): "TIMESTAMP"}
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_list(t):
        return f"ARRAY<{spark_type_of(t.value_type)}>"
    raise SchemaError(f"no Spark type for Arrow type {t}")


@dataclass(frozen=True)
class Column:
    """One column: its stable id (row values key on it), name, type and definition.

    ``type`` is a MySQL type name, lower case (``cdc_core.schema.column_type.TYPES``); what a type means, its TiDB
    ``FieldType`` and its Python values live in that module."""

    id: int
    name: str
    type: str
    nullable: bool = True
    default: Any = None  # already converted with ``convert`` (None = no default / NULL)
    # What a row that does not store this column reads (TiDB's OriginDefaultValue): the default at
    # the time the column was added. It differs from ``default`` once a later MODIFY/CHANGE COLUMN
    # changes or drops the default: rows written before the ADD COLUMN must not change with it.
    origin_default: Any = "__same_as_default__"
    length: int | None = None  # CHAR/VARCHAR/BINARY/VARBINARY(n), BIT(n), VECTOR(n) (None: VECTOR of any dimension)
    precision: int | None = None  # DECIMAL(p, s)
    scale: int | None = None
    unsigned: bool = False
    fsp: int | None = None  # DATETIME/TIMESTAMP/TIME(fsp); None is 0
    elems: tuple[str, ...] = ()  # ENUM/SET members
    # A text column's collation when it is not one that orders by the UTF-8 bytes (``column_type.BIN_COLLATIONS``,
    # TiDB's default utf8mb4_bin among them): "" for those. Only a table read from a cluster's schema has one.
    collate: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.origin_default, str) and self.origin_default == "__same_as_default__":
            object.__setattr__(self, "origin_default", self.default)
        object.__setattr__(self, "elems", tuple(self.elems))
        try:
            ct.check_definition(self)
        except ct.ColumnValueError as exc:
            raise SchemaError(f"column {self.name!r}: {exc}") from None

    @property
    def sql_type(self) -> str:
        return ct.sql_type(self)

    @property
    def kind(self) -> str:
        """The kind of Python value (``column_type.INT``, ``TEXT``, ``BINARY``, ...)."""
        return ct.kind(self)

    def arrow_type(self) -> pa.DataType:
        """The Arrow type of the column in the silver table: the row decoder's, by the column's TiDB type (one
        mapping, ``cdc_core.codec.rowcodec_batch.arrow_type``)."""
        from cdc_core.codec.rowcodec_batch import arrow_type  # numpy/pyarrow: only the data paths need them

        return arrow_type(self.field_type())

    def field_type(self) -> mt.FieldType:
        """The TiDB ``FieldType`` row values of this column are encoded by (``pkg/parser/mysql/type.go`` codes)."""
        return ct.field_type(self)

    def spark_type(self) -> str:
        """The Spark SQL type name (for ``cast`` and DDL strings) of :meth:`arrow_type`."""
        return spark_type_of(self.arrow_type())

    def convert(self, value: Any, dates: ct.DateRules = ct.STRICT_DATES) -> Any:
        """This column's Python value of a SQL literal's value, a JSON form or a typed value; check it fits (a date
        by ``dates``: a session's ``sql_mode``, or ``STORED_DATES`` for a value TiDB stored)."""
        try:
            return ct.convert(self, value, dates)
        except ct.ColumnValueError as exc:
            raise SchemaError(f"column {self.name!r} ({self.sql_type}): {exc}") from None

    def to_json_value(self, value: Any) -> Any:
        """The JSON form of a converted value (``value_text.json_value``)."""
        return json_value(value)

    def arrow_value(self, value: Any) -> Any:
        """A converted value as ``pyarrow.array`` takes it for :meth:`arrow_type` (``column_type.arrow_value``)."""
        return ct.arrow_value(self, value)

    def from_arrow(self, value: Any) -> Any:
        """The Python value of a value read from :meth:`arrow_type` (``column_type.from_arrow``)."""
        return ct.from_arrow(self, value)

    def to_stored(self, value: Any) -> Any:
        """A converted value as the row codec stores it (``column_type.to_stored``)."""
        return ct.to_stored(self, value)

    def from_stored(self, value: Any) -> Any:
        """The Python value of a value the row codec decoded."""
        try:
            return ct.from_stored(self, value)
        except ct.ColumnValueError as exc:
            raise SchemaError(f"column {self.name!r} ({self.sql_type}): stored {exc}") from None


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    unique: bool = False
    primary: bool = False
    # Stable id (index keys are ``t{table}_i{id}...``): survives ADD/DROP INDEX of other indexes.
    id: int = 0


@dataclass(frozen=True)
class TableInfo:
    id: int
    db_name: str
    name: str
    columns: tuple[Column, ...]
    indexes: tuple[Index, ...] = ()
    # Clustered integer PK: the PK value is the row handle. Otherwise rows are keyed by a hidden
    # _tidb_rowid handle and the PK/UKs are unique indexes.
    pk_is_handle: bool = False
    # Clustered non-integer or composite PK (TiDB's common handle): the row key holds the PK's memcomparable datums
    # (``t{id}_r{datums}``), the row value every column, and the PK has an index id but no index entries.
    is_common_handle: bool = False
    # A partitioned table: its rows live under each partition's own id, never under ``id``.
    partition: PartitionInfo | None = None
    schema_version: int = 0
    db_id: int = 0
    max_column_id: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    # --- lookups ------------------------------------------------------------------------------
    def column(self, name: str) -> Column:
        lname = name.lower()
        for c in self.columns:
            if c.name.lower() == lname:
                return c
        raise SchemaError(f"table {self.qualified_name}: unknown column {name!r}")

    def column_by_id(self) -> dict[int, Column]:
        """A new ``{id: Column}`` dict (the caller may change it)."""
        return {c.id: c for c in self.columns}

    def column_with_id(self, col_id: int) -> Column:
        """The column of ``col_id`` (``KeyError`` if none), from a lookup built once per TableInfo."""
        return self._by_id[col_id]

    @cached_property
    def _by_id(self) -> dict[int, Column]:
        return {c.id: c for c in self.columns}

    def field_types(self) -> dict[int, mt.FieldType]:
        """``{column id: FieldType}``: what encoding or decoding a row value under this schema needs (built once
        per TableInfo: every row read or written asks for it; do not mutate)."""
        return self._field_types

    @cached_property
    def _field_types(self) -> dict[int, mt.FieldType]:
        return {c.id: c.field_type() for c in self.columns}

    @property
    def qualified_name(self) -> str:
        return f"{self.db_name}.{self.name}"

    @property
    def primary_key(self) -> tuple[str, ...]:
        for ix in self.indexes:
            if ix.primary:
                return ix.columns
        return ()

    @property
    def physical_ids(self) -> tuple[int, ...]:
        """The ids its rows are keyed by (``t{id}_r...``): its partitions' ids, or its own."""
        return self.partition.ids if self.partition is not None else (self.id,)

    @property
    def clustered(self) -> bool:
        """Whether rows are keyed by their PK (an integer handle or a common handle), not by ``_tidb_rowid``."""
        return self.pk_is_handle or self.is_common_handle

    @property
    def handle_column(self) -> str | None:
        """The column whose value is the row handle, or None for a hidden ``_tidb_rowid``."""
        return self.primary_key[0] if self.pk_is_handle else None

    def unique_keys(self) -> list[tuple[str, ...]]:
        """PK first, then every UNIQUE index whose columns are all NOT NULL (seed 002's "non-null UK")."""
        keys: list[tuple[str, ...]] = []
        if self.primary_key:
            keys.append(self.primary_key)
        for ix in self.indexes:
            if ix.unique and not ix.primary and all(not self.column(c).nullable for c in ix.columns):
                keys.append(ix.columns)
        return keys

    def all_unique_indexes(self) -> list[tuple[str, ...]]:
        return [ix.columns for ix in self.indexes if ix.unique or ix.primary]

    def delta_key(self) -> tuple[str, ...]:
        """The key of the Delta table: the PK, else the first non-null UK, else ``_tidb_rowid``."""
        keys = self.unique_keys()
        return keys[0] if keys else (ROWID_COLUMN,)

    def arrow_schema(self, *, with_rowid: bool | None = None) -> pa.Schema:
        """The Arrow schema of the silver Delta table (adds ``_tidb_rowid`` when it is the key)."""
        import pyarrow as pa

        fields = [pa.field(c.name, c.arrow_type(), nullable=True) for c in self.columns]
        if with_rowid if with_rowid is not None else self.delta_key() == (ROWID_COLUMN,):
            fields.append(pa.field(ROWID_COLUMN, pa.int64(), nullable=True))
        return pa.schema(fields)

    def key_schema(self) -> pa.Schema:
        """The Arrow schema of the Delta key columns (:meth:`delta_key`), typed as in :meth:`arrow_schema`."""
        import pyarrow as pa

        image = self.arrow_schema()
        return pa.schema([image.field(k) for k in self.delta_key()])

    # --- serialization ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["columns"] = [
            {**asdict(c), "default": c.to_json_value(c.default), "origin_default": c.to_json_value(c.origin_default)}
            for c in self.columns
        ]
        for c in d["columns"]:
            c["elems"] = list(c["elems"])
            if not c["collate"]:
                del c["collate"]  # the stored schema of a table without one reads as before the field existed
        d["indexes"] = [{**asdict(ix), "columns": list(ix.columns)} for ix in self.indexes]
        d["partition"] = self.partition.to_dict() if self.partition is not None else None
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableInfo:
        try:
            cols = []
            for c in d["columns"]:
                col = Column(**{**c, "default": None, "origin_default": None, "elems": tuple(c.get("elems", ()))})
                default = col.convert(c.get("default"), ct.STORED_DATES)
                origin = col.convert(c["origin_default"], ct.STORED_DATES) if "origin_default" in c else default
                cols.append(replace(col, default=default, origin_default=origin))
            indexes = tuple(
                Index(name=ix["name"], columns=tuple(ix["columns"]), unique=ix.get("unique", False),
                      primary=ix.get("primary", False), id=int(ix.get("id", 0)))
                for ix in d.get("indexes", [])
            )
            return cls(
                id=int(d["id"]), db_name=d["db_name"], name=d["name"], columns=tuple(cols),
                indexes=indexes, pk_is_handle=bool(d.get("pk_is_handle", False)),
                is_common_handle=bool(d.get("is_common_handle", False)),
                schema_version=int(d.get("schema_version", 0)), db_id=int(d.get("db_id", 0)),
                max_column_id=int(d.get("max_column_id", max((c.id for c in cols), default=0))),
                extra=dict(d.get("extra", {})),
                partition=PartitionInfo.from_dict(d["partition"]) if d.get("partition") else None,
            )
        except (KeyError, TypeError) as exc:
            raise SchemaError(f"malformed table info: {exc}") from exc

    @classmethod
    def from_json(cls, text: str | bytes) -> TableInfo:
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"malformed table info JSON: {exc}") from exc
        return cls.from_dict(d)

    # --- rows ---------------------------------------------------------------------------------
    def decode_values(self, raw: dict[int, Any]) -> dict[str, Any]:
        """Typed ``{column name: value}`` of a decoded row value under this schema.

        Ids the schema no longer has (dropped columns) are ignored; columns the value lacks take
        their origin default (NULL when none).
        """
        out: dict[str, Any] = {}
        for c in self.columns:
            out[c.name] = c.from_stored(raw[c.id]) if c.id in raw else c.origin_default
        return out
