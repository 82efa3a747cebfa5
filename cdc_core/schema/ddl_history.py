"""The DDL history system table ``mysql.tidb_ddl_history``: one row per finished DDL job.

Both sides use this definition: the upstream writes a row in the same transaction as the DDL's
schema change (so the row's commit ts is the DDL's commit ts), and the changefeed pulls the table's
span like any other and decodes the rows with ``TABLE_INFO``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cdc_core.codec.row import decode_row, encode_row
from cdc_core.schema.model import Column, Index, TableInfo

DB_NAME = "mysql"
TABLE_NAME = "tidb_ddl_history"
TABLE_ID = 5
SYSTEM_DB_ID = 1
# User databases and tables get ids from here on (TiDB reserves the low ids for system objects).
FIRST_USER_ID = 100

TABLE_INFO = TableInfo(
    id=TABLE_ID,
    db_name=DB_NAME,
    name=TABLE_NAME,
    db_id=SYSTEM_DB_ID,
    pk_is_handle=True,
    columns=(
        Column(1, "job_id", "bigint", nullable=False),
        Column(2, "job_type", "varchar", length=64, nullable=False),
        Column(3, "schema_id", "bigint"),
        Column(4, "table_id", "bigint"),
        Column(5, "schema_name", "varchar", length=256),
        Column(6, "table_name", "varchar", length=256),
        Column(7, "query", "text"),
        Column(8, "schema_version", "bigint"),
        Column(9, "table_info", "text"),
        Column(10, "finished_ts", "bigint"),
        # For RENAME TABLE / TRUNCATE: the table id before the job (TRUNCATE gives a new id).
        Column(11, "old_table_id", "bigint"),
        Column(12, "old_schema_name", "varchar", length=256),
        Column(13, "old_table_name", "varchar", length=256),
    ),
    indexes=(Index("PRIMARY", ("job_id",), unique=True, primary=True),),
    max_column_id=13,
)

JOB_TYPES = (
    "create schema",
    "drop schema",
    "create table",
    "drop table",
    "truncate table",
    "rename table",
    "add column",
    "drop column",
    "rename column",
    "modify column",
    "add index",
    "drop index",
)


@dataclass(frozen=True)
class DDLJob:
    job_id: int
    job_type: str
    schema_id: int | None
    table_id: int | None
    schema_name: str | None
    table_name: str | None
    query: str
    schema_version: int
    table_info: TableInfo | None  # the table after the job (None for drops and schema jobs)
    finished_ts: int  # the commit ts of the job
    old_table_id: int | None = None
    old_schema_name: str | None = None
    old_table_name: str | None = None

    def to_row(self) -> dict[str, Any]:
        """``{column name: value}`` for the history table."""
        return {
            "job_id": self.job_id,
            "job_type": self.job_type,
            "schema_id": self.schema_id,
            "table_id": self.table_id,
            "schema_name": self.schema_name,
            "table_name": self.table_name,
            "query": self.query,
            "schema_version": self.schema_version,
            "table_info": self.table_info.to_json() if self.table_info else None,
            "finished_ts": self.finished_ts,
            "old_table_id": self.old_table_id,
            "old_schema_name": self.old_schema_name,
            "old_table_name": self.old_table_name,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DDLJob:
        ti = row.get("table_info")
        return cls(
            job_id=int(row["job_id"]),
            job_type=str(row["job_type"]),
            schema_id=_opt_int(row.get("schema_id")),
            table_id=_opt_int(row.get("table_id")),
            schema_name=row.get("schema_name"),
            table_name=row.get("table_name"),
            query=str(row.get("query") or ""),
            schema_version=int(row.get("schema_version") or 0),
            table_info=TableInfo.from_json(ti) if ti else None,
            finished_ts=int(row["finished_ts"]),
            old_table_id=_opt_int(row.get("old_table_id")),
            old_schema_name=row.get("old_schema_name"),
            old_table_name=row.get("old_table_name"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_row(), sort_keys=True)

    def to_value(self) -> bytes:
        """The job's history-table row value (rowcodec v2 under ``TABLE_INFO``)."""
        row = self.to_row()
        return encode_row(TABLE_INFO, {c.id: c.convert(row[c.name]) for c in TABLE_INFO.columns})

    @classmethod
    def from_value(cls, value: bytes) -> DDLJob:
        """A job from its history-table row value."""
        return cls.from_row(TABLE_INFO.decode_values(decode_row(TABLE_INFO, value)))


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)
