"""Reading the upstream at a ts over its MySQL protocol, as the jobs share it: a table cut into chunks by its regions
and read chunk by chunk (the snapshot's fetch, the full reconciliation's upstream side, its chunked checksums), and
the batched point reads at a window's changed keys with the table's ``COUNT(*)`` (the window checks and their read
ahead). Rows come typed as the lake holds them (:func:`row_typer`), in Arrow batches or as a Spark DataFrame whose
tasks each read over a connection of their own.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdc_core.changefeed.config import DqMode
from cdc_core.changefeed.job_args.snapshot_load import DEFAULT_MAX_CHUNKS
from cdc_core.client.tidb_sql import ENV_TIDB
from cdc_core.codec import key as keycodec
from cdc_core.codec import memcomparable, rowcodec
from cdc_core.codec import mysql_type as mt
from cdc_core.codec.sql_ident import quote_ident, quote_list, quote_table
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import ROWID_COLUMN, Column, TableInfo
from cdc_core.tls import TlsConfig, client_tls, pinned
from spark_jobs.normalize import mapped_values
from spark_jobs.normalize.mount import image_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdc_core.client.upstream import UpstreamClient

log = logging.getLogger(__name__)

LOAD_BATCH_ROWS = 65_536
POINT_BATCH = 1_000
# Key column kinds whose values this job writes as SQL literals that select exactly the rows holding them.
_LITERAL_KINDS = frozenset({ct.INT, ct.YEAR, ct.DECIMAL, ct.DATETIME, ct.TIMESTAMP, ct.DATE, ct.TEXT, ct.BINARY,
                            ct.ENUM, ct.SET})


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
    (:mod:`spark_jobs.normalize.mapped_values`; a load takes the image columns only)."""
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


# --- point reads at a window's changed keys ----------------------------------------------------


def key_literal(col: Column, value: Any, literal: Callable[[str], str]) -> str:
    """A Delta key value as the SQL literal that selects the upstream rows holding it (``literal``: a string as the
    session that runs the statement reads it, ``TidbSql.literal``)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")  # str() writes 1E-7 for a small one: a DOUBLE literal to MySQL
    if isinstance(value, str) and ct.decimal_as_text(col):  # a wide DECIMAL's text: a number, not a string to cast
        return format(Decimal(value), "f")
    if isinstance(value, datetime):
        return literal(value.strftime("%Y-%m-%d %H:%M:%S.%f"))
    if isinstance(value, date):
        return literal(value.isoformat())
    if isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, str):
        return literal(value)
    raise ChangefeedError(f"column {col.name!r}: no SQL literal for key value {value!r}")


def point_select(table: TableInfo, key: Sequence[str], values: Sequence[tuple[Any, ...]],
                 literal: Callable[[str], str]) -> str:
    """``SELECT`` of the rows at ``values`` of the key columns ``key`` (strings written by ``literal``)."""
    cols = f"*, {quote_ident(ROWID_COLUMN)}" if ROWID_COLUMN in table.arrow_schema().names else "*"
    return f"SELECT {cols} FROM {quote_table(table.db_name, table.name)} WHERE {_at_keys(table, key, values, literal)}"


def point_count(table: TableInfo, key: Sequence[str], values: Sequence[tuple[Any, ...]],
                literal: Callable[[str], str]) -> str:
    """``SELECT COUNT(*) AS n`` of the rows at ``values`` of the key columns ``key``."""
    where = _at_keys(table, key, values, literal)
    return f"SELECT COUNT(*) AS n FROM {quote_table(table.db_name, table.name)} WHERE {where}"


def _at_keys(table: TableInfo, key: Sequence[str], values: Sequence[tuple[Any, ...]],
             literal: Callable[[str], str]) -> str:
    key_cols = [table.column(k) if k != ROWID_COLUMN else None for k in key]

    def lit(c: Column | None, v: Any) -> str:
        return str(int(v)) if c is None else key_literal(c, v, literal)

    if len(key) == 1:
        where = f"{quote_ident(key[0])} IN ({', '.join(lit(key_cols[0], v[0]) for v in values)})"
    else:
        tuples = ", ".join("(" + ", ".join(lit(c, x) for c, x in zip(key_cols, v, strict=True)) + ")" for v in values)
        where = f"({quote_list(key)}) IN ({tuples})"
    return where


def _rows_at(client: UpstreamClient, table: TableInfo, ts: int, key: Sequence[str],
             batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[Any, ...]]:
    """The upstream rows (image values, in order) at the key values of ``batches`` at ``ts``, ``POINT_BATCH`` keys
    per statement."""

    typed = row_typer(table)
    for b in batches:
        values = list(zip(*(b.column(k).to_pylist() for k in key), strict=True))
        for i in range(0, len(values), POINT_BATCH):
            sql = point_select(table, key, values[i:i + POINT_BATCH], client.literal)
            for row in client.iter_rows(sql, at_ts=ts):
                yield typed(row)


def fetch_points(pd_addr: str, tidb: str | None, tls: TlsConfig | None, ts: int, table_json: str, key: Sequence[str],
                 schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: batches of key values in, the upstream rows at them (at ``ts``) out, through one
    MySQL connection per task (with the driver's TLS files, ``tls``)."""
    from cdc_core.client.upstream import UpstreamClient

    table = TableInfo.from_json(table_json)

    def rows() -> Iterator[tuple[Any, ...]]:
        with UpstreamClient(pd_addr, tidb=tidb) as client:
            yield from _rows_at(client, table, ts, key, batches)

    with pinned(tls):
        yield from batched(rows(), schema)


@contextmanager
def _upstream(pd_addr: str, tidb: str | None, client: UpstreamClient | None) -> Iterator[UpstreamClient]:
    """``client`` when given (a job's, shared by its tables: one PD lookup, one MySQL connection per thread), else
    a client of its own, closed after."""
    from cdc_core.client.upstream import UpstreamClient

    if client is not None:
        yield client
        return
    with UpstreamClient(pd_addr, tidb=tidb) as own:
        yield own


READ_STREAMS = 3  # point-read statements of one table in flight at once (upstream_rows_at)
_read_pool: ThreadPoolExecutor | None = None
_read_pool_lock = threading.Lock()


def _point_reads() -> ThreadPoolExecutor:
    """The driver's point-read threads, shared by every table and job of the process: a client's MySQL connection
    is per thread (``UpstreamClient.sql``), so a job opens at most ``READ_STREAMS`` more, whatever its tables."""
    global _read_pool
    with _read_pool_lock:
        if _read_pool is None:
            _read_pool = ThreadPoolExecutor(max_workers=READ_STREAMS, thread_name_prefix="point-reads")
        return _read_pool


def upstream_rows_at(pd_addr: str, tidb: str | None, ts: int, table: TableInfo, keys: pa.Table,
                     client: UpstreamClient | None = None) -> pa.Table:
    """The upstream rows at ``keys`` at ``ts``, read on the driver (silver schema). Keys past one statement's
    ``POINT_BATCH`` are read ``READ_STREAMS`` statements at a time: TiDB (or the embedded upstream) then reads one
    statement's rows while this process parses another's, instead of idling through the client's share of each
    (the table that holds most of a window's changes is the window checks' longest step)."""
    import pyarrow as pa


    schema = table.arrow_schema()
    with _upstream(pd_addr, tidb, client) as c:

        def read(piece: pa.Table) -> list[pa.RecordBatch]:
            rows = _rows_at(c, table, ts, piece.column_names, piece.to_batches(max_chunksize=POINT_BATCH))
            return list(batched(rows, schema))

        if keys.num_rows <= POINT_BATCH:
            batches = read(keys)
        else:
            pieces = [keys.slice(i, POINT_BATCH) for i in range(0, keys.num_rows, POINT_BATCH)]
            batches = [b for got in _point_reads().map(read, pieces) for b in got]
        return pa.Table.from_batches(batches, schema=schema)


def upstream_at_keys(spark: SparkSession, pd_addr: str, tidb: str | None, ts: int, table: TableInfo,
                     keys: DataFrame) -> DataFrame:
    """The upstream rows at ``keys`` at ``ts`` (image columns). Keys of a type written as no exact literal (TIME,
    FLOAT, BIT, JSON) are matched against the table read chunk by chunk instead."""
    import functools

    from pyspark.sql.pandas.types import to_arrow_schema


    key = list(keys.columns)
    if any(k != ROWID_COLUMN and table.column(k).kind not in _LITERAL_KINDS for k in key):
        return upstream_frame(spark, pd_addr, ts, table, tidb=tidb).join(keys, on=key, how="left_semi")
    target = spark.createDataFrame([], spark_schema(table)).schema
    fetch = functools.partial(fetch_points, pd_addr, tidb, client_tls(), ts, table.to_json(), key,
                              to_arrow_schema(target, timezone="UTC"))
    return keys.mapInArrow(fetch, target)


def upstream_side(pd_addr: str, tidb: str | None, ts: int, table: TableInfo, keys: pa.Table, mode: DqMode,
                  client: UpstreamClient | None = None, *, after_ts: int, base: int | None
                  ) -> tuple[int, pa.Table | None]:
    """What the checks on the driver compare a table's Delta side with: the upstream's row count at ``ts``
    (:func:`upstream_count_since`, from ``base`` at ``after_ts``), and its rows at ``keys`` (mode "checksum"; else
    None)."""
    rows = upstream_rows_at(pd_addr, tidb, ts, table, keys, client) if mode == "checksum" else None
    count = upstream_count_since(pd_addr, tidb, table, after_ts=after_ts, ts=ts, keys=keys, base=base,
                                 held_at_ts=None if rows is None else rows.num_rows, client=client)
    return count, rows


def upstream_count_at_keys(pd_addr: str, tidb: str | None, ts: int, table: TableInfo, keys: pa.Table,
                           client: UpstreamClient | None = None) -> int:
    """How many of ``keys`` (distinct values of the key columns) the upstream's table holds at ``ts``:
    ``SELECT COUNT(*) ... WHERE (k) IN (...)``, ``POINT_BATCH`` keys a statement -- O(keys), never the table."""
    key = keys.column_names
    n = 0
    with _upstream(pd_addr, tidb, client) as c:
        for b in keys.to_batches(max_chunksize=POINT_BATCH):
            values = list(zip(*(b.column(k).to_pylist() for k in key), strict=True))
            if values:
                n += int(c.query(point_count(table, key, values, c.literal), at_ts=ts)[0]["n"])
    return n


def upstream_count_since(pd_addr: str, tidb: str | None, table: TableInfo, *, after_ts: int, ts: int,
                         keys: pa.Table, base: int | None, held_at_ts: int | None = None,
                         client: UpstreamClient | None = None) -> int:
    """The upstream's row count at ``ts`` without counting its table: ``base`` (its count at ``after_ts``, which the
    checks there found Delta to hold) plus the window's net inserts minus its net deletes -- the changed ``keys`` it
    holds at ``ts`` (``held_at_ts`` when the caller read them) minus those it held at ``after_ts``. A key the window
    did not change is held at both or at neither, so the result is exact, at O(changed keys) on the upstream where a
    ``COUNT(*)`` walks the whole table (TiKV's coprocessor, on the production cluster, every window).

    ``SELECT COUNT(*)`` instead when there is no base (the table's first checks) or the keys are of a type written
    as no exact literal (:func:`checkable_on_driver`). A row the upstream gained at a key the window's changelog
    does not hold (a lost event) is not seen here: the scheduled full reconciliation counts every row."""
    if base is None or not checkable_on_driver(table):
        return upstream_count(pd_addr, tidb, ts, table, client)
    with _upstream(pd_addr, tidb, client) as c:
        now = held_at_ts if held_at_ts is not None else upstream_count_at_keys(pd_addr, tidb, ts, table, keys, c)
        before = upstream_count_at_keys(pd_addr, tidb, after_ts, table, keys, c)
    return base + now - before


def resolved_tidb(client: UpstreamClient, tidb: str | None) -> str | None:
    """Where the Spark tasks' point reads go: ``tidb`` when given (or ``$CDCFLOW_TIDB``, which the tasks read
    themselves), else the SQL servers ``client`` found registered in PD, as ``host:port`` (such an address carries
    no credentials). Found once on the driver, so the tasks never ask PD: under a catch-up's load each task's own
    lookup (an etcd ``Range``) could pass its deadline and fail the check job."""
    if tidb or os.environ.get(ENV_TIDB):
        return tidb
    return ",".join(a.addr for a in client.sql_addresses())


def upstream_count(pd_addr: str, tidb: str | None, ts: int, table: TableInfo,
                   client: UpstreamClient | None = None) -> int:
    with _upstream(pd_addr, tidb, client) as c:
        rows = c.query(f"SELECT COUNT(*) AS n FROM {quote_table(table.db_name, table.name)}", at_ts=ts)
    return int(rows[0]["n"])


def checkable_on_driver(table: TableInfo) -> bool:
    """Whether every Delta key column is written as an exact SQL literal (the point reads need them)."""
    return all(k == ROWID_COLUMN or table.column(k).kind in _LITERAL_KINDS for k in table.delta_key())

