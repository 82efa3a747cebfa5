"""The stores' min resolved ts reports (``cdc_core/upstream/store/resolved_ts_reporter.py``), read back from PD's
HTTP API: PD's min-resolved-ts follows the TSO, a held prewrite lock keeps it at the lock's start ts, a pessimistic
lock does not."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from cdc_core.codec import key as keycodec


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


def test_a_pessimistic_lock_does_not_hold_min_resolved_ts(upstream_cluster: Any, upstream_client: Any,
                                                          fresh_db: str) -> None:
    """TiKV's resolver tracks prewrite locks only (``components/resolved_ts/src/cmd.rs``: Put and Delete locks): a
    pessimistic lock held by an open transaction leaves PD's min resolved ts following the TSO."""
    cl = upstream_cluster.cluster
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 1)")
    tid = upstream_cluster.call(lambda: cl.catalog.table(fresh_db, "t").id)
    key = keycodec.row_key(tid, 1)
    start_ts = upstream_client.get_ts()

    async def lock() -> None:
        await cl.store.acquire_pessimistic_locks([key], key, start_ts, start_ts, 1.0)
        await asyncio.sleep(0)

    upstream_cluster.run(lock())
    try:
        upstream_cluster.call(cl.min_resolved_reporter.report_once)
        assert _min_resolved_ts(upstream_cluster.pd_addr) > start_ts
    finally:
        upstream_cluster.call(lambda: cl.store.pessimistic_rollback([key], start_ts))
