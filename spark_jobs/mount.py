"""Mount: decode one table's bronze row events with its TableInfo, natively in Spark.

Row values are JSON objects keyed by column id (``cdc_core.codec.row``). Each value is parsed
once with ``from_json`` into ``map<string,string>`` -- a map rather than a struct because an
absent id ("not set": take the column default) must be told apart from a JSON null (NULL), and a
struct yields null for both. Every JSON scalar lands in the map as its text, which is then cast to
the column's Spark type (ANSI casts: a value that does not fit fails the job instead of becoming
NULL). Ids the schema does not have (dropped columns) are never looked at.

The handle comes from the row key: bytes 12..19 (1-based) are the 8-byte big-endian handle with
the sign bit flipped. For clustered tables it is the PK value; otherwise it is ``_tidb_rowid``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_core.schema.model import ROWID_COLUMN, Column, TableInfo

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

NEW = "_new"  # struct: the row image after the event (null for a delete)
OLD = "_old"  # struct: the row image before it (null when the key had no previous version)
HANDLE = "_handle"
_SIGN = "9223372036854775808"  # 2^63


def handle_expr(key_col: str = "key") -> SparkColumn:
    """BIGINT handle decoded from a row key: unsigned(bytes 12..19) - 2^63, in exact decimal."""
    from pyspark.sql import functions as F

    unsigned = F.conv(F.hex(F.substring(F.col(key_col), 12, 8)), 16, 10).cast("DECIMAL(20,0)")
    return (unsigned - F.lit(_SIGN).cast("DECIMAL(20,0)")).cast("BIGINT")


def image_columns(table: TableInfo) -> list[tuple[str, str]]:
    """``(name, spark type)`` of a mounted row image: the table's columns, plus ``_tidb_rowid``
    when the Delta table carries it (it is the Delta key)."""
    cols = [(c.name, c.spark_type()) for c in table.columns]
    if ROWID_COLUMN in table.arrow_schema().names:
        cols.append((ROWID_COLUMN, "BIGINT"))
    return cols


def _default_lit(c: Column) -> SparkColumn:
    from pyspark.sql import functions as F

    if c.origin_default is None:
        return F.lit(None).cast(c.spark_type())
    return F.lit(str(c.to_json_value(c.origin_default))).cast(c.spark_type())


def _image(map_col: str, table: TableInfo) -> SparkColumn:
    """A typed struct of the table's columns from a parsed ``map<string,string>`` (null map → null)."""
    from pyspark.sql import functions as F

    m = F.col(map_col)
    handle = F.col(HANDLE)
    fields: list[SparkColumn] = []
    pk_handle = table.handle_column
    for c in table.columns:
        if pk_handle is not None and c.name == pk_handle:
            # Clustered: the key is authoritative for the PK (the value may not even carry it).
            v = handle.cast(c.spark_type())
        else:
            cid = F.lit(str(c.id))
            v = F.when(F.map_contains_key(m, cid), m[cid].cast(c.spark_type())).otherwise(_default_lit(c))
        fields.append(v.alias(c.name))
    if ROWID_COLUMN in table.arrow_schema().names:
        fields.append(handle.alias(ROWID_COLUMN))
    return F.when(m.isNull(), F.lit(None)).otherwise(F.struct(*fields))


def key_only_image(table: TableInfo) -> SparkColumn | None:
    """The image of a row known only by its key (a delete without an old value), or None when the
    key does not determine the Delta key (a non-clustered table keyed by PK/UK)."""
    from pyspark.sql import functions as F

    if table.handle_column is None and ROWID_COLUMN not in table.arrow_schema().names:
        return None
    pk_handle = table.handle_column
    fields = []
    for name, stype in image_columns(table):
        if name in (pk_handle, ROWID_COLUMN):
            fields.append(F.col(HANDLE).cast(stype).alias(name))
        else:
            fields.append(F.lit(None).cast(stype).alias(name))
    return F.struct(*fields)


def mount(events: DataFrame, table: TableInfo) -> DataFrame:
    """Decode bronze events of ``table`` (other table ids are filtered out).

    Output columns: ``table_id, key, op, start_ts, commit_ts, _handle, _new, _old``, where
    ``_new``/``_old`` are structs of :func:`image_columns`.
    """
    from pyspark.sql import functions as F

    mtype = "map<string,string>"
    opts = {"mode": "FAILFAST"}
    return (
        events.where(F.col("table_id") == F.lit(table.id))
        .withColumn(HANDLE, handle_expr("key"))
        .withColumn(
            "_vm",
            F.when(
                (F.col("op") == "put") & F.col("value").isNotNull(),
                F.from_json(F.col("value").cast("string"), mtype, opts),
            ),
        )
        .withColumn("_om", F.from_json(F.col("old_value").cast("string"), mtype, opts))
        .withColumn(NEW, _image("_vm", table))
        .withColumn(OLD, _image("_om", table))
        .select("table_id", "key", "op", "start_ts", "commit_ts", HANDLE, NEW, OLD)
    )
