"""ALTER TABLE jobs on a table info: ADD/DROP/RENAME/MODIFY COLUMN, ADD/DROP INDEX and ADD/DROP PRIMARY KEY.

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

from cdc_core.codec import mysql_type as mt
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import Column, Index, SchemaError, TableInfo
from cdc_core.upstream.sql.ddl.column_def import ColumnSpec, build_column
from cdc_core.upstream.sql.errors import ErrorKind, SqlError
from cdc_core.upstream.sql.table_writer import AUTO_INCREMENT_KEY

# What an existing row reads for a new NOT NULL column added without a DEFAULT (MySQL's implicit
# default, by kind of value). DATE/DATETIME/TIMESTAMP's zero date is not representable in Delta, so
# such a column must be given a DEFAULT.
_IMPLICIT_DEFAULT: dict[str, Any] = {
    ct.INT: 0, ct.FLOAT: 0.0, ct.DECIMAL: Decimal(0), ct.TEXT: "", ct.BINARY: b"", ct.TIME: "00:00:00",
    ct.YEAR: 0, ct.SET: "", ct.BIT: 0, ct.JSON: "null",
}


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
        if col.kind == ct.ENUM:
            implicit = col.elems[0]  # MySQL: a NOT NULL ENUM defaults to its first member
        elif col.kind in _IMPLICIT_DEFAULT:
            implicit = col.convert(_IMPLICIT_DEFAULT[col.kind])
        else:
            raise SqlError(f"ADD COLUMN {col.name!r}: a NOT NULL {col.sql_type} column needs a DEFAULT")
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
        new = replace(new, origin_default=new.convert(old.origin_default))
    except SchemaError as exc:
        raise SqlError(f"Data truncated for column {old.name!r} (its value in rows older than the column): {exc}",
                       ErrorKind.CONSTRAINT) from exc
    if info.handle_column and info.handle_column.lower() == old.name.lower() and not ct.is_handle_type(new):
        raise SqlError(f"MODIFY COLUMN {old.name!r}: the clustered primary key must stay an integer type")
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


_STRING_TPS = frozenset(mt.STRING_TYPES)


def _elems_changed(old: tuple[str, ...], new: tuple[str, ...]) -> bool:
    """``isElemsChangedToModifyColumn``: members may only be appended."""
    return len(new) < len(old) or any(a != b for a, b in zip(old, new, strict=False))


def need_change_column_data(old: Column, new: Column) -> bool:
    """TiDB's ``needChangeColumnData`` (pkg/ddl/modify_column.go): whether MODIFY COLUMN rewrites every row under a
    new column id. Same type: DECIMAL when precision, scale or sign changes, ENUM/SET unless members are only
    appended, integers when the sign changes, BINARY(n) when n changes, others when they shrink or change sign;
    CHAR <-> VARCHAR always; between string types when they shrink; between integer types when the type's default
    length shrinks (BIGINT to INT) or the sign changes; any other change of type always (FLOAT <-> DOUBLE too)."""
    o, n = old.field_type(), new.field_type()
    toggles = o.unsigned != n.unsigned

    def truncates_or_toggles() -> bool:
        return (n.flen > 0 and (n.flen < o.flen or n.decimal < o.decimal)) or toggles

    if o.tp == n.tp:
        if o.tp == mt.TypeNewDecimal:
            return (o.flen, o.decimal) != (n.flen, n.decimal) or toggles
        if o.tp in (mt.TypeEnum, mt.TypeSet):
            return _elems_changed(o.elems, n.elems)
        if o.tp in mt.INTEGER_TYPES:
            return toggles
        if o.tp == mt.TypeString and o.binary:
            return n.flen != o.flen  # BINARY pads with 0x00: a new length changes every value
        return truncates_or_toggles()
    if {o.tp, n.tp} == {mt.TypeVarchar, mt.TypeString}:
        return True  # ConvertBetweenCharAndVarchar
    if o.tp in _STRING_TPS and n.tp in _STRING_TPS:
        return truncates_or_toggles()
    if o.tp in mt.INTEGER_TYPES and n.tp in mt.INTEGER_TYPES:
        default_old, default_new = ct.TYPES[old.type].flen, ct.TYPES[new.type].flen
        return default_new < default_old or toggles
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
    next_id = max((ix.id for ix in info.indexes), default=0) + 1
    ix = Index(ix_name, resolved, unique=unique, id=next_id)
    return replace(info, indexes=(*info.indexes, ix)), ix


def drop_index(info: TableInfo, name: str) -> tuple[TableInfo, Index, int]:
    """Returns (table after, the dropped index, its key id)."""
    for ix in info.indexes:
        if ix.name.lower() == name.lower():
            if ix.primary:
                raise SqlError("dropping the PRIMARY KEY is not supported")
            return replace(info, indexes=tuple(x for x in info.indexes if x is not ix)), ix, ix.id
    raise SqlError(f"Can't DROP '{name}'; check that column/key exists", ErrorKind.NOT_FOUND)


def add_primary_key(info: TableInfo, columns: tuple[str, ...]) -> tuple[TableInfo, Index]:
    """ADD PRIMARY KEY (TiDB's ActionAddPrimaryKey): a non-clustered primary key, a unique index whose columns
    become NOT NULL (the caller checks the rows: NULLs are ``Invalid use of NULL value``, duplicates the index's
    duplicate entry). TiDB adds no clustered key to a table and no second primary key (pkg/ddl/executor.go
    ``CreatePrimaryKey``)."""
    if info.primary_key:
        raise SqlError("Multiple primary key defined", ErrorKind.EXISTS)
    if not columns:
        raise SqlError("a primary key needs at least one column")
    resolved = tuple(_col(info, c).name for c in columns)
    next_id = max((ix.id for ix in info.indexes), default=0) + 1
    ix = Index("PRIMARY", resolved, unique=True, primary=True, id=next_id)
    cols = tuple(replace(c, nullable=False) if c.name in resolved else c for c in info.columns)
    return replace(info, columns=cols, indexes=(*info.indexes, ix)), ix


def drop_primary_key(info: TableInfo) -> tuple[TableInfo, Index]:
    """DROP PRIMARY KEY (TiDB's ActionDropPrimaryKey) of a non-clustered table: its unique index goes, the rows
    keep their ``_tidb_rowid`` handles; the columns stay NOT NULL. A clustered key is the rows' key and cannot go
    (TiDB's ``checkIsDropPrimaryKey``)."""
    if info.clustered:
        raise SqlError("Unsupported drop primary key when the table is using clustered index")
    pk = next((ix for ix in info.indexes if ix.primary), None)
    if pk is None:
        raise SqlError("Can't DROP 'PRIMARY'; check that column/key exists", ErrorKind.NOT_FOUND)
    return replace(info, indexes=tuple(x for x in info.indexes if x is not pk)), pk
