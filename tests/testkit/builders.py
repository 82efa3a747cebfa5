"""Builders of the spark_jobs tests: table infos and a bronze event builder (imported by tests)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from cdc_core.codec.key import row_key
from cdc_core.codec.rowcodec import encode_row_v2
from cdc_core.schema.column_type import STORED_DATES
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.normalize.bronze import BRONZE_SCHEMA


def encode(table: TableInfo, value: dict[int, Any]) -> bytes:
    """A rowcodec v2 value of ``{column id: value}`` (values as SQL literals or typed, any TiDB stores: a zero date
    too; ids the table does not have are encoded as VARCHAR, like a value written before its column was dropped)."""
    cols = table.column_by_id()
    items = []
    for cid, v in value.items():
        col = cols.get(cid)
        if col is None:
            items.append((cid, Column(cid, "x", "varchar", length=255).field_type(), None if v is None else str(v)))
        else:
            items.append((cid, col.field_type(), col.to_stored(col.convert(v, STORED_DATES))))
    return encode_row_v2(items)


class Bronze:
    """Builds a bronze Arrow table from row events (values ``{column id: value}``)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def put(
        self,
        table: TableInfo,
        handle: int,
        commit_ts: int,
        value: dict[int, Any],
        old: dict[int, Any] | None = None,
        *,
        region: int = 1,
    ) -> Bronze:
        self.rows.append(
            {
                "region_id": region, "table_id": table.id, "key": row_key(table.id, handle), "op": "put",
                "start_ts": commit_ts - 1, "commit_ts": commit_ts, "value": encode(table, value),
                "old_value": None if old is None else encode(table, old),
            }
        )  # fmt: skip
        return self

    def delete(
        self, table: TableInfo, handle: int, commit_ts: int, old: dict[int, Any] | None, *, region: int = 1
    ) -> Bronze:
        self.rows.append(
            {
                "region_id": region, "table_id": table.id, "key": row_key(table.id, handle), "op": "delete",
                "start_ts": commit_ts - 1, "commit_ts": commit_ts, "value": None,
                "old_value": None if old is None else encode(table, old),
            }
        )  # fmt: skip
        return self

    def arrow(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=BRONZE_SCHEMA)


def clustered_table(table_id: int = 101, name: str = "c") -> TableInfo:
    """``CREATE TABLE c (a INT PRIMARY KEY CLUSTERED, b INT)``."""
    return TableInfo(
        id=table_id, db_name="test", name=name,
        columns=(Column(1, "a", "int", nullable=False), Column(2, "b", "int")),
        indexes=(Index("PRIMARY", ("a",), unique=True, primary=True),), pk_is_handle=True,
    )  # fmt: skip


def nonclustered_table(table_id: int = 102, name: str = "nc") -> TableInfo:
    """``CREATE TABLE nc (a INT PRIMARY KEY NONCLUSTERED, u VARCHAR(10) NOT NULL UNIQUE, b INT)``."""
    return TableInfo(
        id=table_id, db_name="test", name=name,
        columns=(Column(1, "a", "int", nullable=False), Column(2, "u", "varchar", nullable=False, length=10),
                 Column(3, "b", "int")),
        indexes=(Index("PRIMARY", ("a",), unique=True, primary=True), Index("uk_u", ("u",), unique=True)),
    )  # fmt: skip


def rowid_table(table_id: int = 103, name: str = "r") -> TableInfo:
    """``CREATE TABLE r (a INT, b VARCHAR(10))``: no key, the Delta key is ``_tidb_rowid``."""
    return TableInfo(
        id=table_id, db_name="test", name=name,
        columns=(Column(1, "a", "int"), Column(2, "b", "varchar", length=10)),
    )  # fmt: skip


def typed_table(table_id: int = 104, name: str = "typed") -> TableInfo:
    """Every supported type, a column with a default, clustered BIGINT PK."""
    from datetime import datetime
    from decimal import Decimal

    return TableInfo(
        id=table_id, db_name="test", name=name,
        columns=(
            Column(1, "id", "bigint", nullable=False),
            Column(2, "i", "int"),
            Column(3, "bi", "bigint"),
            Column(4, "s", "varchar", length=20),
            Column(5, "d", "decimal", precision=12, scale=3),
            Column(6, "dt", "datetime", fsp=6),
            Column(7, "tx", "text"),
            Column(9, "def_i", "int", default=7),
            Column(10, "def_d", "decimal", precision=6, scale=2, default=Decimal("1.50")),
            Column(11, "def_dt", "datetime", default=datetime(2020, 1, 1, 0, 0, 0)),
            Column(12, "def_s", "varchar", length=5, default="dflt"),
        ),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True,
    )  # fmt: skip
