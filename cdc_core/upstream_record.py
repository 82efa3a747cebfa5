"""The running upstream's record, ``$CDCFLOW_HOME/upstream.json``: ``{pd_addr, pd_members, mysql_addr, store_addrs,
pid, control_addr}``, written by the process that serves (``cdc_core.upstream.process``, atomically once every server
serves, removed when it stops) and read by whoever finds the upstream through it (the clients' PD address, the CLI's
status and stop, Airflow's status view). The two sides meet in this file, not in each other's code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cdc_core import durable
from cdc_core.errors import UpstreamError
from cdc_core.home import upstream_file


def read_upstream_file() -> dict[str, Any] | None:
    """The ``$CDCFLOW_HOME/upstream.json`` written by a running upstream, or None."""
    path = upstream_file()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise UpstreamError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else None


def write_upstream_file(pd_addr: str, store_addrs: list[str], pid: int, pd_members: list[str] | None = None,
                        mysql_addr: str = "", control_addr: str = "") -> Path:
    path = upstream_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"pd_addr": pd_addr, "pd_members": pd_members or [pd_addr], "mysql_addr": mysql_addr or None,
            "store_addrs": store_addrs, "pid": pid, "control_addr": control_addr or None}
    durable.write_file(path, json.dumps(data, indent=2) + "\n")
    return path


def remove_upstream_file(pid: int) -> None:
    """Remove upstream.json if it still names ``pid`` (a newer server's file is left alone)."""
    try:
        data = read_upstream_file()
    except UpstreamError:
        data = None
    if data is not None and data.get("pid") == pid:
        upstream_file().unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody has reaped yet counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
