"""Data-quality checks of one table at a barrier, costing what the window changed, not what the table holds.

At ``ts``, for a table whose rows the window ``(after_ts, ts]`` changed:

1. **changed keys**: the Delta keys of the table's bronze events in ``(after_ts, ts]`` (both images of each event,
   mounted as the apply mounts them; a delete without an old value by its row key);
2. ``rows_equal`` (mode "checksum"): the upstream rows at those keys at ``ts`` -- batched point reads,
   ``upstream_read.POINT_BATCH`` keys per ``SELECT ... WHERE (k) IN (...)`` (TiDB's BatchPointGet) -- equal the Delta
   rows at those keys, compared by the row hash of :mod:`spark_jobs.checks.data_quality`; a key the upstream no longer
   has must be absent from Delta;
3. ``delta_key_unique``, ``not_null:<column>``, ``unique:<index>`` (Great Expectations) on the Delta rows at those
   keys;
4. ``row_count_equals``: the row count in the Delta log's statistics (``numRecords`` of the live files, no data
   read) against the upstream's count at ``ts`` without counting its table (``upstream_read.upstream_count_since``):
   the count checked at ``after_ts`` (Delta's then, :func:`~spark_jobs.checks.data_quality.count_as_of`) plus the
   changed keys the upstream holds at ``ts`` minus those it held at ``after_ts`` -- O(changed keys); a
   ``SELECT COUNT(*)`` (TiKV's coprocessor walking the table) only for a table's first checks and keys of a type
   written as no exact literal. The full reconciliation counts every row (``cdcflow verify``, the maintenance DAG);
5. ``schema_equals``: the Delta log's schema against the schema version's.

The Delta side reads only the files committed since the table's version at ``after_ts`` (every row written in the
window is in one of them: a merge rewrites the files it touches), filtered to the changed keys. A row the window
should have removed and left in an older file is not seen by 2 and 3; the count (4) sees it. Whole-table
comparisons -- every row, every unique index across all files -- are the full reconciliation's
(:mod:`spark_jobs.checks.data_quality`, ``cdcflow verify`` and the maintenance DAG).

Two engines run these checks. :func:`check_on_driver` runs them in Arrow on the driver, no Spark job, for a table
whose changed keys the driver holds (:mod:`spark_jobs.normalize.changed_keys` reads those of all a window's tables in
one pass); :func:`run_checks` runs them in Spark, for a table past the driver's key budget, keyed by a type without an
exact SQL literal, or failing a check on the driver (Spark's report then names the keys that differ).
:func:`run_job` puts each table where it belongs.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from cdc_core.changefeed.config import DqMode
from cdc_core.changefeed.job_args.window_checks import WindowChecksArgs, check_dq
from cdc_core.codec.sink_uri import table_path
from cdc_core.codec.sql_ident import quote_ident
from cdc_core.schema.model import TableInfo
from spark_jobs.checks import check_read_ahead, history_checks
from spark_jobs.checks import data_quality as dq
from spark_jobs.checks.check_read_ahead import TABLE_THREADS, UpstreamSide, driver_keys
from spark_jobs.job_io import args_file_main
from spark_jobs.upstream_read import (
    checkable_on_driver,
    resolved_tidb,
    upstream_at_keys,
    upstream_count_since,
    upstream_side,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

    from cdc_core.client.upstream import UpstreamClient

log = logging.getLogger(__name__)



# --- changed keys -------------------------------------------------------------------------------


def changed_keys(spark: SparkSession, sink: str, changefeed_id: str, window_end_ts: int, table: TableInfo,
                 after_ts: int, ts: int) -> DataFrame:
    """The distinct Delta keys (one column per key column, Delta-typed) of ``table``'s events in
    ``(after_ts, ts]`` of the bronze window ending at ``window_end_ts``."""
    from pyspark.sql import functions as F

    from spark_jobs.normalize.bronze import read_bronze
    from spark_jobs.normalize.mount import HANDLE, NEW, OLD, key_only_image, mount

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
    return out.where(F.col("i").isNotNull()).select(*[F.col(f"i.{quote_ident(k)}").alias(k) for k in key]).distinct()


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
    return rows if rows is not None else _scanned_rows(dt)


def _scanned_rows(dt: DeltaTable) -> int:
    """The live rows of a table whose log lacks a file's row count, by reading its first column."""
    from spark_jobs.load import silver_read

    first = dt.schema().to_arrow().names[0]
    return sum(b.num_rows for b in silver_read.scan(dt, [first]))


def rows_written_since(dt: DeltaTable, path: str, table: TableInfo, after_ts: int, keys: pa.Table) -> pa.Table:
    """The rows (silver schema) at ``keys`` (a table of the Delta key columns) of ``dt``'s files committed after the
    table's version at ``after_ts`` (all files when it had none). A merge rewrites whole files, so the files a
    window wrote may hold the table: they are scanned batch by batch, filtered on the first key column in the scan
    and joined with the keys batch by batch, so that the driver holds the rows at the keys, never what the files
    hold."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    from spark_jobs.load import silver_read

    schema = table.arrow_schema()
    key = list(keys.column_names)
    keys = keys.cast(table.key_schema())
    before = dq.version_as_of(dt, after_ts)
    if silver_read.has_deletion_vectors(dt):
        # The files the window wrote and those it gave a deletion vector: their key columns, then the live rows
        # at the keys (a marked file is read for its keys only, not rewritten or read whole).
        got = [silver_read.conform(t, schema) for t in silver_read.rows_at_keys(
            silver_read.table_dir(dt), silver_read.written_files(dt, before), keys, schema.names)]
        return pa.concat_tables(got) if got else schema.empty_table()
    old = set(_live_files(path, before).column("path").to_pylist()) if before is not None else set()
    ds = dt.to_pyarrow_dataset()
    fragments = [f for f in ds.get_fragments() if f.path not in old]
    names = [n for n in schema.names if n in ds.schema.names]
    typ = ds.schema.field(key[0]).type
    # An integer key is pre-filtered in the scan. Others are not: the dataset's file statistics may type a string as
    # another Arrow string type than its schema does (string vs string_view), which the scan's filter cannot compare.
    first = keys.column(key[0]).combine_chunks()
    wanted = pads.field(key[0]).isin(first.cast(typ)) if pa.types.is_integer(typ) else None
    scanner = pads.FileSystemDataset(fragments, ds.schema, ds.format, ds.filesystem).scanner(
        columns=names, filter=wanted, batch_readahead=1, fragment_readahead=1)
    kept = []
    for b in scanner.to_batches():
        if not b.num_rows:
            continue
        rows = silver_read.conform(pa.Table.from_batches([b]), schema)
        # the key columns joined, the rows taken: Acero's join carries no list column (a VECTOR's)
        hits = (rows.select(key).append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
                .join(keys, keys=key, join_type="left semi").column("__row"))
        if len(hits):
            kept.append(rows.take(hits))
    return pa.concat_tables(kept) if kept else schema.empty_table()


def delta_written_since(spark: SparkSession, path: str, table: TableInfo, after_ts: int, keys: pa.Table
                        ) -> tuple[DataFrame, int]:
    """:func:`rows_written_since` as a DataFrame of the image columns, and the current Delta version."""
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    rows = rows_written_since(dt, path, table, after_ts, keys)
    from spark_jobs.load import silver_read

    return silver_read.spark_frame(spark, rows, dq.spark_schema_ddl(table)), dt.version()


# --- the checks -------------------------------------------------------------------------------


def _mode_text(mode: str, content: bool) -> str:
    why = "changed keys" if content else "changed keys; no rows or count: event filters drop rows on purpose"
    return f"{mode} ({why})"


def _count_result(got: int, want: int) -> dq.ExpectationResult:
    ok = want == got
    return dq.ExpectationResult(expectation="row_count_equals", success=ok, observed=got, expected=want,
                                details="" if ok else f"Delta's log counts {got} rows, upstream {want}")


def _rows_equal_result(bad: int, samples: list[dict[str, Any]]) -> dq.ExpectationResult:
    return dq.ExpectationResult(
        expectation="rows_equal", success=bad == 0,
        details="" if bad == 0 else f"{bad} changed key(s) hold other rows in Delta than upstream",
        observed=bad, expected=0, sample_keys=samples)


def _rows_equal(table: TableInfo, key: list[str], delta: DataFrame, upstream: DataFrame) -> dq.ExpectationResult:
    """Per changed key, the Delta rows' hashes against the upstream rows'; sample keys of those that differ."""
    key_cols = dq.delta_key_columns(table)
    n, samples = dq.differing_keys(dq.keyed_hashes(delta, table, key_cols), dq.keyed_hashes(upstream, table, key_cols),
                                   key, count=True)
    return _rows_equal_result(int(n or 0), samples)


def run_checks(
    sink: str, changefeed_id: str, window_end_ts: int, table: TableInfo, *, after_ts: int, ts: int, mode: DqMode,
    pd_addr: str | None, tidb: str | None = None, content: bool = True, spark: SparkSession | None = None,
    derive_count: bool = False,
) -> dq.CheckReport:
    """The checks of the module docstring for ``table`` at ``ts``. ``content=False`` (event filters drop its
    rows on purpose) leaves out ``rows_equal`` and ``row_count_equals``; mode "count" leaves out ``rows_equal``.
    ``derive_count``: the upstream's count is derived from the count at ``after_ts`` (no DDL job touched the table
    since, ``WindowChecksArgs.derive_counts``), else it is a ``COUNT(*)``. The report is returned, never raised."""
    from deltalake import DeltaTable

    from spark_jobs.session import get_spark

    check_dq(mode, content, pd_addr)
    report = dq.CheckReport(table=table.qualified_name, ts=ts, mode=_mode_text(mode, content), passed=True)
    if mode == "off":
        return report
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
    keys_arrow = keys.toArrow()  # O(changed keys): the Delta side keeps only the rows at them, file batch by batch
    if not DeltaTable.is_deltatable(path):
        delta = spark.createDataFrame([], dq.spark_schema_ddl(table))
        report.delta_version, report.row_count = None, 0
    else:
        delta, report.delta_version = delta_written_since(spark, path, table, after_ts, keys_arrow)
        report.row_count = delta_count(path)
    at_keys = delta.cache()
    lap("keys_and_delta")
    try:
        if content:
            assert pd_addr is not None
            want = upstream_count_since(pd_addr, tidb, table, after_ts=after_ts, ts=ts, keys=keys_arrow,
                                        base=dq.count_as_of(path, after_ts) if derive_count else None)
            report.results.append(_count_result(report.row_count, want))
            lap("upstream_count")
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

# --- the checks on the driver -------------------------------------------------------------------



def same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Whether two tables of one schema hold the same rows, as multisets (at the changed keys, row for row what
    :func:`_rows_equal` compares by hash). False also when a value has no exact equality (a NaN, an unhashable
    value): :func:`run_checks` then compares the table in Spark.

    Both are sorted on every column in Arrow and compared column for column (no Python object per value, and the
    GIL released while the window's other tables are checked); a schema Arrow cannot sort (a nested type) is
    compared as Python tuples."""
    import pyarrow as pa

    if a.num_rows != b.num_rows:
        return False
    if a.schema.equals(b.schema):
        order = [(name, "ascending") for name in a.column_names]
        try:
            return bool(a.sort_by(order).equals(b.sort_by(order)))
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass

    def rows(t: pa.Table) -> Counter[tuple[Any, ...]]:
        def hashable(v: Any) -> Any:  # a VECTOR's elements
            return tuple(v) if isinstance(v, list) else v

        return Counter(tuple(map(hashable, r)) for r in zip(*(c.to_pylist() for c in t.columns), strict=True))

    try:
        return rows(a) == rows(b)
    except TypeError:
        return False


def _content_on_driver(
    sink: str, table: TableInfo, keys: pa.Table, *, after_ts: int, ts: int, mode: DqMode, pd_addr: str | None,
    tidb: str | None, content: bool, client: UpstreamClient | None, ahead: UpstreamSide | None = None,
    derive_count: bool = False,
) -> tuple[dq.CheckReport, pa.Table] | None:
    """:func:`check_on_driver` but the structural expectations: the report so far and the Delta rows at the keys
    (:func:`spark_jobs.checks.data_quality.structural_columns`), or None when a check failed. The upstream's count and
    rows at the keys come from ``ahead`` when it holds them (:mod:`spark_jobs.checks.check_read_ahead`)."""
    from deltalake import DeltaTable

    report = dq.CheckReport(table=table.qualified_name, ts=ts, mode=_mode_text(mode, content), passed=True)
    path = table_path(sink, table)
    dt = None
    started = time.monotonic()
    if DeltaTable.is_deltatable(path):
        dt = DeltaTable(path)
        report.delta_version = dt.version()
        counted = dq.log_row_count(dt)
        report.row_count = counted if counted is not None else _scanned_rows(dt)
        at_keys = rows_written_since(dt, path, table, after_ts, keys)
    else:
        report.row_count, at_keys = 0, table.arrow_schema().empty_table()
    delta_s = time.monotonic() - started
    upstream = "not read"  # where the slow-table line says the upstream's time went
    if content:
        assert pd_addr is not None
        name = table.qualified_name
        if ahead is not None and name in ahead.counts:
            counted, rows = ahead.counts[name], ahead.rows.get(name)
            upstream = "read ahead"
        else:
            counted, rows = upstream_side(pd_addr, tidb, ts, table, keys, mode, client, after_ts=after_ts,
                                          base=dq.count_as_of(path, after_ts) if derive_count else None)
            upstream = f"{time.monotonic() - started - delta_s:.3f} s"
        report.results.append(_count_result(report.row_count, counted))
        if mode == "checksum":
            assert rows is not None
            same = same_rows(at_keys, rows)
            report.results.append(_rows_equal_result(0 if same else 1, []))
    report.results.append(dq._schema_result(sink, table, report.delta_version, dt))
    took = time.monotonic() - started
    if took >= SLOW_TABLE_S:  # where a slow window's checks go
        log.info("window checks of %s on the driver: %.3f s for %d changed keys (Delta %.3f s, upstream %s)",
                 table.qualified_name, took, keys.num_rows, delta_s, upstream)
    if not all(r.success for r in report.results):
        return None
    return report, at_keys.select(dq.structural_columns(table))


def check_on_driver(
    sink: str, table: TableInfo, keys: pa.Table, *, after_ts: int, ts: int, mode: DqMode, pd_addr: str | None,
    tidb: str | None = None, content: bool = True, client: UpstreamClient | None = None, derive_count: bool = False,
) -> dq.CheckReport | None:
    """:func:`run_checks` for a table whose changed keys the driver holds (``keys``, from
    :mod:`spark_jobs.normalize.changed_keys`), every step on the driver in Arrow and no Spark job: the Delta rows at the
    keys from the files written since ``after_ts`` (delta-rs), the upstream's at them by batched point reads, compared
    row for row; Great Expectations on them as a pandas frame (:mod:`spark_jobs.checks.structural_checks`). Returns the
    report when every check passes, None when one fails: the caller then checks the table again with
    :func:`run_checks`, whose report says what differs and where (a failure is rare and worth its diagnosis; a
    window's checks that pass cost no Spark job)."""
    from spark_jobs.checks import structural_checks

    check_dq(mode, content, pd_addr)
    if mode == "off":
        return dq.CheckReport(table=table.qualified_name, ts=ts, mode=_mode_text(mode, content), passed=True)
    checked = _content_on_driver(sink, table, keys, after_ts=after_ts, ts=ts, mode=mode, pd_addr=pd_addr, tidb=tidb,
                                 content=content, client=client, derive_count=derive_count)
    if checked is None or structural_checks.failing({table.qualified_name: (table, checked[1])}):
        return None
    report, _ = checked
    report.results += structural_checks.passed_results(table)
    return report


# --- the job ----------------------------------------------------------------------------------

SLOW_TABLE_S = 1.0  # a table whose checks on the driver take longer is logged with where the time went


def _driver_checks(args: WindowChecksArgs, reports: dict[str, dict[str, Any]], client: UpstreamClient | None,
                   threads: int) -> None:
    """The tables of ``args`` checked on the driver into ``reports``: their content checks
    (:func:`_content_on_driver`) ``threads`` at a time, then the structural expectations of all of them in one GX
    run (:mod:`spark_jobs.checks.structural_checks`). A table left out -- a check failed, or could not run -- is the
    Spark checks' (see :func:`run_job`)."""
    from spark_jobs.checks import structural_checks

    sink, after_ts, ts, mode, pd_addr, tidb = args.sink_uri, args.after_ts, args.ts, args.mode, args.pd_addr, args.tidb
    if mode == "off":
        return
    started = time.monotonic()
    on_driver = [(t, c) for t, c in args.tables if checkable_on_driver(t)]
    ahead = check_read_ahead.take(args)
    keys = ahead.keys if ahead is not None else driver_keys(args)

    def driver(entry: tuple[TableInfo, bool]) -> tuple[TableInfo, tuple[dq.CheckReport, pa.Table] | None]:
        table, content = entry
        k = keys.get(table.qualified_name)
        if k is None:
            return table, None
        try:
            return table, _content_on_driver(sink, table, k, after_ts=after_ts, ts=ts, mode=mode, pd_addr=pd_addr,
                                             tidb=tidb, content=content, client=client, ahead=ahead,
                                             derive_count=args.derives_count(table))
        except Exception:  # the Spark checks then run, and raise what the table's checks cannot get past
            log.warning("window checks of %s on the driver failed; checking it in Spark", table.qualified_name,
                        exc_info=True)
            return table, None

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="window-checks") as pool:
        checked = {t.qualified_name: (t, c) for t, c in pool.map(driver, on_driver) if c is not None}
    content_s = time.monotonic() - started
    bad = structural_checks.failing({name: (t, c[1]) for name, (t, c) in checked.items()})
    for name, (table, (report, _)) in checked.items():
        if name not in bad:
            report.results += structural_checks.passed_results(table)
            reports[name] = report.to_dict()
    log.info("window checks at %d on the driver: %d table(s), %d changed keys, content %.3f s, structure %.3f s%s",
             ts, len(checked), sum(k.num_rows for k in keys.values() if k is not None), content_s,
             time.monotonic() - started - content_s, " (upstream side read ahead)" if ahead is not None else "")


def run_job(opts: WindowChecksArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: ``WindowChecksArgs`` in, JSON out: ``{"tables":
    {name: CheckReport.to_dict()}}``.

    One job checks every table a window touched. The window's changed keys of all of them are read in one pass over
    its bronze files (:mod:`spark_jobs.normalize.changed_keys`), and each table whose keys the driver holds is checked
    there (:func:`check_on_driver`, no Spark job: a window touching fifty tables costs fifty small reads, not the
    several hundred Spark jobs of checking each in Spark). The others -- past the driver's key budget, keyed by
    a type without an exact SQL literal, or failing a check -- are checked by :func:`run_checks` in Spark,
    ``TABLE_THREADS`` at a time (most of a table's check is waiting on Spark's scheduling and the upstream). The
    driver's checks share one upstream client: PD is asked for TiDB once, and each thread keeps its connection.
    What this process read ahead for the job while the window applied (:mod:`spark_jobs.checks.check_read_ahead`) is
    taken instead of reading it again."""
    sink, after_ts, ts, mode, pd_addr, tidb = opts.sink_uri, opts.after_ts, opts.ts, opts.mode, opts.pd_addr, opts.tidb
    reports: dict[str, dict[str, Any]] = {}
    threads = max(1, min(TABLE_THREADS, len(opts.tables)))
    with ExitStack() as stack:
        client = None
        if opts.reads_upstream:
            from cdc_core.client.upstream import UpstreamClient

            assert pd_addr is not None
            client = stack.enter_context(UpstreamClient(pd_addr, tidb=tidb))
            tidb = resolved_tidb(client, tidb)  # found once, before the threads share the client, for Spark's too
        _driver_checks(opts, reports, client, threads)
    in_spark = [(t, c) for t, c in opts.tables if t.qualified_name not in reports]
    log.info("window checks at %d: %d table(s) checked on the driver, %d in Spark", ts, len(reports), len(in_spark))
    if in_spark:
        from spark_jobs.session import get_spark

        spark = get_spark()

        def one(entry: tuple[TableInfo, bool]) -> tuple[str, dict[str, Any]]:
            table, content = entry
            return table.qualified_name, run_checks(
                sink, opts.changefeed_id, opts.window_end_ts, table, after_ts=after_ts, ts=ts, mode=mode,
                pd_addr=pd_addr, tidb=tidb, content=content, spark=spark,
                derive_count=opts.derives_count(table)).to_dict()

        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="window-checks") as pool:
            reports.update(pool.map(one, in_spark))
    for t, _ in opts.tables:  # a history table's open rows against the table (spark_jobs.checks.history_checks)
        if t.qualified_name in opts.history and opts.mode != "off":
            reports[t.qualified_name] = history_checks.add_to_report(sink, t, reports[t.qualified_name])
    return {"tables": {t.qualified_name: reports[t.qualified_name] for t, _ in opts.tables}}


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: ``--args FILE [--result FILE]``; exit 0 even when checks fail (the result says
    so); exit 1 only when the job itself fails."""
    return args_file_main("spark_jobs.checks.window_checks", "Changed-key checks of a silver table.", run_job,
                          WindowChecksArgs, argv)


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
