"""Apply one window (or one barrier segment of it) from the bronze changelog to the silver tables.

For each table: read the window's bronze events of its table id, keep those in the segment
``(checkpoint_ts, barrier_ts]`` (``barrier_ts < window_end_ts`` makes the upper bound exclusive:
DML at a DDL barrier ``b`` is applied with ``commit_ts < b``), remove duplicates, mount with the
table's schema, split/order/net-effect, and MERGE into ``<sink>/<db>/<table>`` with the app
transaction ``("cdcflow/<changefeed>", barrier ts)``. A table whose recorded version is already
``>=`` the barrier ts is skipped without reading anything.

Run under spark-submit (``cdc_core.changefeed.spark_engine`` does this with ``--args``)::

    spark-submit spark_jobs/apply_window.py --args args.json --result result.json
    spark-submit spark_jobs/apply_window.py --sink S --changefeed CF --window-end-ts T \\
        --tables tables.json [--checkpoint-ts C] [--barrier-ts B]

(``tables.json``: a JSON list of ``TableInfo`` dicts or JSON strings.)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cdc_core.schema.model import TableInfo
from spark_jobs.bronze import read_bronze
from spark_jobs.delta_writer import DeltaWriter, app_id_for, get_writer, table_path
from spark_jobs.job_io import read_args, write_result
from spark_jobs.mount import mount
from spark_jobs.net_effect import dedupe, net_effect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def apply_window(
    sink: str,
    changefeed_id: str,
    window_end_ts: int,
    tables: list[TableInfo],
    *,
    checkpoint_ts: int | None = None,
    barrier_ts: int | None = None,
    spark: SparkSession | None = None,
    writer: DeltaWriter | None = None,
) -> dict[str, dict[str, Any]]:
    """Apply the window ``window_end_ts`` of ``changefeed_id`` to every table in ``tables``.

    ``checkpoint_ts``: only events with ``commit_ts > checkpoint_ts`` (the part of the window an
    earlier barrier already applied is excluded). ``barrier_ts`` (default ``window_end_ts``): the
    app-txn version; below ``window_end_ts`` only ``commit_ts < barrier_ts`` is applied.

    Returns ``{"<db>.<table>": {"table_id", "rows_upserted", "rows_deleted", "delta_version",
    "skipped", "applied_version", "reason", "changes", "path"}}``.
    """
    from pyspark.sql import functions as F

    from spark_jobs.session import get_spark

    barrier = window_end_ts if barrier_ts is None else barrier_ts
    if barrier > window_end_ts:
        raise ValueError(f"barrier ts {barrier} is after the window end {window_end_ts}")
    if checkpoint_ts is not None and checkpoint_ts >= barrier:
        raise ValueError(f"checkpoint ts {checkpoint_ts} is not below the barrier ts {barrier}")
    ids = [t.id for t in tables]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate table ids in {ids}")
    spark = spark or get_spark()
    writer = writer or get_writer(spark=spark)
    app_id = app_id_for(changefeed_id)

    results: dict[str, dict[str, Any]] = {}
    pending: list[TableInfo] = []
    for t in tables:
        path = table_path(sink, t)
        recorded = writer.applied_version(path, app_id)
        if recorded is not None and barrier <= recorded:
            results[t.qualified_name] = {
                "table_id": t.id, "rows_upserted": 0, "rows_deleted": 0,
                "delta_version": writer.table_version(path), "skipped": True,
                "applied_version": recorded, "reason": f"already applied up to {recorded}",
                "changes": 0, "path": path,
            }  # fmt: skip
        else:
            pending.append(t)
    if not pending:
        return results

    events = read_bronze(spark, sink, changefeed_id, window_end_ts, table_ids=[t.id for t in pending])
    if checkpoint_ts is not None:
        events = events.where(F.col("commit_ts") > F.lit(checkpoint_ts))
    upper = F.col("commit_ts") < F.lit(barrier) if barrier < window_end_ts else F.col("commit_ts") <= F.lit(barrier)
    events = dedupe(events.where(upper))
    cached = len(pending) > 1
    if cached:
        events = events.cache()
    try:
        for t in pending:
            path = table_path(sink, t)
            changes = net_effect(mount(events, t), t, deduplicated=True)
            res = writer.merge(path, t, changes, app_id=app_id, version=barrier)
            if res.changes == 0 and not res.skipped:
                log.debug("no changes for %s in window %d", t.qualified_name, window_end_ts)
            results[t.qualified_name] = {"table_id": t.id, **res.to_dict(), "path": path}
            log.info(
                "applied window %d (barrier %d) to %s: +%d -%d (version %s, skipped=%s)",
                window_end_ts, barrier, t.qualified_name, res.rows_upserted, res.rows_deleted,
                res.delta_version, res.skipped,
            )  # fmt: skip
    finally:
        if cached:
            events.unpersist()
    return results


def _table_infos(items: Sequence[str | dict[str, Any] | TableInfo]) -> list[TableInfo]:
    out = []
    for it in items:
        if isinstance(it, TableInfo):
            out.append(it)
        elif isinstance(it, str):
            out.append(TableInfo.from_json(it))
        else:
            out.append(TableInfo.from_dict(it))
    return out


def run_job(args: dict[str, Any]) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point (JSON in, JSON out).

    ``args``: ``sink_uri``, ``changefeed_id``, ``window_end_ts``, ``tables`` (``TableInfo`` JSON
    strings or dicts), optional ``checkpoint_ts``, ``barrier_ts``, ``writer``. Returns
    ``{"window_end_ts", "barrier_ts", "tables": {<db.table>: stats}, "rows_upserted",
    "rows_deleted"}``.
    """
    from spark_jobs.session import get_spark

    spark = get_spark("cdcflow-apply-window")
    end = int(args["window_end_ts"])
    barrier = args.get("barrier_ts")
    stats = apply_window(
        args["sink_uri"], args["changefeed_id"], end, _table_infos(args["tables"]),
        checkpoint_ts=args.get("checkpoint_ts"), barrier_ts=barrier, spark=spark,
        writer=get_writer(args.get("writer"), spark),
    )  # fmt: skip
    return {
        "window_end_ts": end,
        "barrier_ts": end if barrier is None else int(barrier),
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
    p.add_argument("--checkpoint-ts", type=int)
    p.add_argument("--barrier-ts", type=int)
    p.add_argument("--writer", choices=["delta-rs", "delta-spark"])
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if ns.args:
        job_args = read_args(ns.args)
    else:
        missing = [o for o in ("sink", "changefeed", "window_end_ts", "tables") if getattr(ns, o) is None]
        if missing:
            p.error(f"either --args or all of {', '.join('--' + m.replace('_', '-') for m in missing)}")
        text = ns.tables if ns.tables.lstrip().startswith("[") else open(ns.tables, encoding="utf-8").read()
        job_args = {
            "sink_uri": ns.sink, "changefeed_id": ns.changefeed, "window_end_ts": ns.window_end_ts,
            "tables": json.loads(text), "checkpoint_ts": ns.checkpoint_ts, "barrier_ts": ns.barrier_ts,
            "writer": ns.writer,
        }  # fmt: skip
    write_result(run_job(job_args), ns.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
