"""How a changefeed runs its Spark jobs: in this process (embedded engine) or via spark-submit.

``cdc_core`` does not import ``spark_jobs`` (the layering runs the other way); it names the job
entry points and either imports them at call time (``local``, the default: one shared local
SparkSession, no JVM start per window) or submits ``spark_jobs/<job>.py`` with JSON arguments to
the cluster named by ``CDCFLOW_SPARK_MASTER`` (``submit``). Select with ``CDCFLOW_SPARK_ENGINE``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from cdc_core.errors import ChangefeedError, TransientError

JOBS = {
    "apply_window": "spark_jobs.apply_window:run_job",
    "data_quality": "spark_jobs.data_quality:run_job",
    "ddl_apply": "spark_jobs.ddl_apply:run_job",
    "rollback": "spark_jobs.rollback:run_job",
    "snapshot_load": "spark_jobs.snapshot_load:run_job",
    "window_checks": "spark_jobs.window_checks:run_job",
}


def engine() -> str:
    e = os.environ.get("CDCFLOW_SPARK_ENGINE", "local")
    if e not in ("local", "submit"):
        raise ChangefeedError(f"CDCFLOW_SPARK_ENGINE must be 'local' or 'submit', got {e!r}")
    return e


def run_job(job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run a Spark job with JSON-serializable ``args``; returns its JSON-serializable result."""
    if job not in JOBS:
        raise ChangefeedError(f"unknown Spark job {job!r}")
    if engine() == "local":
        module, func = JOBS[job].split(":")
        fn = getattr(importlib.import_module(module), func)
        result: dict[str, Any] = fn(args)
        return result
    return _submit(job, args)


def _failure(stdout: str, stderr: str, lines: int = 20) -> str:
    """What a failed submission says: the job's Python traceback (spark-submit's Python runner passes the
    driver's stderr to its stdout) when there is one, else the tail of spark-submit's own stderr."""
    for text in (stdout, stderr):
        at = text.rfind("Traceback (most recent call last)")
        if at >= 0:
            return "\n".join(text[at:].splitlines()[-lines:])
    return "\n".join(stderr.splitlines()[-lines:])


# What spark-submit's output says when the cluster, not the job, failed: the driver lost its executors or its
# master, or the application was removed (a worker or the master died under it).
_CLUSTER_FAILURES = ("SparkContext was shut down", "ExecutorLostFailure", "Master removed our application",
                     "All masters are unresponsive", "Py4JNetworkError", "Connection refused")


def submit_failure(job: str, returncode: int, stdout: str, stderr: str) -> ChangefeedError | TransientError:
    """The error of a failed ``spark-submit``: transient (the step is retried, the changefeed stays normal) when a
    signal ended it (``kill -9`` of spark-submit's JVM or of the Python driver: a negative code, or 128 + the
    signal from the launcher script) or the cluster failed under it and no cdcflow error ended the job; else a
    ``ChangefeedError`` (the changefeed goes into error: the job itself refused, a retry would do the same)."""
    said = _failure(stdout, stderr)
    message = f"spark-submit of {job} failed (exit {returncode}):\n{said}"
    raised = re.findall(r"cdc_core\.errors\.(\w+)", said)
    if raised:  # the job ended on a cdcflow error: as transient as the job said it was
        transient = raised[-1] in ("UpstreamError", "TransientError")
    else:
        killed = returncode < 0 or returncode in (128 + 9, 128 + 15)
        # in what ended it (the traceback, else stderr's tail), not in the INFO lines of a job that recovered
        transient = killed or any(m in said for m in _CLUSTER_FAILURES)
    return TransientError(message) if transient else ChangefeedError(message)


def _delta_confs() -> dict[str, str]:
    module = importlib.import_module("spark_jobs.delta_jars")
    confs: dict[str, str] = module.session_confs()
    return confs


def _submit(job: str, args: dict[str, Any]) -> dict[str, Any]:
    submit = shutil.which("spark-submit") or str(Path(sys.executable).parent / "spark-submit")
    master = os.environ.get("CDCFLOW_SPARK_MASTER", "local[2]")
    module = JOBS[job].split(":")[0]
    with tempfile.TemporaryDirectory() as d:
        a, r = Path(d) / "args.json", Path(d) / "result.json"
        a.write_text(json.dumps(args))
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise ChangefeedError(f"cannot find the Spark job module {module}")
        cmd = [submit, "--master", master]
        for k, v in _delta_confs().items():  # delta-spark's jars and Delta's extension, as local sessions have
            cmd += ["--conf", f"{k}={v}"]
        cmd += [spec.origin, "--args", str(a), "--result", str(r)]
        env = dict(os.environ)
        pyspark_spec = importlib.util.find_spec("pyspark")
        if "SPARK_HOME" not in env and pyspark_spec is not None and pyspark_spec.origin:
            # The pip-installed spark-submit finds its jars through SPARK_HOME = the pyspark package.
            env["SPARK_HOME"] = str(Path(pyspark_spec.origin).parent)
        # The driver (and local executors) run this interpreter, which has cdc_core and spark_jobs; spark-submit's
        # default is whatever `python3` is on PATH. A cluster's executors are told theirs by its deployment.
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise submit_failure(job, proc.returncode, proc.stdout, proc.stderr)
        out: dict[str, Any] = json.loads(r.read_text())
        return out
