"""``information_schema`` as the MySQL front answers it, with TiDB's own columns.

mysql-mimic executes ``information_schema`` queries (and the SHOW statements it rewrites into them) with sqlglot
over tables built from a schema; this module builds them from the SQL-front session's tables, at its
``tidb_snapshot`` when one is set, as TiDB does. ``SCHEMATA`` lists every database, one without tables too (as
TiDB; mysql-mimic would list the databases of the columns only). TiDB's additions that cdcflow and TiCDC's users
rely on: ``TABLES.TIDB_TABLE_ID`` (the table's physical id, the one in its row keys) and ``TIDB_PK_TYPE`` (CLUSTERED
or NONCLUSTERED), and ``PARTITIONS`` with ``TIDB_PARTITION_ID`` (each partition's physical id). TiDB's engine
is reported as InnoDB and tables' collation as utf8mb4_bin, as TiDB reports them (``pkg/infoschema/tables.go``).

Cost: the tables are built per query, O(columns of every table the session sees).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from mysql_mimic.constants import INFO_SCHEMA
from mysql_mimic.results import AllowedResult
from mysql_mimic.schema import BaseInfoSchema, Column, info_schema_tables
from sqlglot import expressions as exp
from sqlglot.executor import Table, execute

from cdc_core.schema.model import TableInfo

SCHEMA: dict[str, dict[str, dict[str, str]]] = copy.deepcopy(INFO_SCHEMA)
SCHEMA["information_schema"]["tables"].update({"tidb_table_id": "BIGINT", "tidb_pk_type": "TEXT"})
SCHEMA["information_schema"]["partitions"] = {
    "table_catalog": "TEXT", "table_schema": "TEXT", "table_name": "TEXT", "partition_name": "TEXT",
    "partition_ordinal_position": "INT", "partition_method": "TEXT", "partition_expression": "TEXT",
    "partition_description": "TEXT", "table_rows": "INT", "tidb_partition_id": "BIGINT",
}  # fmt: skip
TABLES_COLUMNS: tuple[str, ...] = tuple(SCHEMA["information_schema"]["tables"])


def tables_row(info: TableInfo) -> tuple[Any, ...]:
    """A table's ``information_schema.TABLES`` row: mysql-mimic's columns, then TiDB's ``TIDB_TABLE_ID`` and
    ``TIDB_PK_TYPE``; engine and collation as TiDB reports them."""
    return ("def", info.db_name, info.name, "BASE TABLE", "InnoDB", "1.0", *(None,) * 11, "utf8mb4_bin",
            None, None, None, info.id, "CLUSTERED" if info.clustered else "NONCLUSTERED")


def system_tables_rows() -> list[tuple[Any, ...]]:
    """The ``TABLES`` rows of mysql-mimic's own ``information_schema`` and ``mysql`` tables."""
    return [("def", db, name, "SYSTEM TABLE", "MinervaSQL", "1.0", *(None,) * 11, "utf8mb4_general_ci", None, None,
             None, None, None) for db, tables in sorted(INFO_SCHEMA.items()) for name in sorted(tables)]


def partitions_rows(info: TableInfo) -> list[tuple[Any, ...]]:
    """A partitioned table's ``information_schema.PARTITIONS`` rows, with TiDB's ``TIDB_PARTITION_ID``."""
    part = info.partition
    if part is None:
        return []
    return [("def", info.db_name, info.name, d.name, i, part.method_name, part.expression, part.description(d), None,
             d.id) for i, d in enumerate(part.definitions, 1)]


class TidbInfoSchema(BaseInfoSchema):
    """The ``information_schema`` of a list of tables."""

    def __init__(self, tables: Sequence[TableInfo], databases: Sequence[str] = ()) -> None:
        columns = [
            Column(name=c.name, type=c.sql_type, table=t.name, schema=t.db_name, is_nullable=c.nullable,
                   default=None if c.default is None else str(c.to_json_value(c.default)))
            for t in tables for c in t.columns
        ]
        data: dict[str, dict[str, Any]] = info_schema_tables(columns)
        data["information_schema"]["tables"] = Table(TABLES_COLUMNS, [*map(tables_row, tables), *system_tables_rows()])
        # Every database, those without a table too: mysql-mimic's ``info_schema_tables`` lists the databases of the
        # columns it is given, so an empty one (``CREATE DATABASE x`` alone) would be missing from SHOW DATABASES.
        names = {db.lower(): db for db in [*INFO_SCHEMA, *databases, *(t.db_name for t in tables)]}
        data["information_schema"]["schemata"] = Table(
            tuple(SCHEMA["information_schema"]["schemata"]),
            [("def", name, "utf8mb4", "utf8mb4_bin", None) for _, name in sorted(names.items())])
        data["information_schema"]["partitions"] = Table(tuple(SCHEMA["information_schema"]["partitions"]),
                                                         [r for t in tables for r in partitions_rows(t)])
        self.tables = data

    async def query(self, expression: exp.Expression) -> AllowedResult:
        expression = expression.transform(_remove_collate)
        result = execute(expression, schema=SCHEMA, tables=self.tables)
        return result.rows, result.columns


def _remove_collate(node: exp.Expression) -> exp.Expression:
    # sqlglot's executor has no collations (mysql-mimic strips them the same way).
    return node.left if isinstance(node, exp.Collate) else node  # type: ignore[return-value]
