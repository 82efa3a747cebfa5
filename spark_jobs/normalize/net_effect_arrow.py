"""Mount, dedupe, update split, order and net effect of one table's window events in Arrow, on the driver.

What :mod:`spark_jobs.normalize.mount` and :mod:`spark_jobs.normalize.net_effect` compute in Spark, for a table whose
events the driver holds (:mod:`spark_jobs.normalize.window_events`): the same decoder
(:func:`spark_jobs.normalize.mount.decode_batch`) and the same rules (seed 002), in Arrow compute kernels over whole
columns -- no Python per row, and no Spark job, whose scheduling is most of a small table's cost (a window touching
fifty tables planned and ran fifty of them). The result has the columns of
:func:`spark_jobs.normalize.net_effect.net_effect` and the same rows: ``tests/spark_jobs/normalize/test_net_effect.py``
runs every case on both and compares them on random event sets.

1. Exact duplicates by ``(table_id, key, commit_ts, op)`` are removed (the first kept: duplicates are equal).
2. Events of the ignored transactions (``start_ts``) are dropped.
3. A PUT gives an insert of its new image, preceded by a delete of its old image when the Delta key or a unique key
   changed (null-safe); a DELETE gives a delete of its old image, or, without one, of the image its row key gives
   when the handle is the Delta key (else nothing: a key that had no earlier version).
4. The net effect per Delta key is the last change by ``(commit_ts, deletes before inserts, row key)``.

An upsert carries its new image's mapped values (``_cdc_mapped``, :mod:`spark_jobs.normalize.mapped_values`) for
the count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdc_core.schema.model import ROWID_COLUMN, TableInfo
from spark_jobs.normalize.mapped_values import MAPPED_COL, NEW_MAPPED
from spark_jobs.normalize.mount import HANDLE, NEW, OLD, decode_events
from spark_jobs.normalize.net_effect import COMMIT_TS_COL, DEDUPE_COLUMNS, KIND_DELETE, KIND_INSERT, OP_COL

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 65_536
_TS, _KIND, _KEY, _IDX = "__cdc_ts", "__cdc_kind", "__cdc_key", "__cdc_idx"


def _first_of_groups(t: pa.Table, by: Sequence[str]) -> pa.Table:
    """The first row of ``t`` (in its order) of each distinct value of ``by``."""
    import pyarrow as pa

    indexed = t.append_column(_IDX, pa.array(range(t.num_rows), pa.int64()))
    first = indexed.group_by(list(by), use_threads=False).aggregate([(_IDX, "first")])
    return t.take(first.column(f"{_IDX}_first"))


def mount_arrow(table: TableInfo, events: pa.Table) -> pa.Table:
    """:func:`spark_jobs.normalize.mount.mount` of events held on the driver (bronze columns, see
    :func:`spark_jobs.normalize.mount.decode_events`), ``BATCH_ROWS`` at a time."""
    import pyarrow as pa

    from spark_jobs.normalize.mount import mounted_schema

    return pa.Table.from_batches([decode_events(table, b) for b in events.to_batches(max_chunksize=BATCH_ROWS)],
                                 schema=mounted_schema(table))


def _null_safe_differs(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    import pyarrow.compute as pc

    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.invert(pc.or_(both_null, pc.fill_null(pc.equal(a, b), False)))


def net_effect_arrow(events: pa.Table, table: TableInfo, ignore_txn_start_ts: Sequence[int] = ()) -> pa.Table:
    """The net change set of a table's window events (bronze columns): one row per Delta key, with the image
    columns, ``_cdc_op`` ('delete' | 'upsert'), ``_cdc_commit_ts`` and ``_cdc_mapped``."""
    return reduce_changes(ordered_changes(events, table, ignore_txn_start_ts), table, list(table.delta_key()))


def reduce_changes(flat: pa.Table, table: TableInfo, by: list[str]) -> pa.Table:
    """The last change of :func:`ordered_changes` of each distinct ``by`` (the Delta key: the net effect; the key
    and the commit ts: each committed version, :mod:`spark_jobs.load.history`), with the image columns, ``_cdc_op``,
    ``_cdc_commit_ts`` and ``_cdc_mapped``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = table.arrow_schema().names
    last = _first_of_groups(flat, [_TS if c == COMMIT_TS_COL else c for c in by])
    op_out = pc.if_else(pc.equal(last.column(_KIND), KIND_DELETE), "delete", "upsert")
    return pa.table([*(last.column(n) for n in names), op_out, last.column(_TS), last.column(MAPPED_COL)],
                    names=[*names, OP_COL, COMMIT_TS_COL, MAPPED_COL])


def ordered_changes(events: pa.Table, table: TableInfo, ignore_txn_start_ts: Sequence[int] = ()) -> pa.Table:
    """Steps 1-3 of the module docstring: every placed change (``__cdc_ts``, ``__cdc_kind``, ``__cdc_key``, the image
    columns, ``_cdc_mapped``), latest first by ``(commit_ts, deletes before inserts, row key)``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    events = _first_of_groups(events, DEDUPE_COLUMNS)
    if ignore_txn_start_ts:
        events = events.filter(pc.invert(pc.is_in(events.column("start_ts"),
                                                  pa.array([int(t) for t in ignore_txn_start_ts], pa.int64()))))
    m = mount_arrow(table, events)
    schema = table.arrow_schema()  # the fields of an image, in image_columns' order
    names = schema.names
    op, new, old = m.column("op"), m.column(NEW), m.column(OLD)
    is_put, is_del = pc.equal(op, "put"), pc.equal(op, "delete")
    has_old = pc.is_valid(old)

    changed_cols: list[str] = []
    for k in [table.delta_key(), *table.unique_keys()]:
        changed_cols.extend(c for c in k if c not in changed_cols)
    keys_changed = pa.array(np.zeros(m.num_rows, dtype=bool))
    for c in changed_cols:
        keys_changed = pc.or_(keys_changed, _null_safe_differs(pc.struct_field(old, c), pc.struct_field(new, c)))

    def part(rows: pa.ChunkedArray, kind: int, image: pa.ChunkedArray | None) -> pa.Table:
        sel = m.filter(pc.fill_null(rows, False))
        cols = [sel.column("commit_ts"), pa.array(np.full(sel.num_rows, kind, dtype=np.int32)), sel.column("key")]
        if image is None:  # the image the row key gives: the handle in its column, nothing else known
            handle = sel.column(HANDLE)
            cols += [handle.cast(f.type) if f.name in (table.handle_column, ROWID_COLUMN) else pa.nulls(sel.num_rows,
                     f.type) for f in schema]  # fmt: skip
        else:
            img = image.filter(pc.fill_null(rows, False))
            cols += [pc.struct_field(img, n) for n in names]
        marks = sel.column(NEW_MAPPED) if kind == KIND_INSERT else pa.nulls(sel.num_rows, m.schema.field(
            NEW_MAPPED).type)
        return pa.table([*cols, marks], names=[_TS, _KIND, _KEY, *names, MAPPED_COL])

    by_handle = table.handle_column is not None or ROWID_COLUMN in names
    parts = [
        part(pc.and_(is_del, has_old), KIND_DELETE, old),
        part(pc.and_(pc.and_(is_put, has_old), keys_changed), KIND_DELETE, old),
        part(pc.and_(is_put, pc.is_valid(new)), KIND_INSERT, new),
    ]
    if by_handle:
        parts.append(part(pc.and_(is_del, pc.invert(has_old)), KIND_DELETE, None))
    flat = pa.concat_tables(parts)
    key = list(table.delta_key())
    placed = pc.is_valid(flat.column(key[0]))
    for name in key[1:]:
        placed = pc.and_(placed, pc.is_valid(flat.column(name)))
    return flat.filter(placed).sort_by([(_TS, "descending"), (_KIND, "descending"), (_KEY, "descending")])
