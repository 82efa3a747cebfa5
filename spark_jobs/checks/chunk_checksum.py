"""The full reconciliation's chunked checksums, computed where the rows are (sync_diff_inspector's method).

A table is cut into chunks of its range column (``upstream_read.plan_chunks``: by the regions; one chunk when
the Delta table lacks that column, see :func:`chunk_column`). For each chunk,
the upstream computes ``COUNT(*)`` and ``BIT_XOR(CAST(CRC32(CONCAT_WS(',', <columns>, CONCAT(ISNULL(c1), ...)))
AS UNSIGNED))`` itself (TiDB pushes the aggregate down to TiKV's coprocessor; sync_diff_inspector's
``GetCRC32Checksum`` and DM's tests write the same query), and Spark computes the same two numbers over the Delta
rows of the chunk, all chunks in one job. Only the two numbers per chunk cross the network. A chunk whose numbers
differ is bisected on its integer range (both sides again, a chunk at a time) until the differing pieces hold
at most ``ROW_DIFF_ROWS`` rows; only those are read upstream row by row and diffed by key, for the sample keys.

Each column enters the text as a form both sides print alike: integers, DECIMAL (its scale's digits; a DECIMAL
wider than 38 digits is that text in the lake too), strings, ENUM and SET as themselves; DATE and DATETIME/TIMESTAMP
through ``DATE_FORMAT`` with six fraction digits (TIMESTAMP in UTC: the reader's session time zone is UTC,
``cdc_core.client.tidb_sql``); byte strings as ``HEX``; BIT as its unsigned integer. A column's NULL flag is its
text's: TiDB's ``DATE_FORMAT`` of a zero date or of one with a zero month or day is NULL (``builtinDateFormatSig``:
``InvalidZero``), which is what the lake holds for those values (``column_type.maps_to_null``). Year-0 dates and
invalid days (ALLOW_INVALID_DATES) print upstream but are NULL in the lake: their chunk differs here, and the rows of
the differing pieces are then compared under the lake's mapping (``data_quality.PushedDown.compare``).
FLOAT/DOUBLE, TIME, JSON and VECTOR have no such form (MySQL and Java print floats differently; TiDB prints JSON its
own way): a table with one of them is compared by reading its rows (:func:`pushdown_columns` is None and
``data_quality`` hashes every row in Spark instead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdc_core.codec.sql_ident import quote_ident, quote_table
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import Column, TableInfo
from spark_jobs.upstream_read import Chunk, range_column

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

ROW_DIFF_ROWS = 10_000  # a differing chunk is bisected down to pieces of at most this many rows, then diffed
MAX_DIFF_PIECES = 8  # pieces row-diffed for sample keys (the count of differing chunks covers the rest)
_DATETIME_SQL = "%Y-%m-%d %H:%i:%s.%f"
_DATETIME_SPARK = "yyyy-MM-dd HH:mm:ss.SSSSSS"


@dataclass(frozen=True)
class ChunkSum:
    """What both sides compute per chunk; ``lo`` / ``hi``: the smallest and largest range value seen (None: no
    rows), for bisecting."""

    count: int
    checksum: int
    lo: Any = None
    hi: Any = None

    def same(self, other: ChunkSum) -> bool:
        return self.count == other.count and self.checksum == other.checksum


def _sql_text(col: Column) -> str | None:
    c = quote_ident(col.name)
    k = col.kind
    if k in (ct.INT, ct.YEAR, ct.DECIMAL, ct.TEXT, ct.ENUM, ct.SET):
        return c
    if k == ct.DATE:
        return f"DATE_FORMAT({c}, '%Y-%m-%d')"
    if k in (ct.DATETIME, ct.TIMESTAMP):
        return f"DATE_FORMAT({c}, '{_DATETIME_SQL}')"
    if k == ct.BINARY:
        return f"HEX({c})"
    if k == ct.BIT:
        return f"CAST({c} AS UNSIGNED)"
    return None


def _spark_text(col: Column) -> SparkColumn | None:
    from pyspark.sql import functions as F

    c = F.col(quote_ident(col.name))
    k = col.kind
    if k in (ct.INT, ct.YEAR, ct.DECIMAL, ct.TEXT, ct.ENUM, ct.SET):
        return c.cast("string")  # a DECIMAL prints plain, with its scale's digits, as MySQL prints it
    if k == ct.DATE:
        return F.date_format(c, "yyyy-MM-dd")
    if k in (ct.DATETIME, ct.TIMESTAMP):
        return F.date_format(c, _DATETIME_SPARK)  # the session time zone is UTC (spark_jobs.session)
    if k == ct.BINARY:
        return F.hex(c)
    if k == ct.BIT:
        return F.conv(F.hex(c), 16, 10)
    return None


def _maps(col: Column) -> bool:
    """Whether the column's upstream values may be ones the lake holds as NULL (its NULL flag is then its text's)."""
    return col.kind in (ct.DATE, ct.DATETIME, ct.TIMESTAMP)


def pushdown_columns(table: TableInfo) -> list[Column] | None:
    """The table's columns when every one has a text form both sides print alike (see the module docstring);
    None when a column has none."""
    cols = list(table.columns)
    if any(_sql_text(c) is None for c in cols):
        return None
    return cols


def chunk_column(table: TableInfo) -> str | None:
    """The column both sides cut chunks on: the range column of the upstream's chunks when the Delta table holds
    it too (a table keyed by ``_tidb_rowid`` under a NONCLUSTERED primary key has no row id in Delta); None: the
    table is one chunk."""
    rc = range_column(table)
    return rc if rc is not None and rc in table.arrow_schema().names else None


def plan(pd_addr: str, table: TableInfo) -> list[Chunk]:
    from spark_jobs.upstream_read import plan_chunks

    return plan_chunks(pd_addr, table)[0] if chunk_column(table) is not None else [Chunk(None, None)]


def checksum_sql(table: TableInfo, chunk: Chunk, literal: Callable[[str], str]) -> str:
    """The upstream's query for one chunk: ``cnt``, ``checksum``, ``lo``, ``hi`` (a string bound of the chunk written
    by ``literal``, ``TidbSql.literal``)."""
    cols = pushdown_columns(table)
    if cols is None:
        raise ValueError(f"{table.qualified_name} has a column without a pushed-down text form")
    texts = [t for t in (_sql_text(c) for c in cols) if t is not None]
    nulls = ", ".join(f"ISNULL({_sql_text(c) if _maps(c) else quote_ident(c.name)})" for c in cols)
    rc = chunk_column(table)
    where = chunk.where(rc, literal) if rc is not None else ""
    r = quote_ident(rc) if rc is not None else None
    bounds = f"MIN({r}) AS lo, MAX({r}) AS hi" if r is not None else "NULL AS lo, NULL AS hi"
    return (f"SELECT COUNT(*) AS cnt, BIT_XOR(CAST(CRC32(CONCAT_WS(',', {', '.join(texts)}, CONCAT({nulls}))) "
            f"AS UNSIGNED)) AS checksum, {bounds} "
            f"FROM {quote_table(table.db_name, table.name)}" + (f" WHERE {where}" if where else ""))


def upstream_sums(client: Any, ts: int, table: TableInfo, chunks: Sequence[Chunk]) -> list[ChunkSum]:
    """Each chunk's numbers, computed by the upstream at ``ts`` (``client``: an ``UpstreamClient``)."""
    out = []
    for chunk in chunks:
        (row,) = client.query(checksum_sql(table, chunk, client.literal), at_ts=ts)
        out.append(ChunkSum(int(row["cnt"]), int(row["checksum"] or 0), row["lo"], row["hi"]))
    return out


def _row_crc(table: TableInfo) -> SparkColumn:
    from pyspark.sql import functions as F

    cols = pushdown_columns(table)
    assert cols is not None
    texts = [t for t in (_spark_text(c) for c in cols) if t is not None]
    nulls = F.concat(*[F.isnull(F.col(quote_ident(c.name))).cast("int").cast("string") for c in cols])  # the text's
    return F.crc32(F.concat_ws(",", *texts, nulls).cast("binary"))


def _in_chunk(column: str, chunk: Chunk) -> SparkColumn:
    from pyspark.sql import functions as F

    c = F.col(quote_ident(column))
    cond = F.lit(True)
    if chunk.lo is not None:
        cond = cond & (c >= F.lit(chunk.lo))
    if chunk.hi is not None:
        cond = cond & (c < F.lit(chunk.hi))
    return cond


def delta_sums(df: DataFrame, table: TableInfo, chunks: Sequence[Chunk]) -> list[ChunkSum]:
    """Each chunk's numbers over the Delta rows in ``df``, in one Spark job (rows tagged with their chunk)."""
    from pyspark.sql import functions as F

    rc = chunk_column(table)
    tag = F.lit(0)
    if rc is not None:
        tag = F.lit(None).cast("int")
        for i, chunk in reversed(list(enumerate(chunks))):
            tag = F.when(_in_chunk(rc, chunk), F.lit(i)).otherwise(tag)
    value = F.col(quote_ident(rc)) if rc is not None else F.lit(None).cast("bigint")
    rows = (df.select(tag.alias("chunk"), _row_crc(table).alias("crc"), value.alias("rc"))
            .groupBy("chunk")
            .agg(F.count(F.lit(1)).alias("cnt"), F.bit_xor("crc").alias("checksum"), F.min("rc").alias("lo"),
                 F.max("rc").alias("hi"))
            .collect())
    by_chunk = {r["chunk"]: ChunkSum(int(r["cnt"]), int(r["checksum"] or 0), r["lo"], r["hi"]) for r in rows}
    return [by_chunk.get(i, ChunkSum(0, 0)) for i in range(len(chunks))]


def _halves(table: TableInfo, chunk: Chunk, up: ChunkSum, got: ChunkSum) -> list[Chunk] | None:
    """The chunk cut in two at the middle of its integer range (None: a string range, or one value)."""
    rc = chunk_column(table)
    seen = [v for v in (up.lo, up.hi, got.lo, got.hi) if v is not None]
    if rc is None or not seen or not all(isinstance(v, int) for v in seen):
        return None
    lo = chunk.lo if isinstance(chunk.lo, int) else min(seen)
    hi = chunk.hi if isinstance(chunk.hi, int) else max(seen) + 1
    mid = (lo + hi) // 2
    if mid <= lo or mid >= hi:
        return None
    return [Chunk(chunk.lo, mid), Chunk(mid, chunk.hi)]


def differing_pieces(client: Any, ts: int, df: DataFrame, table: TableInfo, chunk: Chunk, up: ChunkSum,
                     got: ChunkSum, limit: int = MAX_DIFF_PIECES) -> list[Chunk]:
    """Pieces of a differing chunk of at most ``ROW_DIFF_ROWS`` rows whose numbers still differ (at most
    ``limit``), found by bisecting: only the halves that differ are cut further."""
    if up.count + got.count <= 2 * ROW_DIFF_ROWS:
        return [chunk]
    halves = _halves(table, chunk, up, got)
    if halves is None:
        return [chunk]
    out: list[Chunk] = []
    for half, u, g in zip(halves, upstream_sums(client, ts, table, halves), delta_sums(df, table, halves),
                          strict=True):
        if len(out) >= limit:
            break
        if not u.same(g):
            out.extend(differing_pieces(client, ts, df, table, half, u, g, limit - len(out)))
    return out or [chunk]


def chunk_filter(table: TableInfo, chunks: Sequence[Chunk]) -> SparkColumn:
    """Rows in any of ``chunks``."""
    from pyspark.sql import functions as F

    rc = chunk_column(table)
    if rc is None:
        return F.lit(True)
    cond = F.lit(False)
    for chunk in chunks:
        cond = cond | _in_chunk(rc, chunk)
    return cond
