"""The CLI's control of a background upstream: ``cdcflow upstream start --detach`` (the same command started in a
new session, its output in ``$CDCFLOW_HOME/logs/upstream.log``, returning once the upstream's record names the
child and PD answers), ``status`` (its endpoints, asked of PD) and ``stop`` (SIGTERM to the recorded pid, then the
wait for it to exit). This side talks to the upstream as a client does, over the wire; the serving process is
``cdc_core.upstream.process``, and the record between them ``cdc_core.upstream_record``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from cdc_core import detached
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import UpstreamError
from cdc_core.home import upstream_file
from cdc_core.log import get_logger
from cdc_core.tls import http_scheme, httpx_verify
from cdc_core.upstream.process import check_not_running
from cdc_core.upstream_record import pid_alive, read_upstream_file, remove_upstream_file

log = get_logger("cdcflow.upstream.process")  # the channel a detached start has always logged on

LOG_NAME = "upstream.log"
DETACHED_ENV = "CDCFLOW_UPSTREAM_DETACHED"


def spawn_detached(args: list[str], timeout: float = 30.0) -> dict[str, Any]:
    """Start ``cdcflow upstream start ARGS`` in the background; return upstream.json once it serves."""
    check_not_running()

    def serving(pid: int) -> dict[str, Any] | None:
        data = read_upstream_file()
        if data is None or data.get("pid") != pid:
            return None
        with UpstreamClient(str(data["pd_addr"]), timeout=2.0) as client:
            return data if client.ping() else None

    data = detached.spawn(["upstream", "start", *args], log_name=LOG_NAME, what="the upstream", ready=serving,
                          error=UpstreamError, timeout=timeout, env={DETACHED_ENV: "1"})
    log.info("detached upstream serving", **data)
    return data


def status() -> dict[str, Any]:
    """The running upstream's endpoints: ``{"pd", "pd_members": [{"id", "name", "address", "leader"}], "mysql",
    "stores": [{"id", "address", "state", "status_address", "cdc"}], "pid", "cdc": {"incremental_scans",
    "registered_regions"}}``; ``pd`` is the PD leader, ``cdc`` the stores' change-feed counters summed
    (:func:`store_cdc_metrics`).

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
        infos = client.all_stores()
        members = client.members()
        leader = client.leader_addr
    stores: list[dict[str, Any]] = []
    for s in infos:
        store: dict[str, Any] = {"id": s.id, "address": s.address, "state": s.state,
                                 "status_address": s.status_address}
        if s.status_address and s.state == "Up":
            store["cdc"] = store_cdc_metrics(s.status_address)
        stores.append(store)
    cdc = {name: sum(st["cdc"][name] for st in stores if "cdc" in st)
           for name in ("incremental_scans", "registered_regions")}
    return {"pd": leader, "pd_members": members, "mysql": data.get("mysql_addr"), "stores": stores, "pid": pid,
            "control": data.get("control_addr"), "cdc": cdc}


def store_cdc_metrics(status_address: str, timeout: float = 5.0) -> dict[str, int]:
    """A store's change-feed counters from its status server's ``/metrics``, as a TiKV operator reads them:
    ``incremental_scans`` (scan tasks started since the store started, ``tikv_cdc_scan_tasks{type="total"}``),
    ``ongoing_scans`` (``type="ongoing"``), ``registered_regions`` (``tikv_cdc_captured_region_total``) and
    ``scan_disk_read_bytes``. Raises ``UpstreamError`` when the store does not answer."""
    url = f"{http_scheme()}://{status_address}/metrics"
    try:
        resp = httpx.get(url, timeout=timeout, verify=httpx_verify())
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise UpstreamError(f"the store's status server at {url} did not answer: {exc}") from exc
    out = {"incremental_scans": 0, "ongoing_scans": 0, "registered_regions": 0, "scan_disk_read_bytes": 0}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            if sample.name == "tikv_cdc_scan_tasks" and sample.labels.get("type") in ("total", "ongoing"):
                out["incremental_scans" if sample.labels["type"] == "total" else "ongoing_scans"] = int(sample.value)
            elif sample.name == "tikv_cdc_captured_region_total":
                out["registered_regions"] = int(sample.value)
            elif sample.name == "tikv_cdc_scan_disk_read_bytes_total":
                out["scan_disk_read_bytes"] = int(sample.value)
    return out


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
