"""Debian's stock ``sysbench`` against an embedded upstream's MySQL front, and a changefeed kept running beside it.

``run(...)`` runs one of sysbench's bundled OLTP scripts (``oltp_point_select``, ``oltp_read_write``,
``oltp_write_only``, ``oltp_update_index``) with its stock options -- prepared statements on, through libmariadb,
as TiDB's own sysbench guide runs it -- and returns its figures (:class:`Report`). ``ChangefeedLoop`` runs
``cdcflow changefeed run <id> --until-ts now`` again and again in its own processes until stopped, as a user's
scheduler would while the workload writes: window after window, each catching up with the upstream's now.
``scripts/preflight.py test`` installs ``sysbench``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from types import TracebackType

SCRIPTS = ("oltp_point_select", "oltp_read_write", "oltp_write_only", "oltp_update_index")
AVAILABLE = shutil.which("sysbench") is not None
WHY_MISSING = "sysbench: python scripts/preflight.py test installs it"


@dataclass(frozen=True)
class Report:
    """What sysbench prints under "SQL statistics" (per-second figures over the run's wall time)."""

    transactions: int
    tps: float
    queries: int
    qps: float
    ignored_errors: int  # errors the script restarts a transaction on (1213 deadlock, 1205 lock wait timeout, ...)
    reconnects: int
    output: str


_FIGURE = re.compile(r"^\s*(transactions|queries|ignored errors|reconnects):\s+(\d+)\s+\((\d+(?:\.\d+)?) per sec\.\)",
                     re.MULTILINE)


def parse(output: str) -> Report:
    found = {name: (int(n), float(rate)) for name, n, rate in _FIGURE.findall(output)}
    missing = {"transactions", "queries", "ignored errors", "reconnects"} - found.keys()
    if missing:
        raise AssertionError(f"sysbench printed no {sorted(missing)}:\n{output[-3000:]}")
    return Report(transactions=found["transactions"][0], tps=found["transactions"][1], queries=found["queries"][0],
                  qps=found["queries"][1], ignored_errors=found["ignored errors"][0],
                  reconnects=found["reconnects"][0], output=output)


def command(script: str, mysql_addr: str, db: str, *args: str, tables: int = 2, table_size: int = 1000) -> list[str]:
    host, _, port = mysql_addr.rpartition(":")
    return ["sysbench", script, f"--mysql-host={host}", f"--mysql-port={port}", "--mysql-user=root",
            f"--mysql-db={db}", f"--tables={tables}", f"--table-size={table_size}", *args]


def _run(cmd: list[str], timeout: float) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def prepare(mysql_addr: str, db: str, *, tables: int = 2, table_size: int = 1000, timeout: float = 300) -> None:
    """sysbench's own ``prepare``: CREATE TABLE sbtestN, its rows in multi-row INSERTs, then CREATE INDEX k_N."""
    _run(command("oltp_read_write", mysql_addr, db, "prepare", tables=tables, table_size=table_size), timeout)


def run(script: str, mysql_addr: str, db: str, *, threads: int = 2, seconds: int = 20, tables: int = 2,
        table_size: int = 1000, extra: tuple[str, ...] = ()) -> Report:
    """One timed run of ``script``; an error sysbench does not ignore fails it (sysbench exits non-zero)."""
    cmd = command(script, mysql_addr, db, f"--threads={threads}", f"--time={seconds}", "--report-interval=0",
                  *extra, "run", tables=tables, table_size=table_size)
    return parse(_run(cmd, timeout=seconds + 120))


class ChangefeedLoop:
    """``cdcflow changefeed run ID --until-ts now``, one process after another, until the ``with`` block ends (the
    window in flight then finishes). Each run's output is kept; a failed run stops the loop and fails ``__exit__``."""

    def __init__(self, changefeed_id: str, *, timeout: float = 600) -> None:
        self.changefeed_id = changefeed_id
        self.timeout = timeout
        self.runs = 0
        self.failure: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"changefeed-loop-{changefeed_id}", daemon=True)

    def _loop(self) -> None:
        cmd = [sys.executable, "-m", "cdc_core.cli.main", "changefeed", "run", self.changefeed_id, "--until-ts", "now"]
        while not self._stop.is_set():
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout, check=False)
            if done.returncode != 0:
                self.failure = f"{' '.join(cmd)} exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}"
                return
            self.runs += 1

    def __enter__(self) -> ChangefeedLoop:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(self.timeout)
        if et is None and self.failure is not None:
            raise AssertionError(self.failure)
