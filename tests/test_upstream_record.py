"""The running upstream's record: written and read back, removed only by the process it names, a broken one an
error naming the file, a recorded pid judged alive or gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_core.errors import UpstreamError
from cdc_core.home import upstream_file
from cdc_core.upstream_record import pid_alive, read_upstream_file, remove_upstream_file, write_upstream_file


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))


def test_the_record_round_trips_and_only_its_own_process_removes_it() -> None:
    assert read_upstream_file() is None
    path = write_upstream_file("127.0.0.1:2379", ["127.0.0.1:20160"], 4242, mysql_addr="127.0.0.1:4000")
    assert path == upstream_file()
    assert read_upstream_file() == {"pd_addr": "127.0.0.1:2379", "pd_members": ["127.0.0.1:2379"],
                                    "mysql_addr": "127.0.0.1:4000", "store_addrs": ["127.0.0.1:20160"],
                                    "pid": 4242, "control_addr": None}
    remove_upstream_file(4243)  # a newer server's record is left alone
    assert read_upstream_file() is not None
    remove_upstream_file(4242)
    assert read_upstream_file() is None


def test_a_broken_record_is_an_error_naming_it() -> None:
    upstream_file().parent.mkdir(parents=True, exist_ok=True)
    upstream_file().write_text("{not json")
    with pytest.raises(UpstreamError, match=r"cannot read .*upstream\.json"):
        read_upstream_file()
    remove_upstream_file(1)  # removing tolerates it, and leaves it
    assert upstream_file().exists()


def test_a_pid_is_alive_while_its_process_runs() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(0) and not pid_alive(-1)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)  # reaped: gone
