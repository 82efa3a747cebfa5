"""``SHOW CREATE TABLE`` and ``SHOW CREATE DATABASE`` as TiDB answers them (``pkg/executor/show.go``,
``ConstructResultOfShowCreateTable`` / ``ConstructResultOfShowCreateDatabase``).

A table's statement is written the way TiDB writes it: backticked names, lower-case types, ``NOT NULL`` /
``DEFAULT NULL`` / ``DEFAULT '<value>'`` (a default is quoted whatever its type), ``AUTO_INCREMENT``, the primary key
with ``/*T![clustered_index] CLUSTERED */`` or ``NONCLUSTERED``, ``UNIQUE KEY`` / ``KEY`` lines, then
``ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin``, ``AUTO_INCREMENT=<next id>`` when the table has an
auto-increment column and has allocated from it, and the partition clause (``AppendPartitionInfo``). The result
has two columns, ``Table`` and ``Create Table`` (``Database`` and ``Create Database``).
"""

from __future__ import annotations

from typing import Final

from cdc_core.schema.model import Column, TableInfo
from cdc_core.schema.partition import HASH, KEY, LIST, RANGE, PartitionInfo
from cdc_core.upstream.sql.expr import text_of

TABLE_COLUMNS: Final = ("Table", "Create Table")
DATABASE_COLUMNS: Final = ("Database", "Create Database")
_TABLE_OPTIONS: Final = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
_TABLE_COLLATION: Final = "utf8mb4_bin"


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def type_text(col: Column) -> str:
    """The type as TiDB prints it (``GetTypeDesc``): lower case, ENUM/SET members as given."""
    sql = col.sql_type
    head, paren, rest = sql.partition("(")
    if not paren:
        return sql.lower()
    body, _, tail = rest.rpartition(")")
    return f"{head.lower()}({body}){tail.lower()}"


def column_line(col: Column, auto_increment: bool) -> str:
    out = f"  {quote(col.name)} {type_text(col)}"
    if col.collate and col.collate != _TABLE_COLLATION:
        out += f" COLLATE {col.collate}"
    if not col.nullable:
        out += " NOT NULL"
    if auto_increment:
        out += " AUTO_INCREMENT"
    elif col.default is None:
        if col.nullable:
            out += " NULL DEFAULT NULL" if col.type == "timestamp" else " DEFAULT NULL"
    else:
        text = text_of(col.to_json_value(col.default)) if not isinstance(col.default, str) else col.default
        out += " DEFAULT '" + (text or "").replace("'", "''") + "'"
    return out


def _columns(names: tuple[str, ...]) -> str:
    return ",".join(quote(n) for n in names)


def partition_clause(part: PartitionInfo) -> str:
    """``PARTITION BY ...`` and its definitions, as ``AppendPartitionInfo`` writes them."""
    head = part.clause_head()
    defs = part.definitions
    if part.type in (HASH, KEY):
        if all(d.name.lower() == f"p{i}" for i, d in enumerate(defs)):
            return f"{head} PARTITIONS {len(defs)}"
        return head + "\n(" + ",\n ".join(f"PARTITION {quote(d.name)}" for d in defs) + ")"
    lines = []
    for d in defs:
        if part.type == RANGE:
            lines.append(f"PARTITION {quote(d.name)} VALUES LESS THAN ({','.join(d.less_than)})")
        elif part.type == LIST:
            values = ",".join(v[0] if len(v) == 1 else "(" + ",".join(v) + ")" for v in d.in_values)
            lines.append(f"PARTITION {quote(d.name)} VALUES IN ({values})")
    return head + "\n(" + ",\n ".join(lines) + ")"


def create_table(info: TableInfo, *, auto_increment_column: str | None, next_auto_id: int) -> str:
    """``info``'s CREATE TABLE statement as TiDB shows it."""
    auto = (auto_increment_column or "").lower()
    lines = [column_line(c, c.name.lower() == auto) for c in info.columns]
    pk = info.primary_key
    if pk:
        kind = "CLUSTERED" if info.clustered else "NONCLUSTERED"
        lines.append(f"  PRIMARY KEY ({_columns(pk)}) /*T![clustered_index] {kind} */")
    for ix in sorted(info.indexes, key=lambda ix: ix.id):  # in the order they were made (TableInfo.Indices)
        if ix.primary:
            continue
        lines.append(f"  {'UNIQUE KEY' if ix.unique else 'KEY'} {quote(ix.name)} ({_columns(ix.columns)})")
    text = f"CREATE TABLE {quote(info.name)} (\n" + ",\n".join(lines) + f"\n) {_TABLE_OPTIONS}"
    if auto and next_auto_id > 1:
        text += f" AUTO_INCREMENT={next_auto_id}"
    if info.partition is not None:
        text += "\n" + partition_clause(info.partition)
    return text


def create_database(name: str) -> str:
    """A database's CREATE DATABASE statement as TiDB shows it."""
    return f"CREATE DATABASE {quote(name)} /*!40100 DEFAULT CHARACTER SET utf8mb4 */"
