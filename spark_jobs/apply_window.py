"""Apply one step of a window from the bronze changelog to the silver tables, exactly once.

A changefeed applies the window ``(checkpoint, T]`` in barrier order: for each DDL commit ts ``b``
in it, the DML with ``commit_ts < b`` (recorded as version ``b - 1``: it covers every change
``<= b - 1``), then the DDL at ``b`` (``spark_jobs.ddl_apply``, version ``b``); finally the DML
with ``commit_ts <= T`` (version ``T``). A DML step is ``apply_window(..., after_ts=a, upto_ts=u,
version=v)``: the events with ``a < commit_ts <= u``, recorded as ``v`` (default ``u``).

For each table: read the window's bronze events of its table id in that range, remove duplicates,
mount with the table's schema (the schema at the step's ts), drop what the event filters ignore,
split/order/net-effect, and MERGE into ``<sink>/<db>/<table>`` with the app transaction
``("cdcflow/<changefeed>", version)``. A table whose recorded version is already ``>= version`` is
skipped without reading anything, and so is a table whose directory a DROP/RENAME moved away at a
ts ``>= version`` (``spark_jobs.load.table_moves``): re-running any step is a no-op.

Event filters (``spark_jobs.normalize.event_filters``) are the ones the changefeed matched to each table,
given either way (both are used when both are given):

* ``event_filters={<table id (int or its string)>: [<filter dict>, ...]}`` next to ``tables``;
* a ``tables`` entry ``{"table": <TableInfo JSON or dict>, "event_filters": [...]}`` instead of a
  bare ``TableInfo`` (or its dict / JSON).

``ignore_txn_start_ts`` applies to every table.

``cdc_core.changefeed.spark_engine`` runs it in a task's application (``spark_jobs.job_server``); by hand::

    spark-submit spark_jobs/apply_window.py --args args.json --result result.json
    spark-submit spark_jobs/apply_window.py --sink S --changefeed CF --window-end-ts T \\
        --tables tables.json [--after-ts A] [--upto-ts U] [--version V]
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from cdc_core import failpoint
from cdc_core.changefeed.apply_result import no_events_reason, skipped
from cdc_core.changefeed.job_args.apply_window import ApplyArgs, TableEntry
from cdc_core.codec.sink_uri import app_id_for, at_barrier_app_id_for, table_path
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import TableInfo
from spark_jobs.job_io import read_job_args, write_result
from spark_jobs.load import history as load_history
from spark_jobs.load.delta_writer import DeltaRsWriter, DeltaWriter, get_writer
from spark_jobs.load.table_moves import read_move
from spark_jobs.normalize import mapped_values
from spark_jobs.normalize.bronze import read_bronze
from spark_jobs.normalize.event_filters import apply_event_filters, drops_rows, validate_filters
from spark_jobs.normalize.mount import decode_failure, mount
from spark_jobs.normalize.net_effect import dedupe, net_effect
from spark_jobs.normalize.net_effect_arrow import net_effect_arrow
from spark_jobs.normalize.window_events import events_by_table

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

TABLE_THREADS = 4  # tables merged at once: most of a small table's merge waits on Spark's scheduling and the commit
# Events of a step the driver holds to apply them in Arrow (at ~200-byte rows with both images, ~100 MB of values);
# the tables past it are applied in Spark. A window is cut at [window] max-events (1 M by default) anyway.
DRIVER_EVENTS = 250_000


def apply_window(
    sink: str,
    changefeed_id: str,
    window_end_ts: int,
    tables: Sequence[TableEntry],
    *,
    after_ts: int | None = None,
    upto_ts: int | None = None,
    version: int | None = None,
    at_barrier: bool = False,
    event_filters: Mapping[int | str, Sequence[Mapping[str, Any]]] | None = None,
    ignore_txn_start_ts: Sequence[int] = (),
    spark: SparkSession | None = None,
    writer: DeltaWriter | None = None,
    ignore_moves: bool = False,
    history: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """Apply the events ``after_ts < commit_ts <= upto_ts`` of window ``window_end_ts`` as ``version``.

    ``after_ts`` (exclusive, default: none) and ``upto_ts`` (inclusive, default ``window_end_ts``)
    bound the step; ``version`` (default ``upto_ts``) is the app-txn version it records and must be
    ``>= upto_ts`` (a recorded version claims every change up to it). ``at_barrier``: the step is the DML committed
    at a DDL's commit ts ``upto_ts`` (``cdc_core.changefeed.barriers``), recorded under the changefeed's at-barrier
    app id (``sink_uri.at_barrier_app_id_for``) since the DDL's own step records ``upto_ts`` under the main one; a
    table that recorded ``upto_ts`` under either has it applied.

    ``ignore_moves``: do not consult the move records of DROP/RENAME (a rebuild replays a table into its
    current path, where a move record of another, earlier table of that name means nothing).

    ``history``: the qualified names of the tables that keep an SCD type 2 history table (``[sink] history``): the
    step's every committed version is written there too (:mod:`spark_jobs.load.history`), exactly once by that
    table's own app transaction, and its result is the table's ``history`` entry.

    Returns ``{"<db>.<table>": {"table_id", "rows_upserted", "rows_deleted", "delta_version",
    "skipped", "applied_version", "reason", "changes", "path", "mapped"}}``; ``mapped``: ``{column: values}`` of
    the values the rows written hold as NULL because Delta cannot hold them (:mod:`spark_jobs.normalize.mapped_values`).
    """


    upto = window_end_ts if upto_ts is None else upto_ts
    ver = upto if version is None else version
    if upto > window_end_ts:
        raise ValueError(f"upto ts {upto} is after the window end {window_end_ts}")
    if after_ts is not None and after_ts > upto:
        raise ValueError(f"after ts {after_ts} is above the upto ts {upto}")
    if ver < upto:
        raise ValueError(f"version {ver} is below the upto ts {upto}: it would not cover what the step applies")
    if at_barrier and ver != upto:
        raise ValueError(f"the DML at a DDL's commit ts {upto} records that ts, not {ver}")
    entries = table_entries(tables, event_filters)
    ids = [t.id for t, _ in entries]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate table ids in {ids}")
    writer = writer or get_writer(spark=spark)  # a Spark session only when the writer needs one
    main_id = app_id_for(changefeed_id)
    app_id = at_barrier_app_id_for(changefeed_id) if at_barrier else main_id

    # Not a table a DROP/RENAME moved away after this step (its history moved with it: a re-run of the step must
    # not start another under the old name).
    kept = [(t, f) for t, f in entries if t.qualified_name in set(history)
            and (ignore_moves or _moved_at(sink, t, writer, ver) is None)]
    hist = load_history.apply_step(
        sink, changefeed_id, window_end_ts, kept, after_ts=after_ts, upto_ts=upto, version=ver, app_id=app_id,
        skip_at=(main_id,) if at_barrier else (), ignore_txn_start_ts=ignore_txn_start_ts,
        driver_events=DRIVER_EVENTS, spark=spark) if kept else {}
    results = _silver(sink, changefeed_id, window_end_ts, entries, after_ts=after_ts, upto=upto, ver=ver,
                      at_barrier=at_barrier, ignore_txn_start_ts=ignore_txn_start_ts, spark=spark, writer=writer,
                      ignore_moves=ignore_moves, app_id=app_id, main_id=main_id)
    for name, h in hist.items():
        results[name]["history"] = h
    return results


def _silver(sink: str, changefeed_id: str, window_end_ts: int, entries: list[tuple[TableInfo, list[dict[str, Any]]]],
            *, after_ts: int | None, upto: int, ver: int, at_barrier: bool, ignore_txn_start_ts: Sequence[int],
            spark: SparkSession | None, writer: DeltaWriter, ignore_moves: bool, app_id: str, main_id: str
            ) -> dict[str, dict[str, Any]]:
    """:func:`apply_window`'s silver tables."""
    from pyspark.sql import functions as F

    from spark_jobs.session import get_spark

    results: dict[str, dict[str, Any]] = {}
    pending: list[tuple[TableInfo, list[dict[str, Any]]]] = []
    for t, filters in entries:
        path = table_path(sink, t)
        recorded = writer.applied_version(path, main_id)
        reason = None
        if recorded is not None and ver <= recorded:
            reason = f"already applied up to {recorded}"
        elif at_barrier and (before_ddl := writer.applied_version(path, app_id)) is not None and ver <= before_ddl:
            reason = f"applied before its DDL, up to {before_ddl}"
        elif not ignore_moves and (moved := _moved_at(sink, t, writer, ver)) is not None:
            reason = f"the table left {path} at ts {moved['ts']} (to {moved['to']}); this step is older"
        if reason is not None:
            results[t.qualified_name] = skipped(t, path, reason, writer.table_version(path), recorded)
        else:
            pending.append((t, filters))
    if not pending:
        return results

    # A delta-rs writer merges from Arrow on the driver: the events of tables without row filters (Spark SQL
    # expressions) are read there in one pass and reduced in Arrow (spark_jobs.normalize.net_effect_arrow), no Spark job
    # per table; the tables past the driver's budget, and all of them for delta-spark, go through Spark.
    held: dict[str, pa.Table | None] = {}
    if isinstance(writer, DeltaRsWriter):
        for t, filters in pending:
            validate_filters(filters, t)
        light = [t for t, filters in pending if not drops_rows(filters)]
        held = events_by_table(sink, changefeed_id, window_end_ts, light, after_ts, upto, limit=DRIVER_EVENTS)
    in_spark = [(t, f) for t, f in pending if held.get(t.qualified_name) is None]
    present: set[int] = set()
    cached = False
    if in_spark:
        spark = spark or get_spark()  # started here, not for a window the driver applies in Arrow
        events = read_bronze(spark, sink, changefeed_id, window_end_ts,
                             table_ids=[pid for t, _ in in_spark for pid in t.physical_ids])
        if after_ts is not None:
            events = events.where(F.col("commit_ts") > F.lit(after_ts))
        events = events.where(F.col("commit_ts") <= F.lit(upto))
        # Tables without a row event in the step need no Spark work and no commit: one action over the table_id
        # column alone (Parquet reads just that column; no dedupe shuffle) finds them. Not committing is safe: a
        # re-run finds no events for them again.
        present = {int(r[0]) for r in events.select("table_id").distinct().collect()}
        events = dedupe(events)
        cached = sum(1 for t, _ in in_spark if present.intersection(t.physical_ids)) > 1
        if cached:
            events = events.cache()
    log.info("applying %d table(s) of window %d on the driver, %d in Spark", len(pending) - len(in_spark),
             window_end_ts, len(in_spark))

    def one(entry: tuple[TableInfo, list[dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
        t, filters = entry
        path = table_path(sink, t)
        on_driver = held.pop(t.qualified_name, None)  # the driver lets go of the events once the change set is made
        if on_driver is not None:
            changes = net_effect_arrow(on_driver, t, ignore_txn_start_ts) if on_driver.num_rows else None
            del on_driver
        elif present.intersection(t.physical_ids):
            changes = net_effect(apply_event_filters(mount(events, t), t, filters, ignore_txn_start_ts), t,
                                 deduplicated=True)
        else:
            changes = None
        if changes is None:
            writer.ensure_table(path, t)
            return t.qualified_name, skipped(t, path, no_events_reason(after_ts, upto), writer.table_version(path),
                                             writer.applied_version(path, main_id))
        persisted = None
        try:
            changes, mapped, persisted = _count_mapped(writer, t, changes)
            res = _merge(writer, path, t, changes, app_id, ver, filters)
        except Exception as exc:
            failure = decode_failure(exc)
            if failure is None:
                raise
            raise ChangefeedError(failure) from exc
        finally:
            if persisted is not None:
                persisted.unpersist()
        failpoint.hit("apply.table_committed")
        log.info(
            "applied window %d (%s, %d] as version %d to %s: +%d -%d (version %s, skipped=%s)",
            window_end_ts, after_ts, upto, ver, t.qualified_name, res.rows_upserted, res.rows_deleted,
            res.delta_version, res.skipped,
        )  # fmt: skip
        if mapped:
            log.warning("%s: values Delta cannot hold written as NULL, by column %s (counted in the data-quality "
                        "results)", t.qualified_name, mapped)
        return t.qualified_name, {"table_id": t.id, **res.to_dict(), "path": path, "mapped": mapped}

    try:
        # Tables are merged TABLE_THREADS at a time. Each commits on its own with the app transaction, so a failure
        # in one leaves the others' commits, which a re-run skips ("already applied").
        with ThreadPoolExecutor(max_workers=max(1, min(TABLE_THREADS, len(pending))),
                                thread_name_prefix="apply-window") as pool:
            results.update(pool.map(one, pending))
    finally:
        if cached:
            events.unpersist()
    return results


def _moved_at(sink: str, t: TableInfo, writer: DeltaWriter, ver: int) -> dict[str, Any] | None:
    """The move record of a table whose directory a DROP/RENAME moved away at a ts ``>= ver`` (None: not moved)."""
    if writer.table_version(table_path(sink, t)) is not None:
        return None
    moved = read_move(sink, t.db_name, t.name)
    return moved if moved is not None and int(moved["ts"]) >= ver else None


def _count_mapped(writer: DeltaWriter, t: TableInfo, changes: Any) -> tuple[Any, dict[str, int], Any]:
    """The change set to merge, ``{column: values}`` its upserts hold as NULL because Delta cannot hold them, and a
    persisted DataFrame to unpersist after the merge (or None). A Spark change set is counted where the merge reads
    it: the delta-rs writer collects it to Arrow anyway (done here, once), delta-spark's MERGE reads it persisted
    after the count; a table without a date column maps nothing and is not counted."""
    import pyarrow as pa

    if isinstance(changes, pa.Table):
        return changes, mapped_values.count_arrow(changes.column(mapped_values.MAPPED_COL), t), None
    if not mapped_values.can_map(t):
        return changes, {}, None
    if isinstance(writer, DeltaRsWriter):
        data = changes.toArrow()
        return data, mapped_values.count_arrow(data.column(mapped_values.MAPPED_COL), t), None
    kept = changes.persist()
    return kept, mapped_values.count_spark(kept, t), kept


def _merge(
    writer: DeltaWriter,
    path: str,
    t: TableInfo,
    changes: Any,
    app_id: str,
    version: int,
    filters: list[dict[str, Any]],
) -> Any:
    """``writer.merge``; a Spark failure of a table with filter expressions names them (an
    expression can fail at run time, e.g. an ANSI cast of a bad value)."""
    try:
        return writer.merge(path, t, changes, app_id=app_id, version=version)
    except Exception as exc:
        from pyspark.errors import PySparkException

        if not filters or not isinstance(exc, PySparkException):
            raise
        exprs = [f[k] for f in filters for k in sorted(f) if k.endswith("_expr") and f[k]]
        if not exprs:
            raise
        raise ChangefeedError(
            f"applying {t.qualified_name} failed while evaluating its event filter expressions {exprs}: {exc}"
        ) from exc


def table_entries(
    items: Sequence[TableEntry], by_id: Mapping[int | str, Sequence[Mapping[str, Any]]] | None = None
) -> list[tuple[TableInfo, list[dict[str, Any]]]]:
    """``(TableInfo, event filters)`` of each ``tables`` entry (see the module docstring)."""
    keyed = {int(k): [dict(f) for f in v or ()] for k, v in (by_id or {}).items()}
    out: list[tuple[TableInfo, list[dict[str, Any]]]] = []
    for it in items:
        filters: list[dict[str, Any]] = []
        if isinstance(it, Mapping) and "table" in it:
            filters = [dict(f) for f in it.get("event_filters") or ()]
            it = it["table"]
        info = _table_info(it)
        out.append((info, filters + keyed.get(info.id, [])))
    return out


def _table_info(it: Any) -> TableInfo:
    if isinstance(it, TableInfo):
        return it
    if isinstance(it, str):
        return TableInfo.from_json(it)
    return TableInfo.from_dict(dict(it))


def run_job(a: ApplyArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: ``ApplyArgs`` in, JSON out. Returns
    ``{"window_end_ts", "after_ts", "upto_ts", "version", "tables": {<db.table>: stats},
    "rows_upserted", "rows_deleted"}``.

    Spark starts only if the window needs it (:func:`apply_window`): a local engine's window that the driver
    applies in Arrow with delta-rs starts no JVM, which in a fresh process (each Airflow task, each
    ``cdcflow changefeed run``) is most of the step's time.
    """
    upto = a.window_end_ts if a.upto_ts is None else a.upto_ts
    version = upto if a.version is None else a.version
    stats = apply_window(
        a.sink_uri, a.changefeed_id, a.window_end_ts, a.tables, after_ts=a.after_ts, upto_ts=upto, version=version,
        at_barrier=a.at_barrier, event_filters=a.event_filters, ignore_txn_start_ts=a.ignore_txn_start_ts,
        writer=get_writer(a.writer, deletion_vectors=a.deletion_vectors, change_data_feed=a.change_data_feed),
        ignore_moves=a.ignore_moves, history=a.history,
    )  # fmt: skip
    return {
        "window_end_ts": a.window_end_ts,
        "after_ts": a.after_ts,
        "upto_ts": upto,
        "version": version,
        "tables": stats,
        "rows_upserted": sum(s["rows_upserted"] for s in stats.values()),
        "rows_deleted": sum(s["rows_deleted"] for s in stats.values()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit / CLI entry point.

    Either ``--args FILE [--result FILE]`` (the spark_engine protocol: ``run_job`` arguments as
    JSON) or explicit flags; the result JSON goes to ``--result`` or stdout.
    """
    p = argparse.ArgumentParser(prog="spark_jobs.apply_window", description="Apply a bronze window to Delta.")
    p.add_argument("--args", help="JSON file with the run_job arguments")
    p.add_argument("--result", help="write the result JSON here (default: stdout)")
    p.add_argument("--sink")
    p.add_argument("--changefeed")
    p.add_argument("--window-end-ts", type=int)
    p.add_argument("--tables", help="JSON file (or inline JSON) of a list of table infos")
    p.add_argument("--after-ts", type=int, help="apply commit_ts > this (exclusive)")
    p.add_argument("--upto-ts", type=int, help="apply commit_ts <= this (default: the window end)")
    p.add_argument("--version", type=int, help="app-txn version to record (default: --upto-ts)")
    p.add_argument("--ignore-txn-start-ts", type=int, nargs="*", default=[])
    p.add_argument("--writer", choices=["delta-rs", "delta-spark"])
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if ns.args:
        job_args = read_job_args(ApplyArgs, ns.args)
    else:
        missing = [o for o in ("sink", "changefeed", "window_end_ts", "tables") if getattr(ns, o) is None]
        if missing:
            p.error(f"either --args or all of {', '.join('--' + m.replace('_', '-') for m in missing)}")
        text = ns.tables if ns.tables.lstrip().startswith("[") else open(ns.tables, encoding="utf-8").read()
        job_args = ApplyArgs.from_dict({
            "sink_uri": ns.sink, "changefeed_id": ns.changefeed, "window_end_ts": ns.window_end_ts,
            "tables": json.loads(text), "after_ts": ns.after_ts, "upto_ts": ns.upto_ts,
            "version": ns.version, "ignore_txn_start_ts": ns.ignore_txn_start_ts, "writer": ns.writer,
        })  # fmt: skip
    write_result(run_job(job_args), ns.result)
    return 0


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
