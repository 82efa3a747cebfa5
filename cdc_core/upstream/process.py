"""The ``cdcflow upstream start`` process: a cluster served in the foreground until SIGINT / SIGTERM.

A serving process writes its record, ``$CDCFLOW_HOME/upstream.json`` (``cdc_core.upstream_record``), once every server
serves (atomically: temp file + rename) and removes it when it stops. Starting one in the background, asking it
for its status and stopping it are the CLI's (``cdc_core.cli.upstream_control``), which talks to it as a client.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from cdc_core.errors import UpstreamError
from cdc_core.home import upstream_file
from cdc_core.log import get_logger
from cdc_core.upstream.cluster import Cluster, ClusterConfig
from cdc_core.upstream_record import pid_alive, read_upstream_file, remove_upstream_file, write_upstream_file

log = get_logger("cdcflow.upstream.process")



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


