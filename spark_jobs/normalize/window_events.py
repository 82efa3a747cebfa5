"""A window's bronze events of several tables, read on the driver in one pass and held per table, within a budget.

What the apply reads in Spark for each table (``read_bronze`` filtered to its ids and the step's range), for all the
tables of a step at once when they are small: one scan of the window's part files (:func:`spark_jobs.normalize.bronze.
scan_window`), each batch split by table. The tables together hold at most ``limit`` events: past it, the table
holding the most is given up (None) and the caller reads it in Spark, so a window of millions of changes never
gathers on the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdc_core.schema.model import TableInfo
from spark_jobs.normalize.bronze import BRONZE_SCHEMA, scan_window
from spark_jobs.normalize.mount import EVENT_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 65_536


def events_by_table(sink: str, changefeed_id: str, window_end_ts: int, tables: Sequence[TableInfo],
                    after_ts: int | None, upto_ts: int, *, limit: int) -> dict[str, pa.Table | None]:
    """Per table (by qualified name), its events with ``after_ts < commit_ts <= upto_ts`` (``EVENT_COLUMNS`` of the
    bronze schema; every physical id of a partitioned table); None for a table given up at ``limit`` events."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = pa.schema([BRONZE_SCHEMA.field(n) for n in EVENT_COLUMNS])
    live = {t.qualified_name: t for t in tables}
    held: dict[str, list[pa.RecordBatch]] = {name: [] for name in live}
    rows: dict[str, int] = dict.fromkeys(live, 0)
    out: dict[str, pa.Table | None] = {}
    ids = sorted({pid for t in tables for pid in t.physical_ids})
    for batch in scan_window(sink, changefeed_id, window_end_ts, ids, after_ts, upto_ts, EVENT_COLUMNS, BATCH_ROWS):
        if not live:  # every table given up: the rest of the window is Spark's to read
            break
        for name, table in live.items():
            events = batch.filter(pc.is_in(batch.column("table_id"), pa.array(table.physical_ids, pa.int64())))
            if events.num_rows:
                held[name].append(events)
                rows[name] += events.num_rows
        while live and sum(rows.values()) > limit:
            name = max(rows, key=lambda n: rows[n])
            out[name] = None
            del live[name], held[name], rows[name]
    for name in live:
        out[name] = pa.Table.from_batches(held[name], schema=schema)
    return out
