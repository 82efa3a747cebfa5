"""Parsing a SQL column definition (CREATE TABLE, ADD/MODIFY/CHANGE COLUMN) into a ``Column``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from cdc_core.schema.model import Column, SchemaError
from cdc_core.upstream.errors import SqlError
from cdc_core.upstream.expr import literal_value

TYPES = {
    exp.DataType.Type.INT: "int",
    exp.DataType.Type.BIGINT: "bigint",
    exp.DataType.Type.VARCHAR: "varchar",
    exp.DataType.Type.DECIMAL: "decimal",
    exp.DataType.Type.DATETIME: "datetime",
    exp.DataType.Type.TEXT: "text",
}


@dataclass
class ColumnSpec:
    """A parsed column definition; ``fields`` are ``Column`` keyword arguments except ``id``."""

    fields: dict[str, Any]
    has_default: bool = False
    primary: bool = False
    unique: bool = False
    auto_increment: bool = False
    position: exp.ColumnPosition | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.fields["name"])


def _int_param(dt: exp.DataType, i: int, what: str) -> int | None:
    params = dt.expressions
    if len(params) <= i:
        return None
    node = params[i].this if isinstance(params[i], exp.DataTypeParam) else params[i]
    try:
        return int(str(node.this if isinstance(node, exp.Literal) else node))
    except ValueError as exc:
        raise SqlError(f"bad {what} {node.sql(dialect='mysql')!r}") from exc


def parse_column_def(item: exp.ColumnDef) -> ColumnSpec:
    cname = str(item.this.name if isinstance(item.this, exp.Identifier) else item.name)
    dt = item.args.get("kind")
    if not isinstance(dt, exp.DataType) or dt.this not in TYPES:
        shown = dt.sql(dialect="mysql") if dt is not None else "none"
        raise SqlError(
            f"column {cname!r}: unsupported type {shown} (supported: INT, BIGINT, VARCHAR(n), "
            "DECIMAL(p,s), DATETIME, TEXT)"
        )
    ctype = TYPES[dt.this]
    spec = ColumnSpec({"name": cname, "type": ctype, "nullable": True, "default": None},
                      position=item.args.get("position"))
    if ctype == "varchar":
        spec.fields["length"] = _int_param(dt, 0, "VARCHAR length")
        if spec.fields["length"] is None:
            raise SqlError(f"column {cname!r}: VARCHAR needs a length, e.g. VARCHAR(64)")
    if ctype == "decimal":
        spec.fields["precision"] = _int_param(dt, 0, "DECIMAL precision") or 10
        spec.fields["scale"] = _int_param(dt, 1, "DECIMAL scale") or 0
    for cc in item.args.get("constraints") or []:
        kind = cc.args.get("kind") if isinstance(cc, exp.ColumnConstraint) else cc
        if isinstance(kind, exp.PrimaryKeyColumnConstraint):
            spec.primary = True
        elif isinstance(kind, exp.NotNullColumnConstraint):
            spec.fields["nullable"] = bool(kind.args.get("allow_null"))
        elif isinstance(kind, exp.DefaultColumnConstraint):
            try:
                spec.fields["default"] = literal_value(kind.this)
            except SqlError as exc:
                raise SqlError(f"column {cname!r}: unsupported DEFAULT ({exc.message})") from exc
            spec.has_default = True
        elif isinstance(kind, exp.UniqueColumnConstraint):
            spec.unique = True
        elif isinstance(kind, exp.AutoIncrementColumnConstraint):
            spec.auto_increment = True
        elif isinstance(kind, exp.CommentColumnConstraint):
            pass
        else:
            shown = (kind or cc).sql(dialect="mysql")
            raise SqlError(f"column {cname!r}: unsupported column option {shown!r}")
    return spec


def build_column(spec: ColumnSpec, col_id: int) -> Column:
    """The ``Column`` of a spec, with its DEFAULT converted and checked."""
    fields = dict(spec.fields)
    default = fields.pop("default")
    col = Column(id=col_id, **fields)
    try:
        conv = col.convert(default)
    except SchemaError as exc:
        raise SqlError(f"invalid DEFAULT for {exc}") from exc
    if spec.has_default and conv is None and not col.nullable:
        raise SqlError(f"invalid DEFAULT NULL for NOT NULL column {col.name!r}")
    return replace(col, default=conv, origin_default=conv)
