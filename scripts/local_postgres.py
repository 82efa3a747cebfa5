"""A private PostgreSQL server for Airflow's metadata DB: `make airflow` and the Airflow end-to-end tests.

Airflow on SQLite cannot take a second writer beside a running scheduler: `airflow backfill create` (or
``POST /api/v2/backfills``) fails with "database is locked" — Airflow's own API says backfill creation "is not
supported on SQLite under concurrent access. Please use PostgreSQL or MySQL." So Airflow here runs on a
PostgreSQL cluster of its own: the machine's PostgreSQL server binaries (Debian's ``postgresql`` package,
installed by ``ensure_installed`` when missing and this is root), a data directory given by the caller,
listening on 127.0.0.1 only, ``trust`` auth for the one local user (a development database, not a
production one), database ``airflow``.

PostgreSQL refuses to run as root: as root, the cluster belongs to (and the server runs as) the
``postgres`` system user that Debian's package creates.

    python scripts/local_postgres.py start --dir .airflow/pg --port 5433   # prints the SQLAlchemy URL
    python scripts/local_postgres.py status --dir .airflow/pg                # exit 0 when running
    python scripts/local_postgres.py stop --dir .airflow/pg
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

import service_cli  # scripts/: run as a script, or on sys.path

DB = "airflow"
USER = "airflow"


class PostgresError(RuntimeError):
    pass


def bindir() -> Path | None:
    """The newest installed server's bin directory (Debian keeps them off PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def ensure_installed() -> Path:
    """The server binaries, installing Debian's ``postgresql`` package first when they are missing."""
    found = bindir()
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PostgresError("no PostgreSQL server found (looked in /usr/lib/postgresql/*/bin and on PATH); "
                            "install Debian's 'postgresql' package, or set CDCFLOW_AIRFLOW_DB=sqlite for make "
                            "airflow / make demo (then no backfill while the scheduler runs)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"], check=True,
                   env=env)
    found = bindir()
    if not found:
        raise PostgresError("installed 'postgresql' but found no pg_ctl under /usr/lib/postgresql")
    return found


def _owner() -> str | None:
    """The user that runs the server: ``postgres`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as e:
        raise PostgresError("running as root needs the 'postgres' system user (Debian's postgresql "
                            "package creates it)") from e
    return "postgres"


def _run(args: list[str], owner: str | None) -> subprocess.CompletedProcess[str]:
    cmd = ["runuser", "-u", owner, "--", *args] if owner else args
    return subprocess.run(cmd, capture_output=True, text=True)


def url(port: int) -> str:
    return f"postgresql+psycopg2://{USER}@127.0.0.1:{port}/{DB}"


def start(datadir: Path, port: int, *, durable: bool = True, timeout_s: float = 60.0) -> str:
    """Start (initialising on first use) the cluster in ``datadir`` on 127.0.0.1:``port``; its SQLAlchemy URL.

    Idempotent: a cluster already running from ``datadir`` is left as it is. ``durable=False`` (throw-away
    test clusters) turns fsync off."""
    bins = ensure_installed()
    owner = _owner()
    datadir = datadir.resolve()
    if not (datadir / "PG_VERSION").exists():
        datadir.mkdir(parents=True, exist_ok=True)
        if owner and _run(["test", "-x", str(datadir.parent)], owner).returncode != 0:
            raise PostgresError(f"the server runs as '{owner}', which cannot reach {datadir.parent}: "
                                "put the data directory where it can (CDCFLOW_AIRFLOW_PG_DIR for make airflow)")
        if owner:
            shutil.chown(datadir, owner, owner)
        datadir.chmod(0o700)
        r = _run([str(bins / "initdb"), "-D", str(datadir), "-U", USER, "--auth=trust", "-E", "UTF8",
                  "--no-instructions"], owner)
        if r.returncode != 0:
            raise PostgresError(f"initdb {datadir} failed: {r.stderr.strip() or r.stdout.strip()}")
    status = _run([str(bins / "pg_ctl"), "-D", str(datadir), "status"], owner)
    if status.returncode != 0:
        # Sockets in the data directory (not /var/run/postgresql, which may not exist); TCP on loopback only.
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {datadir}" + ("" if durable else " -c fsync=off")
        r = _run([str(bins / "pg_ctl"), "-D", str(datadir), "-l", str(datadir / "server.log"), "-o", opts,
                  "-w", "-t", str(int(timeout_s)), "start"], owner)
        if r.returncode != 0:
            server_log = datadir / "server.log"
            log = server_log.read_text(errors="replace")[-2000:] if server_log.exists() else ""
            raise PostgresError(f"PostgreSQL in {datadir} did not start on port {port}: "
                                f"{r.stderr.strip() or r.stdout.strip()}\n{log}")
    _create_db(port, timeout_s)
    return url(port)


def _create_db(port: int, timeout_s: float) -> None:
    import psycopg2

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = psycopg2.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres")
            break
        except psycopg2.OperationalError as e:
            # pg_ctl -w returns once the server accepts connections; a retry covers a slow first accept.
            if time.monotonic() > deadline:
                raise PostgresError(f"cannot connect to PostgreSQL on 127.0.0.1:{port}: {e}") from e
            time.sleep(0.5)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{DB}"')
    finally:
        conn.close()


def running(datadir: Path) -> bool:
    """Whether a server is running from ``datadir``."""
    bins = bindir()
    datadir = datadir.resolve()
    if bins is None or not (datadir / "PG_VERSION").exists():
        return False
    return _run([str(bins / "pg_ctl"), "-D", str(datadir), "status"], _owner()).returncode == 0


def stop(datadir: Path) -> None:
    """Stop the cluster in ``datadir`` (fast shutdown); nothing when it is not running."""
    bins = bindir()
    datadir = datadir.resolve()
    if bins is None or not (datadir / "PG_VERSION").exists():
        return
    with contextlib.suppress(PostgresError):
        _run([str(bins / "pg_ctl"), "-D", str(datadir), "-m", "fast", "-w", "stop"], _owner())


def main(argv: list[str] | None = None) -> int:
    return service_cli.run(
        argv, name="local_postgres", description=__doc__.splitlines()[0],
        dir_help="the cluster's data directory", default_port=5433, start=start, stop=stop, running=running,
        errors=(PostgresError, subprocess.CalledProcessError),
    )


if __name__ == "__main__":
    sys.exit(main())
