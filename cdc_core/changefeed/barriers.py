"""The barrier plan of a window: the ordered DML and DDL steps that apply ``(checkpoint, T]``.

For each DDL commit ts ``b`` in the window, in order: DML with ``commit_ts < b`` (recorded in Delta
as version ``b - 1``: it covers every change at or below ``b - 1``, and no change can share a
DDL's commit ts), the data-quality checks at ``b - 1``, then the DDL (version ``b``), after which
the checkpoint may move to ``b``. The last step applies DML up to ``T`` (version ``T``). A DDL
therefore never sees a row change from after it, and no row change is applied under the wrong
schema (ARCHITECTURE.md §3, seed 003).
"""

from __future__ import annotations

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


def plan_steps(checkpoint_ts: int, target_ts: int, jobs: list[DDLJob]) -> list[Step]:
    """DML/DDL steps for ``(checkpoint_ts, target_ts]`` given the relevant DDL jobs in it."""
    steps: list[Step] = []
    prev = checkpoint_ts
    for job in sorted(jobs, key=sort_key):
        b = job.finished_ts
        if not checkpoint_ts < b <= target_ts:
            raise ValueError(f"DDL job {job.job_id} at ts {b} is outside the window ({checkpoint_ts}, {target_ts}]")
        if b - 1 > prev:
            steps.append(DmlStep(prev, b - 1, b - 1))
        steps.append(DdlStep(job))
        prev = b
    if target_ts > prev:
        steps.append(DmlStep(prev, target_ts, target_ts))
    return steps
