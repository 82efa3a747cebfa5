"""The distributed deployment, as processes on one machine: what docker-compose.yml runs in containers.

``SERVICES`` and ``SHARED_ENV`` are the topology: which services there are, what each runs, how many of each, the
ports each serves, and the environment every cdcflow and Airflow process gets, with ``{service:port}`` where an
address goes and ``{SECRET}`` where a secret goes. :class:`DistributedAirflow` starts it as processes (each on
loopback, ports chosen free, the upstream's stores on 127.0.0.2 and 127.0.0.3 and the Spark workers on 127.0.0.5
and 127.0.0.6, so that every advertised address is used), and ``tests/test_deployment.py`` checks that
docker-compose.yml is the same topology: same services and replicas, same commands and options, same published
ports, the same environment with each address naming the same service.

    PostgreSQL (Debian's server)  Redis (Debian's redis-server)
    the embedded upstream: PD + 2 stores        Spark standalone: a master and 2 workers (pyspark's own jars)
    the capture supervisor: a capture per changefeed
    Airflow: API server, scheduler, dag processor, triggerer, 2 Celery workers (CeleryExecutor)

The tasks submit their Spark jobs to the standalone master (``CDCFLOW_SPARK_ENGINE=submit``), whose executors, on
the workers, write Delta through delta-spark.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import local_postgres  # scripts/ is on sys.path (pyproject's pytest pythonpath)
from cdcflow_airflow import bundle_config

from testkit.airflow_server import VENV_BIN, AirflowServer, free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Service:
    """One service of the topology. ``program`` is its command up to the first option (what compose's
    ``command`` starts with, or its image for the two off-the-shelf servers); ``options`` the options compose
    must give it too; ``ports`` what it serves, by name, with the port it listens on in a container."""

    program: tuple[str, ...]
    replicas: int = 1
    ports: dict[str, int] = field(default_factory=dict)
    published: tuple[str, ...] = ()  # ports an operator reaches from the host
    options: tuple[str, ...] = ()
    image: str | None = None  # an off-the-shelf server (compose: this image; here: Debian's package)
    # brought back when it dies (compose: ``restart: unless-stopped``; the soak restarts what it kills). Not the
    # upstream: it would come back empty, its TSO behind every checkpoint; not the one-shot init.
    restarts: bool = True


SERVICES: dict[str, Service] = {
    "postgres": Service(("postgres",), image="postgres", ports={"pg": 5432}),
    "redis": Service(("redis-server",), image="redis", ports={"redis": 6379}),
    "upstream": Service(("cdcflow", "upstream", "start"), ports={"pd": 2379, "mysql": 4000},
                        published=("pd", "mysql"), options=("--pd-addr", "--mysql-addr", "--advertise-host"),
                        restarts=False),
    # a capture for every changefeed that wants one, kept running (cdc_core/capture/supervisor.py)
    "capture": Service(("cdcflow", "capture", "supervise")),
    "spark-master": Service(("spark-class", "org.apache.spark.deploy.master.Master"), ports={"master": 7077},
                            published=("master",), options=("--host",)),
    "spark-worker": Service(("spark-class", "org.apache.spark.deploy.worker.Worker"), replicas=2),
    "airflow-init": Service(("airflow", "db", "migrate"), restarts=False),
    "airflow-apiserver": Service(("airflow", "api-server"), ports={"api": 8080}, published=("api",)),
    "airflow-scheduler": Service(("airflow", "scheduler")),
    "airflow-dag-processor": Service(("airflow", "dag-processor")),
    "airflow-triggerer": Service(("airflow", "triggerer")),
    "airflow-worker": Service(("airflow", "celery", "worker"), replicas=2),
}

# Every cdcflow and Airflow process's environment. ``{service:port}`` is that service's address (compose: the
# service name and the container port; here: loopback and a free port); ``{NAME}`` a secret from the environment;
# ``{path:...}`` a path of the deployment (compose: in the image and its volumes).
SHARED_ENV: dict[str, str] = {
    "CDCFLOW_HOME": "{path:home}",
    "CDCFLOW_UPSTREAM": "{upstream:pd}",
    "CDCFLOW_SPARK_ENGINE": "submit",
    "CDCFLOW_SPARK_MASTER": "spark://{spark-master:master}",
    "CDCFLOW_DELTA_WRITER": "delta-spark",
    "CDCFLOW_TIDB_PASSWORD": "{TIDB_PASSWORD}",
    "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
        "postgresql+psycopg2://{POSTGRES_USER}:{POSTGRES_PASSWORD}@{postgres:pg}/airflow",
    "AIRFLOW__CELERY__RESULT_BACKEND": "db+postgresql+psycopg2://{POSTGRES_USER}:{POSTGRES_PASSWORD}@{postgres:pg}/airflow",
    "AIRFLOW__CELERY__BROKER_URL": "redis://{redis:redis}/0",
    "AIRFLOW__API_AUTH__JWT_SECRET": "{AIRFLOW_JWT_SECRET}",
    "AIRFLOW__CORE__FERNET_KEY": "{AIRFLOW_FERNET_KEY}",
    "AIRFLOW__CORE__DAGS_FOLDER": "{path:dags}",
    "AIRFLOW__CORE__PLUGINS_FOLDER": "{path:plugins}",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://{airflow-apiserver:api}/execution/",
    # failure detection for windows a minute apart (docker-compose.yml says why)
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "120",
    "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "60",
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "30",
    bundle_config.ENV: bundle_config.bundle_config_list(),
}
SECRET_NAMES = ("POSTGRES_USER", "POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_FERNET_KEY", "TIDB_PASSWORD")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_:.-]*)\}")  # {name} or {service:port}; JSON braces are not


def fill(template: str, addresses: dict[str, str], values: dict[str, str]) -> str:
    """``template`` with each ``{service:port}`` from ``addresses`` and each other ``{name}`` from ``values``."""
    def one(m: re.Match[str]) -> str:
        key = m.group(1)
        table = values if key.startswith("path:") or ":" not in key else addresses
        if key not in table:
            raise KeyError(f"{key!r} of {template!r} has no value")
        return table[key]
    return _PLACEHOLDER.sub(one, template)


class _Proc:
    """A long-running process of the topology, in a session of its own, its output in ``log``."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.log, self.argv, self.env = name, log, argv, env
        self._out = open(log, "ab")
        self.popen = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=self._out, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def kill(self) -> None:
        """``kill -9`` of the whole session, as a container dies: the process and everything it started (the
        children in process groups of their own too: task supervisors, spark-submit, executors)."""
        sid = self.popen.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sid, signal.SIGKILL)
        subprocess.run(["pkill", "-KILL", "-s", str(sid)], capture_output=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def restart(self) -> None:
        """Start it again with the same command and environment (a restart policy's job)."""
        assert not self.alive(), f"{self.name} is still running"
        self.popen = self._start()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=30)
        self.kill()  # what is left, and children in process groups of their own (task supervisors, spark-submit)
        self._out.close()


def _port_open(host: str, port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


class DistributedAirflow(AirflowServer):
    """The topology above, started as processes. Driven like :class:`AirflowServer` (REST API, ``airflow``
    CLI); ``upstream_pd`` is its own upstream's PD address, ``spark_workdirs`` the Spark workers' work dirs
    (one ``app-*`` directory per application that ran executors there)."""

    STORE_HOSTS = ("127.0.0.2", "127.0.0.3")
    SPARK_WORKER_HOSTS = ("127.0.0.5", "127.0.0.6")

    def __init__(self, workdir: Path, cdc_home: Path, *, control: bool = False,
                 airflow_env: dict[str, str] | None = None) -> None:
        """``control``: start the upstream with its control port (``control_addr``; faults, as the soak injects
        them), which compose does not; ``airflow_env``: settings for every Airflow process on top of the
        topology's."""
        super().__init__(workdir, {"CDCFLOW_HOME": str(cdc_home)})
        self.cdc_home = cdc_home
        self.control_addr = f"127.0.0.1:{free_port()}" if control else None
        self.procs: list[_Proc] = []
        self.ports = {f"{svc}:{name}": free_port() for svc, s in SERVICES.items() for name in s.ports}
        self.addresses = {k: f"127.0.0.1:{p}" for k, p in self.ports.items()}
        self.port = self.ports["airflow-apiserver:api"]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.spark_ui_port = free_port()
        self.spark_workdirs = [workdir / f"spark-worker-{i + 1}" for i in range(SERVICES["spark-worker"].replicas)]
        self.worker_names = [f"worker{i + 1}@cdcflow" for i in range(SERVICES["airflow-worker"].replicas)]
        self.redis_dir = workdir / "redis"
        self.values = {
            "POSTGRES_USER": local_postgres.USER,  # trust auth: the password is not checked, but it is passed
            "POSTGRES_PASSWORD": secrets.token_hex(8),
            "AIRFLOW_JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW_FERNET_KEY": _fernet_key(),
            "TIDB_PASSWORD": secrets.token_hex(8),
            "path:home": str(cdc_home),
            "path:dags": str(ROOT / "dags"),
            "path:plugins": str(ROOT / "plugins"),
        }
        for key in ("CDCFLOW_SPARK_MASTER", "AIRFLOW__CORE__EXECUTOR"):  # the standalone harness's choices
            self.env.pop(key, None)
        self.env.update({k: fill(v, self.addresses, self.values) for k, v in SHARED_ENV.items()})
        self.env.update({
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.base_url,
            "SPARK_HOME": _spark_home(),  # spark-class and spark-submit of the pyspark wheel find their jars
            "SPARK_LOCAL_IP": "127.0.0.1",  # the drivers (spark-submit in the Celery workers' tasks)
            # Two Celery workers and the triggerer on one machine: log servers on ports of their own. The task
            # logs are files under the shared AIRFLOW_HOME, which the API server reads directly.
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            **(airflow_env or {}),
        })

    @property
    def upstream_pd(self) -> str:
        return self.addresses["upstream:pd"]

    # --- lifecycle -------------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> _Proc:
        spec = SERVICES[name.rstrip("-0123456789") if name.startswith(("spark-worker", "airflow-worker")) else name]
        if spec.image is None:  # the command compose runs, with the options compose gives
            assert (Path(argv[0]).name, *argv[1:len(spec.program)]) == spec.program, (name, argv)
            assert set(spec.options) <= set(argv), (name, spec.options, argv)
        p = _Proc(name, argv, {**self.env, **(env or {})}, self.workdir / f"{name}.log")
        self.procs.append(p)
        return p

    def _wait_for(self, what: str, cond: Any, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            dead = [p for p in self.procs if not p.alive()]
            if dead:
                raise RuntimeError(f"{dead[0].name} exited ({dead[0].popen.returncode}) while waiting for {what}:\n"
                                   f"{dead[0].tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}:\n"
                                   + "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in self.procs))
            time.sleep(1.0)

    def start(self, timeout_s: float = 300.0) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.cdc_home.mkdir(parents=True, exist_ok=True)
        pg, redis = self.ports["postgres:pg"], self.ports["redis:redis"]
        local_postgres.start(self.pg_dir, pg, durable=False)
        self.redis_dir.mkdir(exist_ok=True)
        redis_server = shutil.which("redis-server")
        assert redis_server, "Debian's redis-server is missing (make test's preflight installs it)"
        self._spawn("redis", [redis_server, "--bind", "127.0.0.1", "--port", str(redis), "--save", "",
                              "--appendonly", "no", "--dir", str(self.redis_dir)])
        pd, mysql = self.ports["upstream:pd"], self.ports["upstream:mysql"]
        # No advertised host: each store publishes the loopback address it binds (compose: the service name).
        self._spawn("upstream", [str(VENV_BIN / "cdcflow"), "upstream", "start", "--stores", "2",
                                 "--store-hosts", ",".join(self.STORE_HOSTS), "--pd-addr", f"127.0.0.1:{pd}",
                                 "--mysql-addr", f"127.0.0.1:{mysql}", "--advertise-host", "",
                                 "--min-ts-interval-ms", "200",
                                 *(["--control-addr", self.control_addr] if self.control_addr else [])],
                    env={"CDCFLOW_UPSTREAM_SQL_PASSWORD": self.values["TIDB_PASSWORD"]})
        master = self.ports["spark-master:master"]
        self._spawn("spark-master", [str(VENV_BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
                                     "--host", "127.0.0.1", "--port", str(master),
                                     "--webui-port", str(self.spark_ui_port)])
        self._wait_for("the Spark master", lambda: _port_open("127.0.0.1", master), 120)
        for i, (host, work) in enumerate(zip(self.SPARK_WORKER_HOSTS, self.spark_workdirs, strict=True)):
            work.mkdir(exist_ok=True)
            self._spawn(f"spark-worker-{i + 1}", [
                str(VENV_BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{master}",
                "--host", host, "--cores", "1", "--memory", "1536m", "--webui-port", str(free_port()),
                "--work-dir", str(work)], env={"SPARK_LOCAL_IP": host})
        self._wait_for("Redis and the upstream", lambda: _port_open("127.0.0.1", redis)
                       and _port_open("127.0.0.1", mysql), 120)
        self._spawn("capture", [str(VENV_BIN / "cdcflow"), "capture", "supervise"])
        self.migrate()  # airflow-init
        self._spawn("airflow-apiserver", [str(VENV_BIN / "airflow"), "api-server", "--host", "127.0.0.1",
                                          "--port", str(self.port)])
        for name in ("scheduler", "dag-processor", "triggerer"):
            self._spawn(f"airflow-{name}", [str(VENV_BIN / "airflow"), name])
        for i, hostname in enumerate(self.worker_names):
            self._spawn(f"airflow-worker-{i + 1}", [str(VENV_BIN / "airflow"), "celery", "worker",
                                                    "--celery-hostname", hostname, "--skip-serve-logs"])
        self._wait_for("the API server to be healthy", lambda: self.pw_file.exists() and self._healthy(),
                       timeout_s)
        self._wait_for("both Spark workers to register", lambda: len(self.spark_workers()) == 2, 120)
        self._wait_for("both Celery workers to answer", self._celery_workers_up, timeout_s)

    def _celery_workers_up(self) -> bool:
        proc = subprocess.run([str(VENV_BIN / "celery"), "--app",
                               "airflow.providers.celery.executors.celery_executor.app", "inspect", "ping",
                               "--timeout", "5"], env=self.env, capture_output=True, text=True, cwd=ROOT)
        return all(name in proc.stdout for name in self.worker_names)

    def spark_workers(self) -> list[dict[str, Any]]:
        """The master's live workers (its web UI's JSON)."""
        try:
            r = httpx.get(f"http://127.0.0.1:{self.spark_ui_port}/json/", timeout=5)
            return [w for w in r.json().get("workers", []) if w.get("state") == "ALIVE"]
        except (httpx.HTTPError, ValueError):
            return []

    @property
    def running(self) -> bool:
        return bool(self.procs) and all(p.alive() for p in self.procs)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs.clear()
        local_postgres.stop(self.pg_dir)

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(lines // 4)}" for p in self.procs)


@contextlib.contextmanager
def running(workdir: Path, **kwargs: Any) -> Iterator[DistributedAirflow]:
    """The topology started under ``workdir`` (``kwargs``: :class:`DistributedAirflow`'s), this process logged in
    to its upstream's SQL as every cdcflow process of it is (root with the deployment's password); removed after."""
    t = DistributedAirflow(workdir, workdir / "cdcflow", **kwargs)
    saved = os.environ.get("CDCFLOW_TIDB_PASSWORD")
    os.environ["CDCFLOW_TIDB_PASSWORD"] = t.values["TIDB_PASSWORD"]
    try:
        t.start()
        yield t
    finally:
        t.remove()
        if saved is None:
            os.environ.pop("CDCFLOW_TIDB_PASSWORD", None)
        else:
            os.environ["CDCFLOW_TIDB_PASSWORD"] = saved


def _spark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


if __name__ == "__main__":  # by hand: start it, print where it is, stop on Ctrl-C
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="cdcflow-topology-"))
    t = DistributedAirflow(work, work / "cdcflow")
    try:
        t.start()
        print(f"API {t.base_url}  PD {t.upstream_pd}  logs {work}", file=sys.stderr)
        signal.pause()
    finally:
        t.stop()
