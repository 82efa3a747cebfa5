"""What `make demo` and `make test` need from this machine beyond the venv, checked before they do anything.

The venv (Python packages, the PostgreSQL wheel an ordinary user's Airflow DB runs on) comes from the lock; Java
and Python are checked by the bootstrap. What is left are Debian packages and a few conditions of this checkout:

=========== =============================================================================================
``demo``    root: ``postgresql`` (the Airflow DB's server runs as its ``postgres`` user); the Airflow DB's
            port free or held by this checkout's own cluster; no embedded upstream already running from
            ``$CDCFLOW_HOME`` (the demo starts its own)
``test``    root: ``postgresql``; everyone: ``chromium`` (the browser test drives Debian's Chromium),
            ``mariadb-client`` (a test drives the embedded upstream's MySQL front with Debian's ``mariadb``),
            ``docker-compose`` (a test validates docker-compose.yml with it), ``redis-server`` (the Celery
            broker of the distributed-topology test), ``prometheus`` (promtool for the alert rules, and a
            Prometheus that scrapes Airflow's metrics endpoint) and ``sysbench`` (stock sysbench against the
            embedded upstream's MySQL front, prepared statements on)
=========== =============================================================================================

Missing packages are installed with apt-get when this is root (or ``sudo -n`` works); otherwise the check names
them with the command to run and exits 1, before anything else has run.

    python scripts/preflight.py demo
    python scripts/preflight.py test
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import debian_packages  # scripts/: run as a script, or on sys.path
import local_postgres

CHROMIUM = "/usr/bin/chromium"


class PreflightError(RuntimeError):
    pass


@dataclass(frozen=True)
class Package:
    name: str  # the Debian package
    why: str
    present: Callable[[], bool]
    root_only: bool = False  # only root needs it (an ordinary user's Airflow DB runs from the wheel)


POSTGRESQL = Package("postgresql", "the Airflow metadata DB's server, run as its 'postgres' user when root",
                     lambda: local_postgres._debian_bindir() is not None, root_only=True)
CHROMIUM_PKG = Package("chromium", "the browser end-to-end test drives it", lambda: Path(CHROMIUM).exists())
MARIADB_CLIENT = Package("mariadb-client", "a test connects Debian's mariadb client to the upstream's MySQL front",
                         lambda: shutil.which("mariadb") is not None)
DOCKER_COMPOSE = Package("docker-compose", "a test validates docker-compose.yml with it (`config`, no daemon)",
                         lambda: shutil.which("docker-compose") is not None)
REDIS = Package("redis-server", "the Celery broker of the distributed-topology test (tests/testkit/topology.py)",
                lambda: shutil.which("redis-server") is not None)
SYSBENCH = Package("sysbench", "a test runs stock sysbench (libmariadb, prepared statements) against the MySQL front",
                   lambda: shutil.which("sysbench") is not None)
PROMETHEUS = Package("prometheus", "promtool checks and tests the alert rules; a Prometheus scrapes a running "
                     "deployment in an end-to-end test", lambda: shutil.which("promtool") is not None)
NEEDS: dict[str, list[Package]] = {"demo": [POSTGRESQL],
                                   "test": [POSTGRESQL, CHROMIUM_PKG, MARIADB_CLIENT, DOCKER_COMPOSE, REDIS,
                                            PROMETHEUS, SYSBENCH]}


def ensure_packages(packages: list[Package], what: str) -> None:
    """Install the missing ones of ``packages`` (one apt-get run), or raise naming them and the command."""
    root = os.geteuid() == 0
    missing = [p for p in packages if (root or not p.root_only) and not p.present()]
    if not missing:
        return
    if debian_packages.installer() is None:
        listed = "; ".join(f"{p.name} ({p.why})" for p in missing)
        raise PreflightError(f"{what} needs Debian packages that are missing here: {listed}. Install them as "
                             f"root: apt-get install -y {' '.join(p.name for p in missing)}")
    try:
        debian_packages.install([p.name for p in missing], what)
    except debian_packages.InstallError as e:
        raise PreflightError(str(e)) from e
    still = [p.name for p in missing if not p.present()]
    if still:
        raise PreflightError(f"apt-get ran, but {', '.join(still)} is still not found")


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def check_airflow_db() -> None:
    """The Airflow DB's server can run: binaries to be had, its port free unless its own cluster holds it."""
    if os.environ.get("CDCFLOW_AIRFLOW_DB", "postgres") == "sqlite":
        return
    fix = local_postgres.missing_server_fix()
    if fix:
        raise PreflightError(fix)
    pg_dir = Path(os.environ.get("CDCFLOW_AIRFLOW_PG_DIR", ".airflow/pg"))
    port = int(os.environ.get("CDCFLOW_AIRFLOW_PG_PORT", "5433"))
    if not local_postgres.running(pg_dir) and _port_taken(port):
        raise PreflightError(f"127.0.0.1:{port}, the Airflow DB's port, is taken by another program: set "
                             "CDCFLOW_AIRFLOW_PG_PORT to a free port")


def check_no_upstream() -> None:
    """No embedded upstream runs from ``$CDCFLOW_HOME``: the demo starts (and stops) its own."""
    from cdc_core.errors import CdcflowError
    from cdc_core.upstream.process import check_not_running

    try:
        check_not_running()
    except CdcflowError as e:
        raise PreflightError(f"the demo starts its own embedded upstream, but {e}") from e


def check(mode: str) -> None:
    ensure_packages(NEEDS[mode], f"make {mode}")
    if mode == "demo":
        check_airflow_db()
        check_no_upstream()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in NEEDS:
        print(f"usage: preflight.py {{{'|'.join(NEEDS)}}}", file=sys.stderr)
        return 2
    try:
        check(args[0])
    except PreflightError as e:
        print(f"preflight: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
