"""Reading a silver table's live rows on the driver, with or without deletion vectors.

delta-rs's pyarrow readers (``to_pyarrow_table`` / ``to_pyarrow_dataset``) refuse a table whose protocol has
deletion vectors; its DataFusion scan (``DeltaTable.scan``) applies them. The checks' point reads go through
neither: they read the key columns of the files a window wrote, then only the rows at the window's keys that no
deletion vector removed (:func:`rows_at_keys`), so that what a check reads is bounded by the window, not the table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from spark_jobs import deletion_vector, delta_log

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable


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


def written_files(dt: DeltaTable, before: int | None) -> list[dict[str, Any]]:
    """The ``add`` actions live now that were not at version ``before`` (all of them when None): the files a
    window wrote, and the files it gave a new deletion vector."""
    path = table_dir(dt)
    old = delta_log.live_adds(path, before) if before is not None else {}
    return [a for k, a in delta_log.live_adds(path, dt.version()).items() if k not in old]


def rows_at_keys(path: str, adds: Sequence[dict[str, Any]], keys: pa.Table, names: Sequence[str]
                 ) -> Iterator[pa.Table]:
    """The live rows (``names``) of the files ``adds`` at ``keys`` (a table of key columns), a file at a time: the
    key columns are read first, then only the row groups holding a live row at a key."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    key = list(keys.column_names)
    for add in adds:
        file = os.path.join(path, unquote(add["path"]))
        pf = pq.ParquetFile(file)
        present = [k for k in key if k in pf.schema_arrow.names]
        if len(present) < len(key):
            continue  # a file from before the key column existed holds no row at a key
        data = pf.read(columns=key)
        data = data.append_column("_pos", pa.array(np.arange(data.num_rows, dtype=np.int64)))
        data = data.join(keys.cast(pa.schema([data.schema.field(k) for k in key])), keys=key,
                         join_type="left semi")
        if not data.num_rows:
            continue
        positions = np.sort(data.column("_pos").to_numpy())
        if add.get("deletionVector"):
            deleted = deletion_vector.read(path, deletion_vector.Descriptor.from_json(add["deletionVector"]))
            positions = positions[~np.isin(positions, np.fromiter(deleted, dtype=np.int64, count=len(deleted)))]
            if not len(positions):
                continue
        sizes = np.array([pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        groups = sorted(set(np.searchsorted(starts, positions, side="right") - 1))
        cols = [n for n in names if n in pf.schema_arrow.names]
        rows = pf.read_row_groups(groups, columns=cols)
        first = {g: int(sum(sizes[h] for h in groups[:i])) for i, g in enumerate(groups)}
        group_of = np.searchsorted(starts, positions, side="right") - 1
        local = np.array([first[int(g)] + int(p - starts[g]) for p, g in zip(positions, group_of, strict=True)],
                         dtype=np.int64)
        yield rows.take(pa.array(local))
