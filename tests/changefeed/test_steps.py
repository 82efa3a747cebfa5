"""The apply loop of a window's steps (``steps.apply_steps``): what each Spark job is asked, in order. The jobs
themselves are tested with Spark in tests/spark_jobs; here their answers are recorded stand-ins."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdc_core.changefeed import steps as steps_module
from cdc_core.changefeed.barriers import DdlStep, DmlStep, plan_steps
from cdc_core.changefeed.config import ChangefeedConfig
from cdc_core.changefeed.job_args.apply_window import ApplyArgs
from cdc_core.changefeed.job_args.base import JobArgs
from cdc_core.changefeed.steps import apply_steps, replicated_at
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column, Index, TableInfo
from cdc_core.schema.storage import SchemaStorage

BEFORE = TableInfo(id=101, db_name="db", name="t", db_id=100, pk_is_handle=True, max_column_id=2,
                   columns=(Column(1, "id", "int", nullable=False), Column(2, "v", "int")),
                   indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),))
AFTER = replace(BEFORE, columns=(*BEFORE.columns, Column(3, "w", "int")), max_column_id=3, schema_version=2)


def _job(jid: int, kind: str, ts: int, info: TableInfo) -> DDLJob:
    return DDLJob(job_id=jid, job_type=kind, schema_id=100, table_id=info.id, schema_name="db", table_name="t",
                  query=kind, schema_version=jid, table_info=info, finished_ts=ts)


def test_dml_at_a_ddls_commit_ts_is_applied_before_it_with_the_schema_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = ChangefeedConfig(changefeed_id="cf", sink_uri=f"file://{tmp_path}/lake", start_ts=1)
    add = _job(2, "add column", 20, AFTER)
    storage = SchemaStorage.from_jobs([_job(1, "create table", 10, BEFORE), add])
    calls: list[JobArgs] = []

    def run_job(args: JobArgs) -> dict[str, Any]:
        calls.append(args)
        return {"tables": {}}

    monkeypatch.setattr(steps_module.spark_engine, "run_job", run_job)
    monkeypatch.setattr(steps_module, "_idle_step", lambda *_: None)  # every step has events here
    plan = plan_steps(10, 30, [add], shared={20})
    assert [type(s) for s in plan] == [DmlStep, DmlStep, DdlStep, DmlStep]
    apply_steps(cfg, storage, plan, window_end_ts=30, tables_at=lambda ts: replicated_at(cfg, storage, ts))
    dml = [(a.after_ts, a.upto_ts, a.version, a.at_barrier, list(a.tables)) for a in calls if isinstance(a, ApplyArgs)]
    assert [a.JOB for a in calls] == ["apply_window", "apply_window", "ddl_apply", "apply_window"]
    assert dml == [(10, 19, 19, False, [BEFORE]),
                   (19, 20, 20, True, [BEFORE]),  # the rows committed at 20: the schema before the ADD COLUMN
                   (20, 30, 30, False, [AFTER])]
