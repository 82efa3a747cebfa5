"""The job server's reply to a job that raised: whether the application's Spark is still there, which decides whether
the submitter judges the job or the application (``cdc_core.changefeed.spark_engine``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_core.changefeed.job_args.rollback import RollbackArgs
from spark_jobs import job_server
from testkit.builders import clustered_table


def _reply(job: str, args: dict | None = None) -> dict:
    return json.loads(job_server.run_request({"job": job, "args": args or {}}))


def test_a_job_that_raises_under_a_live_driver_is_the_jobs_failure() -> None:
    reply = _reply("rollback")
    assert "rollback: missing argument(s)" in reply["error"] and reply["spark_alive"] is True


def test_a_job_that_raises_after_the_jvm_went_is_the_applications_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before any job made a SparkContext, a killed JVM shows only as this driver's new parent (the job's own error
    is then py4j's, which says nothing of the kill)."""
    # (raising=False: without the parent check the test fails on its assertion, not on a missing attribute)
    monkeypatch.setattr(job_server, "_JVM_PID", -1, raising=False)
    reply = _reply("rollback")
    assert reply["spark_alive"] is False


def test_only_cdcflow_jobs_run() -> None:
    assert "unknown Spark job 'os:system'" in _reply("os:system")["error"]


def test_a_jobs_json_is_read_into_its_arguments_and_run(tmp_path: Path) -> None:
    """The request's job name picks its arguments' class, which reads the JSON the submitter sent (a rollback of a
    table without a Delta table: a job that needs no Spark)."""
    t = clustered_table()
    args = RollbackArgs(f"file://{tmp_path}", "cf", (t,), 100)
    reply = _reply(args.JOB, json.loads(json.dumps(args.to_dict())))
    assert reply == {"result": {"tables": {"test.c": {"restored": False, "why": "no Delta table"}}}}
