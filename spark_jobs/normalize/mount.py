"""Mount: decode one table's bronze row events with its TableInfo, batch by batch in Spark's Python workers.

Bronze keeps the row values exactly as TiKV sent them (rowcodec v2, or the datum format of old clusters). The
events of a table are mapped with ``mapInArrow``: each Arrow batch of values is decoded at once by
:func:`cdc_core.codec.rowcodec_batch.decode_batch` (numpy over the batch's buffers, no Python call per row per
column) into typed columns, which become the ``_new`` / ``_old`` structs. Ids the schema does not have (dropped
columns) are skipped; ids a value lacks take the column's origin default. A value that does not decode, or does
not fit its Delta type, fails the job with the table, column, key and commit ts. A date Delta cannot hold is NULL in
the image, and ``_new_mapped`` names the columns of the new image mapped so (:mod:`spark_jobs.normalize.mapped_values`).

The handle comes from the row key (the 8 bytes at ``cdc_core.codec.key.HANDLE_OFFSET``, big-endian with the sign bit
flipped), decoded natively before the batches reach Python. For clustered tables it is the PK value and the key is
authoritative for it; otherwise it is ``_tidb_rowid``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from cdc_core.codec.key import HANDLE_OFFSET, ROW_KEY_LEN
from cdc_core.schema.model import ROWID_COLUMN, TableInfo
from spark_jobs.normalize import mapped_values

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

NEW = "_new"  # struct: the row image after the event (null for a delete)
OLD = "_old"  # struct: the row image before it (null when the key had no previous version)
HANDLE = "_handle"
_SIGN = "9223372036854775808"  # 2^63
_PASSED = ("table_id", "key", "op", "start_ts", "commit_ts")
EVENT_COLUMNS = (*_PASSED, "value", "old_value")  # the bronze columns decode_events reads


def handle_expr(key_col: str = "key") -> SparkColumn:
    """BIGINT handle decoded from a row key: unsigned(its 8 handle bytes) - 2^63, in exact decimal."""
    from pyspark.sql import functions as F

    handle = F.substring(F.col(key_col), HANDLE_OFFSET + 1, ROW_KEY_LEN - HANDLE_OFFSET)  # SQL counts from 1
    unsigned = F.conv(F.hex(handle), 16, 10).cast("DECIMAL(20,0)")
    return (unsigned - F.lit(_SIGN).cast("DECIMAL(20,0)")).cast("BIGINT")


def image_columns(table: TableInfo) -> list[tuple[str, str]]:
    """``(name, spark type)`` of a mounted row image: the table's columns, plus ``_tidb_rowid``
    when the Delta table carries it (it is the Delta key)."""
    cols = [(c.name, c.spark_type()) for c in table.columns]
    if ROWID_COLUMN in table.arrow_schema().names:
        cols.append((ROWID_COLUMN, "BIGINT"))
    return cols


def _image_type(table: TableInfo) -> pa.StructType:
    import pyarrow as pa

    return pa.struct(list(table.arrow_schema()))


def mounted_schema(table: TableInfo) -> pa.Schema:
    """The Arrow schema of :func:`mount`'s output."""
    import pyarrow as pa

    image = _image_type(table)
    return pa.schema([
        ("table_id", pa.int64()), ("key", pa.binary()), ("op", pa.string()), ("start_ts", pa.int64()),
        ("commit_ts", pa.int64()), (HANDLE, pa.int64()), (NEW, image), (OLD, image),
        (mapped_values.NEW_MAPPED, mapped_values.marker_type()),
    ])


def _image(table: TableInfo, batch: pa.RecordBatch, column: str, present: pa.Array
           ) -> tuple[pa.StructArray, pa.Array]:
    """The typed images of ``batch[column]`` where ``present`` (null elsewhere), keyed fields from the handle, and
    their mapped values' marker."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdc_core.codec.rowcodec_batch import ArrowColumn, RowDecodeError, decode_batch

    values = pc.if_else(present, batch.column(column), pa.scalar(None, pa.binary()))
    try:
        columns = [ArrowColumn(c.id, c.field_type(), c.to_stored(c.origin_default)) for c in table.columns]
        decoded = decode_batch(values, columns)
        arrays = decoded.arrays
    except RowDecodeError as exc:
        where = [f"table {table.qualified_name} (id {table.id})"]
        if exc.col_id is not None:
            names = {c.id: c.name for c in table.columns}
            where.append(f"column {names.get(exc.col_id, '?')!r} (id {exc.col_id})")
        if exc.row is not None:
            where.append(f"key {batch.column('key')[exc.row].as_py().hex()} at commit ts "
                         f"{batch.column('commit_ts')[exc.row].as_py()} ({column})")
        raise RowDecodeError(f"cannot decode a row value: {', '.join(where)}: {exc}", row=exc.row,
                             col_id=exc.col_id) from exc
    _check_keys_held(table, batch, column, decoded.mapped)
    image = _image_type(table)
    handle = batch.column(HANDLE)
    by_name = dict(zip([c.name for c in table.columns], arrays, strict=True))
    if table.handle_column is not None:
        # Clustered: the key is authoritative for the PK (the value may not even carry it).
        by_name[table.handle_column] = handle.cast(image.field(table.handle_column).type)
    if ROWID_COLUMN in image.names:
        by_name[ROWID_COLUMN] = handle
    children = [by_name[f.name] for f in image]
    marks = mapped_values.marker([c.id for c in table.columns], decoded.mapped, batch.num_rows)
    return pa.StructArray.from_arrays(children, fields=list(image), mask=pc.invert(present)), marks


def _check_keys_held(table: TableInfo, batch: pa.RecordBatch, column: str, mapped: list[Any]) -> None:
    """A value of the Delta key Delta cannot hold (a zero date in a DATE primary key, under a permissive sql_mode)
    would be NULL, and a NULL key merges with nothing: the row would be lost, or repeat. It stops the apply instead,
    naming the table, the column, the row's key and commit ts (the checkpoint stays; the row is fixed upstream, or
    the table filtered out)."""
    import numpy as np

    from cdc_core.codec.rowcodec_batch import RowDecodeError

    keys = set(table.delta_key())
    for c, m in zip(table.columns, mapped, strict=True):
        if m is None or c.name not in keys or c.name == table.handle_column:
            continue
        row = int(np.flatnonzero(m)[0])
        raise RowDecodeError(
            f"table {table.qualified_name} (id {table.id}): column {c.name!r} of its Delta key "
            f"{list(table.delta_key())} holds a value Delta cannot hold (a zero or invalid date), which would leave "
            f"the row without a key: key {batch.column('key')[row].as_py().hex()} at commit ts "
            f"{batch.column('commit_ts')[row].as_py()} ({column})", row=row, col_id=c.id)


def decode_batches(table_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: bronze events of one table (with ``_handle``) in, :func:`mounted_schema` batches out."""

    table = TableInfo.from_json(table_json)
    for batch in batches:
        yield decode_batch(table, batch)


def decode_batch(table: TableInfo, batch: pa.RecordBatch) -> pa.RecordBatch:
    """One batch of bronze events of ``table`` (with ``_handle``) as a :func:`mounted_schema` batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    is_put = pc.fill_null(pc.and_(pc.equal(batch.column("op"), "put"), pc.is_valid(batch.column("value"))), False)
    has_old = pc.is_valid(batch.column("old_value"))
    new, new_mapped = _image(table, batch, "value", is_put)
    old, _ = _image(table, batch, "old_value", has_old)
    passed = [batch.column(n) for n in (*_PASSED, HANDLE)]
    return pa.RecordBatch.from_arrays([*passed, new, old, new_mapped], schema=mounted_schema(table))


def decode_events(table: TableInfo, events: pa.RecordBatch) -> pa.RecordBatch:
    """:func:`decode_batch` of bronze events as read on the driver (``EVENT_COLUMNS``; the handle comes from the row
    keys, :func:`handle_array`). A value that does not decode is a
    ``ChangefeedError`` naming the table, column, key and commit ts: it fails every retry the same way."""
    import pyarrow as pa

    from cdc_core.codec.rowcodec_batch import RowDecodeError
    from cdc_core.errors import ChangefeedError

    batch = pa.RecordBatch.from_arrays(
        [events.column(n) for n in _PASSED] + [handle_array(events.column("key")), events.column("value"),
                                               events.column("old_value")],
        names=[*_PASSED, HANDLE, "value", "old_value"])
    try:
        return decode_batch(table, batch)
    except RowDecodeError as exc:
        raise ChangefeedError(str(exc)) from exc


def handle_array(keys: pa.Array) -> pa.Array:
    """:func:`handle_expr` in Arrow: the BIGINT handles of row keys (8 bytes, big-endian, sign bit flipped;
    ``tablecodec.EncodeRowKeyWithHandle`` in pingcap/tidb ``pkg/tablecodec/tablecodec.go``). Meaningful for int-handle
    and ``_tidb_rowid`` tables only: a common handle's key gives the bytes after ``_r`` read as one, or null when it
    is shorter (a DECIMAL(5,0) primary key's is 17 bytes), as does any key too short to hold one."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = pc.binary_slice(keys, HANDLE_OFFSET, ROW_KEY_LEN)
    whole = pc.fill_null(pc.equal(pc.binary_length(raw), 8), False)
    fixed = pc.if_else(whole, raw, pa.scalar(bytes(8), pa.binary())).cast(pa.binary(8))
    unsigned = np.frombuffer(fixed.buffers()[1], dtype=">u8", count=len(fixed), offset=fixed.offset * 8)
    signed = (unsigned.astype(np.uint64) ^ np.uint64(1 << 63)).view(np.int64)
    return pa.array(signed, type=pa.int64(), mask=~whole.to_numpy(zero_copy_only=False))


_DECODE_ERROR = "RowDecodeError: "


def decode_failure(exc: BaseException) -> str | None:
    """The row-decoding message inside a failed Spark action (raised in a Python worker, it reaches the driver as
    text), or None when ``exc`` is another failure. A value that does not decode fails every retry the same way,
    so the caller turns it into a ``ChangefeedError`` (the changefeed stops in error) rather than a retryable
    failure."""
    text = str(exc)
    at = text.find(_DECODE_ERROR)
    if at < 0:
        return None
    return text[at + len(_DECODE_ERROR):].splitlines()[0].strip()


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
    """Decode bronze events of ``table`` (events of other tables, by physical id, are filtered out).

    Output columns: ``table_id, key, op, start_ts, commit_ts, _handle, _new, _old, _new_mapped``, where
    ``_new``/``_old`` are structs of :func:`image_columns` and ``_new_mapped`` the new image's mapped values
    (:mod:`spark_jobs.normalize.mapped_values`).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    # A partitioned table's rows come under its partitions' ids: all of them are this one table's.
    ids = table.physical_ids
    which = F.col("table_id") == F.lit(ids[0]) if len(ids) == 1 else F.col("table_id").isin(*ids)
    rows = events.where(which).select(
        *_PASSED, handle_expr("key").alias(HANDLE), "value", "old_value")
    return rows.mapInArrow(functools.partial(decode_batches, table.to_json()), from_arrow_schema(mounted_schema(table)))
