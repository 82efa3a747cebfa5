"""Values the lake holds as NULL because Delta cannot hold them, marked where they are read and counted per column.

A date Delta's DATE/TIMESTAMP has no value for (a zero date, a zero month or day, year 0, an invalid day: what TiDB
stores under a permissive ``sql_mode``; ``cdc_core.schema.column_type.maps_to_null``) becomes NULL in the silver
table. So that no such value goes silently, each row that had one carries a marker, a ``list<int32>`` of the ids of
its mapped columns (NULL when none):

- mounted events carry :data:`NEW_MAPPED` for their new image (``rowcodec_batch.decode_batch`` says which values it
  mapped), the change set :data:`MAPPED_COL` for the row it writes (an upsert's; a delete writes none);
- a snapshot base carries :data:`MAPPED_COL` per row read (the upstream's values over SQL).

The writers take only the table's columns, so a marker never reaches Delta. A window's ``apply_window`` result and a
snapshot load's result carry the counts (:func:`count_arrow`, :func:`count_spark`: ``{column name: values}``), and
``cdc_core.changefeed.tasks`` records them in the data-quality results (``dq_results.mapped_reports``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cdc_core.errors import ChangefeedError
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import TableInfo

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import DataFrame

NEW_MAPPED = "_new_mapped"  # mounted events: the new image's mapped column ids
MAPPED_COL = "_cdc_mapped"  # a change set's or a snapshot base's rows: the row's mapped column ids


def marker_type() -> pa.DataType:
    import pyarrow as pa

    return pa.list_(pa.field("element", pa.int32()))


def can_map(table: TableInfo) -> bool:
    """Whether any column of ``table`` can hold a value the lake maps to NULL (a DATE, DATETIME or TIMESTAMP)."""
    return any(c.kind in (ct.DATE, ct.DATETIME, ct.TIMESTAMP) for c in table.columns)


def marker(ids: Sequence[int], masks: Sequence[np.ndarray | None], n: int) -> pa.Array:
    """The marker of ``n`` rows: per row, the ids of ``ids`` whose mask (one per id; None: no row) holds it, NULL
    for a row with none. O(rows x marked columns) in numpy."""
    import numpy as np
    import pyarrow as pa

    marked = [(i, m) for i, m in zip(ids, masks, strict=True) if m is not None]
    if not marked:
        return pa.nulls(n, marker_type())
    grid = np.stack([m for _, m in marked], axis=1)  # rows x marked columns
    counts = grid.sum(axis=1)
    values = np.broadcast_to(np.array([i for i, _ in marked], np.int32), grid.shape)[grid]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, pa.int32()), type=marker_type(),
                                    mask=pa.array(counts == 0))


def row_marker(table: TableInfo, row: Sequence[Any]) -> list[int] | None:
    """The marker of one row of Python values in column order (a snapshot's), before :func:`arrow_value` maps them.
    A value of the Delta key that would be mapped is a ``ChangefeedError`` (a row without a key: see
    ``spark_jobs.normalize.mount``)."""
    mapped = [c for c, v in zip(table.columns, row, strict=False) if v is not None and ct.maps_to_null(c, v)]
    keys = table.delta_key()
    for c in mapped:
        if c.name in keys:
            at = {c.name.lower(): i for i, c in enumerate(table.columns)}
            key = {k: row[at[k.lower()]] for k in keys if k.lower() in at and at[k.lower()] < len(row)}
            raise ChangefeedError(
                f"table {table.qualified_name}: column {c.name!r} of its Delta key {list(keys)} holds a value "
                f"Delta cannot hold ({row[table.columns.index(c)]!r}: a zero or invalid date), which would leave "
                f"the row without a key: the row with key {key}")
    return [c.id for c in mapped] or None


def _names(table: TableInfo, counts: dict[int, int]) -> dict[str, int]:
    by_id = table.column_by_id()
    return {by_id[i].name if i in by_id else f"column id {i}": n for i, n in sorted(counts.items()) if n}


def count_arrow(marks: pa.Array | pa.ChunkedArray | None, table: TableInfo) -> dict[str, int]:
    """``{column name: values mapped}`` of a marker column (None: no marker, nothing mapped)."""
    import pyarrow.compute as pc

    if marks is None or marks.null_count == len(marks):
        return {}
    flat = pc.list_flatten(marks)
    counts = pc.value_counts(flat)
    return _names(table, {int(v["values"]): int(v["counts"]) for v in counts.to_pylist()})


def count_spark(df: DataFrame, table: TableInfo) -> dict[str, int]:
    """:func:`count_arrow` of a DataFrame's :data:`MAPPED_COL`, aggregated in Spark (one small result per column)."""
    from pyspark.sql import functions as F

    rows = (df.where(F.col(MAPPED_COL).isNotNull()).select(F.explode(MAPPED_COL).alias("id"))
            .groupBy("id").count().collect())
    return _names(table, {int(r["id"]): int(r["count"]) for r in rows})


def add_counts(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """``total`` with ``more`` added (in place; returned)."""
    for name, n in more.items():
        total[name] = total.get(name, 0) + int(n)
    return total


__all__ = ["MAPPED_COL", "NEW_MAPPED", "add_counts", "can_map", "count_arrow", "count_spark", "marker", "marker_type",
           "row_marker"]
