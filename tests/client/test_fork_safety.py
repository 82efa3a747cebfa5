"""A process that holds an upstream channel can still fork+exec children (PySpark's JVM launch).

gRPC core's fork handlers crashed such children before exec (grpc/grpc#43055: measured here at
37 of 300 spawns with ``GRPC_ENABLE_FORK_SUPPORT`` unset); ``cdc_core`` turns them off on import.
Each case runs in a fresh interpreter, because gRPC reads the setting once, when first imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SPAWNS = 150

CHILD = textwrap.dedent("""
    import os, signal, subprocess, sys
    from cdc_core.client.upstream import UpstreamClient

    with UpstreamClient(sys.argv[1]) as c:
        c.get_ts()  # the channel is connected and stays open (idle) while the children start
        crashed = 0
        for _ in range(int(sys.argv[2])):
            # As pyspark.java_gateway launches the JVM: a preexec_fn forces fork() (no vfork).
            p = subprocess.Popen(["true"], stdin=subprocess.PIPE,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
            p.stdin.close()
            crashed += p.wait() != 0
    print(os.environ.get("GRPC_ENABLE_FORK_SUPPORT"), crashed)
""")


def _run(pd_addr: str, env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, pd_addr, str(SPAWNS)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    setting, crashed = out.stdout.split()
    return setting, int(crashed)


def test_children_forked_while_a_channel_is_open_all_exec(pd_addr: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    assert _run(pd_addr, env) == ("false", 0)


def test_an_explicit_setting_is_kept(pd_addr: str) -> None:
    env = {**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "0"}
    assert _run(pd_addr, env) == ("0", 0)
