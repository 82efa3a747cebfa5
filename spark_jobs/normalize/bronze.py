"""The bronze changelog as the Spark jobs see it: layout, schema, writer and readers.

Layout (owned by :mod:`cdc_core.codec.changelog`, which the puller writes with)::

    <sink>/_cdcflow/changelog/changefeed=<id>/window=<end_ts, 20 digits>/part-*.parquet

A window directory holds every row event with ``checkpoint_ts < commit_ts <= end_ts`` of the
changefeed's tables (and of the DDL history table). It is written whole under a temporary name
and renamed, so a directory that exists is complete; it may still hold exact duplicates (a region
reconnect replays events), which the apply job removes. A window directory that does not exist
was never pulled: reading it is an error, never an empty window -- otherwise applying it would
record the window as done without its data.

Only ``file://`` (or bare path) sinks are supported for the changelog, as in
``cdc_core.codec.changelog``; Spark reads the part files by explicit path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from cdc_core.codec import changelog
from cdc_core.errors import ChangefeedError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BRONZE_SCHEMA: pa.Schema = changelog.SCHEMA
OPS = (changelog.OP_PUT, changelog.OP_DELETE)
# The same columns as a Spark DDL string (reading with an explicit schema never infers).
BRONZE_SPARK_DDL = (
    "region_id BIGINT, table_id BIGINT, key BINARY, op STRING, start_ts BIGINT, "
    "commit_ts BIGINT, value BINARY, old_value BINARY"
)


def window_dir(sink: str, changefeed_id: str, end_ts: int) -> Path:
    """``<sink>/_cdcflow/changelog/changefeed=<id>/window=<end_ts zero-padded to 20 digits>``."""
    if not changefeed_id or "/" in changefeed_id or changefeed_id.startswith("."):
        raise ValueError(f"invalid changefeed id {changefeed_id!r}")
    if end_ts < 0:
        raise ValueError(f"window end ts must be >= 0, got {end_ts}")
    return changelog.window_dir(sink, changefeed_id, end_ts)


def list_windows(sink: str, changefeed_id: str) -> list[int]:
    """End ts of every complete window of the changefeed, ascending (the replay order)."""
    return changelog.list_windows(sink, changefeed_id)


def conform(table: pa.Table) -> pa.Table:
    """Select and cast the bronze columns in order; reject unknown ops and missing columns."""
    missing = [n for n in BRONZE_SCHEMA.names if n not in table.column_names]
    if missing:
        raise ValueError(f"bronze batch lacks columns {missing}")
    out = table.select(BRONZE_SCHEMA.names).cast(BRONZE_SCHEMA)
    bad = set(out.column("op").unique().to_pylist()) - set(OPS)
    if bad:
        raise ValueError(f"bronze batch has unknown ops {sorted(map(str, bad))}")
    return out


def write_bronze(sink: str, changefeed_id: str, end_ts: int, arrow_table: pa.Table) -> str:
    """Write a whole window atomically (an existing window directory is replaced); returns its path.

    An empty table still writes the window: "pulled, nothing changed" differs from "not pulled".
    """
    window_dir(sink, changefeed_id, end_ts)  # validates the id and ts
    return str(changelog.write_window(sink, changefeed_id, end_ts, conform(arrow_table)))


def part_files(sink: str, changefeed_id: str, end_ts: int) -> list[str]:
    """The Parquet parts of a window; ``ChangefeedError`` when the window was never written."""
    d = window_dir(sink, changefeed_id, end_ts)
    if not d.is_dir():
        raise ChangefeedError(
            f"bronze window {end_ts} of changefeed {changefeed_id!r} does not exist at {d}: pull it first"
        )
    return sorted(str(p) for p in d.glob("*.parquet") if not p.name.startswith((".", "_")))


def read_bronze_arrow(sink: str, changefeed_id: str, end_ts: int) -> pa.Table:
    """A window's events as one Arrow table (bronze schema)."""
    import pyarrow.parquet as pq

    parts = [pq.read_table(p, schema=BRONZE_SCHEMA) for p in part_files(sink, changefeed_id, end_ts)]
    return pa.concat_tables(parts) if parts else BRONZE_SCHEMA.empty_table()


def scan_window(sink: str, changefeed_id: str, end_ts: int, table_ids: Sequence[int], after_ts: int | None,
                upto_ts: int, columns: Sequence[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """A window's events of ``table_ids`` with ``after_ts < commit_ts <= upto_ts`` (no lower bound when ``after_ts``
    is None), read on the driver batch by batch (at most ``batch_rows`` each, one file and one batch read ahead):
    the tables and the range filter the Parquet scan, so row groups outside them are not decoded."""
    import pyarrow.dataset as pads

    files = part_files(sink, changefeed_id, end_ts)
    if not files or not table_ids:
        return
    where = pads.field("table_id").isin(sorted({int(i) for i in table_ids})) & (pads.field("commit_ts") <= upto_ts)
    if after_ts is not None:
        where = where & (pads.field("commit_ts") > after_ts)
    yield from pads.dataset(files, schema=BRONZE_SCHEMA, format="parquet").to_batches(
        columns=list(columns), batch_size=batch_rows, batch_readahead=1, fragment_readahead=1, filter=where)


def read_bronze(
    spark: SparkSession,
    sink: str,
    changefeed_id: str,
    end_ts: int,
    *,
    table_ids: list[int] | None = None,
) -> DataFrame:
    """A window's events as a Spark DataFrame (bronze columns), optionally of some tables only."""
    from pyspark.sql import functions as F

    files = part_files(sink, changefeed_id, end_ts)
    if files:
        df = spark.read.schema(BRONZE_SPARK_DDL).parquet(*files)
    else:
        df = spark.createDataFrame([], BRONZE_SPARK_DDL)
    if table_ids is not None:
        df = df.where(F.col("table_id").isin([int(t) for t in table_ids]))
    return df
