"""The barrier plan of a window: the ordered DML and DDL steps that apply ``(checkpoint, T]``.

For each DDL commit ts ``b`` in the window, in order: DML with ``commit_ts < b`` (recorded in Delta
as version ``b - 1``: it covers every change at or below ``b - 1``), the data-quality checks at ``b - 1``, then
the DML committed *at* ``b`` if any, then the DDL (version ``b``), after which the checkpoint may move to ``b``.
The last step applies DML up to ``T`` (version ``T``). A DDL therefore never sees a row change from after it, and
no row change is applied under the wrong schema (docs/architecture.md, Windows and barriers; seed 003).

Commit ts are not unique in TiDB: with async commit and 1PC (its defaults) a transaction's commit ts is the
store's ``max_ts + 1``, which can be the very ts PD hands the DDL's own transaction next. Such DML was written
under the schema before the DDL (a transaction that read the new schema started after ``b``), and TiCDC emits it
before the DDL (``pkg/eventservice/event_scanner.go``: at equal commit ts, DML first). Here it is the
*at-barrier* step ``(b - 1, b]``, mounted with the schema at ``b - 1``. Delta's app-transaction versions are
commit ts, and ``b`` under the changefeed's app id says the DDL is applied; so the step records ``b`` under an app
id of its own (``sink_uri.at_barrier_app_id_for``), and a table that recorded ``b`` under either has it applied.
(Recording ``b - 1`` again would not do: Delta skips a write whose app-transaction version is not above the one
recorded, and the step before recorded ``b - 1``.) The checks at the barrier ran before it, at ``b - 1``; its rows
are checked at the next barrier or the window's end, which read the keys changed since the sub-window's start.

A window cut into sub-windows (more row events than the configured bound) also ends a DML step at each cut ``c``:
checks at ``c``, then the checkpoint moves to ``c``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from cdc_core.filter.table_filter import TableFilter
from cdc_core.schema.ddl_job import JOB_TYPES, DDLJob, sort_key
from cdc_core.schema.storage import SchemaStorage

SCHEMA_JOBS = ("create schema", "drop schema")


@dataclass(frozen=True)
class DmlStep:
    after_ts: int  # exclusive
    upto_ts: int  # inclusive
    version: int  # the Delta app-transaction version this step records
    cut: bool = False  # it ends a sub-window (not at a DDL): checked, then the checkpoint moves to upto_ts
    # The DML committed at the DDL commit ts ``upto_ts``, applied just before that DDL (module docstring).
    at_barrier: bool = False

    @property
    def kind(self) -> str:
        return "dml"

    @property
    def schema_ts(self) -> int:
        """The ts whose schema the step's rows are mounted with (and whose table names its paths follow): the
        schema before the DDL for DML at its commit ts, else the step's end."""
        return self.upto_ts - 1 if self.at_barrier else self.upto_ts



@dataclass(frozen=True)
class DdlStep:
    job: DDLJob

    @property
    def kind(self) -> str:
        return "ddl"

    @property
    def version(self) -> int:
        return self.job.finished_ts


Step = DmlStep | DdlStep


def relevant(job: DDLJob, storage: SchemaStorage, flt: TableFilter) -> bool:
    """Whether a DDL concerns a replicated table or schema (before or after the job)."""
    if job.job_type in SCHEMA_JOBS:
        return job.schema_name is not None and flt.match_schema(job.schema_name)
    names: list[tuple[str, str]] = []
    if job.schema_name and job.table_name:
        names.append((job.schema_name, job.table_name))
    if job.old_schema_name and job.old_table_name:
        names.append((job.old_schema_name, job.old_table_name))
    for tid in (job.table_id, job.old_table_id):
        if tid is not None:
            before = storage.table_at(tid, job.finished_ts - 1)
            if before is not None:
                names.append((before.db_name, before.name))
    return any(flt.match(s, t) for s, t in names)


def applies(job: DDLJob, storage: SchemaStorage) -> bool:
    """Whether a DDL job is applied to the silver tables at its barrier: a job on the DDL whitelist, or any other
    that changes what a table's silver table holds -- its Delta key or its columns -- (a job type TiDB adds next
    year, say). The schema storage follows every job either way (docs/architecture.md, Filters: ignored DDL still
    updates it); the rest (a renamed index, a comment, TiFlash replicas) need nothing in Delta."""
    if job.job_type in JOB_TYPES:
        return True
    after = job.table_info
    if after is None:
        return False
    before = storage.table_at(after.id, job.finished_ts - 1)
    return before is not None and (before.delta_key() != after.delta_key()
                                   or before.arrow_schema() != after.arrow_schema())


def plan_steps(checkpoint_ts: int, target_ts: int, jobs: list[DDLJob], cuts: Sequence[int] = (),
               shared: Collection[int] = ()) -> list[Step]:
    """DML/DDL steps for ``(checkpoint_ts, target_ts]`` given the relevant DDL jobs in it. ``cuts``: the ends of
    the window's sub-windows (``sub_windows.window_cuts``); a DML range that spans one is split there, its first part
    a ``cut`` step. ``shared``: the DDL commit ts at which row events of the replicated tables committed too; each
    gets an at-barrier step before its DDL."""
    steps: list[Step] = []
    inner = sorted(c for c in set(cuts) if checkpoint_ts < c < target_ts)

    def dml(lo: int, hi: int, version: int) -> None:
        for c in (c for c in inner if lo < c < hi):
            steps.append(DmlStep(lo, c, c, cut=True))
            lo = c
        steps.append(DmlStep(lo, hi, version))

    prev = checkpoint_ts
    for job in sorted(jobs, key=sort_key):
        b = job.finished_ts
        if not checkpoint_ts < b <= target_ts:
            raise ValueError(f"DDL job {job.job_id} at ts {b} is outside the window ({checkpoint_ts}, {target_ts}]")
        if b - 1 > prev:
            dml(prev, b - 1, b - 1)
        if b in shared and b != prev:  # once before the first part of a job of several tables
            steps.append(DmlStep(b - 1, b, b, at_barrier=True))
        steps.append(DdlStep(job))
        prev = b
    if target_ts > prev:
        dml(prev, target_ts, target_ts)
    return steps
