"""How a changefeed runs its Spark jobs: in this process (embedded engine) or as a Spark application.

``cdc_core`` does not import ``spark_jobs`` (the layering runs the other way); it names the job
entry points and either imports them at call time (``local``, the default: one shared local
SparkSession, no JVM start per window) or runs them in an application submitted with ``spark-submit``
to the cluster named by ``CDCFLOW_SPARK_MASTER`` (``submit``). Select with ``CDCFLOW_SPARK_ENGINE``.

Under ``submit``, the jobs inside a ``one_application()`` block (a task's apply and checks) share one
application (``spark_jobs/job_server.py``): one driver JVM, one registration with the master, one set of
executors for the window's DDL, apply, checks and rollback. A job outside such a block gets an application
of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from cdc_core.changefeed import delta_jars
from cdc_core.changefeed.job_args.base import JobArgs
from cdc_core.errors import ChangefeedError, TransientError
from cdc_core.log import get_logger

log = get_logger("cdcflow.spark_engine")

JOBS = {
    "apply_window": "spark_jobs.apply_window:run_job",
    "data_quality": "spark_jobs.checks.data_quality:run_job",
    "ddl_apply": "spark_jobs.ddl_apply:run_job",
    "maintain": "spark_jobs.maintain:run_job",
    "rollback": "spark_jobs.rollback:run_job",
    "snapshot_load": "spark_jobs.snapshot_load:run_job",
    "window_checks": "spark_jobs.checks.window_checks:run_job",
    "window_checks_read_ahead": "spark_jobs.checks.check_read_ahead:start",
}


def engine() -> str:
    e = os.environ.get("CDCFLOW_SPARK_ENGINE", "local")
    if e not in ("local", "submit"):
        raise ChangefeedError(f"CDCFLOW_SPARK_ENGINE must be 'local' or 'submit', got {e!r}")
    return e


def run_job(args: JobArgs) -> dict[str, Any]:
    """Run the Spark job whose arguments ``args`` are (their class names the job); returns its JSON-serializable
    result. The local engine hands the job ``args`` itself, the submit engine their JSON."""
    job = type(args).JOB
    if job not in JOBS:
        raise ChangefeedError(f"unknown Spark job {job!r}")
    if engine() == "local":
        result: dict[str, Any] = entry_point(job)(args)
        return result
    if (app := _current.get()) is not None:
        return app.run(job, args.to_dict())
    with _Application() as app:
        return app.run(job, args.to_dict())


def entry_point(job: str) -> Callable[[JobArgs], dict[str, Any]]:
    """The function that runs ``job`` (a key of ``JOBS``), imported now: ``cdc_core`` does not import
    ``spark_jobs`` at its own import."""
    module, func = JOBS[job].split(":")
    fn: Callable[[JobArgs], dict[str, Any]] = getattr(importlib.import_module(module), func)
    return fn


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


def job_failure(job: str, reply: dict[str, Any],
                jvm_exit: Callable[[float], int | None]) -> ChangefeedError | TransientError:
    """The error of a job the application answered with ``{"error", "spark_alive"}``: the job's own (judged as its
    one-shot exit would be), or the application's when its Spark went away under the job (transient, with the
    JVM's exit code, which ``jvm_exit(timeout)`` waits for: None while it runs)."""
    alive = reply.get("spark_alive", True)
    said = _failure(reply["error"], "")
    # The driver judges its JVM by its parent pid; a JVM killed a moment ago can still be its parent while its
    # threads exit, and py4j's lost connection is then the only sign. The JVM's end, if it comes, decides.
    if alive and "Py4JNetworkError" not in said:
        return submit_failure(job, 1, reply["error"], "")
    code = jvm_exit(30 if not alive else 10)
    if code is None and alive:  # the JVM runs on: only the job's connection failed
        return submit_failure(job, 1, reply["error"], "")
    # The driver's Spark went away (its JVM killed or stopping, the cluster gone): the application's failure, not
    # the job's, whatever the py4j error says. Its exit code, when it has one, says how.
    return TransientError(f"spark-submit of {job} failed (exit {code}; the driver's Spark stopped under the "
                          f"job):\n{said}")


# The application of the enclosing ``one_application`` block (a ContextVar: a thread of its own submits its own).
_current: contextvars.ContextVar[_Application | None] = contextvars.ContextVar("cdcflow_spark_application",
                                                                               default=None)


def shares_process() -> bool:
    """Whether the jobs run now share one Python process (``local``, or inside ``one_application``): what one
    job leaves in it -- a thread reading ahead for the next -- is there for the next."""
    return engine() == "local" or _current.get() is not None


@contextlib.contextmanager
def one_application() -> Iterator[None]:
    """Run the jobs of this block in one Spark application (``submit``; a no-op under ``local``, whose session is
    already shared). Nested blocks use the outer one. The application is submitted at the block's first job and
    ends with the block."""
    if _current.get() is not None or engine() != "submit":
        yield
        return
    with _Application() as app:
        token = _current.set(app)
        try:
            yield
        finally:
            _current.reset(token)


class _Application:
    """One ``spark-submit`` of ``spark_jobs/job_server.py``, talked to over a Unix socket in a private directory.

    A job's exception comes back as its traceback and is judged as a one-shot job's exit would be
    (``submit_failure``); the application's end (killed, its JVM gone) by its exit code and the output written
    since the job was sent. Whatever interrupts a job here (Airflow's timeout, a signal) ends the application at
    once, its Python driver first: nothing keeps writing Delta after the task gave up."""

    def __init__(self) -> None:
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._driver_pid: int | None = None
        self._conn: socket.socket | None = None
        self._requests: IO[bytes] | None = None
        self._replies: IO[bytes] | None = None
        self._sent_at = (0, 0)  # the sizes of stdout and stderr when the job under way was sent
        self._lock = threading.Lock()
        self.jobs = 0

    def __enter__(self) -> _Application:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, job: str, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            try:
                return self._run(job, args)
            except BaseException as exc:
                if not isinstance(exc, (ChangefeedError, TransientError)):  # interrupted mid-job: not reusable
                    self._kill()
                raise

    def _run(self, job: str, args: dict[str, Any]) -> dict[str, Any]:
        if self._proc is None:
            self._start(job)
        elif self._proc.poll() is not None:
            raise self._ended(job)
        assert self._requests is not None and self._replies is not None
        self._sent_at = self._output_sizes()
        try:
            self._requests.write(json.dumps({"job": job, "args": args}).encode() + b"\n")
            self._requests.flush()
            line = self._replies.readline()
        except OSError:
            line = b""
        if not line:  # the driver is gone (killed, or its JVM was)
            raise self._ended(job)
        self.jobs += 1
        reply: dict[str, Any] = json.loads(line)
        if "error" not in reply:
            result: dict[str, Any] = reply["result"]
            return result
        raise job_failure(job, reply, self._wait)

    def _start(self, job: str) -> None:
        submit = shutil.which("spark-submit") or str(Path(sys.executable).parent / "spark-submit")
        master = os.environ.get("CDCFLOW_SPARK_MASTER", "local[2]")
        spec = importlib.util.find_spec("spark_jobs.job_server")
        if spec is None or spec.origin is None:
            raise ChangefeedError("cannot find the Spark job server module spark_jobs.job_server")
        # A Unix socket's path has at most 107 bytes: a long $TMPDIR falls back to /tmp.
        self._dir = tempfile.TemporaryDirectory(prefix="cdcflow-spark-",
                                                dir=None if len(tempfile.gettempdir()) < 60 else "/tmp")
        d = Path(self._dir.name)
        cmd = [submit, "--master", master]
        # delta-spark's jars and Delta's extension, as local sessions have
        for k, v in delta_jars.session_confs().items():
            cmd += ["--conf", f"{k}={v}"]
        cmd += [spec.origin, "--socket", str(d / "jobs.sock")]
        env = dict(os.environ)
        pyspark_spec = importlib.util.find_spec("pyspark")
        if "SPARK_HOME" not in env and pyspark_spec is not None and pyspark_spec.origin:
            # The pip-installed spark-submit finds its jars through SPARK_HOME = the pyspark package.
            env["SPARK_HOME"] = str(Path(pyspark_spec.origin).parent)
        # The driver (and local executors) run this interpreter, which has cdc_core and spark_jobs; spark-submit's
        # default is whatever `python3` is on PATH. A cluster's executors are told theirs by its deployment.
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(d / "jobs.sock"))
            listener.listen(1)
            # Output to files, not pipes: nobody has to drain them while a job runs; a failure reads what was added.
            with open(d / "stdout", "wb") as out, open(d / "stderr", "wb") as err:
                self._proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
            listener.settimeout(1.0)
            while self._conn is None:
                try:
                    self._conn, _ = listener.accept()
                except TimeoutError:
                    if self._proc.poll() is not None:  # it ended before its driver ran (bad conf, no JVM, killed)
                        raise self._ended(job) from None
        self._conn.settimeout(None)
        self._requests = self._conn.makefile("wb")
        self._replies = self._conn.makefile("rb")
        hello = self._replies.readline()
        if not hello:
            raise self._ended(job)
        self._driver_pid = int(json.loads(hello)["pid"])
        log.info("spark application started", pid=self._proc.pid, driver_pid=self._driver_pid, master=master,
                 first_job=job)

    def _output_sizes(self) -> tuple[int, int]:
        if self._dir is None:
            return 0, 0
        d = Path(self._dir.name)
        return tuple(  # type: ignore[return-value]
            (d / n).stat().st_size if (d / n).exists() else 0 for n in ("stdout", "stderr"))

    def _output(self) -> tuple[str, str]:
        """What the application wrote to stdout and stderr since the job under way was sent (an earlier job's
        traceback must not decide what ended this one)."""
        if self._dir is None:
            return "", ""
        d, texts = Path(self._dir.name), []
        for name, since in zip(("stdout", "stderr"), self._sent_at, strict=True):
            try:
                with open(d / name, "rb") as f:
                    f.seek(since)
                    texts.append(f.read().decode(errors="replace"))
            except FileNotFoundError:
                texts.append("")
        return texts[0], texts[1]

    def _wait(self, timeout: float) -> int | None:
        """The JVM's exit code, waiting up to ``timeout`` seconds for it (None: still running)."""
        assert self._proc is not None
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def _ended(self, job: str) -> ChangefeedError | TransientError:
        """The error of an application that ended under ``job``: as a one-shot submission's exit would say."""
        code = self._wait(60)
        if code is None:
            self._kill()
            code = self._wait(60)
        stdout, stderr = self._output()
        if code == 0:
            return ChangefeedError(f"spark-submit of {job}: the application ended without answering:\n"
                                   f"{_failure(stdout, stderr)}")
        return submit_failure(job, code if code is not None else -9, stdout, stderr)

    def _kill(self) -> None:
        """``kill -9`` of the Python driver, then of the JVM it runs under (the driver is the JVM's child: killing
        only the JVM would leave it running its job)."""
        if self._driver_pid is not None and self._driver_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._driver_pid, signal.SIGKILL)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    def _driver_alive(self) -> bool:
        """Whether the driver's pid is still this application's driver (the JVM that started it may be gone, and
        the pid then free for another process)."""
        try:
            return "job_server.py" in Path(f"/proc/{self._driver_pid}/cmdline").read_text(errors="replace")
        except FileNotFoundError:
            return False
        except OSError:  # no /proc: it is ours for as long as the JVM runs
            return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        """End the application: the driver sees the socket close and returns; one that does not is killed."""
        for f in (self._requests, self._replies, self._conn):
            with contextlib.suppress(OSError):
                if f is not None:
                    f.close()
        if self._proc is not None:
            self._wait(60)
            self._kill()  # a driver that outlived its JVM (killed under a job) has nothing left to serve
            self._proc.wait()
            log.info("spark application ended", pid=self._proc.pid, code=self._proc.returncode, jobs=self.jobs)
        if self._dir is not None:
            self._dir.cleanup()
        self._proc = self._conn = self._requests = self._replies = self._dir = self._driver_pid = None
