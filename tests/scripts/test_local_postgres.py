"""scripts/local_postgres.py: the private PostgreSQL that holds Airflow's metadata DB."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import local_postgres as pg
import pytest

pytestmark = pytest.mark.skipif(pg.bindir() is None and os.geteuid() != 0,
                                reason="no PostgreSQL server binaries, and not root to install Debian's package")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def datadir() -> Iterator[Path]:
    # Not pytest's tmp_path: as root the server runs as 'postgres', which cannot enter root's private temp root.
    d = Path(tempfile.mkdtemp(prefix="cdcflow-pg-test-"))
    yield d
    pg.stop(d)
    shutil.rmtree(d, ignore_errors=True)


def test_start_is_idempotent_serves_the_airflow_db_on_loopback_and_stops(datadir: Path) -> None:
    import psycopg2

    port = _port()
    url = pg.start(datadir, port, durable=False)
    assert url == f"postgresql+psycopg2://airflow@127.0.0.1:{port}/airflow"
    assert pg.running(datadir)
    assert pg.start(datadir, port, durable=False) == url  # already running: left as it is
    with psycopg2.connect(host="127.0.0.1", port=port, user="airflow", dbname="airflow") as conn:
        with conn.cursor() as cur:
            cur.execute("SHOW listen_addresses")
            assert cur.fetchone() == ("127.0.0.1",)
    assert pg.main(["status", "--dir", str(datadir)]) == 0
    pg.stop(datadir)
    assert not pg.running(datadir) and pg.main(["status", "--dir", str(datadir)]) == 3
    # Restarted from the same directory: the database is still there.
    pg.start(datadir, port)
    with psycopg2.connect(host="127.0.0.1", port=port, user="airflow", dbname="airflow"):
        pass


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's server runs as another user")
def test_a_data_dir_the_server_user_cannot_reach_moves_to_its_home_linked_and_removable(tmp_path: Path) -> None:
    """A checkout under a mode-700 directory (/root, mktemp -d): 'postgres' cannot enter it, so the cluster lives in
    its home, the requested path links there, the private directory keeps its mode, and remove deletes both."""
    import psycopg2

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    requested = private / "pg"
    port = _port()
    try:
        assert pg.start(requested, port, durable=False) == pg.url(port)
        real = requested.resolve()
        assert requested.is_symlink() and real.parent == Path("/var/lib/postgresql/cdcflow")
        assert (private.stat().st_mode & 0o777) == 0o700
        assert pg.running(requested) and pg.main(["status", "--dir", str(requested)]) == 0
        with psycopg2.connect(host="127.0.0.1", port=port, user="airflow", dbname="airflow"):
            pass
        pg.stop(requested)
        assert pg.start(requested, port, durable=False) == pg.url(port)  # restarted through the link
        assert pg.main(["remove", "--dir", str(requested)]) == 0
        assert not requested.exists() and not requested.is_symlink() and not real.exists()
    finally:
        pg.remove(requested)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's server runs as another user")
def test_an_existing_cluster_made_unreachable_is_a_clear_error(datadir: Path) -> None:
    datadir.chmod(0o755)
    pg.start(datadir / "pg", _port(), durable=False)
    assert not (datadir / "pg").is_symlink()
    pg.stop(datadir / "pg")
    datadir.chmod(0o700)  # its parent turned private after the cluster was made
    with pytest.raises(pg.PostgresError, match=r"out of reach of 'postgres'.*remove it"):
        pg.start(datadir / "pg", _port())
