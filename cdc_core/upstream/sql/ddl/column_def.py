"""Parsing a SQL column definition (CREATE TABLE, ADD/MODIFY/CHANGE COLUMN) into a ``Column``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from cdc_core.schema.column_type import BIT
from cdc_core.schema.model import Column, SchemaError
from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.expr import literal_value

T = exp.DataType.Type
# sqlglot's MySQL type -> (cdcflow type name, UNSIGNED)
TYPES: dict[Any, tuple[str, bool]] = {
    T.TINYINT: ("tinyint", False), T.UTINYINT: ("tinyint", True), T.BOOLEAN: ("tinyint", False),
    T.SMALLINT: ("smallint", False), T.USMALLINT: ("smallint", True),
    T.MEDIUMINT: ("mediumint", False), T.UMEDIUMINT: ("mediumint", True),
    T.INT: ("int", False), T.UINT: ("int", True),
    T.BIGINT: ("bigint", False), T.UBIGINT: ("bigint", True),
    T.FLOAT: ("float", False), T.DOUBLE: ("double", False),
    T.DECIMAL: ("decimal", False), T.UDECIMAL: ("decimal", True),
    T.DATE: ("date", False), T.DATETIME: ("datetime", False), T.TIMESTAMP: ("timestamp", False),
    T.TIMESTAMPTZ: ("timestamp", False), T.TIME: ("time", False), T.YEAR: ("year", False),
    T.CHAR: ("char", False), T.VARCHAR: ("varchar", False), T.BINARY: ("binary", False),
    T.VARBINARY: ("varbinary", False), T.TINYTEXT: ("tinytext", False), T.TEXT: ("text", False),
    T.MEDIUMTEXT: ("mediumtext", False), T.LONGTEXT: ("longtext", False), T.TINYBLOB: ("tinyblob", False),
    T.BLOB: ("blob", False), T.MEDIUMBLOB: ("mediumblob", False), T.LONGBLOB: ("longblob", False),
    T.ENUM: ("enum", False), T.SET: ("set", False), T.BIT: ("bit", False), T.JSON: ("json", False),
    T.VECTOR: ("vector", False),  # TiDB v8.4+: VECTOR, VECTOR(D) of float32
}
_TEXT_CHARSETS = frozenset({"utf8mb4", "utf8"})
_TEXT_COLLATIONS = frozenset({"utf8mb4_bin", "utf8_bin"})


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
        raise SqlError(f"column {cname!r}: unsupported type {shown} (supported: the integer types, FLOAT, DOUBLE, "
                       "DECIMAL, DATE, DATETIME, TIMESTAMP, TIME, YEAR, CHAR, VARCHAR, BINARY, VARBINARY, the TEXT "
                       "and BLOB types, ENUM, SET, BIT, JSON, VECTOR)")
    ctype, unsigned = TYPES[dt.this]
    spec = ColumnSpec({"name": cname, "type": ctype, "nullable": True, "default": None},
                      position=item.args.get("position"))
    _type_params(spec, dt, cname)
    if unsigned:
        spec.fields["unsigned"] = True
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
        elif isinstance(kind, exp.CharacterSetColumnConstraint | exp.CollateColumnConstraint):
            _check_charset(spec, kind)
        else:
            shown = (kind or cc).sql(dialect="mysql")
            raise SqlError(f"column {cname!r}: unsupported column option {shown!r}")
    return spec


def _type_params(spec: ColumnSpec, dt: exp.DataType, cname: str) -> None:
    """Lengths, precision, fsp and members of a type (``INT(11)``'s display width means nothing and is
    dropped, as TiDB does for row values)."""
    ctype = spec.fields["type"]
    if ctype in ("char", "varchar", "binary", "varbinary", "bit"):
        spec.fields["length"] = _int_param(dt, 0, f"{ctype.upper()} length")
    elif ctype == "vector":  # VECTOR(D): D elements; VECTOR: any number (TiDB's UnspecifiedLength)
        spec.fields["length"] = _int_param(dt, 0, "VECTOR dimension")
    elif ctype == "decimal":
        spec.fields["precision"] = _int_param(dt, 0, "DECIMAL precision") or 10
        spec.fields["scale"] = _int_param(dt, 1, "DECIMAL scale") or 0
    elif ctype in ("datetime", "timestamp", "time"):
        spec.fields["fsp"] = _int_param(dt, 0, "fractional seconds precision")
    elif ctype in ("enum", "set"):
        elems = []
        for e in dt.expressions:
            if not (isinstance(e, exp.Literal) and e.is_string):
                raise SqlError(f"column {cname!r}: {ctype.upper()} members are string literals, got "
                               f"{e.sql(dialect='mysql')!r}")
            elems.append(str(e.this))
        spec.fields["elems"] = tuple(elems)
    elif ctype == "float":
        if len(dt.expressions) > 1:
            raise SqlError(f"column {cname!r}: FLOAT(M,D) is not supported (use FLOAT, DOUBLE or DECIMAL(M,D))")
        p = _int_param(dt, 0, "FLOAT precision")
        if p is not None and p > 24:
            spec.fields["type"] = "double"  # MySQL: FLOAT(p) with p > 24 is a DOUBLE
    elif ctype == "double" and dt.expressions:
        raise SqlError(f"column {cname!r}: DOUBLE(M,D) is not supported (use DOUBLE or DECIMAL(M,D))")


def _check_charset(spec: ColumnSpec, kind: exp.Expression) -> None:
    """TiDB's default ``utf8mb4``/``utf8mb4_bin`` is what cdcflow compares text by; say so for any other."""
    name = str(kind.this.name if isinstance(kind.this, exp.Expression) else kind.this).lower()
    if spec.fields["type"] in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "json"):
        if name == "binary":
            return
    elif name in (_TEXT_CHARSETS if isinstance(kind, exp.CharacterSetColumnConstraint) else _TEXT_COLLATIONS):
        return
    raise SqlError(f"column {spec.name!r}: {kind.sql(dialect='mysql')} is not supported (text columns are "
                   "utf8mb4 with utf8mb4_bin, TiDB's default)")


def build_column(spec: ColumnSpec, col_id: int) -> Column:
    """The ``Column`` of a spec, with its DEFAULT converted and checked."""
    fields = dict(spec.fields)
    default = fields.pop("default")
    try:
        col = Column(id=col_id, **fields)
    except SchemaError as exc:
        raise SqlError(str(exc)) from None
    try:
        conv = col.convert(default)
    except SchemaError as exc:
        raise SqlError(f"invalid DEFAULT for {exc}") from exc
    if spec.has_default and conv is None and not col.nullable:
        raise SqlError(f"invalid DEFAULT NULL for NOT NULL column {col.name!r}")
    if isinstance(conv, bytes) and col.kind != BIT:
        try:
            conv.decode("utf-8")
        except UnicodeDecodeError:
            # TiDB keeps a BINARY/BLOB default as a JSON string (only BIT has default_bit), and Go's encoder writes
            # U+FFFD for each byte that is not UTF-8: the schema TiDB loads back has another default than was
            # given. The stand-in refuses what it could not keep rather than diverge from its own job JSON.
            raise SqlError(f"invalid DEFAULT for column {col.name!r}: {conv.hex()} is not UTF-8, which TiDB's "
                           "schema JSON cannot keep") from None
    return replace(col, default=conv, origin_default=conv)
