"""Data-quality checks of a silver Delta table at a barrier, with Great Expectations 1.x.

The table is read with delta-rs into Arrow and handed to Spark with its exact schema
(``TIMESTAMP_NTZ`` for DATETIME), then validated by an ephemeral GX context on a Spark datasource:

1. the Delta key is unique (``ExpectColumnValuesToBeUnique`` / ``ExpectCompoundColumnsToBeUnique``), and so
   is every other PRIMARY / UNIQUE index of the schema version, NULLs aside as MySQL does (``unique:<index>``);
2. every NOT NULL column of the upstream schema version holds no NULL (``ExpectColumnValuesToNotBeNull``);
3. the row count equals the upstream snapshot's (``mode`` "count" or "checksum");
4. an order-independent checksum equals the upstream snapshot's (``mode`` "checksum"), validated
   as a one-row frame with ``ExpectColumnValuesToBeInSet``;
5. the Delta table's schema (column names, order and Arrow types, from its log) equals the schema version's
   (``schema_equals``). This one is compared directly, not through GX: the frame GX sees is already cast to the
   expected schema (so that 1-4 can run even on a drifted table), and the log is what every reader sees.

The checksum is computed the same way from upstream JSON rows (``SELECT *``: DECIMAL/DATETIME as
strings, ints as numbers) in Python and from the Delta table in Spark: every column of the table
(not ``_tidb_rowid``, which upstream rows lack) is canonicalized to a string -- integers in
decimal, DECIMAL in plain notation with exactly ``scale`` digits, DATETIME as
``YYYY-MM-DD HH:MM:SS.ffffff``, strings as they are -- a row is the concatenation of
``N`` (NULL) or ``S<length>:<text>`` per column in column order, its hash is the first 8 bytes of
SHA-256 as an unsigned integer, and the table checksum is the sum of row hashes mod 2^64 as 16 hex
digits. The sum makes it order-independent and still sensitive to duplicate rows.

When the count or checksum differs, sample offending keys are found by joining per-key row
hashes of both sides in Spark.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import os
import re
import struct
import threading
import uuid
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdc_core.changefeed.config import DqMode
from cdc_core.changefeed.job_args.base import check_mode
from cdc_core.changefeed.job_args.data_quality import ReconcileArgs
from cdc_core.changefeed.versions import version_as_of
from cdc_core.codec.sink_uri import table_path
from cdc_core.codec.sql_ident import quote_ident
from cdc_core.errors import DataQualityError
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import ROWID_COLUMN, Column, TableInfo
from spark_jobs.checks import history_checks
from spark_jobs.job_io import read_job_args, write_result
from spark_jobs.normalize.mount import image_columns

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

# GX logs its import and docs-registry book-keeping at INFO: hundreds of lines in every Airflow task log. Set
# here, not where GX is first imported: any function of this module may be the first to import it.
logging.getLogger("great_expectations").setLevel(logging.WARNING)

SAMPLE_KEYS = 10
_MOD = 1 << 64
_TS_FORMAT_SPARK = "yyyy-MM-dd HH:mm:ss.SSSSSS"


# --- canonical form and checksum ----------------------------------------------------------------


def canonical_value(col: Column, value: Any) -> str | None:
    """The canonical string of one value of ``col`` (None for NULL); accepts JSON forms or typed values, the
    upstream's or the lake's, under the lake's mapping (``column_type.arrow_value``): a date Delta cannot hold is
    NULL, a DECIMAL wider than 38 digits its text.

    Integers, YEAR and DECIMAL as their digits (no ``-0``; a wide DECIMAL with exactly its scale's), DATE as
    ``YYYY-MM-DD``, DATETIME/TIMESTAMP with six fraction digits, TIME as its nanoseconds, FLOAT/DOUBLE as their IEEE
    bits (exact; Spark's float printing is Java's), a VECTOR as ``[`` its elements' float32 bits ``]``, bytes
    (BINARY, BLOB, BIT) as lower-case hex, everything else as its text."""
    v = col.convert(value, ct.STORED_DATES)
    if v is None or ct.maps_to_null(col, v):
        return None
    k = col.kind
    if k in (ct.INT, ct.YEAR):
        return str(int(v))
    if k == ct.DECIMAL:
        d: Decimal = v
        if ct.decimal_as_text(col):
            return ct.decimal_text(d, col.scale or 0)
        return format(d.copy_abs() if d.is_zero() else d, "f")
    if k == ct.VECTOR:
        n = len(v)
        return "[" + ",".join(map(str, struct.unpack(f">{n}i", struct.pack(f">{n}f", *v.elements)))) + "]"
    if k in (ct.DATETIME, ct.TIMESTAMP):
        t: datetime = v
        return f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}.{t.microsecond:06d}"
    if k == ct.DATE:
        return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"
    if k == ct.TIME:
        return str(col.arrow_value(v))
    if k == ct.FLOAT:
        if col.type == "float":
            return str(struct.unpack(">i", struct.pack(">f", v))[0])
        return str(struct.unpack(">q", struct.pack(">d", v))[0])
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def _encode_row(parts: Sequence[str | None]) -> str:
    return "".join("N" if p is None else f"S{len(p)}:{p}" for p in parts)


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def _get(row: dict[str, Any], name: str) -> Any:
    if name in row:
        return row[name]
    lname = name.lower()
    for k, v in row.items():
        if k.lower() == lname:
            return v
    raise KeyError(name)


def row_hash(row: dict[str, Any], table: TableInfo) -> int:
    """The 64-bit hash of one upstream row (``{column name: value}``)."""
    return _hash(_encode_row([canonical_value(c, _get(row, c.name)) for c in table.columns]))


def table_checksum(rows: Iterable[dict[str, Any]], table: TableInfo) -> str:
    """Order-independent checksum of upstream rows (as ``SELECT *`` returns them)."""
    total = 0
    for r in rows:
        total = (total + row_hash(r, table)) % _MOD
    return f"{total:016x}"


def _canonical_col(col: Column) -> SparkColumn:
    from pyspark.sql import functions as F

    c = F.col(quote_ident(col.name))
    k = col.kind
    if k in (ct.DATETIME, ct.TIMESTAMP):
        return F.date_format(c, _TS_FORMAT_SPARK)  # the session time zone is UTC (spark_jobs.session)
    if k == ct.DATE:
        return F.date_format(c, "yyyy-MM-dd")
    if k == ct.DECIMAL and ct.decimal_as_text(col):
        return c  # held as TiDB prints it: exactly its scale's digits, no -0 (column_type.decimal_text)
    if k == ct.DECIMAL:
        return F.when(c == 0, F.abs(c)).otherwise(c).cast("string")  # no "-0.00"
    if k == ct.VECTOR:  # each element's float32 bits (Float.floatToIntBits keeps -0 apart, as the upstream's text)
        bits = F.transform(c, lambda e: F.call_function("java_method", F.lit("java.lang.Float"),
                                                          F.lit("floatToIntBits"), e).cast("string"))
        return F.when(c.isNull(), F.lit(None).cast("string")).otherwise(
            F.concat(F.lit("["), F.concat_ws(",", bits), F.lit("]")))
    if k == ct.FLOAT:
        box, method = ("java.lang.Float", "floatToIntBits") if col.type == "float" else \
            ("java.lang.Double", "doubleToLongBits")
        zero = F.lit(0.0).cast(col.spark_type())  # no -0.0
        bits = F.call_function("java_method", F.lit(box), F.lit(method), F.when(c == 0, zero).otherwise(c))
        return F.when(c.isNull(), F.lit(None).cast("string")).otherwise(bits)
    if k in (ct.BINARY, ct.BIT):
        return F.lower(F.hex(c))
    return c.cast("string")


def _encoded_col(cols: Sequence[Column]) -> SparkColumn:
    from pyspark.sql import functions as F

    pieces = []
    for col in cols:
        s = _canonical_col(col)
        tagged = F.concat(F.lit("S"), F.char_length(s).cast("string"), F.lit(":"), s)
        pieces.append(F.when(s.isNull(), F.lit("N")).otherwise(tagged))
    return F.concat(*pieces) if pieces else F.lit("")


def spark_row_hash(table: TableInfo) -> SparkColumn:
    """The row hash of :func:`row_hash` as a Spark ``DECIMAL(20,0)`` column expression."""
    from pyspark.sql import functions as F

    return F.conv(F.substring(F.sha2(_encoded_col(table.columns), 256), 1, 16), 16, 10).cast("DECIMAL(20,0)")


def spark_checksum(df: DataFrame, table: TableInfo) -> str:
    """:func:`table_checksum` of a DataFrame with the table's columns, computed in Spark."""
    from pyspark.sql import functions as F

    total = (
        df.select(spark_row_hash(table).alias("h"))
        .agg(F.coalesce(F.sum("h"), F.lit(0).cast("DECIMAL(38,0)")).alias("s"))
        .collect()[0]["s"]
    )
    return f"{int(total) % _MOD:016x}"


# --- reading the silver table -------------------------------------------------------------------


def spark_schema_ddl(table: TableInfo) -> str:
    return ", ".join(f"{quote_ident(n)} {t}" for n, t in image_columns(table))


# A silver table of up to this many rows (its Delta log's statistics) is read by delta-rs into Arrow on the driver
# and handed to Spark: no Delta log replay job, so a small table's checks take a fraction of a second. A larger one is
# read by Spark's Delta reader on the executors, a file at a time: a table of any size never passes through the driver
# (a 5 M-row table read through it ran a 1 GB local driver out of heap in ``make bench-scale``).
DRIVER_READ_ROWS = 100_000


def count_as_of(path: str, ts: int) -> int | None:
    """Rows of the Delta table at ``path`` as the changefeed had it at ``ts`` (:func:`version_as_of`), from its log's
    statistics; None when there is no such version or a file lacks its row count. The window checks' base count:
    the table at the previous barrier, which that barrier's checks compared with the upstream."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return None
    version = version_as_of(path, ts)
    return None if version is None else log_row_count(DeltaTable(path, version=version))


def log_row_count(dt: DeltaTable) -> int | None:
    """Rows of a Delta table version from its log's file statistics, deletion vectors counted (no data read); None
    when a file lacks them (:func:`spark_jobs.load.silver_read.log_row_count`)."""
    from spark_jobs.load import silver_read

    return silver_read.log_row_count(dt)


def read_silver(
    spark: SparkSession, sink: str, table: TableInfo, as_of_ts: int | None = None
) -> tuple[DataFrame, int | None]:
    """The silver table as a Spark DataFrame of its image columns (typed as the table's schema says; a column the
    Delta table lacks reads as NULL) and its Delta version. Small tables come through delta-rs and Arrow, others
    through Spark's Delta reader (:data:`DRIVER_READ_ROWS`).

    A table that does not exist yet reads as empty (version None). ``as_of_ts`` reads it as of that ts (Delta
    time travel to :func:`version_as_of`), for checks of a ts below the checkpoint.
    """
    df, version, _ = _read_silver(spark, sink, table, as_of_ts)
    return df, version


def _read_silver(
    spark: SparkSession, sink: str, table: TableInfo, as_of_ts: int | None = None
) -> tuple[DataFrame, int | None, pa.Table | None]:
    """:func:`read_silver`, and the rows as Arrow when the driver read them (a table of ``DRIVER_READ_ROWS`` at
    most, or none yet), else None."""
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    from spark_jobs.load import silver_read

    path = table_path(sink, table)
    schema = table.arrow_schema()
    version = None
    if DeltaTable.is_deltatable(path) and as_of_ts is not None:
        version = version_as_of(path, as_of_ts)
    if not DeltaTable.is_deltatable(path) or (as_of_ts is not None and version is None):
        empty = schema.empty_table()
        return spark.createDataFrame(empty, schema=spark_schema_ddl(table)), None, empty
    dt = DeltaTable(path, version=version)
    present = set(dt.schema().to_arrow().names)
    rows = log_row_count(dt)
    if rows is not None and rows <= DRIVER_READ_ROWS:
        data = silver_read.conform(silver_read.read_table(dt, [n for n in schema.names if n in present]), schema)
        return silver_read.spark_frame(spark, data, spark_schema_ddl(table)), dt.version(), data
    df = spark.read.format("delta").option("versionAsOf", dt.version()).load(path)
    return df.select(*[(F.col(quote_ident(n)) if n in present else F.lit(None)).cast(t).alias(n)
                       for n, t in image_columns(table)]), dt.version(), None


# --- the report ---------------------------------------------------------------------------------


@dataclass
class ExpectationResult:
    expectation: str
    success: bool
    details: str = ""
    observed: Any = None
    expected: Any = None
    sample_keys: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CheckReport:
    table: str
    ts: int
    mode: str
    passed: bool
    delta_version: int | None = None
    row_count: int | None = None
    results: list[ExpectationResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))

    @property
    def sample_keys(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for r in self.results:
            out.extend(k for k in r.sample_keys if k not in out)
        return out[:SAMPLE_KEYS]

    def raise_for_failure(self) -> None:
        if not self.passed:
            failed = [f"{r.expectation} ({r.details})" for r in self.results if not r.success]
            raise DataQualityError(
                f"data-quality check of {self.table} at ts {self.ts} failed: {'; '.join(failed)}"
                + (f"; sample keys {self.sample_keys}" if self.sample_keys else "")
            )


# --- GX -----------------------------------------------------------------------------------------


@functools.cache
def _gx_context() -> Any:
    """One ephemeral GX context per process (nothing is persisted; no analytics)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # no usage-statistics calls home
    warnings.filterwarnings("ignore", message=".*pandas >= 3.0.0.*", category=FutureWarning)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    return ctx


_GX_SOURCES = threading.Lock()  # the context's datasource registry is shared by the threads of a job
# Pandas datasources free for a run (each with its one asset and batch definition), taken and given back by the
# runs of all threads: registering a datasource and removing it again makes GX serialize its whole configuration
# twice, about half of a small frame's validation (tests/spark_jobs/checks/test_data_quality.py checks that a batch
# definition used again validates the frame it is given, not the one before).
_GX_PANDAS_FREE: list[Any] = []
_GX_PANDAS_MADE = itertools.count()


def _pandas_batch_definition() -> Any:
    with _GX_SOURCES:
        if _GX_PANDAS_FREE:
            return _GX_PANDAS_FREE.pop()
        ds = _gx_context().data_sources.add_pandas(name=f"cdcflow_pandas_{next(_GX_PANDAS_MADE)}")
        return ds.add_dataframe_asset(name="silver").add_batch_definition_whole_dataframe("whole")


def _validate(df: DataFrame | pd.DataFrame, expectations: list[Any], result_format: str | None = None) -> list[Any]:
    """Validate a Spark DataFrame (or a pandas one: a few rows on the driver) against expectations in one GX run;
    results in expectation order. ``result_format`` "BOOLEAN_ONLY" (success alone: no counts or sample values, fewer
    metrics) for a caller that looks again when one fails; SUMMARY with ``SAMPLE_KEYS`` sample values otherwise.

    A pandas frame is validated through a datasource of a pool kept for the process (one run at a time each); a
    Spark one through a datasource of its own (GX asset names are per datasource), removed afterwards, so that none
    outlives the Spark session it reads. Runs of several threads (the checks of several tables) validate at once,
    taking and registering their datasources one at a time.
    """
    import great_expectations as gx
    import pandas as pd

    suite = gx.ExpectationSuite(name=f"cdcflow_{uuid.uuid4().hex[:12]}", expectations=expectations)
    fmt = result_format or {"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE_KEYS}
    back: dict[str, str] = {}  # the names GX saw -> the table's
    if isinstance(df, pd.DataFrame):
        definition = _pandas_batch_definition()
        try:
            res = definition.get_batch(batch_parameters={"dataframe": df}).validate(suite, result_format=fmt)
        finally:
            # The datasource's engine keeps the frame and the metrics of its last run (under the one batch id all
            # its runs share, as a fallback for a metric a run did not compute): dropped, so that a pooled
            # datasource holds nothing between runs.
            engine = definition.data_asset.datasource.get_execution_engine()
            engine._metric_cache.clear()
            engine.batch_manager.reset_batch_cache()
            engine.batch_manager.batch_data_cache.clear()
            with _GX_SOURCES:
                _GX_PANDAS_FREE.append(definition)
    else:
        df, gx_expectations, back = _gx_column_names(df, expectations)
        suite = gx.ExpectationSuite(name=suite.name, expectations=gx_expectations)
        ctx = _gx_context()
        name = f"cdcflow_{uuid.uuid4().hex[:12]}"
        with _GX_SOURCES:
            ds = ctx.data_sources.add_spark(name=name)
        try:
            batch = (
                ds.add_dataframe_asset(name="silver")
                .add_batch_definition_whole_dataframe("whole")
                .get_batch(batch_parameters={"dataframe": df})
            )
            res = batch.validate(suite, result_format=fmt)
        finally:
            with _GX_SOURCES:
                ctx.data_sources.delete(name)
        for r in res.results if back else ():  # sample rows keyed by the table's names again
            samples = r.result.get("partial_unexpected_list")
            if samples:
                r.result["partial_unexpected_list"] = [
                    {back.get(c, c): x for c, x in v.items()} if isinstance(v, dict) else v for v in samples]
    # Matched by type and column(s): a suite holds one NOT NULL expectation per column, one per unique index.
    def key(kind: str, column: Any, columns: Any) -> tuple[str, Any]:
        if column is not None:
            return kind, back.get(column, column)
        return kind, tuple(back.get(c, c) for c in columns or ())

    by_key: dict[tuple[str, Any], Any] = {
        key(r.expectation_config.type, r.expectation_config.kwargs.get("column"),
            r.expectation_config.kwargs.get("column_list")): r
        for r in res.results
    }
    out = [by_key[key(e.expectation_type, getattr(e, "column", None), getattr(e, "column_list", None))]
           for e in expectations]
    for r in out:
        info = r.exception_info or {}
        if info.get("raised_exception"):
            raise DataQualityError(
                f"Great Expectations could not evaluate {r.expectation_config.type}: {info.get('exception_message')}"
            )
    return out


_GX_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_GX_COLUMN_ARGS = ("column", "column_A", "column_B")


def _gx_column_names(df: DataFrame, expectations: list[Any]) -> tuple[DataFrame, list[Any], dict[str, str]]:
    """``df`` and ``expectations`` with every column whose name is not a plain identifier renamed
    (``cdcflow_c<i>``), and ``{new name: name}``. GX's Spark engine refers to a column by ``F.col(name)``, which
    parses the name (a dot reaches into a struct, a backtick quotes): on a column ``a.b`` or ``a`b`` its NOT NULL and
    compound-uniqueness expectations gave wrong answers (checked on GX 1.x)."""
    rename = {n: f"cdcflow_c{i}" for i, n in enumerate(df.columns) if not _GX_PLAIN_NAME.match(n)}
    if not rename:
        return df, expectations, {}
    out = []
    for e in expectations:
        update: dict[str, Any] = {a: rename[v] for a in _GX_COLUMN_ARGS if (v := getattr(e, a, None)) in rename}
        if getattr(e, "column_list", None):
            update["column_list"] = [rename.get(c, c) for c in e.column_list]
        out.append(e.copy(update=update) if update else e)
    return df.toDF(*[rename.get(n, n) for n in df.columns]), out, {v: k for k, v in rename.items()}


def _jsonable(v: Any) -> Any:
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, datetime):
        return v.isoformat(sep=" ")
    return v


def _unique_expectation(table: TableInfo) -> Any:
    import great_expectations.expectations as gxe

    key = list(table.delta_key())
    if len(key) == 1:
        return gxe.ExpectColumnValuesToBeUnique(column=key[0])
    return gxe.ExpectCompoundColumnsToBeUnique(column_list=key)  # GX wants >= 2 columns here


def _other_unique_indexes(table: TableInfo) -> list[tuple[str, tuple[str, ...]]]:
    """The PRIMARY / UNIQUE indexes other than the Delta key, as ``(name, columns)``."""
    key = tuple(table.delta_key())
    return [(ix.name, tuple(ix.columns)) for ix in table.indexes
            if (ix.unique or ix.primary) and tuple(ix.columns) != key]


def _index_unique_expectation(columns: tuple[str, ...]) -> Any:
    import great_expectations.expectations as gxe

    if len(columns) == 1:  # GX leaves NULLs out of column map expectations, as a MySQL UNIQUE index does
        return gxe.ExpectColumnValuesToBeUnique(column=columns[0])
    return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(columns), ignore_row_if="any_value_is_missing")


def _unexpected_samples(r: Any, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The distinct offending values of a GX uniqueness result, as ``{column: value}``."""
    samples: list[dict[str, Any]] = []
    for v in r.result.get("partial_unexpected_list") or []:
        k = {c: _jsonable(v.get(c)) for c in columns} if isinstance(v, dict) else {columns[0]: _jsonable(v)}
        if k not in samples:
            samples.append(k)
    return samples


def _index_unique_result(name: str, columns: tuple[str, ...], r: Any) -> ExpectationResult:
    samples = _unexpected_samples(r, columns)
    n = r.result.get("unexpected_count", 0)
    return ExpectationResult(
        expectation=f"unique:{name}", success=bool(r.success),
        details="" if r.success else f"unique index {name} {list(columns)}: {n} rows share a value",
        observed=n, expected=0, sample_keys=samples,
    )


def _uniqueness_result(r: Any, table: TableInfo) -> ExpectationResult:
    key = list(table.delta_key())
    samples = _unexpected_samples(r, key)
    n = r.result.get("unexpected_count", 0)
    return ExpectationResult(
        expectation="delta_key_unique",
        success=bool(r.success),
        details="" if r.success else f"key {key}: {n} rows share a key with another row",
        observed=n,
        expected=0,
        sample_keys=samples,
    )


@dataclass
class Upstream:
    """The upstream side of a comparison: a DataFrame of the table's rows at ts (read in the job, chunk by chunk,
    by ``upstream_read.upstream_frame``) or, for callers holding few rows, a list of ``SELECT *`` rows."""

    frame: DataFrame | None = None
    rows: list[dict[str, Any]] | None = None
    pushed: PushedDown | None = None

    def count(self) -> int:
        if self.pushed is not None:
            return sum(u.count for u in self.pushed.upstream)
        return self.frame.count() if self.frame is not None else len(self.rows or [])

    def checksum(self, table: TableInfo) -> str:
        return spark_checksum(self.frame, table) if self.frame is not None else table_checksum(self.rows or [], table)

    def keyed(self, spark: SparkSession, table: TableInfo, key_cols: list[Column]) -> DataFrame:
        """``(k, h)``: each row's key (canonical JSON) and row hash, as :func:`_diff_keys` compares them."""

        if self.pushed is not None:
            return keyed_hashes(self.pushed.rows_of_pieces(spark, table), table, key_cols)
        if self.frame is not None:
            return keyed_hashes(self.frame, table, key_cols)
        pairs = [(json.dumps([canonical_value(c, _get(r, c.name)) for c in key_cols], separators=(",", ":"),
                             ensure_ascii=False), str(row_hash(r, table))) for r in self.rows or []]
        return spark.createDataFrame(pairs, "k STRING, h STRING")


@dataclass
class PushedDown:
    """The upstream side of a chunked checksum comparison (:mod:`spark_jobs.checks.chunk_checksum`): the table's chunks
    and the numbers the upstream computed for each at ``ts``; after :meth:`compare`, the pieces that differ."""

    pd_addr: str
    tidb: str | None
    ts: int
    table: TableInfo
    chunks: list[Any] = field(default_factory=list)
    upstream: list[Any] = field(default_factory=list)
    pieces: list[Any] = field(default_factory=list)

    @classmethod
    def read(cls, pd_addr: str, tidb: str | None, ts: int, table: TableInfo) -> PushedDown:
        from cdc_core.client.upstream import UpstreamClient
        from spark_jobs.checks import chunk_checksum as cc

        chunks = cc.plan(pd_addr, table)
        with UpstreamClient(pd_addr, tidb=tidb, timeout=3600.0) as client:  # a chunk's scan may take minutes
            sums = cc.upstream_sums(client, ts, table, chunks)
        return cls(pd_addr, tidb, ts, table, chunks, sums)

    def compare(self, df: DataFrame) -> ExpectationResult:
        """Every chunk's count and checksum, Delta's (one Spark job) against the upstream's, in one GX run over a
        frame of them; the differing chunks are bisected down to the pieces to diff row by row."""
        import great_expectations.expectations as gxe
        import pandas as pd

        from cdc_core.client.upstream import UpstreamClient
        from spark_jobs.checks import chunk_checksum as cc

        got = cc.delta_sums(df, self.table, self.chunks)
        # A row per chunk, on the driver: GX validates it as a pandas frame (over Spark, a few jobs for a few rows).
        frame = pd.DataFrame(
            [(i, f"{g.count}:{g.checksum:08x}", f"{u.count}:{u.checksum:08x}")
             for i, (g, u) in enumerate(zip(got, self.upstream, strict=True))],
            columns=["chunk", "delta", "upstream"])
        (r,) = _validate(frame, [gxe.ExpectColumnPairValuesToBeEqual(column_A="delta", column_B="upstream")])
        differ = [i for i, (g, u) in enumerate(zip(got, self.upstream, strict=True)) if not u.same(g)]
        whole = True  # every differing chunk's differing rows are in self.pieces
        if differ:
            with UpstreamClient(self.pd_addr, tidb=self.tidb, timeout=3600.0) as client:
                for i in differ:
                    left = cc.MAX_DIFF_PIECES - len(self.pieces)
                    if left <= 0:
                        whole = False
                        break
                    self.pieces.extend(cc.differing_pieces(client, self.ts, df, self.table, self.chunks[i],
                                                           self.upstream[i], got[i], left))
            whole = whole and len(self.pieces) < cc.MAX_DIFF_PIECES  # at the limit, a piece may have been left out
        n = len(self.chunks)
        if differ and whole and self._pieces_equal(df):
            # Upstream text the lake holds as NULL (a year-0 date, an invalid day: chunk_checksum's docstring) made
            # the chunks differ; their rows are equal under the lake's mapping.
            return ExpectationResult(
                expectation="checksum_equals", success=True,
                details=f"{len(differ)} of {n} chunk(s) differ in the pushed-down CRC32 only by values the lake holds "
                        "as NULL; their rows compare equal", observed=f"{n} of {n} chunks equal",
                expected=f"{n} of {n} chunks equal")
        return ExpectationResult(
            expectation="checksum_equals", success=bool(r.success) and not differ,
            details="" if not differ else f"{len(differ)} of {n} chunk(s) differ in count or CRC32 checksum",
            observed=f"{n - len(differ)} of {n} chunks equal", expected=f"{n} of {n} chunks equal")

    def _pieces_equal(self, df: DataFrame) -> bool:
        """Whether the rows of the differing pieces are equal on both sides, compared by the row hashes of the
        canonical form (under the lake's mapping); only tables that can hold a mapped date are compared so."""
        from spark_jobs.checks import chunk_checksum as cc
        from spark_jobs.normalize.mapped_values import can_map

        if not can_map(self.table):
            return False
        key_cols = delta_key_columns(self.table)
        n, _ = differing_keys(keyed_hashes(df.where(cc.chunk_filter(self.table, self.pieces)), self.table, key_cols),
                              keyed_hashes(self.rows_of_pieces(df.sparkSession, self.table), self.table, key_cols),
                              [c.name for c in key_cols], count=True)
        return n == 0

    def rows_of_pieces(self, spark: SparkSession, table: TableInfo) -> DataFrame:
        """The upstream rows of the differing pieces, read chunk by chunk (a few thousand rows each)."""
        from spark_jobs.upstream_read import upstream_frame

        return upstream_frame(spark, self.pd_addr, self.ts, table, tidb=self.tidb, chunks=self.pieces)


def _content_results(
    spark: SparkSession, df: DataFrame, table: TableInfo, upstream: Upstream, want_count: int, r_count: Any,
    mode: DqMode,
) -> list[ExpectationResult]:
    """Row count (from the GX result) and, in "checksum" mode, the checksum against the upstream rows."""
    import great_expectations.expectations as gxe
    import pandas as pd

    got_count = int(r_count.result.get("observed_value") or 0)
    out = [ExpectationResult(
        expectation="row_count_equals", success=bool(r_count.success),
        details="" if r_count.success else f"Delta has {got_count} rows, upstream {want_count}",
        observed=got_count, expected=want_count,
    )]
    if mode == "checksum" and upstream.pushed is not None:
        out.append(upstream.pushed.compare(df))
    elif mode == "checksum":
        want_sum = upstream.checksum(table)
        got_sum = spark_checksum(df, table)
        frame = pd.DataFrame({"checksum": [got_sum]})  # one row: a pandas frame, no Spark job
        (r_sum,) = _validate(frame, [gxe.ExpectColumnValuesToBeInSet(column="checksum", value_set=[want_sum])])
        out.append(ExpectationResult(
            expectation="checksum_equals", success=bool(r_sum.success),
            details="" if r_sum.success else f"Delta checksum {got_sum}, upstream {want_sum}",
            observed=got_sum, expected=want_sum,
        ))
    return out


def _schema_result(sink: str, table: TableInfo, version: int | None = None,
                   dt: DeltaTable | None = None) -> ExpectationResult:
    """The Delta log's schema (at ``version``, default the latest; of ``dt`` when the caller has the table open at
    it) against the schema version's (names, order, Arrow types; nullability aside)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    want = [(f.name, str(f.type)) for f in table.arrow_schema()]
    path = table_path(sink, table)
    if dt is None and DeltaTable.is_deltatable(path):
        dt = DeltaTable(path, version=version)
    got = [(f.name, str(f.type)) for f in pa.schema(dt.schema().to_arrow())] if dt is not None else []
    ok = got == want
    details = ""
    if not ok:
        missing = [f"{n} {t}" for n, t in want if (n, t) not in got]
        extra = [f"{n} {t}" for n, t in got if (n, t) not in want]
        details = f"Delta columns {got} != upstream {want}" + (f"; missing {missing}" if missing else "") + (
            f"; unexpected {extra}" if extra else "")
    return ExpectationResult(expectation="schema_equals", success=ok, details=details,
                             observed=[f"{n} {t}" for n, t in got], expected=[f"{n} {t}" for n, t in want])


def _not_null_result(column: str, r: Any, df: DataFrame | None, table: TableInfo) -> ExpectationResult:
    n = int(r.result.get("unexpected_count") or 0)
    samples: list[dict[str, Any]] = []
    if not r.success and df is not None:
        from pyspark.sql import functions as F

        key = list(table.delta_key())
        rows = df.where(F.col(quote_ident(column)).isNull()).select(*[F.col(quote_ident(k)) for k in key])
        rows = rows.limit(SAMPLE_KEYS)
        samples = [{k: _jsonable(v) for k, v in row.asDict().items()} for row in rows.collect()]
    return ExpectationResult(
        expectation=f"not_null:{column}", success=bool(r.success),
        details="" if r.success else f"NOT NULL column {column!r} holds {n} NULL(s)",
        observed=n, expected=0, sample_keys=samples,
    )


def delta_key_columns(table: TableInfo) -> list[Column]:
    """The columns of the Delta key, ``_tidb_rowid`` (not a table column) as a BIGINT one."""
    return [table.column(k) if k != ROWID_COLUMN else Column(0, ROWID_COLUMN, "bigint") for k in table.delta_key()]


def keyed_hashes(df: DataFrame, table: TableInfo, key_cols: Sequence[Column]) -> DataFrame:
    """``(k, h)``: each row's key (canonical JSON of ``key_cols``) and row hash, as :func:`differing_keys` takes."""
    from pyspark.sql import functions as F

    return df.select(F.to_json(F.array(*[_canonical_col(c) for c in key_cols])).alias("k"),
                     spark_row_hash(table).cast("string").alias("h"))


def differing_keys(actual: DataFrame, expected: DataFrame, names: Sequence[str], *, count: bool = False
                   ) -> tuple[int | None, list[dict[str, Any]]]:
    """Keys whose rows differ between two :func:`keyed_hashes` frames (Delta's, the upstream's): how many (with
    ``count``) and up to SAMPLE_KEYS of them, each with ``_problem`` "missing in Delta", "not upstream" or
    "differs"."""
    from pyspark.sql import functions as F

    def agg(d: DataFrame, name: str) -> DataFrame:
        return d.groupBy("k").agg(F.sort_array(F.collect_list("h")).alias(name))

    j = agg(actual, "a").join(agg(expected, "e"), "k", "full_outer").where(~F.col("a").eqNullSafe(F.col("e")))
    if count:
        j = j.cache()
    try:
        n = j.count() if count else None
        out = []
        for row in j.orderBy("k").limit(SAMPLE_KEYS).collect():
            side = "missing in Delta" if row["a"] is None else "not upstream" if row["e"] is None else "differs"
            out.append({**dict(zip(names, json.loads(row["k"]), strict=True)), "_problem": side})
    finally:
        if count:
            j.unpersist()
    return n, out


def _diff_keys(spark: SparkSession, df: DataFrame, upstream: Upstream, table: TableInfo) -> list[dict[str, Any]]:
    """Keys whose rows differ between the Delta table and the upstream rows (at most SAMPLE_KEYS)."""
    # Rows read by SELECT * lack _tidb_rowid: a table keyed by it is compared by whole rows.
    key = [] if ROWID_COLUMN in table.delta_key() else list(table.delta_key())
    key_cols = [table.column(k) for k in key] or list(table.columns)
    if upstream.pushed is not None:  # only the pieces whose checksums differ are compared row by row
        from spark_jobs.checks import chunk_checksum as cc

        key_cols = delta_key_columns(table)  # the pieces' upstream rows are read with _tidb_rowid
        df = df.where(cc.chunk_filter(table, upstream.pushed.pieces))
    _, out = differing_keys(keyed_hashes(df, table, key_cols), upstream.keyed(spark, table, key_cols),
                            [c.name for c in key_cols])
    return out


def not_null_columns(table: TableInfo) -> list[Column]:
    """The NOT NULL columns whose lake values are never NULL: a DATE/DATETIME/TIMESTAMP's may be, where the upstream
    holds a date Delta cannot hold (``column_type.maps_to_null``, counted where it is mapped); the row comparison
    checks those against the upstream's values instead."""
    return [c for c in table.columns if not c.nullable and c.kind not in (ct.DATE, ct.DATETIME, ct.TIMESTAMP)]


def structural_expectations(table: TableInfo) -> dict[str, Any]:
    """The GX expectations on a table's rows that need no upstream, by name: ``key`` (the Delta key unique),
    ``not_null:<column>`` per NOT NULL column, ``index:<name>`` per other PRIMARY / UNIQUE index."""
    import great_expectations.expectations as gxe

    named: dict[str, Any] = {"key": _unique_expectation(table)}
    named.update({f"not_null:{c.name}": gxe.ExpectColumnValuesToNotBeNull(column=c.name)
                  for c in not_null_columns(table)})
    named.update({f"index:{n}": _index_unique_expectation(cols) for n, cols in _other_unique_indexes(table)})
    return named


def structural_columns(table: TableInfo) -> list[str]:
    """The columns :func:`structural_expectations` read: the key, the NOT NULL columns, the unique indexes'."""
    named = [*table.delta_key(), *(c.name for c in not_null_columns(table))]
    named += [c for _, cols in _other_unique_indexes(table) for c in cols]
    return list(dict.fromkeys(named))


def validate_arrow(rows: pa.Table, table: TableInfo, named: dict[str, Any]) -> dict[str, Any]:
    """GX results by name of ``named`` (:func:`structural_expectations`, and a row count) on ``rows`` held by the
    driver, as a pandas frame of :func:`structural_columns`: each expectation a pass over the frame, where over a
    Spark frame GX's metrics are Spark jobs, two or three an expectation."""
    # Integers with NULLs stay exact Python ints (a float64 would make 2^53 and 2^53 + 1 one value).
    frame = rows.select(structural_columns(table)).to_pandas(integer_object_nulls=True)
    return dict(zip(named, _validate(frame, list(named.values())), strict=True))


def structural_results(got: dict[str, Any], df: DataFrame | None, table: TableInfo) -> list[ExpectationResult]:
    """The results of :func:`structural_expectations` (``got``: GX results by the same names), after the key's:
    NOT NULL, then unique indexes; the sample keys of a NULL are read from ``df`` (None: no samples)."""
    out = [_not_null_result(c.name, got[f"not_null:{c.name}"], df, table) for c in not_null_columns(table)]
    out.extend(_index_unique_result(n, cols, got[f"index:{n}"]) for n, cols in _other_unique_indexes(table))
    return out


def run_checks(
    sink: str,
    table: TableInfo,
    *,
    expected_rows: list[dict[str, Any]] | None = None,
    upstream: DataFrame | None = None,
    mode: DqMode,
    ts: int,
    spark: SparkSession | None = None,
    content: bool = True,
    as_of_ts: int | None = None,
    pushed: PushedDown | None = None,
) -> CheckReport:
    """Check the silver table of ``table`` against the upstream snapshot at ``ts``.

    ``mode``: "off" (no checks), "count" (key uniqueness + row count) or "checksum" (also the
    checksum). "count"/"checksum" need the upstream rows at ``ts``: ``upstream``, a DataFrame of them (what the
    job reads, chunk by chunk: ``upstream_read.upstream_frame``), or ``expected_rows``, a list of ``SELECT *``
    rows for callers holding few. The report is returned, never raised; call :meth:`CheckReport.raise_for_failure`
    to raise. ``content=False`` (a table whose row changes event filters drop on purpose) keeps the key, NOT NULL
    and schema checks and leaves out count and checksum; the upstream rows are then not needed.
    """
    check_mode(mode)
    report = CheckReport(table=table.qualified_name, ts=ts, mode=mode, passed=True)
    if mode == "off":
        return report
    if not content:
        report.mode = f"{mode} (no count/checksum: event filters drop rows on purpose)"
    elif expected_rows is None and upstream is None and pushed is None:
        raise ValueError(f"data-quality mode {mode!r} needs the upstream rows (upstream or expected_rows)")
    import great_expectations.expectations as gxe

    from spark_jobs.session import get_spark

    spark = spark or get_spark()
    up: Upstream | None = None
    if content:
        # The upstream frame is read once (it streams from TiDB) and kept by Spark, spilling to disk, for the
        # count, the checksum and, on a difference, the sample keys.
        up = Upstream(frame=upstream.select(*[quote_ident(c.name) for c in table.columns]).cache()
                      if upstream is not None else None, rows=expected_rows, pushed=pushed)
    df, report.delta_version, local = _read_silver(spark, sink, table, as_of_ts)
    df = df.cache()
    try:
        want_count = up.count() if up is not None else None
        # One GX run for every expectation on the table's frame, results by name.
        named = structural_expectations(table)
        if want_count is not None:
            named["count"] = gxe.ExpectTableRowCountToEqual(value=want_count)
        # A table the driver read whole is validated there; when an expectation fails, Spark validates it again
        # and its results name the keys, as for a table Spark read.
        got = validate_arrow(local, table, named) if local is not None else None
        if got is None or not all(r.success for r in got.values()):
            got = dict(zip(named, _validate(df, list(named.values())), strict=True))
        report.results.append(_uniqueness_result(got["key"], table))
        if up is None or want_count is None:
            report.row_count = local.num_rows if local is not None else int(df.count())
        else:
            content_results = _content_results(spark, df, table, up, want_count, got["count"], mode)
            report.results.extend(content_results)
            report.row_count = int(content_results[0].observed or 0)
        report.results.append(_schema_result(sink, table, report.delta_version))
        report.results.extend(structural_results(got, df, table))
        content_failed = [r for r in report.results
                          if not r.success and r.expectation in ("row_count_equals", "checksum_equals")]
        if content_failed and up is not None:
            samples = _diff_keys(spark, df, up, table)
            for r in content_failed:
                r.sample_keys = samples
        report.passed = all(r.success for r in report.results)
    finally:
        df.unpersist()
        if up is not None and up.frame is not None:
            up.frame.unpersist()
    return report


TABLE_THREADS = 4  # tables reconciled at once by one job


def _check_one(args: ReconcileArgs, table: TableInfo, content: bool) -> CheckReport:
    upstream, pushed = None, None
    if content and args.mode != "off" and args.pd_addr:
        from spark_jobs.checks import chunk_checksum
        from spark_jobs.session import get_spark
        from spark_jobs.upstream_read import upstream_frame

        if args.mode == "checksum" and chunk_checksum.pushdown_columns(table) is not None:
            # The upstream computes each chunk's count and checksum itself; its rows stay where they are.
            pushed = PushedDown.read(args.pd_addr, args.tidb, args.ts, table)
        else:
            upstream = upstream_frame(get_spark(), args.pd_addr, args.ts, table, tidb=args.tidb)
    return run_checks(args.sink_uri, table, expected_rows=args.expected_rows, upstream=upstream, mode=args.mode,
                      ts=args.ts, content=content, as_of_ts=args.as_of_ts, pushed=pushed)


def run_job(opts: ReconcileArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: ``ReconcileArgs`` in, JSON out. Returns
    the one table's :meth:`CheckReport.to_dict` (``passed``, ``results`` with ``expectation``, ``success``,
    ``details``, ``sample_keys``...) when given ``table``, else ``{"tables": {name: report}}``.

    Several tables are reconciled by one job, ``TABLE_THREADS`` at a time: a table's reconciliation is mostly
    small Spark jobs (GX's metrics, the chunk sums) and waits on the upstream's aggregates, so tables overlap
    where one table's jobs leave the cores idle, and one Spark application (under ``spark-submit``, one JVM)
    serves them all.
    """
    if opts.single:
        return _check_one(opts, *opts.tables[0]).to_dict()
    from concurrent.futures import ThreadPoolExecutor

    def one(entry: tuple[TableInfo, bool]) -> tuple[str, dict[str, Any]]:
        report = _check_one(opts, *entry).to_dict()
        if entry[0].qualified_name in opts.history and opts.as_of_ts is None and opts.mode != "off":
            report = history_checks.add_to_report(opts.sink_uri, entry[0], report)
        return entry[0].qualified_name, report

    with ThreadPoolExecutor(max_workers=max(1, min(TABLE_THREADS, len(opts.tables))),
                            thread_name_prefix="reconcile") as pool:
        return {"tables": dict(pool.map(one, opts.tables))}


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: ``--args FILE [--result FILE]``; exit 0 even when checks fail
    (the result says so); exit 1 only when the job itself fails."""
    import argparse

    p = argparse.ArgumentParser(prog="spark_jobs.checks.data_quality",
                                description="Data-quality checks of a silver table.")
    p.add_argument("--args", required=True, help="JSON file with the run_job arguments")
    p.add_argument("--result", help="write the result JSON here (default: stdout)")
    ns = p.parse_args(argv)
    write_result(run_job(read_job_args(ReconcileArgs, ns.args)), ns.result)
    return 0


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
