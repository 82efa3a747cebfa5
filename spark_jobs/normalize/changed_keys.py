"""The Delta keys a window changed, for every table it touched, read from the bronze window in Arrow on the driver.

What :func:`spark_jobs.checks.window_checks.changed_keys` computes in Spark for one table, for all of a window's tables
in one pass over its part files: batch by batch (``BATCH_ROWS`` events), filtered to the tables and to
``(after_ts, ts]`` in the Parquet scan, decoded by the apply's decoder
(:func:`spark_jobs.normalize.mount.decode_batch`), of which only the key columns of both images are kept (and the handle
of a delete without an old value, which is the key of a table keyed by its int handle or ``_tidb_rowid``). A table's
keys are de-duplicated as they accumulate.

Memory is bounded by ``limit`` keys in all: past it, the table holding the most keys is given up (None) and its
checks read its keys in Spark, so a catch-up window's millions of changes never gather on the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdc_core.schema.model import ROWID_COLUMN, TableInfo
from spark_jobs.normalize.bronze import scan_window
from spark_jobs.normalize.mount import EVENT_COLUMNS, HANDLE, NEW, OLD, decode_events

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 65_536


def keys_of_batch(table: TableInfo, events: pa.RecordBatch) -> pa.Table:
    """The Delta keys (not de-duplicated) of one batch of ``table``'s bronze events: both images' key columns, and
    the handle of an event with neither image (a delete without an old value) when the handle is the key."""
    import pyarrow as pa
    import pyarrow.compute as pc


    schema = table.key_schema()
    mounted = decode_events(table, events)
    parts = []
    for image in (NEW, OLD):
        s = mounted.column(image)
        parts.append(pa.table([s.field(k) for k in schema.names], schema=schema).filter(pc.is_valid(s)))
    by_handle = table.handle_column is not None or ROWID_COLUMN in schema.names
    if by_handle and len(schema) == 1:
        neither = pc.and_(pc.is_null(mounted.column(NEW)), pc.is_null(mounted.column(OLD)))
        handles = mounted.column(HANDLE).filter(neither)
        parts.append(pa.table([handles.cast(schema.field(0).type)], schema=schema))
    return pa.concat_tables(parts)


def _distinct(t: pa.Table) -> pa.Table:
    return t.group_by(t.column_names, use_threads=False).aggregate([])


def changed_keys_arrow(sink: str, changefeed_id: str, window_end_ts: int, tables: Sequence[TableInfo],
                       after_ts: int, ts: int, *, limit: int) -> dict[str, pa.Table | None]:
    """Per table (by qualified name), the distinct Delta keys of its events in ``(after_ts, ts]`` of the bronze
    window ending at ``window_end_ts``, as an Arrow table of the key columns (silver types); None for a table given
    up at the ``limit`` (see the module docstring) or whose keys Arrow cannot group."""
    import pyarrow as pa
    import pyarrow.compute as pc

    live = {t.qualified_name: t for t in tables}
    held: dict[str, list[pa.Table]] = {name: [] for name in live}
    rows: dict[str, int] = dict.fromkeys(live, 0)
    # a table's keys are de-duplicated when they pass twice what its last de-duplication left (at least BATCH_ROWS):
    # a table with many distinct keys is regrouped O(log n) times, not once a batch
    compact_at: dict[str, int] = dict.fromkeys(live, BATCH_ROWS)
    out: dict[str, pa.Table | None] = {}
    raw: set[str] = set()  # tables holding keys not yet de-duplicated

    def give_up(name: str) -> None:
        out[name] = None
        del live[name], held[name], rows[name]
        raw.discard(name)

    def compact(name: str) -> None:
        """De-duplicate a table's keys held so far (an update holds its key twice: both images); a table whose
        keys Arrow cannot group is given up."""
        if name not in raw:
            return
        try:
            held[name] = [_distinct(pa.concat_tables(held[name]))]
        except pa.ArrowNotImplementedError:
            give_up(name)
            return
        rows[name] = held[name][0].num_rows
        compact_at[name] = max(BATCH_ROWS, 2 * rows[name])
        raw.discard(name)

    ids = sorted({pid for t in tables for pid in t.physical_ids})
    if ids:
        scan = scan_window(sink, changefeed_id, window_end_ts, ids, after_ts, ts, EVENT_COLUMNS, BATCH_ROWS)
        for batch in scan:
            if not live:  # every table left to Spark: the rest of the window is not the driver's to read
                break
            for name, table in list(live.items()):
                events = batch.filter(pc.is_in(batch.column("table_id"), pa.array(table.physical_ids, pa.int64())))
                if events.num_rows == 0:
                    continue
                held[name].append(keys_of_batch(table, events))
                rows[name] += held[name][-1].num_rows
                raw.add(name)
                if rows[name] > compact_at[name]:
                    compact(name)
            if sum(rows.values()) > limit:
                for name in list(live):
                    compact(name)
            while live and sum(rows.values()) > limit:
                give_up(max(rows, key=lambda n: rows[n]))
    for name in list(live):
        compact(name)
    for name, table in live.items():
        out[name] = held[name][0] if held[name] else table.key_schema().empty_table()
    return out
