"""The barrier plan of a window: the ordered DML and DDL steps that apply ``(checkpoint, T]``.

For each DDL commit ts ``b`` in the window, in order: DML with ``commit_ts < b`` (recorded in Delta
as version ``b - 1``: it covers every change at or below ``b - 1``, and no change can share a
DDL's commit ts), the data-quality checks at ``b - 1``, then the DDL (version ``b``), after which
the checkpoint may move to ``b``. The last step applies DML up to ``T`` (version ``T``). A DDL
therefore never sees a row change from after it, and no row change is applied under the wrong
schema (ARCHITECTURE.md §3, seed 003). A window cut into sub-windows (more row events than the configured
bound) also ends a DML step at each cut ``c``: checks at ``c``, then the checkpoint moves to ``c``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdc_core.filter.table_filter import TableFilter
from cdc_core.schema.ddl_history import DDLJob, sort_key
from cdc_core.schema.storage import SchemaStorage

SCHEMA_JOBS = ("create schema", "drop schema")


@dataclass(frozen=True)
class DmlStep:
    after_ts: int  # exclusive
    upto_ts: int  # inclusive
    version: int  # the Delta app-transaction version this step records
    cut: bool = False  # it ends a sub-window (not at a DDL): checked, then the checkpoint moves to upto_ts

    @property
    def kind(self) -> str:
        return "dml"


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


def plan_steps(checkpoint_ts: int, target_ts: int, jobs: list[DDLJob], cuts: Sequence[int] = ()) -> list[Step]:
    """DML/DDL steps for ``(checkpoint_ts, target_ts]`` given the relevant DDL jobs in it. ``cuts``: the ends of
    the window's sub-windows (``changelog.cut_parts``); a DML range that spans one is split there, its first part
    a ``cut`` step."""
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
        steps.append(DdlStep(job))
        prev = b
    if target_ts > prev:
        dml(prev, target_ts, target_ts)
    return steps
