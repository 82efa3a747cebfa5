"""Apply one DDL job to the silver Delta tables at its barrier, exactly once.

The changefeed calls this at a DDL's commit ts ``b`` after every DML with ``commit_ts < b`` has
landed (recorded as version ``b - 1``) and before any later DML. Every Delta commit made here
carries the app transaction ``("cdcflow/<changefeed>", b)``; a table whose recorded version is
already ``>= b`` is left alone. Operations that make no Delta commit (directory moves, schema-only
changes) are idempotent by state instead.

=====================  ======================================================================
job                    what happens to Delta
=====================  ======================================================================
create schema          nothing (tables arrive with CREATE TABLE)
drop schema            every table under ``<sink>/<db>`` moves to the dropped area (below)
create table           ``<sink>/<db>/<table>`` is created with the table's schema (one commit)
drop table             the directory moves to ``<sink>/_cdcflow/dropped/<db>/<table>@<b>``; data
                       users trust is never deleted here (a maintenance job expires it)
truncate table         every row is deleted in one commit (the table id changes upstream; the
                       silver table stays where it is)
add partition          nothing (the new partition's rows come under its own id)
drop / truncate        the rows the dropped (truncated) partitions held are deleted in one commit,
partition              by the partitioning rule before the job (``PartitionRule.rows_predicate``, or
                       for KEY ``partition_rows``): upstream they leave without a row event
reorganize partition,  nothing: the rows are copied to new partitions (and, for the last two, a new
partition by, remove   table id) upstream, the logical table's rows unchanged; the schema storage
partitioning           follows the ids
exchange partition     upstream no row moves: the partition's key range becomes the normal table's and
                       the normal table's the partition's (ids swapped), so the rows that change sides
                       are read from the upstream at the barrier. Partitioned table (if replicated):
                       the partition's rows (the normal table's at ``b``) deleted by key, then the
                       normal table's rows at ``b - 1`` appended (the commit with the app transaction;
                       a re-run before it deletes and appends again). Normal table (if replicated):
                       overwritten with its rows at ``b`` (the partition's), one commit.
rename table           the directory moves to the new ``<db>/<table>`` (``os.replace``; Delta logs
                       use relative paths, so the table stays valid)
add column             NULL origin default (or an empty table): a metadata-only commit that adds
                       the column. Otherwise a rewrite (below) that fills ``origin_default`` in.
drop / rename column   a rewrite (below)
modify column          widening: INT->BIGINT and DECIMAL(p,s)->DECIMAL(p',s') with s'>=s and
                       p'-s'>=p-s are a rewrite with a cast; changes that keep the Delta type
                       (VARCHAR length, VARCHAR<->TEXT, nullability, defaults) are schema-only.
                       A column TiDB reorganized (a new column id swapped in) is the same column.
                       Anything narrowing or changing the type incompatibly raises
                       ``ChangefeedError``.
add / drop index,      nothing, unless the Delta key (PK, else first NOT NULL UK, else
add / drop primary     ``_tidb_rowid``) changes: then the silver table is re-keyed. To columns it
key, any other job     holds (a unique key, a primary key added), its rows stay and later windows merge
that changes the key   by the new key (a ``_tidb_rowid`` column it no longer needs is rewritten
or the columns         away); to ``_tidb_rowid`` (a non-clustered table's primary key dropped, no
                       NOT NULL unique key left: the old key may now repeat) the table is reloaded
                       from the upstream's rows at the barrier, with their handles, in one commit.
                       The same check guards every ALTER (e.g. MODIFY ... NOT NULL can turn a UNIQUE
                       index into the key).
=====================  ======================================================================

Why a rewrite for DROP/RENAME COLUMN. Delta can drop or rename a column without touching data
only under column mapping (``delta.columnMapping.mode = name``). delta-rs 1.6.6 has no DROP/RENAME
COLUMN operation at all (``TableAlterer`` offers ``add_columns`` but neither), and although it
creates and MERGEs into column-mapped tables, its pyarrow reader (``to_pyarrow_table`` /
``to_pyarrow_dataset``, which the data-quality job and many users read with) returns NULL for every
column of such a table -- checked on 1.6.6. So cdcflow keeps column mapping off and rewrites: the
table is streamed batch by batch from its current snapshot (``to_pyarrow_dataset().to_batches``),
each batch projected to the new schema (dropped columns left out, renamed ones relabelled, widened
ones cast, added ones filled with their origin default), and written with
``write_deltalake(mode="overwrite", schema_mode="overwrite")`` -- one commit that removes every old
file and adds the new ones, with the app transaction. Memory stays at one batch; the cost is a
full read + write of the table (the old files stay until ``VACUUM``). Measured on this 2-core box
(``tests/bench/ddl_rewrite_bench.py``, 1M rows, 6 columns, 31 MB of Parquet): DROP COLUMN
0.9 s warm / 2.8 s in a fresh process, RENAME COLUMN 0.6 s, ADD COLUMN with a default 1.0 s,
INT->BIGINT 0.8 s, ADD COLUMN with a NULL default 0.01 s (metadata only); 3M rows: DROP COLUMN 6.1 s.
Peak memory still grows with the table (+0.27 GB at 1M rows, +0.46 GB at 3M), so something
buffers beyond one batch -- probably delta-rs filling a whole output file up to
``target_file_size``; not yet verified.

Run under spark-submit like the other jobs::

    spark-submit spark_jobs/ddl_apply.py --args args.json --result result.json

(``args``: ``sink_uri``, ``changefeed_id``, ``job`` (``DDLJob.to_json()`` or its dict),
``before`` / ``after`` (``TableInfo`` JSON / dict or null).)
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cdc_core.changefeed.job_args.ddl_apply import DdlApplyArgs, Exchange, Upstream
from cdc_core.codec.sink_uri import app_id_for, check_lake_names, component_name, table_path
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.schema import column_type as ct
from cdc_core.schema.ddl_job import JOB_TYPES, MULTI_SCHEMA_CHANGE, DDLJob
from cdc_core.schema.model import ROWID_COLUMN, Column, TableInfo
from cdc_core.schema.partition import PartitionError
from cdc_core.schema.partition_rule import rule_of
from spark_jobs.job_io import args_file_main
from spark_jobs.load import partition_rows
from spark_jobs.load.delta_writer import check_schema, create_silver_table, merge_predicate
from spark_jobs.load.table_moves import database_dir, dropped_path, move_dir, record_move, silver_dir
from spark_jobs.normalize import mapped_values

log = logging.getLogger(__name__)

REWRITE_BATCH_ROWS = 65_536


@dataclass(frozen=True)
class _Ctx:
    sink: str
    app_id: str
    job: DDLJob
    upstream: Upstream | None = None
    changefeed_id: str = ""

    @property
    def ts(self) -> int:
        return self.job.finished_ts

    def props(self) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(
            app_transactions=[Transaction(app_id=self.app_id, version=self.ts)],
            custom_metadata={
                "cdcflow.ddl": self.job.job_type,
                "cdcflow.job_id": str(self.job.job_id),
                "cdcflow.ts": str(self.ts),
            },
        )

    def where(self, table: str) -> str:
        return f"{self.job.job_type.upper()} on {table} (job {self.job.job_id}, ts {self.ts})"


# Jobs that copy a table's rows to new physical ids (new partitions; PARTITION BY / REMOVE PARTITIONING a new table
# id too) and leave the rows as SQL sees them unchanged: the backfill's puts are under ids the table has only from
# the barrier on, and the old ranges go by delete-range, neither a change of the logical table.
_RELAYOUT = ("alter table reorganize partition", "alter table partition by", "alter table remove partitioning")
_RELAYOUT_NOTE = "nothing to write (the rows stay; only the physical ids that hold them changed)"


def apply_ddl(
    sink: str, changefeed_id: str, job: DDLJob, before: TableInfo | None, after: TableInfo | None,
    exchange: Exchange | None = None, upstream: Upstream | None = None,
) -> dict[str, Any]:
    """Apply ``job`` (``before``/``after``: the table just before / after it, None where there is
    none; ``exchange``: the normal table of an EXCHANGE PARTITION) to the silver tables of ``changefeed_id``;
    returns ``{"job_id", "job_type", "ts", "action", "skipped", "reason", "paths", "applied_version",
    "delta_version", "seconds"}``."""
    if job.job_type not in JOB_TYPES and (before is None or after is None):
        # Off the whitelist, a job is applied only when it changes a table's Delta key or columns (an ALTER)
        raise ChangefeedError(
            f"unsupported DDL {job.job_type!r} (job {job.job_id}, ts {job.finished_ts}): {job.query!r}"
        )
    ctx = _Ctx(sink, app_id_for(changefeed_id), job, upstream, changefeed_id)
    if after is not None:
        try:  # a name the lake cannot hold stops the changefeed at the job that brings it (create, rename, column)
            check_lake_names(after)
        except ChangefeedError as exc:
            raise ChangefeedError(f"{ctx.where(after.qualified_name)}: {exc}") from exc
    started = time.monotonic()
    handler = {
        "create schema": lambda: _result("nothing to write (tables come with CREATE TABLE)", []),
        "drop schema": lambda: _drop_schema(ctx),
        "create table": lambda: _create_table(ctx, _need(ctx, after, "after")),
        "drop table": lambda: _drop_table(ctx, before),
        "truncate table": lambda: _truncate_table(ctx, _need(ctx, after, "after")),
        "rename table": lambda: _rename_table(ctx, before, _need(ctx, after, "after")),
        "add partition": lambda: _result("nothing to write (the new partitions' rows come under their own ids)", []),
        "drop partition": lambda: _remove_partitions(ctx, _need(ctx, before, "before"), _need(ctx, after, "after")),
        "truncate partition": lambda: _remove_partitions(ctx, _need(ctx, before, "before"),
                                                         _need(ctx, after, "after")),
        **dict.fromkeys(_RELAYOUT, lambda: _result(_RELAYOUT_NOTE, [])),
    }.get(job.job_type)
    if job.job_type == "exchange partition":
        if exchange is None:
            raise ChangefeedError(f"{ctx.where(str(job.table_name))}: the normal table and the upstream are required")
        out = _exchange_partition(ctx, before, after, exchange)
    elif handler is not None:
        out = handler()
    else:  # column and index jobs
        out = _alter(ctx, _need(ctx, before, "before"), _need(ctx, after, "after"))
    out = {"job_id": job.job_id, "job_type": job.job_type, "ts": job.finished_ts, **out}
    out["seconds"] = round(time.monotonic() - started, 3)
    log.info("applied DDL %s at ts %d: %s", job.job_type, job.finished_ts, out["action"])
    return out


def _need(ctx: _Ctx, info: TableInfo | None, which: str) -> TableInfo:
    if info is None:
        raise ChangefeedError(f"{ctx.where(str(ctx.job.table_name))}: the table info {which} the job is required")
    return info


def _result(
    action: str,
    paths: list[str],
    *,
    skipped: bool = False,
    reason: str | None = None,
    applied: int | None = None,
    version: int | None = None,
) -> dict[str, Any]:
    return {
        "action": action, "skipped": skipped, "reason": reason, "paths": paths,
        "applied_version": applied, "delta_version": version,
    }  # fmt: skip


def _open(path: str) -> Any:
    """The DeltaTable at ``path`` or None."""
    from deltalake import DeltaTable

    return DeltaTable(path) if DeltaTable.is_deltatable(path) else None


def _done(ctx: _Ctx, dt: Any, path: str) -> dict[str, Any] | None:
    """The "already applied" result when the table recorded a version ``>= ts``."""
    recorded = dt.transaction_version(ctx.app_id)
    if recorded is not None and recorded >= ctx.ts:
        return _result(
            "already applied", [path], skipped=True, reason=f"already applied up to {recorded}",
            applied=recorded, version=dt.version(),
        )  # fmt: skip
    return None


def _committed(ctx: _Ctx, action: str, path: str) -> dict[str, Any]:
    dt = _open(path)
    return _result(action, [path], applied=dt.transaction_version(ctx.app_id), version=dt.version())


def _record_txn(ctx: _Ctx, dt: Any) -> None:
    """Record the app transaction with an empty append (for an operation that changed no file)."""
    from deltalake import write_deltalake

    empty = pa.schema(dt.schema().to_arrow()).empty_table()
    write_deltalake(dt, empty, mode="append", commit_properties=ctx.props())


# --- tables ---------------------------------------------------------------------------------------


def _create(ctx: _Ctx, path: str, table: TableInfo) -> None:
    create_silver_table(path, table, mode="error", commit_properties=ctx.props())


def _create_table(ctx: _Ctx, after: TableInfo) -> dict[str, Any]:
    path = table_path(ctx.sink, after)
    dt = _open(path)
    if dt is None:
        _create(ctx, path, after)
        return _committed(ctx, "created", path)
    done = _done(ctx, dt, path)
    if done is not None:
        return done
    # A table already at the path that this changefeed did not create at or after ts: adopt it only
    # when it is empty and has the new table's schema, never mix rows of two tables.
    try:
        check_schema(pa.schema(dt.schema().to_arrow()), after, path)
    except ChangefeedError as exc:
        raise ChangefeedError(f"{ctx.where(after.qualified_name)}: a different Delta table exists at {path}") from exc
    if dt.count() != 0:
        raise ChangefeedError(
            f"{ctx.where(after.qualified_name)}: a non-empty Delta table not written by this changefeed exists at "
            f"{path}; move it away"
        )
    _record_txn(ctx, dt)
    return _committed(ctx, "adopted an existing empty table", path)


def _drop_path(ctx: _Ctx, db: str, name: str, table_id: int | None) -> dict[str, Any]:
    """Move ``<sink>/<db>/<name>`` to the dropped area (idempotent by state)."""
    src = silver_dir(ctx.sink, db, name)
    dst = dropped_path(ctx.sink, db, name, ctx.ts)
    if os.path.exists(dst):
        return _result(f"already moved to {dst}", [dst], skipped=True, reason="already applied")
    dt = _open(src)
    if dt is not None:
        recorded = dt.transaction_version(ctx.app_id)
        if recorded is not None and recorded > ctx.ts:
            # A table re-created at the path after this DROP: the drop happened before it.
            return _result("already applied", [src], skipped=True, reason=f"{src} holds a table of ts {recorded}")
    # The move record first: a crash between the two leaves a record and an unmoved table, which a
    # re-run moves; never a moved table that a re-run DML step would re-create empty.
    record_move(ctx.sink, db, name, ts=ctx.ts, to=dst, job_id=ctx.job.job_id, table_id=table_id)
    if dt is None:
        return _result("nothing to drop (the table was never written)", [src])
    move_dir(src, dst)
    return _result(f"moved to {dst}", [src, dst])


def _tables_in(root: str) -> list[str]:
    """The names of the silver tables in a database's directory: its directories hold them encoded
    (``sink_uri.name_component``) and the paths a move takes are made of names; one cdcflow did not write stays."""
    names = []
    for n in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        try:
            name = component_name(n)
        except ValueError:
            continue
        if _open(os.path.join(root, n)) is not None:
            names.append(name)
    return names


def _drop_table(ctx: _Ctx, before: TableInfo | None) -> dict[str, Any]:
    db = before.db_name if before else ctx.job.schema_name
    name = before.name if before else ctx.job.table_name
    if not db or not name:
        raise ChangefeedError(f"{ctx.where('?')}: no table name in the job or the table info before it")
    return _drop_path(ctx, db, name, before.id if before else ctx.job.table_id)


def _drop_schema(ctx: _Ctx) -> dict[str, Any]:
    db = ctx.job.schema_name
    if not db:
        raise ChangefeedError(f"{ctx.where('?')}: no database name in the job")
    names = _tables_in(database_dir(ctx.sink, db))
    paths: list[str] = []
    for n in names:
        paths.extend(_drop_path(ctx, db, n, None)["paths"])
    return _result(f"moved {len(names)} table(s) of {db} to the dropped area", paths)


def _truncate_table(ctx: _Ctx, after: TableInfo) -> dict[str, Any]:
    return _delete_rows(ctx, after, None, "truncated")


def _delete_rows(ctx: _Ctx, after: TableInfo, predicate: str | Callable[[Any], object] | None,
                 action: str) -> dict[str, Any]:
    """Delete the rows ``predicate`` selects (every row: None; a callable deletes them itself, in at most one
    commit with the app transaction) in one commit with the app transaction."""
    path = table_path(ctx.sink, after)
    dt = _open(path)
    if dt is None:
        _create(ctx, path, after)
        return _committed(ctx, "created empty (the table was never written)", path)
    done = _done(ctx, dt, path)
    if done is not None:
        return done
    before_version = dt.version()
    if callable(predicate):
        predicate(dt)
    else:
        dt.delete(predicate, commit_properties=ctx.props())
    dt = _open(path)
    if dt.version() == before_version:  # nothing to delete: delta-rs makes no commit
        _record_txn(ctx, dt)
    return _committed(ctx, action, path)


def _remove_partitions(ctx: _Ctx, before: TableInfo, after: TableInfo) -> dict[str, Any]:
    """DROP / TRUNCATE PARTITION: the rows of every partition whose id left the table are deleted, in one commit.
    Upstream they go without a row event (TiDB removes the partition's key range), so the barrier deletes them by
    the partitioning rule of the table before the job: by its SQL predicate, or where it has none (KEY) by
    streaming the table through the rule (``spark_jobs.load.partition_rows``)."""
    part = before.partition
    if part is None:
        raise ChangefeedError(f"{ctx.job.job_type} (job {ctx.job.job_id}) on {before.qualified_name}, which was not "
                              "partitioned before it")
    kept = set(after.physical_ids)
    gone = [d for d in part.definitions if d.id not in kept]
    try:
        rule = rule_of(part, before.columns)
        predicate = rule.rows_predicate(gone)
    except PartitionError as exc:
        raise ChangefeedError(f"{ctx.job.job_type} (job {ctx.job.job_id}, ts {ctx.job.finished_ts}) on "
                              f"{before.qualified_name}: the rows of partition(s) {', '.join(d.name for d in gone)} "
                              f"cannot be told apart: {exc}") from exc
    action = f"deleted the rows of partition(s) {', '.join(d.name for d in gone)}"
    if predicate is None:
        return _delete_rows(ctx, after, lambda dt: partition_rows.remove_rows(dt, rule, gone, ctx.props()), action)
    return _delete_rows(ctx, after, predicate, action)


def _exchange_partition(ctx: _Ctx, before: TableInfo | None, after: TableInfo | None, ex: Exchange) -> dict[str, Any]:
    """EXCHANGE PARTITION on whichever of its two tables the changefeed replicates (see the module docstring)."""
    parts = []
    if before is not None and after is not None:
        parts.append(_exchange_into_partitioned(ctx, before, after, ex))
    if ex.replicate_normal:
        parts.append(_exchange_into_normal(ctx, ex))
    if not parts:
        return _result("nothing to write (neither table is replicated)", [], skipped=True, reason="not replicated")
    out = dict(parts[-1])
    out.update(action="; ".join(p["action"] for p in parts), paths=[x for p in parts for x in p["paths"]],
               skipped=all(p["skipped"] for p in parts))
    return out


def _open_or_create(path: str, table: TableInfo) -> Any:
    """The DeltaTable at ``path``, created empty (no app transaction) when there is none."""
    dt = _open(path)
    if dt is None:
        create_silver_table(path, table, mode="ignore")
        dt = _open(path)
    return dt


def _exchange_into_partitioned(ctx: _Ctx, before: TableInfo, after: TableInfo, ex: Exchange) -> dict[str, Any]:
    from deltalake import write_deltalake

    from spark_jobs.upstream_read import upstream_reader

    where = ctx.where(after.qualified_name)
    path = table_path(ctx.sink, after)
    dt = _open_or_create(path, after)
    done = _done(ctx, dt, path)
    if done is not None:
        return done
    part = before.partition
    gone = [d for d in part.definitions if d.id == ctx.job.partition_id] if part is not None else []
    if not gone:
        raise ChangefeedError(f"{where}: partition id {ctx.job.partition_id} is not a partition of the table before "
                              "the job")
    # The partition's rows are the normal table's at b (no row moved): deleted by their keys, so that no rule is
    # needed (RANGE COLUMNS on dates, expressions) and rows an earlier WITHOUT VALIDATION put there go too. No app
    # transaction on this commit: the append records the job, so a re-run that finds it unrecorded knows no append
    # landed, deletes again (nothing left, or the same rows) and appends.
    leaving = upstream_reader(ex.pd_addr, ex.tidb, ctx.ts, ex.normal_after, after)
    dt.merge(leaving, merge_predicate(after), source_alias="s", target_alias="t").when_matched_delete().execute()
    rows = upstream_reader(ex.pd_addr, ex.tidb, ctx.ts - 1, ex.normal_before, after)
    write_deltalake(path, rows, mode="append", commit_properties=ctx.props())
    return _committed(ctx, f"partition {gone[0].name} now holds {ex.normal_before.qualified_name}'s rows", path)


def _exchange_into_normal(ctx: _Ctx, ex: Exchange) -> dict[str, Any]:
    from deltalake import write_deltalake

    from spark_jobs.upstream_read import upstream_reader

    target = ex.normal_target
    path = table_path(ctx.sink, target)
    dt = _open_or_create(path, target)
    done = _done(ctx, dt, path)
    if done is not None:
        return done
    rows = upstream_reader(ex.pd_addr, ex.tidb, ctx.ts, ex.normal_after, target)
    write_deltalake(path, rows, mode="overwrite", commit_properties=ctx.props())
    return _committed(ctx, f"{target.qualified_name} now holds the exchanged partition's rows", path)


def _rename_table(ctx: _Ctx, before: TableInfo | None, after: TableInfo) -> dict[str, Any]:
    old_db = before.db_name if before else ctx.job.old_schema_name
    old_name = before.name if before else ctx.job.old_table_name
    if not old_db or not old_name:
        raise ChangefeedError(f"{ctx.where(after.qualified_name)}: the old table name is unknown")
    src, dst = silver_dir(ctx.sink, old_db, old_name), silver_dir(ctx.sink, after.db_name, after.name)
    if src == dst:
        return _result("same name", [dst])
    src_dt, dst_dt = _open(src), _open(dst)
    if dst_dt is not None:
        recorded = src_dt.transaction_version(ctx.app_id) if src_dt is not None else None
        if src_dt is None or (recorded is not None and recorded > ctx.ts):
            return _result(f"already moved to {dst}", [dst], skipped=True, reason="already applied")
        raise ChangefeedError(
            f"{ctx.where(after.qualified_name)}: both {src} and {dst} hold Delta tables; cannot rename over a table"
        )
    record_move(ctx.sink, old_db, old_name, ts=ctx.ts, to=dst, job_id=ctx.job.job_id, table_id=after.id)
    if src_dt is None:
        return _result("nothing to move (the table was never written)", [src, dst])
    move_dir(src, dst)
    return _result(f"moved to {dst}", [src, dst])


# --- columns and indexes --------------------------------------------------------------------------


def _key_ids(t: TableInfo, swapped: dict[int, int] | None = None) -> tuple[int, ...]:
    """The Delta key by column id (a renamed key column is the same key); -1 is ``_tidb_rowid``. ``swapped``
    maps a reorganized column's new id to its old one."""
    ids = (-1 if c == ROWID_COLUMN else t.column(c).id for c in t.delta_key())
    return tuple((swapped or {}).get(i, i) for i in ids)


def swapped_column_ids(job: DDLJob, before: TableInfo, after: TableInfo) -> dict[int, int]:
    """``{new id: old id}`` of the columns a MODIFY COLUMN reorganized: TiDB backfills a changing column under a
    new id and swaps it in (pkg/ddl/modify_column.go), so the job's table has an id the table before lacks and
    lacks one it had. Other jobs keep ids.

    In a multi-schema change the new ids may also be added columns and the missing ones dropped columns. A
    reorganized column keeps its name (TiDB refuses to touch a column twice in one statement, so a name cannot be
    dropped and added again), which pairs it; what stays unpaired is as many added and dropped columns as the
    job has ADD / DROP COLUMN sub-jobs. One more on each side with no ADD or DROP is a CHANGE that renamed the
    column it reorganized; any other surplus cannot be told from drops and adds: ``ChangefeedError``, rather
    than a silent loss of a column's values.
    """
    new = {c.id for c in after.columns} - {c.id for c in before.columns}
    gone = {c.id for c in before.columns} - {c.id for c in after.columns}
    if job.job_type == "modify column":
        return {new.pop(): gone.pop()} if len(new) == 1 and len(gone) == 1 else {}
    if job.job_type != MULTI_SCHEMA_CHANGE:
        return {}
    gone_by_name = {before.column_with_id(i).name.lower(): i for i in gone}
    pairs = {i: gone_by_name[after.column_with_id(i).name.lower()] for i in new
             if after.column_with_id(i).name.lower() in gone_by_name}
    unpaired_new = new - set(pairs)
    unpaired_gone = gone - set(pairs.values())
    adds, drops = job.sub_job_types.count("add column"), job.sub_job_types.count("drop column")
    surplus = (len(unpaired_new) - adds, len(unpaired_gone) - drops)
    if surplus == (0, 0):
        return pairs
    if surplus == (1, 1) and adds == drops == 0:
        return {**pairs, next(iter(unpaired_new)): next(iter(unpaired_gone))}
    raise ChangefeedError(
        f"{job.job_type.upper()} on {after.qualified_name} (job {job.job_id}, ts {job.finished_ts}): columns "
        f"{sorted(before.column_with_id(i).name for i in unpaired_gone)} are gone and "
        f"{sorted(after.column_with_id(i).name for i in unpaired_new)} are new under other names, with "
        f"{adds} ADD and {drops} DROP COLUMN in the statement: a renamed, reorganized column (CHANGE COLUMN) cannot "
        "be told from a drop and an add. Run such changes as separate ALTER TABLE statements, or rebuild the table "
        "from the bronze changelog."
    )


def check_type_change(table: str, old: Column, new: Column, ts: int) -> bool:
    """Whether MODIFY ``old`` -> ``new`` rewrites data (True) or is schema-only (False).

    ``ChangefeedError`` for a narrowing or incompatible change: the silver table cannot follow it
    without losing or reinterpreting values.
    """
    same_type = old.arrow_type() == new.arrow_type()
    if same_type and not (old.kind in (ct.ENUM, ct.SET) and not ct.members_appended(old, new)) and not _rescaled(
            old, new):
        return False  # VARCHAR length, VARCHAR<->TEXT, same DECIMAL, appended ENUM members: the Delta type holds
    if same_type and ct.delta_widens(old, new):
        return True  # a DECIMAL held as text, its scale widened: each value rewritten with the new scale
    if not same_type and ct.delta_widens(old, new):
        return True
    raise ChangefeedError(
        f"MODIFY COLUMN {table}.{old.name}"
        + (f" (now {new.name})" if new.name != old.name else "")
        + f" at ts {ts}: {old.sql_type} -> {new.sql_type} narrows or changes the Delta type "
        f"({old.arrow_type()} -> {new.arrow_type()}); only widening changes (a wider integer type, FLOAT->DOUBLE, "
        "DECIMAL with no fewer integer or fraction digits, string lengths, ENUM/SET members appended) can be "
        "applied to the silver table. "
        "Rebuild the table from the bronze changelog or filter this DDL out."
    )


def _rescaled(old: Column, new: Column) -> bool:
    """A DECIMAL the lake holds as its text (wider than 38 digits, ``column_type.decimal_as_text``) whose scale
    changes: its text has the old scale's digits, which the new type prints otherwise."""
    return ct.decimal_as_text(new) and old.kind == ct.DECIMAL and (old.scale or 0) != (new.scale or 0)


def _as_decimal_text(scale: int) -> Callable[[Any], Any]:
    """A column's values (DECIMAL as Arrow decimal128, or as text) as the text of a DECIMAL of ``scale``, as TiDB
    prints it (``column_type.decimal_text``): per value, but only for the columns a MODIFY makes text or rescales."""
    from decimal import Decimal

    def convert(col: Any) -> Any:
        values = [None if v is None else ct.decimal_text(Decimal(str(v)), scale) for v in col.to_pylist()]
        return pa.array(values, pa.string())

    return convert


@dataclass(frozen=True)
class _Target:
    """One column of the rewritten table: from an existing column (cast when the type widens, or ``convert``ed) or
    a constant (the origin default of a new column)."""

    field: pa.Field
    source: str | None
    value: Any = None
    convert: Callable[[Any], Any] | None = None


def _plan(ctx: _Ctx, before: TableInfo, after: TableInfo, empty: bool) -> tuple[list[_Target], bool]:
    """The new table's columns and whether existing data must be rewritten."""
    old_by_id = before.column_by_id()
    for new_id, old_id in swapped_column_ids(ctx.job, before, after).items():
        old_by_id[new_id] = old_by_id[old_id]
    by_name = {c.name: c for c in after.columns}
    before_names = before.arrow_schema().names
    targets: list[_Target] = []
    rewrite = False
    for f in after.arrow_schema():
        if f.name == ROWID_COLUMN:
            # Only an empty table may gain or lose _tidb_rowid (the key check ran before).
            targets.append(_Target(f, ROWID_COLUMN if ROWID_COLUMN in before_names else None))
            continue
        col = by_name[f.name]
        old = old_by_id.get(col.id)
        if old is None:
            targets.append(_Target(f, None, col.arrow_value(col.origin_default)))
            rewrite = rewrite or (col.origin_default is not None and not empty)
            continue
        if check_type_change(after.qualified_name, old, col, ctx.ts):
            rewrite = True
        rewrite = rewrite or old.name != col.name
        # a DECIMAL that becomes text (wider than 38 digits) or is text with another scale: its values reprinted
        text = ct.decimal_as_text(col) and (not ct.decimal_as_text(old) or _rescaled(old, col))
        targets.append(_Target(f, old.name, convert=_as_decimal_text(col.scale or 0) if text else None))
    kept = {t.source for t in targets if t.source is not None}
    rewrite = rewrite or any(n not in kept for n in before_names)  # a dropped column
    return targets, rewrite


def _batches(ds: Any, targets: list[_Target], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    sources = sorted({t.source for t in targets if t.source is not None})
    for b in ds.to_batches(columns=sources, batch_size=REWRITE_BATCH_ROWS):
        n = b.num_rows
        cols = []
        for t in targets:
            if t.source is None:
                cols.append(
                    pa.nulls(n, t.field.type) if t.value is None else pa.repeat(pa.scalar(t.value, t.field.type), n)
                )
            else:
                c = b.column(t.source)
                if t.convert is not None:
                    cols.append(t.convert(c))
                else:
                    cols.append(c if c.type == t.field.type else c.cast(t.field.type, safe=True))
        yield pa.RecordBatch.from_arrays(cols, schema=schema)


def rewrite_table(dt: Any, targets: list[_Target], props: Any) -> None:
    """Overwrite the table with the projected schema in one commit, streaming batch by batch."""
    from deltalake import write_deltalake

    from spark_jobs.load import silver_read

    schema = pa.schema([t.field for t in targets])
    if not silver_read.has_deletion_vectors(dt):
        # The dataset must be opened before write_deltalake runs: delta-rs cannot start a nested
        # runtime from inside the reader it is consuming.
        ds = dt.to_pyarrow_dataset()
        reader = pa.RecordBatchReader.from_batches(schema, _batches(ds, targets, schema))
        write_deltalake(dt, reader, mode="overwrite", schema_mode="overwrite", commit_properties=props)
        return
    # Deletion vectors: only delta-rs's DataFusion scan applies them, and it cannot feed its own writer (the nested
    # runtime again), so the live rows are spooled to a Parquet file beside the table first, batch by batch.
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    spool = os.path.join(silver_read.table_dir(dt), f"_cdcflow_rewrite-{uuid.uuid4().hex}.parquet")
    try:
        live = silver_read.scan(dt)
        with pq.ParquetWriter(spool, live.schema) as out:
            for b in live:
                out.write_batch(b)
        reader = pa.RecordBatchReader.from_batches(schema, _batches(pads.dataset(spool), targets, schema))
        write_deltalake(dt, reader, mode="overwrite", schema_mode="overwrite", commit_properties=props)
    finally:
        if os.path.exists(spool):
            os.unlink(spool)


def _alter(ctx: _Ctx, before: TableInfo, after: TableInfo) -> dict[str, Any]:
    from deltalake.schema import Field

    if before.id != after.id:
        raise ChangefeedError(f"{ctx.where(after.qualified_name)}: table ids differ ({before.id} != {after.id})")
    path = table_path(ctx.sink, after)
    if table_path(ctx.sink, before) != path:
        raise ChangefeedError(f"{ctx.where(after.qualified_name)}: the table name changed in an ALTER job")
    dt = _open(path)
    if dt is None:
        # Never written yet: the silver table starts with the schema after the job.
        _create(ctx, path, after)
        return _committed(ctx, "created with the new schema (the table was never written)", path)
    done = _done(ctx, dt, path)
    if done is not None:
        return done
    try:
        check_schema(pa.schema(dt.schema().to_arrow()), before, path)
    except ChangefeedError as exc:
        raise ChangefeedError(
            f"{ctx.where(after.qualified_name)}: the silver table does not have the schema before the job: {exc}"
        ) from exc
    empty = dt.count() == 0
    if (_key_ids(before) != _key_ids(after, swapped_column_ids(ctx.job, before, after)) and not empty
            and after.delta_key() == (ROWID_COLUMN,)):
        return _rekey_by_rowid(ctx, before, after, path)
    # A key of columns the rows have (the primary key dropped for a NOT NULL unique one, or added to a table keyed
    # by _tidb_rowid): the rows stay, merged by the new key from now on; a _tidb_rowid column it no longer needs
    # goes in the rewrite below. The upstream holds the new key unique, and so the silver table at the barrier.
    targets, rewrite = _plan(ctx, before, after, empty)
    new = [t for t in targets if t.source is None]
    if not rewrite and not new:
        return _result("schema-only (the Delta schema does not change)", [path])
    if not rewrite:
        # Only new columns whose existing rows read NULL (or no rows): a metadata-only commit.
        dt.alter.add_columns([Field.from_arrow(t.field) for t in new], commit_properties=ctx.props())
        return _committed(ctx, f"added column(s) {[t.field.name for t in new]} (metadata only)", path)
    started = time.monotonic()
    rewrite_table(dt, targets, ctx.props())
    return _committed(ctx, f"rewrote the table with the new schema in {time.monotonic() - started:.3f}s", path)


def _rekey_by_rowid(ctx: _Ctx, before: TableInfo, after: TableInfo, path: str) -> dict[str, Any]:
    """The Delta key becomes ``_tidb_rowid`` (a non-clustered table's primary key dropped, or the unique index that
    was its key, and no NOT NULL unique key left): rows that were one per old key may now repeat it, and only the
    handle tells them apart, which the silver table never held. The table is overwritten, in one commit with the
    app transaction, by the upstream's rows at the barrier with their ``_tidb_rowid`` (streamed, as a snapshot
    reads them): every change up to the barrier is in them, as in the table they replace. The read is at the
    barrier, which the changefeed's service GC safe point holds; one lost to GC is an error naming the remedy, as a
    failed read is, and nothing is committed. Values Delta cannot hold are counted as a snapshot counts them
    (``mapped``)."""
    from deltalake import write_deltalake

    from cdc_core.changefeed import gc_safepoint
    from spark_jobs.upstream_read import Chunk, base_schema, batched, fetch_partition

    up = ctx.upstream
    where = ctx.where(after.qualified_name)
    if up is None:
        raise ChangefeedError(f"{where} re-keys the silver table by _tidb_rowid: the upstream's address is required "
                              "to read the rows' handles")
    started = time.monotonic()
    try:
        gc_safepoint.check_not_lost_by_gc(up.pd_addr, ctx.changefeed_id, ctx.ts,
                                          f"the re-key of {after.qualified_name} by _tidb_rowid reads at ts")
    except UpstreamError as exc:
        raise ChangefeedError(f"{where} re-keys the silver table by _tidb_rowid: PD's GC safe point is not "
                              f"known: {exc}") from exc
    schema, marked_schema = after.arrow_schema(), base_schema(after)
    mapped: dict[str, int] = {}

    def batches() -> Iterator[pa.RecordBatch]:
        rows = fetch_partition(up.pd_addr, up.tidb, ctx.ts, after.to_json(), iter([Chunk(None, None)]), marked=True)
        for batch in batched(rows, marked_schema):
            mapped_values.add_counts(mapped, mapped_values.count_arrow(batch.column(mapped_values.MAPPED_COL), after))
            yield pa.RecordBatch.from_arrays(batch.columns[:-1], schema=schema)

    try:
        write_deltalake(path, pa.RecordBatchReader.from_batches(schema, batches()), mode="overwrite",
                        schema_mode="overwrite", commit_properties=ctx.props())
    except UpstreamError as exc:
        raise ChangefeedError(f"{where} re-keys the silver table by _tidb_rowid and could not read its rows at ts "
                              f"{ctx.ts} from the upstream (nothing was committed; the barrier is applied again "
                              f"on the next run): {exc}") from exc
    out = _committed(ctx, f"re-keyed from {list(before.delta_key())} to _tidb_rowid: reloaded the table's rows at "
                          f"ts {ctx.ts} from the upstream in {time.monotonic() - started:.3f}s", path)
    if mapped:
        out["mapped"] = {after.qualified_name: mapped}
        log.warning("re-key of %s at %d: values Delta cannot hold read as NULL, by column %s", after.qualified_name,
                    ctx.ts, mapped)
    return out


# --- job entry points -----------------------------------------------------------------------------


def run_job(opts: DdlApplyArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: ``DdlApplyArgs`` in; returns :func:`apply_ddl`'s
    result, with the history table's (:func:`spark_jobs.load.history.after_ddl`) as ``history`` when the table keeps
    one."""
    out = apply_ddl(opts.sink_uri, opts.changefeed_id, opts.job, opts.before, opts.after, opts.exchange,
                    opts.upstream)
    if opts.history:
        from spark_jobs.load import history

        out["history"] = history.after_ddl(opts.sink_uri, opts.job, opts.before, opts.after,
                                           app_id=app_id_for(opts.changefeed_id))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit / CLI entry point: ``--args FILE [--result FILE]``."""
    return args_file_main("spark_jobs.ddl_apply", "Apply one DDL job to the silver tables.", run_job, DdlApplyArgs,
                          argv)


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
