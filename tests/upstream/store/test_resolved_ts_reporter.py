"""The stores' min resolved ts reports (``cdc_core/upstream/store/resolved_ts_reporter.py``), read back from PD's
HTTP API: PD's min-resolved-ts follows the TSO, and a held lock keeps it at the lock's start ts."""

from __future__ import annotations

from typing import Any

import httpx


def _min_resolved_ts(pd_addr: str) -> int:
    r = httpx.get(f"http://{pd_addr}/pd/api/v1/min-resolved-ts")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["is_real_time"] is True and body["persist_interval"] == "1s"
    return int(body["min_resolved_ts"])


def test_min_resolved_ts_follows_the_tso_and_stops_at_a_held_lock(upstream_cluster: Any, upstream_client: Any,
                                                                 fresh_db: str) -> None:
    cl = upstream_cluster.cluster
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 1)")
    before = upstream_client.get_ts()
    upstream_cluster.call(cl.min_resolved_reporter.report_once)
    assert _min_resolved_ts(upstream_cluster.pd_addr) > before
    held = upstream_cluster.call(lambda: cl.faults.hold_lock(fresh_db, "t"))
    try:
        upstream_cluster.call(cl.min_resolved_reporter.report_once)
        stuck = _min_resolved_ts(upstream_cluster.pd_addr)
        assert stuck == held.start_ts  # the region's resolved ts stops at the lock's start ts
        upstream_cluster.call(cl.min_resolved_reporter.report_once)
        assert _min_resolved_ts(upstream_cluster.pd_addr) == stuck
    finally:
        upstream_cluster.call(lambda: cl.faults.release_lock(held.start_ts))
    after = upstream_client.get_ts()
    upstream_cluster.call(cl.min_resolved_reporter.report_once)
    assert _min_resolved_ts(upstream_cluster.pd_addr) > after
