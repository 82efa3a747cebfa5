"""A local Spark Connect server for Airflow's tasks: `make airflow`, `make demo` and the Airflow end-to-end tests.

Every Airflow task is a process of its own. With the embedded engine, each ``apply`` and ``check`` task would
start a JVM (~12 s on 2 cores) and then run its first queries cold (seconds each until the JIT warms up), for
windows that hold a few rows. Here one long-lived Spark (``local[2]``, the pyspark wheel's own
``spark-connect`` jar and the Delta jars the bootstrap fetched, nothing downloaded here) serves them all: a
task connects with ``CDCFLOW_SPARK_MASTER=sc://127.0.0.1:<port>`` (``spark_jobs.session``), has a session of
its own on the server, and its queries run warm. It is also how a production deployment would reach a shared
Spark cluster from Airflow workers.

The server listens on 127.0.0.1 only. Its Python workers (``mapInArrow`` in ``spark_jobs.upstream_read``)
run this interpreter, which has cdc_core and spark_jobs installed.

    python scripts/spark_connect.py start --dir .airflow/spark --port 15002   # prints sc://127.0.0.1:15002
    python scripts/spark_connect.py status --dir .airflow/spark               # exit 0 when running
    python scripts/spark_connect.py stop --dir .airflow/spark
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import service_cli  # scripts/: run as a script, or on sys.path

from cdc_core.changefeed import delta_jars

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PID_FILE = "server.pid"
LOG_FILE = "server.log"
READY_LINE = "Spark Connect server started"


class SparkConnectError(RuntimeError):
    pass


# Servers this process started (a harness that starts and stops its own): reaped by stop().
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def url(port: int) -> str:
    return f"sc://127.0.0.1:{port}"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _pid(workdir: Path) -> int | None:
    """The server's pid when it is alive, else None."""
    try:
        pid = int((workdir / PID_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return None if _exited(pid) else pid


def _exited(pid: int) -> bool:
    """Whether ``pid`` is a zombie: exited (our own child, not yet reaped), though it answers signal 0.

    Not just its state ``Z``: that is the state of the main thread, which the JVM's can reach while the
    shutdown hooks still run (with the server's socket open) on other threads."""
    try:
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
    except OSError:
        return False
    return status.get("State", "").strip().startswith("Z") and status.get("Threads", "1").strip() in ("0", "1")


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _log_tail(workdir: Path, chars: int = 3000) -> str:
    p = workdir / LOG_FILE
    return p.read_text(errors="replace")[-chars:] if p.exists() else ""


def command(port: int, *, master: str = "local[2]", driver_memory: str = "1g",
            warehouse_dir: Path | None = None) -> list[str]:
    """The spark-submit command line of the server."""
    spark_submit = _spark_home() / "bin" / "spark-submit"
    confs = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    if warehouse_dir is not None:
        confs["spark.sql.warehouse.dir"] = str(warehouse_dir)
    confs.update(delta_jars.session_confs())  # the tasks' sessions can MERGE and RESTORE through delta-spark
    args = [str(spark_submit), "--master", master, "--class", SERVER_CLASS, "--name", "cdcflow-spark-connect"]
    for k, v in confs.items():
        args += ["--conf", f"{k}={v}"]
    return args


def start(workdir: Path, port: int, *, driver_memory: str | None = None, timeout_s: float = 180.0) -> str:
    """Start the server (logs and pid file in ``workdir``) on 127.0.0.1:``port``; its ``sc://`` URL.

    Idempotent: a server already running from ``workdir`` is left as it is. Returns once the server accepts
    connections; raises ``SparkConnectError`` with the log's tail when it exits or does not come up."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if _pid(workdir) is not None:
        return url(port)
    if _accepts(port):
        raise SparkConnectError(f"port {port} on 127.0.0.1 is taken by another process: pick another "
                                "(CDCFLOW_SPARK_CONNECT_PORT for make airflow)")
    home = _spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        # The server logs at WARN into LOG_FILE; its INFO lines are per query.
        "SPARK_CONF_DIR": str(_conf_dir(workdir)),
    }
    memory = driver_memory or os.environ.get("CDCFLOW_SPARK_DRIVER_MEMORY", "1g")
    with (workdir / LOG_FILE).open("ab") as log:
        proc = subprocess.Popen(command(port, driver_memory=memory, warehouse_dir=workdir / "spark-warehouse"),
                                cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    (workdir / PID_FILE).write_text(str(proc.pid))
    _CHILDREN[proc.pid] = proc
    deadline = time.monotonic() + timeout_s
    while not _accepts(port):
        if proc.poll() is not None:
            _CHILDREN.pop(proc.pid, None)
            (workdir / PID_FILE).unlink(missing_ok=True)
            raise SparkConnectError(f"the Spark Connect server exited with {proc.returncode} before accepting "
                                    f"connections on {port}:\n{_log_tail(workdir)}")
        if time.monotonic() > deadline:
            stop(workdir)
            raise SparkConnectError(f"the Spark Connect server did not accept connections on {port} within "
                                    f"{timeout_s:.0f} s:\n{_log_tail(workdir)}")
        time.sleep(0.5)
    return url(port)


def _conf_dir(workdir: Path) -> Path:
    """A SPARK_CONF_DIR whose log4j2 config logs WARN and above (the default logs every query at INFO)."""
    d = workdir / "conf"
    d.mkdir(exist_ok=True)
    (d / "log4j2.properties").write_text(
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.stdout.ref = console\n"
        "appender.console.type = Console\n"
        "appender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
        # The line start() waits on is INFO: keep it.
        "logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer\n"
        "logger.connect.level = info\n"
    )
    return d


def running(workdir: Path) -> bool:
    return _pid(workdir.resolve()) is not None


def stop(workdir: Path, timeout_s: float = 30.0) -> None:
    """Stop the server started from ``workdir`` (its whole process group); nothing when it is not running."""
    workdir = workdir.resolve()
    pid = _pid(workdir)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        child = _CHILDREN.pop(pid, None)
        while _pid(workdir) is not None and time.monotonic() < deadline:
            if child is not None:
                child.poll()  # reaps it once it has exited
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    (workdir / PID_FILE).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    return service_cli.run(
        argv, name="spark_connect", description=__doc__.splitlines()[0],
        dir_help="the server's folder: pid file, log, conf", default_port=15002, start=start, stop=stop,
        running=running, errors=(SparkConnectError,),
    )


if __name__ == "__main__":
    sys.exit(main())
