"""The ``cdcflow upstream start`` process: serve in the foreground, or detach a background server.

A serving process writes ``$CDCFLOW_HOME/upstream.json`` ``{pd_addr, store_addrs, pid}`` once
every server serves (atomically: temp file + rename) and removes it when it stops (SIGINT /
SIGTERM). ``spawn_detached`` starts the same command in a new session with its output in
``$CDCFLOW_HOME/logs/upstream.log`` and returns when that file names the child and PD answers;
``stop_running`` sends SIGTERM to the recorded pid and waits for the process to exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cdc_core import durable
from cdc_core.client.upstream import UpstreamClient, read_upstream_file
from cdc_core.errors import UpstreamError
from cdc_core.home import home, logs_dir, upstream_file
from cdc_core.log import get_logger
from cdc_core.upstream.cluster import Cluster, ClusterConfig

log = get_logger("cdcflow.upstream.process")

LOG_NAME = "upstream.log"
DETACHED_ENV = "CDCFLOW_UPSTREAM_DETACHED"


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


def check_not_running() -> None:
    """Fail if a live upstream is recorded; remove a stale record."""
    data = read_upstream_file()
    if data is None:
        return
    pid = int(data.get("pid") or 0)
    if pid_alive(pid):
        raise UpstreamError(
            f"an upstream is already running (pid {pid}, PD {data.get('pd_addr')}); "
            "stop it with `cdcflow upstream stop`"
        )
    upstream_file().unlink(missing_ok=True)


async def serve(config: ClusterConfig) -> None:
    """Run a cluster until SIGINT/SIGTERM; upstream.json exists exactly while it serves."""
    cluster = Cluster(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await cluster.start()
    pid = os.getpid()
    try:
        path = write_upstream_file(cluster.pd_addr, cluster.store_addrs, pid, cluster.pd_member_addrs,
                                   cluster.mysql_addr, cluster.control_addr)
        control = f", control {cluster.control_addr}" if cluster.control_addr else ""
        print(f"upstream serving: PD {','.join(cluster.pd_member_addrs)}, MySQL {cluster.mysql_addr or '-'}{control}, "
              f"stores {', '.join(cluster.store_addrs)} (pid {pid}, {path})", file=sys.stderr, flush=True)
        await stop.wait()
        print("upstream stopping", file=sys.stderr, flush=True)
    finally:
        remove_upstream_file(pid)
        await cluster.stop()


def run_foreground(config: ClusterConfig) -> None:
    check_not_running()
    asyncio.run(serve(config))


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def spawn_detached(args: list[str], timeout: float = 30.0) -> dict[str, Any]:
    """Start ``cdcflow upstream start ARGS`` in the background; return upstream.json once it serves."""
    check_not_running()
    logs = logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / LOG_NAME
    env = {**os.environ, "CDCFLOW_HOME": str(home()), DETACHED_ENV: "1"}
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdc_core.cli.main", "upstream", "start", *args],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = proc.poll()
        if rc is not None:
            raise UpstreamError(f"the upstream exited with code {rc} while starting; {log_path}:\n{_tail(log_path)}")
        data = read_upstream_file()
        if data is not None and data.get("pid") == proc.pid:
            with UpstreamClient(str(data["pd_addr"]), timeout=2.0) as client:
                if client.ping():
                    log.info("detached upstream serving", **data)
                    return data
        time.sleep(0.1)
    proc.kill()
    raise UpstreamError(f"the upstream did not start serving within {timeout:g}s; {log_path}:\n{_tail(log_path)}")


def status() -> dict[str, Any]:
    """The running upstream's endpoints: ``{"pd", "pd_members": [{"id", "name", "address", "leader"}], "mysql",
    "stores": [{"id", "address", "state"}], "pid"}``; ``pd`` is the PD leader.

    ``mysql`` is the SQL front's MySQL-protocol address (None when not served). The members and stores are PD's
    lists (``GetMembers``, ``GetAllStores``). Raises ``UpstreamError`` when none runs."""
    data = read_upstream_file()
    if data is None:
        raise UpstreamError(f"no upstream running (no {upstream_file()}); start one with "
                            "`cdcflow upstream start --detach`")
    pid = int(data.get("pid") or 0)
    if not pid_alive(pid):
        raise UpstreamError(f"no upstream running: {upstream_file()} names pid {pid}, which has exited")
    with UpstreamClient(",".join(data.get("pd_members") or [data["pd_addr"]]), timeout=5.0) as client:
        stores = [{"id": s.id, "address": s.address, "state": s.state} for s in client.all_stores()]
        members = client.members()
        leader = client.leader_addr
    return {"pd": leader, "pd_members": members, "mysql": data.get("mysql_addr"), "stores": stores, "pid": pid,
            "control": data.get("control_addr")}


def stop_running(timeout: float = 30.0) -> tuple[int, bool]:
    """SIGTERM the recorded upstream and wait for it to exit; ``(pid, was_running)``."""
    data = read_upstream_file()
    if data is None:
        raise UpstreamError(f"no upstream running (no {upstream_file()})")
    pid = int(data.get("pid") or 0)
    if not pid_alive(pid):
        upstream_file().unlink(missing_ok=True)
        return pid, False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            remove_upstream_file(pid)
            return pid, True
        time.sleep(0.05)
    raise UpstreamError(f"the upstream (pid {pid}) did not exit within {timeout:g}s of SIGTERM")
