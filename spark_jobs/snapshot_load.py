"""Snapshot loads: tables' rows read from the upstream at a ts, kept as a bronze base, and put into Delta.

A changefeed's ``snapshot`` window (and ``initial-snapshot = true``) reloads tables at its checkpoint ``C``
in two phases (``args["phase"]``), run by the window's ``pull`` and ``apply`` steps:

``fetch``
    Read each table at ``C`` from the upstream (a snapshot read over the MySQL protocol, ``SET @@tidb_snapshot
    = C``, streamed) in parallel chunks and write the rows, typed with the silver schema, as the table's bronze
    **snapshot base** ``<changelog>/snapshot=<C>/<db>.<table>/`` (:mod:`cdc_core.codec.changelog`). The
    chunks are the table's regions (PD ScanRegions over the table span), their boundary keys decoded into
    handle ranges ``[lo, hi)`` and read with ``SELECT * FROM db.t WHERE <handle> >= lo AND <handle> < hi``;
    the chunk list is a DataFrame of one chunk per partition mapped with ``mapInArrow`` (so it also runs over
    Spark Connect), each task streaming its rows over its own MySQL connection. A table of one chunk, or of at
    most ``DRIVER_ROWS`` rows at ``C`` (its ``COUNT(*)``), is streamed on the driver into parquet with pyarrow
    instead: no Spark job. ``FETCH_THREADS`` tables are fetched at a time.
    A base already written for the same table id and schema version is kept (rows at a ts never change),
    so a re-run fetches nothing twice.
``load``
    Replace a Delta table's contents with a base in **one** commit that carries the app transaction
    ``("cdcflow/<changefeed>", version)`` and ``cdcflow.ts = version`` (the base's ts) like every cdcflow
    commit, plus ``cdcflow.load_id``: a load whose id is already in the table's recent history is skipped
    (idempotent retries). The base is streamed batch by batch into ``write_deltalake(mode="overwrite",
    schema_mode="overwrite")`` cast to ``TableInfo.arrow_schema()`` -- exactly the Arrow types ``apply``
    writes. A rebuild uses this phase alone, from the latest base of a table.

Run under spark-submit like the other jobs::

    spark-submit spark_jobs/snapshot_load.py --args args.json --result result.json
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdc_core.changefeed.job_args.snapshot_load import DEFAULT_MAX_CHUNKS, SnapshotJobArgs
from cdc_core.codec import changelog, memcomparable, rowcodec
from cdc_core.codec import key as keycodec
from cdc_core.codec import mysql_type as mt
from cdc_core.codec.sink_uri import app_id_for, table_path
from cdc_core.codec.sql_ident import quote_ident, quote_table
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import ROWID_COLUMN, TableInfo
from cdc_core.tls import TlsConfig, client_tls, pinned
from spark_jobs import mapped_values, silver_read
from spark_jobs.delta_writer import commit_metadata, create_silver_table
from spark_jobs.job_io import args_file_main
from spark_jobs.mount import image_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

LOAD_BATCH_ROWS = 65_536
FETCH_THREADS = 4  # tables whose bases one fetch job reads at once
# A table of at most this many rows at the ts is streamed on the driver, whatever its chunks: a Spark job's fixed cost
# is more than its parallel tasks save on such a table (tests/bench/test_snapshot_fetch_bench.py).
# $CDCFLOW_SNAPSHOT_DRIVER_ROWS sets it (0: only a table of one chunk is read on the driver).
DRIVER_ROWS = 100_000
ENV_DRIVER_ROWS = "CDCFLOW_SNAPSHOT_DRIVER_ROWS"
HISTORY_LOOKBACK = 50  # commits searched for a load id already committed


# --- chunks -------------------------------------------------------------------------------------


Bound = int | str | None


@dataclass(frozen=True)
class Chunk:
    """Values ``[lo, hi)`` of the range column (an integer handle, or the leading column of a common handle: an
    integer or a string); None: unbounded on that side."""

    lo: Bound
    hi: Bound

    def where(self, column: str, literal: Callable[[str], str]) -> str:
        """The chunk as a condition on ``column`` (a string bound written by ``literal``, ``TidbSql.literal``)."""
        parts = []
        if self.lo is not None:
            parts.append(f"{quote_ident(column)} >= {_literal(self.lo, literal)}")
        if self.hi is not None:
            parts.append(f"{quote_ident(column)} < {_literal(self.hi, literal)}")
        return " AND ".join(parts)

    def spec(self) -> tuple[str, str]:
        """The chunk as the two JSON strings a Spark row carries (an int or a str each side, or null)."""
        return json.dumps(self.lo), json.dumps(self.hi)

    @classmethod
    def from_spec(cls, lo: str, hi: str) -> Chunk:
        return cls(json.loads(lo), json.loads(hi))


def _literal(v: int | str, literal: Callable[[str], str]) -> str:
    return literal(v) if isinstance(v, str) else str(int(v))


def range_column(table: TableInfo) -> str | None:
    """The column that orders a table's row keys and that SQL can filter on: the clustered integer PK, the first PK
    column of a common handle when it is a signed integer or a string of a binary-ordered collation (its datum leads
    every row key), else the hidden ``_tidb_rowid``; None (one chunk) for a common handle led by any other type."""
    if table.handle_column is not None:
        col = table.column(table.handle_column)
        return col.name if col.kind == "int" else None
    if table.is_common_handle:
        col = table.column(table.primary_key[0])
        ft = col.field_type()
        if col.kind == "int" and not ft.unsigned:
            return col.name
        # A string cut from a region boundary's key bytes sorts among the others as the server compares them only
        # under a collation that orders by the bytes: a case- or accent-insensitive one keys rows by weight
        # strings, whose decoded bytes are no such cut.
        if ft.tp in mt.STRING_TYPES and not ft.binary and ft.collate in ct.BIN_COLLATIONS:
            return col.name
        return None
    return ROWID_COLUMN


def common_handle_lower_bound(table_id: int, boundary: bytes) -> int | str | None:
    """The leading datum of a region boundary inside a common-handle table's span, as a cut between chunks of that
    column's values: a signed integer (``intFlag`` + 8 bytes) or a string (``bytesFlag`` + memcomparable groups,
    as many whole groups as the boundary holds); None when the boundary carries none (at the span start, another
    datum kind). Any cut is exact: every row falls in the one range ``[lo, hi)`` of its first PK value."""
    start, end = keycodec.table_span(table_id)
    if boundary <= start or boundary >= end:
        return None
    rest = boundary[len(start):]
    if rest[:1] == bytes([rowcodec.INT_FLAG]):
        payload = rest[1:9]
        return keycodec.decode_int(payload + b"\x00" * (8 - len(payload)))
    if rest[:1] == bytes([rowcodec.BYTES_FLAG]):
        try:
            raw, _ = memcomparable.decode_bytes(rest[1:], partial=True)
        except memcomparable.KeyDecodeError:
            return None
        text = raw.decode("utf-8", errors="ignore").rstrip(" ")
        # Below U+0020 the server's PAD SPACE order and the code-point order differ; such a cut is dropped.
        return text if text and min(text) >= " " else None
    return None


def handle_lower_bound(table_id: int, boundary: bytes) -> int | None:
    """The smallest handle whose row key is ``>= boundary`` (a region boundary inside the table span).

    None: the boundary is at or before the span start (no lower bound). A boundary past every handle
    raises ``OverflowError``.
    """
    start, end = keycodec.table_span(table_id)
    if boundary <= start:
        return None
    if boundary >= end:
        raise OverflowError("boundary after the table span")
    rest = boundary[len(start):]
    if len(rest) < 8:  # a prefix of encoded handles: every key with it is >= the boundary
        return keycodec.decode_int(rest + b"\x00" * (8 - len(rest)))
    h = keycodec.decode_int(rest[:8])
    if len(rest) == 8:
        return h
    if h == (1 << 63) - 1:
        raise OverflowError("boundary after the last handle")
    return h + 1  # the row key of h sorts before a longer key it prefixes


def chunks_from_boundaries(table_id: int, boundaries: Sequence[bytes], max_chunks: int, *, common: bool = False
                           ) -> list[Chunk]:
    """Handle ranges between region boundary keys (``common``: ranges of a common handle's leading integer); at
    most ``max_chunks`` (adjacent ranges merged evenly)."""
    bounds: set[Any] = set()
    for b in boundaries:
        try:
            h = common_handle_lower_bound(table_id, b) if common else handle_lower_bound(table_id, b)
        except OverflowError:
            continue
        if h is not None:
            bounds.add(h)
    cuts = sorted(bounds)
    if max_chunks < 1:
        raise ValueError(f"max_chunks must be >= 1, got {max_chunks}")
    if len(cuts) + 1 > max_chunks:  # keep max_chunks - 1 cuts, spread evenly
        step = len(cuts) / (max_chunks - 1) if max_chunks > 1 else 0
        cuts = sorted({cuts[int(i * step)] for i in range(max_chunks - 1)}) if max_chunks > 1 else []
    edges: list[Bound] = [None, *cuts, None]
    return [Chunk(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def plan_chunks(pd_addr: str, table: TableInfo, max_chunks: int = DEFAULT_MAX_CHUNKS) -> tuple[list[Chunk], str]:
    """The chunks of a table (by its regions) and how they were made."""
    if range_column(table) is None:
        return [Chunk(None, None)], "one chunk: the table's row keys lead with no value SQL can range on here"
    from cdc_core.puller.pd_client import PDClient

    async def regions() -> list[bytes]:
        pd = PDClient(pd_addr)
        try:
            start, end = keycodec.table_span(table.id)
            return [r.start_key for r in await pd.scan_regions(start, end)]
        finally:
            await pd.close()

    try:
        boundaries = asyncio.run(regions())
    except UpstreamError as exc:  # reading in one chunk is slower, never wrong
        log.warning("cannot list the regions of %s (%s): one chunk", table.qualified_name, exc)
        return [Chunk(None, None)], f"one chunk: ScanRegions failed ({exc})"
    chunks = chunks_from_boundaries(table.id, boundaries, max_chunks, common=table.is_common_handle)
    return chunks, f"{len(chunks)} chunk(s) from {len(boundaries)} region(s)"


# --- fetch --------------------------------------------------------------------------------------


def select_sql(table: TableInfo, chunk: Chunk, literal: Callable[[str], str]) -> str:
    cols = f"*, {quote_ident(ROWID_COLUMN)}" if ROWID_COLUMN in table.arrow_schema().names else "*"
    sql = f"SELECT {cols} FROM {quote_table(table.db_name, table.name)}"
    column = range_column(table)
    where = chunk.where(column, literal) if column is not None else ""
    return f"{sql} WHERE {where}" if where else sql


def row_typer(table: TableInfo, *, marked: bool = False) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """What gives a ``SELECT`` row (JSON values by column name) as Python values of ``table``'s image columns, in
    order, as the lake holds them (``Column.arrow_value``: a date Delta cannot hold is NULL); ``marked``: and the
    row's mapped values' marker last (:func:`base_schema`). The image's layout (whether ``_tidb_rowid`` is in it,
    which takes its Arrow schema) is worked out once per table, not per row."""
    columns = [(c, c.name.lower()) for c in table.columns]
    rowid = ROWID_COLUMN in table.arrow_schema().names

    def typed(row: dict[str, Any]) -> tuple[Any, ...]:
        lowered = {k.lower(): v for k, v in row.items()}
        # the values the upstream holds, whatever the session's sql_mode let a write store (a zero date too)
        values = [c.convert(lowered.get(name), ct.STORED_DATES) for c, name in columns]
        out: list[Any] = [c.arrow_value(v) for (c, _), v in zip(columns, values, strict=True)]
        if rowid:
            out.append(int(lowered[ROWID_COLUMN]))
        if marked:
            out.append(mapped_values.row_marker(table, values))
        return tuple(out)

    return typed


def base_schema(table: TableInfo) -> pa.Schema:
    """The Arrow schema of a snapshot base's files: the image columns, and the rows' mapped values' marker
    (:mod:`spark_jobs.mapped_values`; a load takes the image columns only)."""
    return table.arrow_schema().append(pa.field(mapped_values.MAPPED_COL, mapped_values.marker_type()))


def fetch_partition(pd_addr: str, tidb: str | None, ts: int, table_json: str, chunks: Iterator[Chunk],
                    marked: bool = False) -> Iterator[tuple[Any, ...]]:
    """The rows of ``chunks`` at ``ts``, streamed through one MySQL connection of its own (``tidb``: the SQL
    addresses; None: the TiDB servers registered in PD); ``marked``: each with its marker (:func:`row_typer`)."""
    from cdc_core.client.upstream import UpstreamClient

    table = TableInfo.from_json(table_json)
    typed = row_typer(table, marked=marked)
    with UpstreamClient(pd_addr, tidb=tidb) as client:
        for chunk in chunks:
            for row in client.iter_rows(select_sql(table, chunk, client.literal), at_ts=ts):
                yield typed(row)


def upstream_reader(pd_addr: str, tidb: str | None, ts: int, source: TableInfo,
                    target: TableInfo | None = None) -> pa.RecordBatchReader:
    """``source``'s rows at ``ts``, streamed off one MySQL connection as batches of ``LOAD_BATCH_ROWS`` rows at
    most, typed with ``target``'s Arrow schema (default: the source's; a table of the same columns)."""
    schema = (target or source).arrow_schema()
    rows = fetch_partition(pd_addr, tidb, ts, source.to_json(), iter([Chunk(None, None)]))
    return pa.RecordBatchReader.from_batches(schema, batched(rows, schema))


def spark_schema(table: TableInfo, *, marked: bool = False) -> str:
    cols = [*image_columns(table), *([(mapped_values.MAPPED_COL, "ARRAY<INT>")] if marked else [])]
    return ", ".join(f"{quote_ident(n)} {t}" for n, t in cols)


def _rows_batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def batched(rows: Iterator[tuple[Any, ...]], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``rows`` as batches of ``schema``, ``LOAD_BATCH_ROWS`` rows at most (none for no rows)."""
    batch: list[tuple[Any, ...]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= LOAD_BATCH_ROWS:
            yield _rows_batch(batch, schema)
            batch = []
    if batch:
        yield _rows_batch(batch, schema)


def fetch_chunk_batches(pd_addr: str, tidb: str | None, tls: TlsConfig | None, ts: int, table_json: str,
                        schema: pa.Schema, specs: Iterator[pa.RecordBatch], marked: bool = False
                        ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body (a Spark Python worker): chunk specs (``lo``, ``hi``) in, their rows out as batches
    of ``schema`` (what Spark expects for the table's image columns), ``LOAD_BATCH_ROWS`` rows at most, read
    with the driver's TLS files (``tls``)."""
    chunks = (Chunk.from_spec(lo, hi) for b in specs
              for lo, hi in zip(b.column("lo").to_pylist(), b.column("hi").to_pylist(), strict=True))
    with pinned(tls):
        yield from batched(fetch_partition(pd_addr, tidb, ts, table_json, chunks, marked), schema)


def upstream_frame(spark: SparkSession, pd_addr: str, ts: int, table: TableInfo, *, tidb: str | None = None,
                   chunks: list[Chunk] | None = None, marked: bool = False) -> DataFrame:
    """The table's rows at ``ts`` as a (lazy) DataFrame of its image columns, read in parallel by chunk.

    A DataFrame of chunk specs, one per partition (``repartition(n)`` deals rows round robin), mapped with
    ``mapInArrow``: unlike an RDD this also runs over Spark Connect (``sc://``), where a client has no
    SparkContext. Each task streams its chunks' rows over its own MySQL connection, ``LOAD_BATCH_ROWS`` at a time,
    so no process holds the table. The data-quality checks read the upstream side of their comparison so.
    ``marked``: with the rows' mapped values' marker (a snapshot base's, :func:`base_schema`).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    if chunks is None:
        chunks, _ = plan_chunks(pd_addr, table)
    spec = spark.createDataFrame([c.spec() for c in chunks], "lo STRING, hi STRING").repartition(len(chunks))
    target = spark.createDataFrame([], spark_schema(table, marked=marked)).schema
    arrow_target = to_arrow_schema(target, timezone="UTC")  # the session's time zone (spark_jobs.session)
    fetch = functools.partial(fetch_chunk_batches, pd_addr, tidb, client_tls(), ts, table.to_json(), arrow_target,
                              marked=marked)
    return spec.mapInArrow(fetch, target)


def driver_rows() -> int:
    """The largest table (rows at the snapshot ts) whose base is read on the driver: ``DRIVER_ROWS``, or
    ``$CDCFLOW_SNAPSHOT_DRIVER_ROWS``."""
    text = os.environ.get(ENV_DRIVER_ROWS)
    if text is None or not text.strip():
        return DRIVER_ROWS
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ChangefeedError(f"${ENV_DRIVER_ROWS} must be a row count (an integer >= 0), got {text!r}")
    return value


def remove_stale_temps(final: Path) -> None:
    """Remove the temporary directories a crashed fetch of ``final``'s table left (one window runs at a time). By
    exact name: ``.tmp-db.t-*`` also matches ``db.t-x``'s, which another fetch thread may be writing."""
    own = re.compile(rf"\.tmp-{re.escape(final.name)}-[0-9a-f]{{32}}")
    for stale in final.parent.glob(f".tmp-{final.name}-*"):
        if own.fullmatch(stale.name):
            shutil.rmtree(stale, ignore_errors=True)


def _written_base(final: Path, table: TableInfo) -> dict[str, Any] | None:
    """The meta of the base at ``final`` when one of the same table id and schema version is there already."""
    meta_path = final / changelog.TABLE_META
    if not meta_path.is_file():
        return None
    meta: dict[str, Any] = json.loads(meta_path.read_text())
    return meta if meta.get("table_id") == table.id and meta.get("schema_version") == table.schema_version else None


def fetch_table(
    spark: SparkSession, sink: str, changefeed_id: str, pd_addr: str, ts: int, table: TableInfo,
    *, max_chunks: int = DEFAULT_MAX_CHUNKS, tidb: str | None = None, max_driver_rows: int | None = None,
) -> dict[str, Any]:
    """Write the base of ``table`` at ``ts`` (kept when one for the same table id and schema version exists).
    ``max_driver_rows``: the largest table read on the driver (default :func:`driver_rows`)."""
    started = time.monotonic()
    final = changelog.snapshot_table_dir(sink, changefeed_id, ts, table.db_name, table.name)
    meta = _written_base(final, table)
    if meta is not None:
        return {"skipped": True, "reason": "base already written", "rows": meta.get("rows"),
                "chunks": meta.get("chunks"), "chunking": meta.get("chunking"), "path": str(final),
                "seconds": round(time.monotonic() - started, 3)}
    chunks, how = plan_chunks(pd_addr, table, max_chunks)
    fetch = functools.partial(fetch_partition, pd_addr, tidb, ts, table.to_json(), marked=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(final)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex}"
    # A table of several chunks is counted first (on TiDB a COUNT(*) pushed down to the coprocessors of its regions,
    # a fraction of the read that follows); not when no such table may be read on the driver.
    from spark_jobs.window_checks import upstream_count  # the checks build on this module, not the reverse

    bound = driver_rows() if max_driver_rows is None else max_driver_rows
    on_driver = len(chunks) == 1 or (bound > 0 and upstream_count(pd_addr, tidb, ts, table) <= bound)
    if on_driver:
        # One chunk, or a small table, gains nothing from distribution: stream it here into parquet with the silver
        # schema (no Spark job, no Python worker), chunk after chunk, LOAD_BATCH_ROWS rows at a time.
        _write_arrow(tmp, table, fetch(iter(chunks)))
    else:
        frame = upstream_frame(spark, pd_addr, ts, table, tidb=tidb, chunks=chunks, marked=True)
        frame.write.mode("overwrite").parquet(str(tmp))
    rows = _count_rows(tmp)
    mapped = _count_mapped(tmp, table)
    if mapped:
        log.warning("snapshot base of %s at %d: values Delta cannot hold read as NULL, by column %s",
                    table.qualified_name, ts, mapped)
    meta = {"table_id": table.id, "qualified_name": table.qualified_name, "ts": ts, "rows": rows,
            "chunks": len(chunks), "chunking": how, "schema_version": table.schema_version,
            "table": table.to_dict(), "written_at": time.time(), "mapped": mapped}
    changelog.publish_snapshot_table(tmp, final, meta)
    log.info("snapshot base of %s at %d: %d rows in %d chunk(s), read %s", table.qualified_name, ts, rows,
             len(chunks), "on the driver" if on_driver else "by Spark tasks")
    return {"skipped": False, "reason": None, "rows": rows, "chunks": len(chunks), "chunking": how,
            "path": str(final), "seconds": round(time.monotonic() - started, 3), "mapped": mapped}


def fold_table(sink: str, changefeed_id: str, ts: int, table: TableInfo) -> dict[str, Any]:
    """Write the base of ``table`` at ``ts`` from its silver table as of ``ts`` (Delta time travel to the version
    the changefeed committed at or before ``ts``; no rows when the table had none): what the lake held at a
    checkpoint, whose windows were checked there. Streamed, ``LOAD_BATCH_ROWS`` rows at a time."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from spark_jobs.data_quality import version_as_of

    started = time.monotonic()
    final = changelog.snapshot_table_dir(sink, changefeed_id, ts, table.db_name, table.name)
    written = _written_base(final, table)
    if written is not None:
        return {"skipped": True, "reason": "base already written", "rows": written.get("rows"), "path": str(final)}
    path = table_path(sink, table)
    version = version_as_of(path, ts) if DeltaTable.is_deltatable(path) else None
    schema = table.arrow_schema()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex}"
    tmp.mkdir()
    rows = 0
    with pq.ParquetWriter(tmp / "part-00000.parquet", schema) as writer:
        if version is not None:
            dt = DeltaTable(path, version=version)
            present = [n for n in schema.names if n in dt.schema().to_arrow().names]
            for b in silver_read.scan(dt, present, LOAD_BATCH_ROWS):
                writer.write_batch(silver_read.conform(b, schema))
                rows += b.num_rows
    meta = {"table_id": table.id, "qualified_name": table.qualified_name, "ts": ts, "rows": rows, "chunks": 1,
            "chunking": f"folded from the silver table at Delta version {version}", "source": "silver",
            "delta_version": version, "schema_version": table.schema_version, "table": table.to_dict(),
            "written_at": time.time()}
    changelog.publish_snapshot_table(tmp, final, meta)
    log.info("folded base of %s at %d: %d rows from Delta version %s", table.qualified_name, ts, rows, version)
    return {"skipped": False, "reason": None, "rows": rows, "delta_version": version, "path": str(final),
            "seconds": round(time.monotonic() - started, 3)}


def _write_arrow(d: Path, table: TableInfo, rows: Iterator[tuple[Any, ...]]) -> None:
    import pyarrow.parquet as pq

    d.mkdir(parents=True)
    schema = base_schema(table)
    with pq.ParquetWriter(d / "part-00000.parquet", schema) as writer:
        for batch in batched(rows, schema):
            writer.write_batch(batch)


def _count_rows(d: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in changelog.snapshot_part_files(d))


def _count_mapped(d: Path, table: TableInfo) -> dict[str, int]:
    """``{column: values}`` a base's rows hold as NULL because Delta cannot hold them (their markers, a file and a
    row group at a time: only that column is read)."""
    import pyarrow.parquet as pq

    total: dict[str, int] = {}
    if not mapped_values.can_map(table):
        return total
    for p in changelog.snapshot_part_files(d):
        f = pq.ParquetFile(p)
        if mapped_values.MAPPED_COL not in f.schema_arrow.names:
            continue
        for i in range(f.num_row_groups):
            marks = f.read_row_group(i, columns=[mapped_values.MAPPED_COL]).column(0)
            mapped_values.add_counts(total, mapped_values.count_arrow(marks, table))
    return total


# --- load ---------------------------------------------------------------------------------------


def _base_batches(files: list[Path], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    for f in files:
        for b in pq.ParquetFile(f).iter_batches(batch_size=LOAD_BATCH_ROWS):
            yield silver_read.conform(b, schema)


def _already_loaded(path: str, load_id: str) -> tuple[bool, int | None]:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return False, None
    dt = DeltaTable(path)
    done = any(c.get("cdcflow.load_id") == load_id for c in dt.history(HISTORY_LOOKBACK))
    return done, dt.version()


def load_base(
    sink: str, changefeed_id: str, base_dir: str | Path, table: TableInfo, *, version: int, load_id: str,
) -> dict[str, Any]:
    """Replace the silver table of ``table`` (its path by ``table``'s names) with the base at ``base_dir`` in
    one commit recording ``version``; skipped when ``load_id`` is already committed there."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    started = time.monotonic()
    path = table_path(sink, table)
    done, version_now = _already_loaded(path, load_id)
    if done:
        return {"skipped": True, "reason": f"already loaded ({load_id})", "rows": None,
                "delta_version": version_now, "path": path, "seconds": round(time.monotonic() - started, 3)}
    base = Path(base_dir)
    if not (base / changelog.TABLE_META).is_file():
        raise ChangefeedError(f"no complete snapshot base at {base}")
    meta = json.loads((base / changelog.TABLE_META).read_text())
    if not DeltaTable.is_deltatable(path):
        create_silver_table(path, table, mode="ignore")
    schema = table.arrow_schema()
    props = CommitProperties(
        app_transactions=[Transaction(app_id=app_id_for(changefeed_id), version=version)],
        custom_metadata={**commit_metadata(table, version), "cdcflow.snapshot": str(meta.get("ts")),
                         "cdcflow.load_id": load_id},
    )
    reader = pa.RecordBatchReader.from_batches(schema, _base_batches(changelog.snapshot_part_files(base), schema))
    write_deltalake(path, reader, mode="overwrite", schema_mode="overwrite", commit_properties=props)
    dt = DeltaTable(path)
    log.info("loaded %s from the snapshot base %s as version %d", table.qualified_name, base, version)
    return {"skipped": False, "reason": None, "rows": meta.get("rows"), "delta_version": dt.version(),
            "applied_version": dt.transaction_version(app_id_for(changefeed_id)), "path": path,
            "seconds": round(time.monotonic() - started, 3), "mapped": meta.get("mapped") or {}}


# --- job entry points ---------------------------------------------------------------------------


def run_job(opts: SnapshotJobArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: ``SnapshotJobArgs`` in, JSON out.

    "fetch" returns ``{"tables": {"db.t": {"rows", "chunks", "chunking", "path", "skipped", "reason",
    "seconds"}}}``; "load" ``{"tables": {"db.t": {"rows", "delta_version", "applied_version", "skipped", "reason",
    "path"}}}``; "fold" (the bases at ``ts`` from the silver tables, :func:`fold_table`) ``{"tables": {"db.t":
    {"rows", "delta_version", "path", "skipped", "reason"}}}``; each with the ``phase``.
    """
    out: dict[str, dict[str, Any]] = {}
    if opts.phase == "fetch":
        from spark_jobs.session import get_spark

        spark = get_spark("cdcflow-snapshot-load")
        bound = driver_rows()  # a bad $CDCFLOW_SNAPSHOT_DRIVER_ROWS fails the job here, before any table
        assert opts.pd_addr is not None and opts.ts is not None
        pd_addr, ts = opts.pd_addr, opts.ts

        def fetch(t: TableInfo) -> tuple[str, dict[str, Any]]:
            return t.qualified_name, fetch_table(
                spark, opts.sink_uri, opts.changefeed_id, pd_addr, ts, t, max_chunks=opts.max_chunks,
                tidb=opts.tidb, max_driver_rows=bound,
            )

        # A small table's fetch is mostly fixed costs (PD's regions, a Spark job, a parquet commit): several at a
        # time overlap them with each other's reads.
        with ThreadPoolExecutor(max_workers=max(1, min(FETCH_THREADS, len(opts.tables))),
                                thread_name_prefix="snapshot-fetch") as pool:
            out.update(pool.map(fetch, opts.tables))
    elif opts.phase == "load":
        for item in opts.loads:
            out[item.table.qualified_name] = load_base(opts.sink_uri, opts.changefeed_id, item.base, item.table,
                                                       version=item.version, load_id=item.load_id)
    else:
        assert opts.ts is not None
        for t in opts.tables:
            out[t.qualified_name] = fold_table(opts.sink_uri, opts.changefeed_id, opts.ts, t)
    return {"phase": opts.phase, "tables": out}


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: ``--args FILE [--result FILE]``."""
    return args_file_main("spark_jobs.snapshot_load", "Snapshot bases: fetch or load.", run_job, SnapshotJobArgs,
                          argv)


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
