"""Every Spark job's arguments class by its job name (the keys of ``spark_engine.JOBS``): what the job server reads a
request's JSON with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdc_core.changefeed.job_args.apply_window import ApplyArgs
from cdc_core.changefeed.job_args.base import JobArgs
from cdc_core.changefeed.job_args.data_quality import ReconcileArgs
from cdc_core.changefeed.job_args.ddl_apply import DdlApplyArgs
from cdc_core.changefeed.job_args.maintain import MaintainArgs
from cdc_core.changefeed.job_args.rollback import RollbackArgs
from cdc_core.changefeed.job_args.snapshot_load import SnapshotJobArgs
from cdc_core.changefeed.job_args.window_checks import ReadAheadArgs, WindowChecksArgs
from cdc_core.errors import ChangefeedError

ARGS: dict[str, type[JobArgs]] = {cls.JOB: cls for cls in (
    ApplyArgs, DdlApplyArgs, WindowChecksArgs, ReadAheadArgs, ReconcileArgs, SnapshotJobArgs, RollbackArgs,
    MaintainArgs)}


def from_job_dict(job: str, args: Mapping[str, Any]) -> JobArgs:
    """The arguments of the job named ``job`` from their JSON (what the job server is sent)."""
    cls = ARGS.get(job)
    if cls is None:
        raise ChangefeedError(f"unknown Spark job {job!r}")
    return cls.from_dict(args)
