"""Reading a silver table's live rows on the driver, with or without deletion vectors.

delta-rs's pyarrow readers (``to_pyarrow_table`` / ``to_pyarrow_dataset``) refuse a table whose protocol has
deletion vectors; its DataFusion scan (``DeltaTable.scan``) applies them. The checks' point reads go through
neither: they read the key columns of the files a window wrote, then only the rows at the window's keys that no
deletion vector removed (:func:`rows_at_keys`), so that what a check reads is bounded by the window, not the table.
Rows read so go to Spark through :func:`spark_frame`, which drops the empty record batches Spark would lose rows at.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from spark_jobs.load import deletion_vector, delta_log
from spark_jobs.load.file_pruning import may_hold

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession


def has_deletion_vectors(dt: DeltaTable) -> bool:
    """Whether the table's protocol has deletion vectors (whatever its property says now: older files may have
    them)."""
    return "deletionVectors" in (dt.protocol().reader_features or [])


def table_dir(dt: DeltaTable) -> str:
    uri = dt.table_uri
    return unquote(uri[len("file://"):]) if uri.startswith("file://") else uri


def log_row_count(dt: DeltaTable) -> int | None:
    """Rows of a Delta table version from its log (``numRecords`` of the live files less the rows their deletion
    vectors remove; no data read); None when a file lacks ``numRecords``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not has_deletion_vectors(dt):
        counts = pa.table(dt.get_add_actions(flatten=True)).column("num_records")
        return int(pc.sum(counts).as_py() or 0) if counts.null_count == 0 else None
    rows = 0
    for add in delta_log.live_adds(table_dir(dt), dt.version()).values():
        stats = json.loads(add["stats"]) if add.get("stats") else {}
        if stats.get("numRecords") is None:
            return None
        rows += int(stats["numRecords"]) - int((add.get("deletionVector") or {}).get("cardinality", 0))
    return rows


def scan(dt: DeltaTable, columns: Sequence[str] | None = None, batch_size: int = 65_536) -> pa.RecordBatchReader:
    """The table's live rows, batch by batch (``columns`` only, when given; batches of ``batch_size`` rows at most
    without deletion vectors, DataFusion's own batches with them)."""
    import pyarrow as pa

    if has_deletion_vectors(dt):
        return pa.RecordBatchReader.from_stream(dt.scan(columns=list(columns) if columns is not None else None))
    ds = dt.to_pyarrow_dataset()
    return ds.scanner(columns=list(columns) if columns is not None else None, batch_size=batch_size).to_reader()


def read_table(dt: DeltaTable, columns: Sequence[str] | None = None) -> pa.Table:
    return scan(dt, columns).read_all()


def spark_frame(spark: SparkSession, data: pa.Table, schema: str | None = None) -> DataFrame:
    """``spark.createDataFrame`` of an Arrow table without its empty record batches.

    PySpark 4.2 sends a ``pa.Table`` to the JVM as its record batches, one per partition
    (``pyspark/sql/pandas/conversion.py``, ``_create_from_arrow_table``), and the rows of the batches after an empty
    one do not arrive (batches of 1, 0 and 1 rows make a frame of 1 row). delta-rs's DataFusion scan of a table with
    deletion vectors (:func:`scan`) yields an empty batch for a file whose vector removes all its rows, so without
    this a check compared the upstream with a frame lacking the rows of the files read after such a file."""
    import pyarrow as pa

    batches = [b for b in data.to_batches() if b.num_rows]
    kept = pa.Table.from_batches(batches, schema=data.schema) if batches else data.schema.empty_table()
    return spark.createDataFrame(kept, schema=schema) if schema is not None else spark.createDataFrame(kept)


def written_files(dt: DeltaTable, before: int | None) -> list[dict[str, Any]]:
    """The ``add`` actions live now that were not at version ``before`` (all of them when None): the files a
    window wrote, and the files it gave a new deletion vector."""
    path = table_dir(dt)
    old = delta_log.live_adds(path, before) if before is not None else {}
    return [a for k, a in delta_log.live_adds(path, dt.version()).items() if k not in old]


def conform(data: Any, schema: pa.Schema) -> Any:
    """A ``pa.Table`` or ``pa.RecordBatch`` with ``schema``'s columns in order and types: a column the data lacks
    (added since it was written) as NULLs, others cast where the type moved."""
    import pyarrow as pa

    cols = []
    for f in schema:
        c = data.column(f.name) if f.name in data.schema.names else pa.nulls(data.num_rows, f.type)
        cols.append(c if c.type == f.type else c.cast(f.type, safe=True))
    return type(data).from_arrays(cols, schema=schema)


def live_matches(path: str, add: dict[str, Any], keys: pa.Table, key: Sequence[str]) -> tuple[pa.Table, Any] | None:
    """The live rows of the file ``add`` at ``keys`` (the key columns ``key``, with any other columns of ``keys``
    carried along): ``keys`` joined with the file's key columns and each row's position (``_pos``), the positions
    its deletion vector already removes left out; and that vector (a ``BitMap64``, empty without one). None when no
    live row of the file is at a key, or the file predates a key column (its rows hold NULL there)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyroaring import BitMap64

    pf = pq.ParquetFile(os.path.join(path, unquote(add["path"])))
    if any(k not in pf.schema_arrow.names for k in key):
        return None
    data = pf.read(columns=list(key))
    data = data.append_column("_pos", pa.array(np.arange(data.num_rows, dtype=np.int64)))
    typed = pa.schema([data.schema.field(f.name) if f.name in key else f for f in keys.schema])
    hit = data.join(keys.cast(typed), keys=list(key), join_type="inner")
    if not hit.num_rows:
        return None
    old = deletion_vector.read(path, deletion_vector.Descriptor.from_json(add["deletionVector"])) \
        if add.get("deletionVector") else BitMap64()
    if len(old):
        # only the hits are looked up in the vector, however many rows it already removes
        gone = deletion_vector.positions(BitMap64(hit.column("_pos").to_numpy().tolist()) & old)
        if len(gone):
            hit = hit.filter(pa.array(~np.isin(hit.column("_pos").to_numpy(), gone)))
            if not hit.num_rows:
                return None
    return hit, old


def rows_at_keys(path: str, adds: Sequence[dict[str, Any]], keys: pa.Table, names: Sequence[str]
                 ) -> Iterator[pa.Table]:
    """The live rows (``names``) of the files ``adds`` at ``keys`` (a table of key columns), a file at a time: the
    key columns are read first, then only the row groups holding a live row at a key; a file whose statistics admit
    no key is not opened (:func:`spark_jobs.load.file_pruning.may_hold`)."""
    import numpy as np

    for add in adds:
        if not may_hold(add, keys, keys.column_names[0]):
            continue
        found = live_matches(path, add, keys, keys.column_names)
        if found is None:
            continue
        yield rows_at_positions(path, add, np.sort(found[0].column("_pos").to_numpy()), names)


def rows_at_positions(path: str, add: dict[str, Any], positions: Any, names: Sequence[str]) -> pa.Table:
    """The rows (``names`` the file has) of the file ``add`` at the sorted row ``positions`` (a numpy array), in
    that order: only the row groups holding one are read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(os.path.join(path, unquote(add["path"])))
    sizes = np.array([pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    group_of = np.searchsorted(starts, positions, side="right") - 1
    groups = np.unique(group_of)
    # where each group read starts in what read_row_groups returns (the groups back to back, in order)
    read_at = np.zeros(len(sizes), dtype=np.int64)
    read_at[groups] = np.concatenate([[0], np.cumsum(sizes[groups])[:-1]])
    rows = pf.read_row_groups(groups.tolist(), columns=[n for n in names if n in pf.schema_arrow.names])
    # delta-rs (arrow-rs) writes the Arrow schema of its string columns as string_view into the file, which pyarrow
    # 26 reads back as such and has no take kernel for: the plain types, the same values.
    plain = pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type) else
                       f.with_type(pa.binary()) if pa.types.is_binary_view(f.type) else f for f in rows.schema])
    if plain != rows.schema:
        rows = rows.cast(plain)
    return rows.take(pa.array(read_at[group_of] + positions - starts[group_of]))
