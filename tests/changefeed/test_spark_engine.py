"""The spark-submit engine: a job submitted as a Spark application (its own driver JVM, the Delta jars passed on
the command line) writes Delta through delta-spark, and its failures come back with the driver's words."""

from __future__ import annotations

from dataclasses import fields

import pytest
from deltalake import DeltaTable

from cdc_core.changefeed import spark_engine
from cdc_core.changefeed.job_args.apply_window import ApplyArgs
from cdc_core.changefeed.job_args.rollback import RollbackArgs
from cdc_core.errors import ChangefeedError
from testkit.builders import Bronze, clustered_table

pytestmark = pytest.mark.spark


def test_unknown_jobs_and_engines_are_refused(monkeypatch):
    rollback = RollbackArgs("file:///lake", "cf", (), 1)
    monkeypatch.setenv("CDCFLOW_SPARK_ENGINE", "submit")
    monkeypatch.delitem(spark_engine.JOBS, "rollback")
    with pytest.raises(ChangefeedError, match="unknown Spark job 'rollback'"):
        spark_engine.run_job(rollback)
    monkeypatch.undo()
    monkeypatch.setenv("CDCFLOW_SPARK_ENGINE", "yarn")
    with pytest.raises(ChangefeedError, match="must be 'local' or 'submit'"):
        spark_engine.run_job(rollback)


def test_a_killed_submission_is_transient_and_leaves_the_changefeed_normal(tmp_path, monkeypatch):
    """``kill -9`` of spark-submit's JVM mid-job (what the soak does to a task): a TransientError, so the step is
    retried and the changefeed stays normal, its checkpoint where it was."""
    import threading

    import psutil

    from cdc_core.changefeed.state import create_state, load_state
    from cdc_core.changefeed.tasks import _guard
    from cdc_core.errors import TransientError

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CDCFLOW_SPARK_ENGINE", "submit")
    monkeypatch.setenv("CDCFLOW_SPARK_MASTER", "local[1]")
    create_state("cf", 7)
    c = clustered_table()
    sink = f"file://{tmp_path}/lake"
    args = ApplyArgs(sink_uri=sink, changefeed_id="cf", window_end_ts=10, after_ts=0, tables=(c,),
                     writer="delta-spark")
    me, killed = psutil.Process(), threading.Event()
    # this process's own Spark JVM (a SparkSubmit too, when an earlier test started a session) is not the submission
    before = {child.pid for child in me.children(recursive=True)}

    def kill_the_submission() -> None:
        while not killed.is_set():
            for child in me.children(recursive=True):
                try:
                    if child.pid not in before and "org.apache.spark.deploy.SparkSubmit" in " ".join(child.cmdline()):
                        child.kill()
                        killed.set()
                        return
                except psutil.NoSuchProcess:
                    continue
            killed.wait(0.2)

    killer = threading.Thread(target=kill_the_submission, daemon=True)
    killer.start()
    with pytest.raises(TransientError, match=r"spark-submit of apply_window failed \(exit (-9|137)\)"):
        _guard("cf", "apply", spark_engine.run_job, args)
    killed.set()
    st = load_state("cf")
    assert (st.state, st.checkpoint_ts, st.error) == ("normal", 7, None)


@pytest.mark.parametrize(("code", "stdout", "stderr", "transient"), [
    (1, "Traceback (most recent call last):\n  ...\ncdc_core.errors.ChangefeedError: unsupported DDL", "", False),
    (1, "Traceback (most recent call last):\n  ...\ncdc_core.errors.UpstreamError: no PD member answered", "", True),
    (1, "", "ERROR TaskSchedulerImpl: Lost executor 0\norg.apache.spark.SparkException: ExecutorLostFailure", True),
    (-9, "", "", True),
    (137, "", "", True),
    (1, "Traceback (most recent call last):\n  ...\nKeyError: 'tables'", "", False),
])
def test_which_failed_submissions_are_transient(code, stdout, stderr, transient):
    from cdc_core.errors import TransientError

    err = spark_engine.submit_failure("apply_window", code, stdout, stderr)
    assert isinstance(err, TransientError) is transient and f"(exit {code})" in str(err)


_PY4J_LOST = ("Traceback (most recent call last):\n  ...\npy4j.protocol.Py4JNetworkError: Error while sending or "
              "receiving")


@pytest.mark.parametrize(("reply", "jvm_exit", "expected"), [
    # the job's own error, its JVM alive: judged as a one-shot exit 1, without waiting for the JVM
    ({"error": "Traceback (most recent call last):\n  ...\nKeyError: 'tables'", "spark_alive": True}, None,
     (ChangefeedError, "(exit 1)")),
    # the driver saw its JVM gone: the JVM's exit code
    ({"error": _PY4J_LOST, "spark_alive": False}, -9, ("transient", "(exit -9; the driver's Spark stopped")),
    # a JVM killed a moment ago, still the driver's parent while it exits: py4j's lost connection, then its end
    ({"error": _PY4J_LOST, "spark_alive": True}, -9, ("transient", "(exit -9; the driver's Spark stopped")),
    # py4j lost its connection and the JVM runs on: the job failed, transient as a cluster failure is
    ({"error": _PY4J_LOST, "spark_alive": True}, None, ("transient", "(exit 1)")),
])
def test_a_jobs_error_is_judged_by_the_jvm_when_its_spark_went_away(reply, jvm_exit, expected):
    from cdc_core.errors import TransientError

    waited: list[float] = []

    def wait(timeout: float) -> int | None:
        waited.append(timeout)
        return jvm_exit

    err = spark_engine.job_failure("apply_window", reply, wait)
    kind, said = expected
    assert isinstance(err, TransientError if kind == "transient" else kind) and said in str(err)
    assert bool(waited) is ("Py4JNetworkError" in reply["error"] or not reply["spark_alive"])


def _submissions(monkeypatch) -> list[list[str]]:
    """The spark-submit command lines started from now on."""
    import subprocess

    started: list[list[str]] = []
    real = subprocess.Popen

    def popen(cmd, *a, **k):
        if "spark-submit" in str(cmd[0]):
            started.append(list(cmd))
        return real(cmd, *a, **k)

    monkeypatch.setattr(spark_engine.subprocess, "Popen", popen)
    return started


def test_a_tasks_jobs_share_one_application(tmp_path, monkeypatch):
    """Inside ``one_application`` the jobs go to one submitted driver (the Delta jars on its command line: it writes
    through delta-spark): one spark-submit for three jobs, and a job that raises is reported (with the driver's
    words) without ending the application for the next one."""
    from cdc_core.codec.sink_uri import app_id_for, table_path
    from spark_jobs.normalize.bronze import write_bronze

    monkeypatch.setenv("CDCFLOW_SPARK_ENGINE", "submit")
    monkeypatch.setenv("CDCFLOW_SPARK_MASTER", "local[1]")
    started = _submissions(monkeypatch)
    c = clustered_table()
    sink = f"file://{tmp_path}/lake"
    write_bronze(sink, "cf", 10, Bronze().put(c, 1, 5, {1: 1, 2: 1}).arrow())
    write_bronze(sink, "cf", 20, Bronze().put(c, 3, 15, {1: 3, 2: 3}).arrow())

    def window(end: int, after: int) -> ApplyArgs:
        return ApplyArgs(sink_uri=sink, changefeed_id="cf", window_end_ts=end, after_ts=after, tables=(c,),
                         writer="delta-spark")

    with spark_engine.one_application():
        assert spark_engine.run_job(window(10, 0))["tables"]["test.c"]["applied_version"] == 10
        with pytest.raises(ChangefeedError, match=r"(?s)spark-submit of apply_window failed.*no longer takes"):
            spark_engine.run_job(_Refused(window(20, 10)))
        with spark_engine.one_application():  # nested: the outer application
            assert spark_engine.run_job(window(20, 10))["rows_upserted"] == 1
    assert len(started) == 1 and started[0][-3].endswith("job_server.py"), started
    dt = DeltaTable(table_path(sink, c))
    assert sorted(r["a"] for r in dt.to_pyarrow_table().to_pylist()) == [1, 3]
    assert dt.transaction_version(app_id_for("cf")) == 20
    assert "Delta-Lake/" in dt.history(1)[0]["engineInfo"]  # written by delta-spark in the submitted driver
    # Outside a block a job is an application of its own (a job refused before it starts Spark says so as well
    # as a MERGE would, without a second Spark session's cost).
    with pytest.raises(ChangefeedError, match="no longer takes barrier_ts"):
        spark_engine.run_job(_Refused(window(20, 10)))
    assert len(started) == 2


class _Refused(ApplyArgs):
    """Arguments whose JSON the job refuses when the application reads it (a name it no longer takes): a job's own
    failure, before it starts Spark."""

    def __init__(self, args: ApplyArgs) -> None:
        super().__init__(**{f.name: getattr(args, f.name) for f in fields(args)})

    def to_dict(self) -> dict:
        return {**super().to_dict(), "barrier_ts": 15}


def _application_processes() -> tuple:
    """The running application's JVM (spark-submit) and its Python driver (``job_server.py``)."""
    import psutil

    def has(p: psutil.Process, word: str) -> bool:
        try:
            return any(word in a for a in p.cmdline())
        except psutil.Error:  # a Spark worker that ended and is not reaped yet
            return False

    mine = psutil.Process().children(recursive=True)
    # the application's JVM submits job_server.py; this process's own Spark session (a SparkSubmit of pyspark-shell,
    # when an earlier test started one) is not the application's
    jvms = [p for p in mine if has(p, "org.apache.spark.deploy.SparkSubmit") and has(p, "job_server.py")]
    drivers = [p for p in mine if has(p, "job_server.py") and p not in jvms]
    assert len(jvms) == 1 and len(drivers) == 1, (jvms, drivers)
    return jvms[0], drivers[0]


def _one_window(tmp_path) -> ApplyArgs:
    from spark_jobs.normalize.bronze import write_bronze

    c = clustered_table()
    sink = f"file://{tmp_path}/lake"
    write_bronze(sink, "cf", 10, Bronze().put(c, 1, 5, {1: 1, 2: 1}).arrow())
    return ApplyArgs(sink_uri=sink, changefeed_id="cf", window_end_ts=10, after_ts=0, tables=(c,),
                     writer="delta-spark")


@pytest.mark.parametrize("victim", ["driver", "jvm"])
def test_an_application_killed_between_jobs_fails_the_next_job_as_transient(tmp_path, monkeypatch, victim):
    """``kill -9`` of the application's Python driver, or of its JVM, while it waits for the next job: that job
    fails as a killed submission does (transient, the exit code in the message), judged by what this job's
    application said, not by an earlier job's traceback; and no driver outlives the block."""
    from cdc_core.errors import TransientError

    monkeypatch.setenv("CDCFLOW_SPARK_ENGINE", "submit")
    monkeypatch.setenv("CDCFLOW_SPARK_MASTER", "local[1]")
    window = _one_window(tmp_path)
    with spark_engine.one_application():
        # A job's own error first: the application reports it and waits for the next job, as after any job (a
        # successful MERGE here would only add a delta-spark job's cost).
        with pytest.raises(ChangefeedError, match="no longer takes barrier_ts"):
            spark_engine.run_job(_Refused(window))
        jvm, driver = _application_processes()
        killed = driver if victim == "driver" else jvm
        killed.kill()  # not psutil's wait: it would reap the JVM, our child, before the engine reads its exit code
        _until(lambda: _dead(killed))
        code = "137" if victim == "driver" else "-9"
        with pytest.raises(TransientError, match=rf"spark-submit of apply_window failed \(exit {code}") as failed:
            spark_engine.run_job(window)
        assert "no longer takes barrier_ts" not in str(failed.value)
    _until(lambda: _dead(driver) and _dead(jvm))  # a driver whose JVM was killed is killed when the block ends


def _dead(p) -> bool:
    import psutil

    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _until(condition, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
