"""ALTER TABLE jobs on a table info: ADD/DROP/RENAME/MODIFY COLUMN and ADD/DROP INDEX.

Each function takes the table before the job and returns the table after it (pure: the
``DdlExecutor`` writes the history row, checks existing data and applies the result). The rules
follow TiDB where it matters to a change-data consumer: column ids are never reused (a dropped
column's values stay in old rows and decode to nothing), a renamed column keeps its id, and a new
column's default is what every existing row reads.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from sqlglot import exp

from cdc_core.schema.model import Column, Index, SchemaError, TableInfo
from cdc_core.upstream.column_def import ColumnSpec, build_column
from cdc_core.upstream.errors import ErrorKind, SqlError
from cdc_core.upstream.table_writer import AUTO_INCREMENT_KEY

# What an existing row reads for a new NOT NULL column added without a DEFAULT (MySQL's implicit
# default). DATETIME has no representable zero value here, so it must be given a DEFAULT.
_IMPLICIT_DEFAULT: dict[str, Any] = {"int": 0, "bigint": 0, "decimal": Decimal(0), "varchar": "", "text": ""}


def _col(info: TableInfo, name: str) -> Column:
    for c in info.columns:
        if c.name.lower() == name.lower():
            return c
    raise SqlError(f"Unknown column '{name}' in '{info.name}'", ErrorKind.NOT_FOUND)


def _has_col(info: TableInfo, name: str) -> bool:
    return any(c.name.lower() == name.lower() for c in info.columns)


def _indexes_with(info: TableInfo, name: str) -> list[Index]:
    return [ix for ix in info.indexes if any(c.lower() == name.lower() for c in ix.columns)]


def add_column(info: TableInfo, spec: ColumnSpec) -> TableInfo:
    if _has_col(info, spec.name):
        raise SqlError(f"Duplicate column name '{spec.name}'", ErrorKind.EXISTS)
    if spec.primary or spec.unique or spec.auto_increment:
        raise SqlError(
            f"ADD COLUMN {spec.name!r}: PRIMARY KEY / UNIQUE / AUTO_INCREMENT are not supported on a new column; "
            "add the column, then ADD UNIQUE KEY"
        )
    col = build_column(spec, info.max_column_id + 1)
    if not col.nullable and col.default is None:
        if col.type not in _IMPLICIT_DEFAULT:
            raise SqlError(f"ADD COLUMN {col.name!r}: a NOT NULL {col.sql_type} column needs a DEFAULT")
        implicit = col.convert(_IMPLICIT_DEFAULT[col.type])
        col = replace(col, default=implicit, origin_default=implicit)
    cols = list(info.columns)
    pos = spec.position
    if pos is None:
        cols.append(col)
    elif str(pos.args.get("position", "")).upper() == "FIRST":
        cols.insert(0, col)
    else:
        after = _col(info, str(pos.this.name if isinstance(pos.this, exp.Column) else pos.this))
        cols.insert(cols.index(after) + 1, col)
    return replace(info, columns=tuple(cols), max_column_id=col.id)


def drop_column(info: TableInfo, name: str) -> TableInfo:
    col = _col(info, name)
    if len(info.columns) == 1:
        raise SqlError(f"can't drop {col.name!r}: it is the only column of '{info.name}' (use DROP TABLE)")
    used = _indexes_with(info, col.name)
    if used:
        names = ", ".join(ix.name for ix in used)
        raise SqlError(f"can't drop column {col.name!r}: it is used by index {names}; drop the index first")
    if info.extra.get(AUTO_INCREMENT_KEY) == col.name:
        raise SqlError(f"can't drop the AUTO_INCREMENT column {col.name!r}")
    return replace(info, columns=tuple(c for c in info.columns if c.id != col.id))


def _renamed_everywhere(info: TableInfo, old: str, new: str) -> tuple[tuple[Index, ...], dict[str, Any]]:
    indexes = tuple(
        replace(ix, columns=tuple(new if c.lower() == old.lower() else c for c in ix.columns)) for ix in info.indexes
    )
    extra = dict(info.extra)
    if extra.get(AUTO_INCREMENT_KEY, "").lower() == old.lower():
        extra[AUTO_INCREMENT_KEY] = new
    return indexes, extra


def rename_column(info: TableInfo, old: str, new: str) -> TableInfo:
    col = _col(info, old)
    if _has_col(info, new) and new.lower() != old.lower():
        raise SqlError(f"Duplicate column name '{new}'", ErrorKind.EXISTS)
    indexes, extra = _renamed_everywhere(info, col.name, new)
    cols = tuple(replace(c, name=new) if c.id == col.id else c for c in info.columns)
    return replace(info, columns=cols, indexes=indexes, extra=extra)


def modify_column(info: TableInfo, spec: ColumnSpec, rename_from: str | None) -> tuple[TableInfo, Column, Column]:
    """MODIFY / CHANGE COLUMN; returns (table after, column before, column after).

    Existing data is checked by the executor (every value must convert to the new type).
    """
    old = _col(info, rename_from or spec.name)
    if spec.primary or spec.unique or spec.auto_increment:
        raise SqlError(f"MODIFY COLUMN {old.name!r}: key and AUTO_INCREMENT options are not supported here")
    if spec.position is not None:
        raise SqlError(f"MODIFY COLUMN {old.name!r}: FIRST/AFTER (reordering columns) is not supported")
    new_name = spec.name
    if new_name.lower() != old.name.lower() and _has_col(info, new_name):
        raise SqlError(f"Duplicate column name '{new_name}'", ErrorKind.EXISTS)
    new = build_column(spec, old.id)
    # Rows that never stored the column keep reading what they read before, in the new type.
    try:
        new = replace(new, origin_default=new.convert(old.to_json_value(old.origin_default)))
    except SchemaError as exc:
        raise SqlError(f"Data truncated for column {old.name!r} (its value in rows older than the column): {exc}",
                       ErrorKind.CONSTRAINT) from exc
    if info.handle_column and info.handle_column.lower() == old.name.lower() and new.type not in ("int", "bigint"):
        raise SqlError(f"MODIFY COLUMN {old.name!r}: the clustered primary key must stay INT or BIGINT")
    if need_change_column_data(old, new):
        if any(old.name.lower() == c.lower() for c in info.primary_key):
            # TiDB: ErrUnsupportedModifyColumn "this column has primary key flag" (pkg/ddl/modify_column.go)
            raise SqlError(f"Unsupported modify column: {old.name!r} from {old.sql_type} to {new.sql_type} needs its "
                           f"data reorganized, and this column has primary key flag")
        # TiDB backfills a changing column with a new id and swaps it in: the column keeps its name and place,
        # its values move to the new id (rows written before the job keep the old id's bytes too).
        new = replace(new, id=info.max_column_id + 1)
        info = replace(info, max_column_id=new.id)
    if info.primary_key and any(c.lower() == old.name.lower() for c in info.primary_key) and new.nullable:
        new = replace(new, nullable=False)  # MySQL: PK columns are implicitly NOT NULL
    indexes, extra = _renamed_everywhere(info, old.name, new.name)
    cols = tuple(new if c.id == old.id else c for c in info.columns)
    return replace(info, columns=cols, indexes=indexes, extra=extra), old, new


_INTEGER_TYPES = ("int", "bigint")
_STRING_TYPES = ("varchar", "text")


def need_change_column_data(old: Column, new: Column) -> bool:
    """TiDB's ``needChangeColumnData`` (pkg/ddl/modify_column.go) over cdcflow's column types: whether MODIFY
    COLUMN rewrites every row under a new column id. Same type: DECIMAL when precision or scale changes, strings
    when they shrink; between integer types when the default length shrinks (BIGINT to INT); between string types
    when the length shrinks; any other change of type always."""
    old_ft, new_ft = old.field_type(), new.field_type()

    def shrinks() -> bool:
        return new_ft.flen > 0 and (new_ft.flen < old_ft.flen or new_ft.decimal < old_ft.decimal)

    if old.type == new.type:
        if old.type == "decimal":
            return (old_ft.flen, old_ft.decimal) != (new_ft.flen, new_ft.decimal)
        if old.type in _INTEGER_TYPES:
            return False
        return shrinks()
    if old.type in _STRING_TYPES and new.type in _STRING_TYPES:
        return shrinks()
    if old.type in _INTEGER_TYPES and new.type in _INTEGER_TYPES:
        return _INTEGER_TYPES.index(new.type) < _INTEGER_TYPES.index(old.type)
    return True


def add_index(info: TableInfo, name: str | None, columns: tuple[str, ...], unique: bool) -> tuple[TableInfo, Index]:
    if not columns:
        raise SqlError("an index needs at least one column")
    resolved = tuple(_col(info, c).name for c in columns)
    ix_name = name or resolved[0]
    if ix_name.lower() == "primary":
        raise SqlError("adding a PRIMARY KEY to an existing table is not supported")
    if any(ix.name.lower() == ix_name.lower() for ix in info.indexes):
        raise SqlError(f"Duplicate key name '{ix_name}'", ErrorKind.EXISTS)
    next_id = max((ix.id or i + 1 for i, ix in enumerate(info.indexes)), default=0) + 1
    ix = Index(ix_name, resolved, unique=unique, id=next_id)
    return replace(info, indexes=(*info.indexes, ix)), ix


def drop_index(info: TableInfo, name: str) -> tuple[TableInfo, Index, int]:
    """Returns (table after, the dropped index, its key id)."""
    for i, ix in enumerate(info.indexes):
        if ix.name.lower() == name.lower():
            if ix.primary:
                raise SqlError("dropping the PRIMARY KEY is not supported")
            return replace(info, indexes=tuple(x for x in info.indexes if x is not ix)), ix, ix.id or i + 1
    raise SqlError(f"Can't DROP '{name}'; check that column/key exists", ErrorKind.NOT_FOUND)
