"""SCD type 2 history tables: ``<sink>/<db>/<table>__history``, one row per committed version of a key.

A changefeed's ``[sink] history = [<table-filter rules>]`` (the syntax of ``[filter] rules``,
:class:`cdc_core.filter.table_filter.TableFilter`) names the tables that keep one. Its columns are the silver table's
plus ``__START_AT`` and ``__END_AT`` (the names of Databricks' AUTO CDC ``STORED AS SCD TYPE 2``): the commit ts
(TSO, BIGINT, as TiCDC's ``commit-ts``) from which the version held, and the commit ts of the change that replaced or
deleted it -- NULL while it is the key's current version (an *open* row). So, per key:

* an insert opens a row (``__START_AT`` = its commit ts);
* an update closes the open row (``__END_AT`` = its commit ts) and opens one with the new values;
* a delete closes the open row;
* an update that changes the Delta key (a DELETE + INSERT after the update split, seed 002) closes the old key's row
  and opens the new key's.

The versions come from every row event of the bronze changelog the step applies, not from the window's net effect:
two updates of a key in two transactions of one window are two rows, the first closed at the second's commit ts.
Within one transaction (one commit ts) only the key's last change counts (:func:`versions_arrow`: the net-effect
order -- deletes before inserts -- reduced per key and commit ts instead of per key).

**Exactly once.** Each write is one Delta commit carrying the application transaction the silver table's commit of
the same step carries (``cdcflow/<changefeed>`` or the at-barrier id, version = the step's version) and the
``cdcflow.ts`` commit metadata (:func:`spark_jobs.load.delta_writer.commit_metadata`); a step at or below the recorded
version is skipped, decided on the history table's own log (the silver commit and this one are two commits: a crash
between them re-runs only the missing one).

**DDL.** At a barrier (:func:`after_ddl`): TRUNCATE TABLE and DROP TABLE close every open row at the DDL's commit ts
(the rows left upstream without a row event); RENAME TABLE moves the history with the silver table; a change of the
columns is followed as the silver table follows it -- an added column is added (NULL in the rows before it: those
versions did not have it), a dropped column is dropped and a widened one cast, by a rewrite in one commit. A
snapshot load or a rebuild's base (:func:`open_snapshot`) replaces the history with one open row per key at the
load's ts.

**Engines.** History tables are written by delta-rs on the driver with either writer: the versions of a step are
reduced in Arrow when the events fit the driver's budget and no event filter needs Spark, else in Spark and
collected (the step's versions of one table, not the table).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdc_core.codec.sink_uri import HISTORY_SUFFIX, history_path, table_path
from cdc_core.codec.sql_ident import quote_ident
from cdc_core.errors import ChangefeedError
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import TableInfo
from spark_jobs.load.delta_writer import _same_type, commit_metadata
from spark_jobs.normalize.net_effect import COMMIT_TS_COL, OP_COL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

SUFFIX = HISTORY_SUFFIX
START_AT = "__START_AT"
END_AT = "__END_AT"
_ACTION = "__cdc_history_action"  # a merge source row either closes an open row or opens one
_CLOSE, _OPEN = "close", "open"


__all__ = ["END_AT", "START_AT", "history_path"]


def history_schema(table: TableInfo) -> pa.Schema:
    """The silver table's Arrow schema plus ``__START_AT`` / ``__END_AT`` (int64: TSO)."""
    return pa.schema([*table.arrow_schema(), pa.field(START_AT, pa.int64()), pa.field(END_AT, pa.int64())])


# --- versions of a step -----------------------------------------------------------------------------


def versions_arrow(events: pa.Table, table: TableInfo, ignore_txn_start_ts: Sequence[int] = ()) -> pa.Table:
    """Each committed version of each Delta key in ``events`` (bronze columns): the image columns, ``_cdc_op``
    ('delete' | 'upsert') and ``_cdc_commit_ts``, one row per (key, commit ts) -- the last change of the key in that
    transaction by the net effect's order (:mod:`spark_jobs.normalize.net_effect_arrow`)."""
    from spark_jobs.normalize.net_effect_arrow import ordered_changes, reduce_changes

    flat = ordered_changes(events, table, ignore_txn_start_ts)
    return reduce_changes(flat, table, [*table.delta_key(), COMMIT_TS_COL]).drop_columns(["_cdc_mapped"])


def versions_spark(mounted: DataFrame, table: TableInfo) -> pa.Table:
    """:func:`versions_arrow` of mounted (and event-filtered) events in Spark (:func:`spark_jobs.normalize.net_effect.
    split_and_order`), collected: one row per (key, commit ts)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from spark_jobs.normalize.mount import image_columns
    from spark_jobs.normalize.net_effect import KIND_DELETE, dedupe, split_and_order

    changes = split_and_order(dedupe(mounted), table)
    names = [n for n, _ in image_columns(table)]
    flat = changes.select(F.col("commit_ts").alias("__ts"), F.col("_kind").alias("__kind"),
                          F.col("key").alias("__key"), *[F.col("_img").getField(n).alias(n) for n in names])
    key = list(table.delta_key())
    for k in key:
        flat = flat.where(F.col(quote_ident(k)).isNotNull())
    w = Window.partitionBy(*[F.col(quote_ident(k)) for k in key], F.col("__ts")).orderBy(
        F.col("__kind").desc(), F.col("__key").desc())
    last = flat.withColumn("__rn", F.row_number().over(w)).where(F.col("__rn") == 1)
    out = last.select(*[F.col(quote_ident(n)) for n in names],
                      F.when(F.col("__kind") == KIND_DELETE, F.lit("delete")).otherwise(F.lit("upsert")).alias(OP_COL),
                      F.col("__ts").alias(COMMIT_TS_COL)).toArrow()
    schema = pa.schema([*table.arrow_schema(), pa.field(OP_COL, pa.string()), pa.field(COMMIT_TS_COL, pa.int64())])
    return pa.table([out.column(f.name).cast(f.type) for f in schema], schema=schema)


def history_rows(versions: pa.Table, table: TableInfo) -> tuple[pa.Table, pa.Table]:
    """``(opened, closes)`` of a step's versions: the rows to insert (each upsert version, ``__END_AT`` the key's
    next version's commit ts in the step, or NULL) and, per key, the commit ts of its first version in the step,
    which closes the row the key has open before it (key columns and ``__START_AT`` = that ts)."""
    import numpy as np
    import pyarrow.compute as pc

    key = list(table.delta_key())
    ordered = versions.sort_by([*[(k, "ascending") for k in key], (COMMIT_TS_COL, "ascending")])
    n = ordered.num_rows
    same_as_next = np.zeros(n, dtype=bool)  # row i and row i + 1 are versions of one key
    if n > 1:
        same = np.ones(n - 1, dtype=bool)
        for k in key:
            col = ordered.column(k)
            same &= pc.fill_null(pc.equal(col.slice(0, n - 1), col.slice(1)), False).to_numpy(zero_copy_only=False)
        same_as_next[:-1] = same
    ts = ordered.column(COMMIT_TS_COL).to_numpy(zero_copy_only=False).astype(np.int64)
    next_ts = np.concatenate([ts[1:], np.zeros(1, dtype=np.int64)]) if n else ts
    end = pa.array(next_ts, pa.int64(), mask=~same_as_next)
    first = np.concatenate([np.ones(1, dtype=bool), ~same_as_next[:-1]]) if n else np.zeros(0, dtype=bool)
    data = table.arrow_schema()
    with_end = ordered.append_column(END_AT, end)
    opened_rows = with_end.filter(pc.equal(ordered.column(OP_COL), "upsert"))
    opened = pa.table([*(opened_rows.column(f.name) for f in data), opened_rows.column(COMMIT_TS_COL),
                       opened_rows.column(END_AT)], schema=history_schema(table))
    firsts = ordered.filter(pa.array(first))
    closes = pa.table([*(firsts.column(k) for k in key), firsts.column(COMMIT_TS_COL)],
                      names=[*key, START_AT])
    return opened, closes


# --- writes ------------------------------------------------------------------------------------------


def _props(app_id: str, version: int, metadata: dict[str, str]) -> Any:
    from deltalake import CommitProperties, Transaction

    return CommitProperties(app_transactions=[Transaction(app_id=app_id, version=version)],
                            custom_metadata={**metadata, "cdcflow.history": "true"})


def ensure_history(path: str, table: TableInfo) -> None:
    """Create the history table (no deletion vectors: every reader reads it) when it does not exist."""
    from deltalake import DeltaTable

    if DeltaTable.is_deltatable(path):
        return
    if "://" not in path:
        os.makedirs(path, exist_ok=True)
    DeltaTable.create(path, history_schema(table), mode="ignore", name=f"{table.name}{SUFFIX}",
                      description=f"cdcflow SCD type 2 history of {table.qualified_name} (__START_AT/__END_AT: "
                                  "commit ts, TSO)")


def _recorded(dt: Any, app_ids: Sequence[str]) -> int | None:
    got = [v for v in (dt.transaction_version(a) for a in app_ids) if v is not None]
    return max(got) if got else None


def align_schema(path: str, table: TableInfo, props: Any | None = None) -> bool:
    """Make the history table's data columns those of ``table`` (the schema at the step's ts): added columns are
    added (a metadata commit: NULL in the existing rows), dropped or retyped ones rewrite the table in one commit
    (delta-rs 1.6 has no DROP COLUMN without column mapping; see :mod:`spark_jobs.ddl_apply`). Returns whether the
    table changed."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.schema import Field

    dt = DeltaTable(path)
    have = pa.schema(dt.schema().to_arrow())
    want = history_schema(table)
    have_types = {f.name: f.type for f in have}
    added = [f for f in want if f.name not in have_types]
    extra = [n for n in have.names if n not in want.names]
    retyped = [f for f in want if f.name in have_types and not _same_type(have_types[f.name], f.type)]
    if not (added or extra or retyped):
        return False
    if not extra and not retyped:
        # DeltaTable.alter.add_columns takes deltalake schema fields (delta-rs python/deltalake/table.py TableAlterer)
        dt.alter.add_columns([Field.from_arrow(f.with_nullable(True)) for f in added], commit_properties=props)
        return True
    rows = dt.to_pyarrow_table()
    cols = [rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
            for f in want]
    write_deltalake(dt, pa.table(cols, schema=want), mode="overwrite", schema_mode="overwrite",
                    commit_properties=props)
    log.info("history table %s follows the schema of %s: added %s, dropped %s, retyped %s", path,
             table.qualified_name, [f.name for f in added], extra, [f.name for f in retyped])
    return True


def write_versions(path: str, table: TableInfo, versions: pa.Table, *, app_id: str, version: int,
                   skip_at: Sequence[str] = ()) -> dict[str, Any]:
    """Close and open the rows of a step's ``versions`` (:func:`versions_arrow`) in one MERGE recording ``(app_id,
    version)``; skipped when ``app_id`` or one of ``skip_at`` recorded ``>= version``. Returns ``{"skipped",
    "reason", "opened", "closed", "delta_version"}``."""
    from deltalake import DeltaTable, write_deltalake

    ensure_history(path, table)
    dt = DeltaTable(path)
    recorded = _recorded(dt, [app_id, *skip_at])
    if recorded is not None and version <= recorded:
        return {"skipped": True, "reason": f"already applied up to {recorded}", "opened": 0, "closed": 0,
                "delta_version": dt.version()}
    props = _props(app_id, version, commit_metadata(table, version))
    if align_schema(path, table):
        dt = DeltaTable(path)
    opened, closes = history_rows(versions, table)
    schema = pa.schema(dt.schema().to_arrow())  # the Delta schema's own column order
    key = list(table.delta_key())
    # One source: the close rows (key, __START_AT = the first new version's ts) match the key's open row only; the
    # open rows match nothing (the predicate requires a close row) and are inserted. One commit, the app txn in it.
    close_src = pa.table([closes.column(f.name) if f.name in closes.column_names else pa.nulls(closes.num_rows, f.type)
                          for f in schema], schema=schema)
    source = pa.concat_tables([close_src, opened.select(schema.names).cast(schema)])
    source = source.append_column(_ACTION, pa.array([_CLOSE] * closes.num_rows + [_OPEN] * opened.num_rows,
                                                    pa.string()))
    before = dt.version()
    closed = inserted = 0
    if source.num_rows:
        on = " AND ".join([f"s.{_ACTION} = '{_CLOSE}'", f"t.{quote_ident(END_AT)} IS NULL",
                           *(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key)])
        metrics = (
            dt.merge(source, on, source_alias="s", target_alias="t", commit_properties=props, streamed_exec=False)
            .when_matched_update({quote_ident(END_AT): f"s.{quote_ident(START_AT)}"})
            .when_not_matched_insert({quote_ident(c): f"s.{quote_ident(c)}" for c in schema.names},
                                     predicate=f"s.{_ACTION} = '{_OPEN}'")
            .execute()
        )
        closed, inserted = int(metrics["num_target_rows_updated"]), int(metrics["num_target_rows_inserted"])
    dt = DeltaTable(path)
    if dt.version() == before:  # a MERGE that changed no file commits nothing: record the step anyway
        write_deltalake(dt, schema.empty_table(), mode="append", commit_properties=props)
        dt = DeltaTable(path)
    return {"skipped": False, "reason": None, "opened": inserted, "closed": closed, "delta_version": dt.version()}


def close_open_rows(path: str, ts: int, *, app_id: str, version: int, metadata: dict[str, str]) -> dict[str, Any]:
    """Set ``__END_AT = ts`` on every open row (TRUNCATE / DROP TABLE at ``ts``), one commit recording ``(app_id,
    version)``; skipped when it recorded ``>= version`` or there is no history table."""
    from deltalake import DeltaTable, write_deltalake

    if not DeltaTable.is_deltatable(path):
        return {"skipped": True, "reason": "no history table", "closed": 0}
    dt = DeltaTable(path)
    recorded = dt.transaction_version(app_id)
    if recorded is not None and version <= recorded:
        return {"skipped": True, "reason": f"already applied up to {recorded}", "closed": 0}
    props = _props(app_id, version, metadata)
    before = dt.version()
    metrics = dt.update(updates={quote_ident(END_AT): str(int(ts))}, predicate=f"{quote_ident(END_AT)} IS NULL",
                        commit_properties=props)
    dt = DeltaTable(path)
    if dt.version() == before:
        write_deltalake(dt, pa.schema(dt.schema().to_arrow()).empty_table(), mode="append", commit_properties=props)
    return {"skipped": False, "reason": None, "closed": int(metrics.get("num_updated_rows", 0))}


def open_snapshot(sink: str, table: TableInfo, *, ts: int, app_id: str, load_id: str) -> dict[str, Any]:
    """Replace the history of ``table`` with one open row per row of its silver table (just loaded from a snapshot
    base at ``ts``): ``__START_AT = ts``. One commit recording ``(app_id, ts)`` and ``cdcflow.load_id`` (a load whose
    id the history table committed already is skipped, as :func:`spark_jobs.snapshot_load.load_base` skips)."""
    from deltalake import DeltaTable, write_deltalake

    from spark_jobs.load import silver_read

    path = history_path(sink, table)
    if DeltaTable.is_deltatable(path) and any(c.get("cdcflow.load_id") == load_id
                                              for c in DeltaTable(path).history(50)):
        return {"skipped": True, "reason": f"already loaded ({load_id})"}
    ensure_history(path, table)
    silver = DeltaTable(table_path(sink, table))
    schema = history_schema(table)
    names = table.arrow_schema().names
    rows = pa.concat_tables([pa.Table.from_batches([b]).select(names) for b in silver_read.scan(silver, names)]) \
        if silver.version() is not None else table.arrow_schema().empty_table()
    rows = rows.cast(table.arrow_schema()) if rows.num_rows else table.arrow_schema().empty_table()
    out = pa.table([*rows.columns, pa.array([ts] * rows.num_rows, pa.int64()), pa.nulls(rows.num_rows, pa.int64())],
                   schema=schema)
    props = _props(app_id, ts, {**commit_metadata(table, ts), "cdcflow.load_id": load_id})
    write_deltalake(path, out, mode="overwrite", schema_mode="overwrite", commit_properties=props)
    return {"skipped": False, "reason": None, "opened": out.num_rows}


def open_rows(path: str, table: TableInfo) -> pa.Table:
    """The open rows (``__END_AT`` NULL) of a history table, in the silver table's columns."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    names = table.arrow_schema().names
    ds = DeltaTable(path).to_pyarrow_dataset()
    return ds.to_table(columns=names, filter=pc.field(END_AT).is_null())


# --- the apply step ---------------------------------------------------------------------------------


def apply_step(sink: str, changefeed_id: str, window_end_ts: int, tables: Sequence[tuple[TableInfo, list[dict[str,
               Any]]]], *, after_ts: int | None, upto_ts: int, version: int, app_id: str, skip_at: Sequence[str],
               ignore_txn_start_ts: Sequence[int], driver_events: int, spark: Any = None) -> dict[str, dict[str, Any]]:
    """Write the versions of ``after_ts < commit_ts <= upto_ts`` of the bronze window into the history table of
    each of ``tables`` (``(TableInfo, event filters)``), recorded as ``(app_id, version)``. The events are read
    on the driver for tables whose filters need no Spark (up to ``driver_events``), in Spark for the others.
    Returns ``{<db.table>: write_versions' result + "path"}``."""
    from deltalake import DeltaTable

    from spark_jobs.normalize.event_filters import drops_rows
    from spark_jobs.normalize.window_events import events_by_table

    out: dict[str, dict[str, Any]] = {}
    pending = []
    for t, filters in tables:
        path = history_path(sink, t)
        if DeltaTable.is_deltatable(path):
            recorded = _recorded(DeltaTable(path), [app_id, *skip_at])
            if recorded is not None and version <= recorded:
                out[t.qualified_name] = {"skipped": True, "reason": f"already applied up to {recorded}",
                                         "opened": 0, "closed": 0, "path": path}
                continue
        pending.append((t, filters))
    light = [t for t, f in pending if not drops_rows(f)]
    held = events_by_table(sink, changefeed_id, window_end_ts, light, after_ts, upto_ts, limit=driver_events) \
        if light else {}
    for t, filters in pending:
        events = held.pop(t.qualified_name, None)
        if events is not None:
            versions = versions_arrow(events, t, ignore_txn_start_ts)
        else:
            versions = _versions_in_spark(spark, sink, changefeed_id, window_end_ts, t, filters, after_ts, upto_ts,
                                          ignore_txn_start_ts)
        path = history_path(sink, t)
        if not versions.num_rows and DeltaTable.is_deltatable(path):
            # No commit for a step without a version of the table, as the silver apply: a re-run finds none again.
            out[t.qualified_name] = {"skipped": True, "reason": "no versions in the step", "opened": 0, "closed": 0,
                                     "path": path}
            continue
        try:
            res = write_versions(path, t, versions, app_id=app_id, version=version, skip_at=skip_at)
        except ChangefeedError:
            raise
        except Exception as exc:
            raise ChangefeedError(f"writing the history of {t.qualified_name} at {path} failed: {exc}") from exc
        out[t.qualified_name] = {**res, "path": path}
        log.info("history of %s, window %d (%s, %d] as %d: %s", t.qualified_name, window_end_ts, after_ts, upto_ts,
                 version, res)
    return out


def _versions_in_spark(spark: Any, sink: str, changefeed_id: str, window_end_ts: int, t: TableInfo,
                       filters: list[dict[str, Any]], after_ts: int | None, upto_ts: int,
                       ignore_txn_start_ts: Sequence[int]) -> pa.Table:
    from pyspark.sql import functions as F

    from spark_jobs.normalize.bronze import read_bronze
    from spark_jobs.normalize.event_filters import apply_event_filters
    from spark_jobs.normalize.mount import mount
    from spark_jobs.session import get_spark

    spark = spark or get_spark()
    events = read_bronze(spark, sink, changefeed_id, window_end_ts, table_ids=list(t.physical_ids))
    if after_ts is not None:
        events = events.where(F.col("commit_ts") > F.lit(after_ts))
    events = events.where(F.col("commit_ts") <= F.lit(upto_ts))
    return versions_spark(apply_event_filters(mount(events, t), t, filters, ignore_txn_start_ts), t)


# --- DDL ----------------------------------------------------------------------------------------------

_CLOSING = ("truncate table", "drop table")


def after_ddl(sink: str, job: DDLJob, before: TableInfo | None, after: TableInfo | None, *, app_id: str
              ) -> dict[str, Any] | None:
    """Follow a DDL applied to the silver table (:mod:`spark_jobs.ddl_apply`) in the history table, recorded as
    ``(app_id, job.finished_ts)``: TRUNCATE / DROP TABLE close every open row at the DDL's ts, RENAME TABLE moves
    the history table with the silver one, a column change aligns its columns (:func:`align_schema`). None when
    there is nothing to do."""
    from deltalake import DeltaTable

    ts = job.finished_ts
    meta = {"cdcflow.ddl": job.job_type, "cdcflow.job_id": str(job.job_id), "cdcflow.ts": str(ts)}
    if job.job_type in _CLOSING:
        info = before or after
        if info is None:
            return None
        return close_open_rows(history_path(sink, info), ts, app_id=app_id, version=ts, metadata=meta)
    if job.job_type == "rename table":
        if before is None or after is None:
            return None
        src, dst = history_path(sink, before), history_path(sink, after)
        if src != dst and "://" not in src and os.path.isdir(src) and not os.path.exists(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)  # Delta logs hold relative paths: the moved table stays valid
            return {"moved": dst}
        return None
    if after is None:
        return None
    path = history_path(sink, after)
    if not DeltaTable.is_deltatable(path):
        return None
    dt = DeltaTable(path)
    recorded = dt.transaction_version(app_id)
    if recorded is not None and ts <= recorded:
        return {"skipped": True, "reason": f"already applied up to {recorded}"}
    return {"aligned": align_schema(path, after, _props(app_id, ts, meta))}
