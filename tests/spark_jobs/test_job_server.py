"""The job server's reply to a job that raised: whether the application's Spark is still there, which decides whether
the submitter judges the job or the application (``cdc_core.changefeed.spark_engine``)."""

from __future__ import annotations

import json

import pytest

from spark_jobs import job_server


def _reply(entry: str) -> dict:
    return json.loads(job_server.run_request({"entry": entry, "args": {}}))


def test_a_job_that_raises_under_a_live_driver_is_the_jobs_failure() -> None:
    reply = _reply("spark_jobs.no_such_module:run")
    assert "No module named" in reply["error"] and reply["spark_alive"] is True


def test_a_job_that_raises_after_the_jvm_went_is_the_applications_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before any job made a SparkContext, a killed JVM shows only as this driver's new parent (the job's own error
    is then py4j's, which says nothing of the kill)."""
    # (raising=False: without the parent check the test fails on its assertion, not on a missing attribute)
    monkeypatch.setattr(job_server, "_JVM_PID", -1, raising=False)
    reply = _reply("spark_jobs.no_such_module:run")
    assert reply["spark_alive"] is False


def test_only_cdcflow_jobs_run() -> None:
    assert "not a cdcflow Spark job entry" in _reply("os:system")["error"]
