"""Data-quality checks of one table at a barrier, costing what the window changed, not what the table holds.

At ``ts``, for a table whose rows the window ``(after_ts, ts]`` changed:

1. **changed keys**: the Delta keys of the table's bronze events in ``(after_ts, ts]`` (both images of each event,
   mounted as the apply mounts them; a delete without an old value by its row key);
2. ``rows_equal`` (mode "checksum"): the upstream rows at those keys at ``ts`` -- batched point reads,
   ``POINT_BATCH`` keys per ``SELECT ... WHERE (k) IN (...)`` (TiDB's BatchPointGet) -- equal the Delta rows at
   those keys, compared by the row hash of :mod:`spark_jobs.data_quality`; a key the upstream no longer has must be
   absent from Delta;
3. ``delta_key_unique``, ``not_null:<column>``, ``unique:<index>`` (Great Expectations) on the Delta rows at those
   keys;
4. ``row_count_equals``: the row count in the Delta log's statistics (``numRecords`` of the live files, no data
   read) against ``SELECT COUNT(*)`` at ``ts``, which the upstream answers itself (TiKV's coprocessor);
5. ``schema_equals``: the Delta log's schema against the schema version's.

The Delta side reads only the files committed since the table's version at ``after_ts`` (every row written in the
window is in one of them: a merge rewrites the files it touches), filtered to the changed keys. A row the window
should have removed and left in an older file is not seen by 2 and 3; the count (4) sees it. Whole-table
comparisons -- every row, every unique index across all files -- are the full reconciliation's
(:mod:`spark_jobs.data_quality`, ``cdcflow verify`` and the maintenance DAG).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdc_core.client.tidb_sql import sql_literal
from cdc_core.errors import ChangefeedError
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import ROWID_COLUMN, Column, TableInfo
from cdc_core.tls import TlsConfig, client_tls, pinned
from spark_jobs import data_quality as dq
from spark_jobs.delta_writer import table_path
from spark_jobs.job_io import args_file_main

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

POINT_BATCH = 1_000
# Key column kinds whose values this job writes as SQL literals that select exactly the rows holding them.
_LITERAL_KINDS = frozenset({ct.INT, ct.YEAR, ct.DECIMAL, ct.DATETIME, ct.TIMESTAMP, ct.DATE, ct.TEXT, ct.BINARY,
                            ct.ENUM, ct.SET})


# --- changed keys -------------------------------------------------------------------------------


def changed_keys(spark: SparkSession, sink: str, changefeed_id: str, window_end_ts: int, table: TableInfo,
                 after_ts: int, ts: int) -> DataFrame:
    """The distinct Delta keys (one column per key column, Delta-typed) of ``table``'s events in
    ``(after_ts, ts]`` of the bronze window ending at ``window_end_ts``."""
    from pyspark.sql import functions as F

    from spark_jobs.bronze import read_bronze
    from spark_jobs.mount import HANDLE, NEW, OLD, key_only_image, mount

    events = read_bronze(spark, sink, changefeed_id, window_end_ts, table_ids=list(table.physical_ids))
    events = events.where((F.col("commit_ts") > after_ts) & (F.col("commit_ts") <= ts))
    m = mount(events, table)
    key = list(table.delta_key())
    images = [m.select(F.col(NEW).alias("i")), m.select(F.col(OLD).alias("i"))]
    by_key = key_only_image(table)
    if by_key is not None:  # a delete without an old value is known by its row key alone
        images.append(m.where(F.col(NEW).isNull() & F.col(OLD).isNull()).select(HANDLE).select(by_key.alias("i")))
    out = images[0]
    for more in images[1:]:
        out = out.unionByName(more)
    return out.where(F.col("i").isNotNull()).select(*[F.col(f"i.`{k}`").alias(k) for k in key]).distinct()


# --- the upstream side: batched point reads ---------------------------------------------------


def key_literal(col: Column, value: Any) -> str:
    """A Delta key value as the SQL literal that selects the upstream rows holding it."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, datetime):
        return sql_literal(value.strftime("%Y-%m-%d %H:%M:%S.%f"))
    if isinstance(value, date):
        return sql_literal(value.isoformat())
    if isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, str):
        return sql_literal(value)
    raise ChangefeedError(f"column {col.name!r}: no SQL literal for key value {value!r}")


def point_select(table: TableInfo, key: Sequence[str], values: Sequence[tuple[Any, ...]]) -> str:
    """``SELECT`` of the rows at ``values`` of the key columns ``key``."""
    cols = "*, `_tidb_rowid`" if ROWID_COLUMN in table.arrow_schema().names else "*"
    key_cols = [table.column(k) if k != ROWID_COLUMN else None for k in key]

    def lit(c: Column | None, v: Any) -> str:
        return str(int(v)) if c is None else key_literal(c, v)

    if len(key) == 1:
        where = f"`{key[0]}` IN ({', '.join(lit(key_cols[0], v[0]) for v in values)})"
    else:
        tuples = ", ".join("(" + ", ".join(lit(c, x) for c, x in zip(key_cols, v, strict=True)) + ")" for v in values)
        where = f"({', '.join(f'`{k}`' for k in key)}) IN ({tuples})"
    return f"SELECT {cols} FROM `{table.db_name}`.`{table.name}` WHERE {where}"


def fetch_points(pd_addr: str, tidb: str | None, tls: TlsConfig | None, ts: int, table_json: str, key: Sequence[str],
                 schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: batches of key values in, the upstream rows at them (at ``ts``) out, through one
    MySQL connection per task (with the driver's TLS files, ``tls``), ``POINT_BATCH`` keys per statement."""
    from cdc_core.client.upstream import UpstreamClient
    from spark_jobs.snapshot_load import _batched, _typed_row

    table = TableInfo.from_json(table_json)

    def rows() -> Iterator[tuple[Any, ...]]:
        with UpstreamClient(pd_addr, tidb=tidb) as client:
            for b in batches:
                values = list(zip(*(b.column(k).to_pylist() for k in key), strict=True))
                for i in range(0, len(values), POINT_BATCH):
                    for row in client.iter_rows(point_select(table, key, values[i:i + POINT_BATCH]), at_ts=ts):
                        yield _typed_row(table, row)

    with pinned(tls):
        yield from _batched(rows(), schema)


def upstream_at_keys(spark: SparkSession, pd_addr: str, tidb: str | None, ts: int, table: TableInfo,
                     keys: DataFrame) -> DataFrame:
    """The upstream rows at ``keys`` at ``ts`` (image columns). Keys of a type written as no exact literal (TIME,
    FLOAT, BIT, JSON) are matched against the table read chunk by chunk instead."""
    import functools

    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_jobs.snapshot_load import spark_schema, upstream_frame

    key = list(keys.columns)
    if any(k != ROWID_COLUMN and table.column(k).kind not in _LITERAL_KINDS for k in key):
        return upstream_frame(spark, pd_addr, ts, table, tidb=tidb).join(keys, on=key, how="left_semi")
    target = spark.createDataFrame([], spark_schema(table)).schema
    fetch = functools.partial(fetch_points, pd_addr, tidb, client_tls(), ts, table.to_json(), key,
                              to_arrow_schema(target, timezone="UTC"))
    return keys.mapInArrow(fetch, target)


def upstream_count(pd_addr: str, tidb: str | None, ts: int, table: TableInfo) -> int:
    from cdc_core.client.upstream import UpstreamClient

    with UpstreamClient(pd_addr, tidb=tidb) as client:
        rows = client.query(f"SELECT COUNT(*) AS n FROM `{table.db_name}`.`{table.name}`", at_ts=ts)
    return int(rows[0]["n"])


# --- the Delta side ---------------------------------------------------------------------------


def _live_files(path: str, version: int | None = None) -> pa.Table:
    import pyarrow as pa
    from deltalake import DeltaTable

    return pa.table(DeltaTable(path, version=version).get_add_actions(flatten=True))


def delta_count(path: str) -> int:
    """Rows of the Delta table from its log's file statistics (no data read); a file without ``numRecords``
    is counted from its Parquet footer."""
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    rows = dq.log_row_count(dt)
    return rows if rows is not None else int(dt.to_pyarrow_dataset().count_rows())


def delta_written_since(spark: SparkSession, path: str, table: TableInfo, after_ts: int, column: str,
                        values: pa.Array) -> tuple[DataFrame, int]:
    """The rows of the files committed after the table's version at ``after_ts`` (all files when it had none) whose
    ``column`` holds one of ``values`` (the changed keys' first column: a merge rewrites whole files, so the files
    a window wrote may hold the table; the filter runs in the Arrow scan, and only the rows at those keys reach
    Spark), as a DataFrame of the image columns, and the current Delta version."""
    import pyarrow as pa
    import pyarrow.dataset as pads
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    before = dq.version_as_of(path, after_ts)
    old = set(_live_files(path, before).column("path").to_pylist()) if before is not None else set()
    ds = dt.to_pyarrow_dataset()
    fragments = [f for f in ds.get_fragments() if f.path not in old]
    schema = table.arrow_schema()
    names = [n for n in schema.names if n in ds.schema.names]
    typ = ds.schema.field(column).type
    # An integer key is filtered in the scan. Others are not: the dataset's file statistics may type a string as
    # another Arrow string type than its schema does (string vs string_view), which Arrow cannot compare; Spark's
    # semi-join with the keys then does the filtering.
    wanted = pads.field(column).isin(values.cast(typ)) if pa.types.is_integer(typ) else None
    data = pads.FileSystemDataset(fragments, ds.schema, ds.format, ds.filesystem).to_table(columns=names,
                                                                                          filter=wanted)
    cols = [data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
            for f in schema]  # fmt: skip
    frame = spark.createDataFrame(pa.Table.from_arrays(cols, schema=schema), schema=dq.spark_schema_ddl(table))
    return frame, dt.version()


# --- the checks -------------------------------------------------------------------------------


def _rows_equal(table: TableInfo, key: list[str], delta: DataFrame, upstream: DataFrame) -> dq.ExpectationResult:
    """Per changed key, the Delta rows' hashes against the upstream rows'; sample keys of those that differ."""
    key_cols = dq.delta_key_columns(table)
    n, samples = dq.differing_keys(dq.keyed_hashes(delta, table, key_cols), dq.keyed_hashes(upstream, table, key_cols),
                                   key, count=True)
    bad = int(n or 0)
    return dq.ExpectationResult(
        expectation="rows_equal", success=bad == 0,
        details="" if bad == 0 else f"{bad} changed key(s) hold other rows in Delta than upstream",
        observed=bad, expected=0, sample_keys=samples)


def run_checks(
    sink: str, changefeed_id: str, window_end_ts: int, table: TableInfo, *, after_ts: int, ts: int, mode: dq.Mode,
    pd_addr: str | None, tidb: str | None = None, content: bool = True, spark: SparkSession | None = None,
) -> dq.CheckReport:
    """The checks of the module docstring for ``table`` at ``ts``. ``content=False`` (event filters drop its
    rows on purpose) leaves out ``rows_equal`` and ``row_count_equals``; mode "count" leaves out ``rows_equal``.
    The report is returned, never raised."""
    from deltalake import DeltaTable

    from spark_jobs.session import get_spark

    if mode not in dq.MODES:
        raise ValueError(f"data-quality mode must be one of {dq.MODES}, got {mode!r}")
    why = "changed keys" if content else "changed keys; no rows or count: event filters drop rows on purpose"
    report = dq.CheckReport(table=table.qualified_name, ts=ts, mode=f"{mode} ({why})", passed=True)
    if mode == "off":
        return report
    if content and pd_addr is None:
        raise ValueError("the changed-key checks need the upstream (pd_addr)")
    spark = spark or get_spark()
    path = table_path(sink, table)
    key = list(table.delta_key())
    took: dict[str, float] = {}
    mark = time.monotonic()

    def lap(step: str) -> None:
        nonlocal mark
        now = time.monotonic()
        took[step] = round(now - mark, 3)
        mark = now

    keys = changed_keys(spark, sink, changefeed_id, window_end_ts, table, after_ts, ts).cache()
    if not DeltaTable.is_deltatable(path):
        delta = spark.createDataFrame([], dq.spark_schema_ddl(table))
        report.delta_version, report.row_count = None, 0
    else:
        first = keys.select(key[0]).toArrow().column(0).combine_chunks()  # O(changed keys), in Arrow
        delta, report.delta_version = delta_written_since(spark, path, table, after_ts, key[0], first)
        report.row_count = delta_count(path)
    at_keys = delta.join(keys, on=key, how="left_semi").cache()
    lap("keys_and_delta")
    try:
        if content:
            assert pd_addr is not None
            want = upstream_count(pd_addr, tidb, ts, table)
            lap("upstream_count")
            ok = want == report.row_count
            report.results.append(dq.ExpectationResult(
                expectation="row_count_equals", success=ok, observed=report.row_count, expected=want,
                details="" if ok else f"Delta's log counts {report.row_count} rows, upstream {want}"))
            if mode == "checksum":
                up = upstream_at_keys(spark, pd_addr, tidb, ts, table, keys).cache()
                try:
                    result = _rows_equal(table, key, at_keys, up)
                    if not result.success and report.delta_version is not None:
                        # A difference: diagnosed against every file (a row the window's commits did not write
                        # is then "differs", not "missing"); the cost of a table read only when a check fails.
                        whole, _ = dq.read_silver(spark, sink, table)
                        result = _rows_equal(table, key, whole.join(keys, on=key, how="left_semi"), up)
                    report.results.append(result)
                finally:
                    up.unpersist()
                lap("rows_equal")
        report.results.append(dq._schema_result(sink, table, report.delta_version))
        report.results.extend(_frame_results(at_keys, table))
        lap("structural")
        report.passed = all(r.success for r in report.results)
    finally:
        at_keys.unpersist()
        keys.unpersist()
    log.info("window checks of %s at %d: %s (seconds per step)", table.qualified_name, ts, took)
    return report


def _frame_results(df: DataFrame, table: TableInfo) -> list[dq.ExpectationResult]:
    """Key uniqueness, NOT NULL and unique indexes of the Delta rows at the changed keys, in one GX run."""
    named = dq.structural_expectations(table)
    got = dict(zip(named, dq._validate(df, list(named.values())), strict=True))
    return [dq._uniqueness_result(got["key"], table), *dq.structural_results(got, df, table)]

TABLE_THREADS = 4  # tables checked at once by one job


def run_job(args: dict[str, Any]) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point. ``args``: ``sink_uri``, ``changefeed_id``,
    ``window_end_ts`` (the bronze window), ``tables`` (``{"table": TableInfo JSON, "content": bool}`` each),
    ``after_ts``, ``ts``, ``mode``, ``pd_addr`` and optional ``tidb``. Returns ``{"tables": {name:
    CheckReport.to_dict()}}``.

    One job checks every table a window touched: a window touching fifty tables is one Spark submission, not
    fifty, and its tables are checked ``TABLE_THREADS`` at a time (Spark runs the jobs of several threads at once;
    most of a small table's check is waiting on Spark's scheduling and the upstream, not computing)."""
    from concurrent.futures import ThreadPoolExecutor

    from spark_jobs.session import get_spark

    spark = get_spark()

    def one(entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        t = entry["table"]
        table = TableInfo.from_json(t) if isinstance(t, str | bytes) else TableInfo.from_dict(t)
        return table.qualified_name, run_checks(
            args["sink_uri"], args["changefeed_id"], int(args["window_end_ts"]), table,
            after_ts=int(args["after_ts"]), ts=int(args["ts"]), mode=args.get("mode", "checksum"),
            pd_addr=args.get("pd_addr"), tidb=args.get("tidb"), content=bool(entry.get("content", True)), spark=spark,
        ).to_dict()

    entries = list(args["tables"])
    with ThreadPoolExecutor(max_workers=max(1, min(TABLE_THREADS, len(entries))),
                            thread_name_prefix="window-checks") as pool:
        return {"tables": dict(pool.map(one, entries))}


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: ``--args FILE [--result FILE]``; exit 0 even when checks fail (the result says
    so); exit 1 only when the job itself fails."""
    return args_file_main("spark_jobs.window_checks", "Changed-key checks of a silver table.", run_job, argv)


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
