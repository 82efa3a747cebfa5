"""A ``cdcflow`` command started in the background: its own session (a terminal's hang-up or the caller's exit does
not reach it), its output appended to a log under ``$CDCFLOW_HOME/logs``, and the wait until it is ready.

``cdcflow upstream start --detach`` and ``cdcflow capture start --detach`` (and the DAG starting a changefeed's
capture) go through :func:`spawn`; each says what "ready" means for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from cdc_core.errors import CdcflowError
from cdc_core.home import home, logs_dir

T = TypeVar("T")
POLL_S = 0.1


def tail(path: os.PathLike[str] | str, lines: int = 20) -> str:
    """The last ``lines`` lines of a log, for an error saying why a process did not start."""
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def spawn(argv: Sequence[str], *, log_name: str, what: str, ready: Callable[[int], T | None],
          error: type[CdcflowError], timeout: float, env: Mapping[str, str] | None = None) -> T:
    """Start ``cdcflow ARGV`` detached and return ``ready(pid)`` once it is not None (polled every
    :data:`POLL_S`). ``error`` (naming ``what``, with the log's tail) when the process exits first or ``timeout``
    passes; on a timeout the process is killed."""
    logs = logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log_path: Path = logs / log_name
    child_env = {**os.environ, "CDCFLOW_HOME": str(home()), **(env or {})}
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdc_core.cli.main", *argv],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=child_env,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = proc.poll()
        if rc is not None:
            raise error(f"{what} exited with code {rc} while starting; {log_path}:\n{tail(log_path)}")
        got = ready(proc.pid)
        if got is not None:
            return got
        time.sleep(POLL_S)
    proc.kill()
    raise error(f"{what} did not start within {timeout:g}s; {log_path}:\n{tail(log_path)}")
