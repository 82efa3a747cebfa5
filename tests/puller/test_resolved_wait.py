"""The deferrable wait: passes on PD's min resolved ts without subscribing a region, falls back to subscribing the
spans when PD's value is held back elsewhere in the cluster or not served, and settles old targets at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cdc_core.codec import key as keycodec
from cdc_core.puller import resolved_wait
from cdc_core.puller.subscription_client import SubscriptionClient


def _span(cluster: Any, db: str, table: str) -> tuple[bytes, bytes]:
    return keycodec.table_span(cluster.catalog.table(db, table).id)


def test_passes_on_pds_min_resolved_ts_without_subscribing(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster of its own: PD's min resolved ts is cluster-wide, and a lock an earlier test left in the session
    cluster (a killed job's, a fault's) would hold it back, which is the fallback's case, not this one."""
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    async def no_subscription(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the wait subscribed a span")

    monkeypatch.setattr(SubscriptionClient, "subscribe", no_subscription)
    with EmbeddedCluster(ClusterConfig(min_ts_interval_ms=50)) as ec, UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY)")
        target = c.get_ts()
        res = asyncio.run(resolved_wait.wait_resolved(ec.pd_addr, [_span(ec.cluster, "d", "t")], target, poll_s=0.1,
                                                      timeout_s=30))
    assert res.how == "pd" and res.resolved_ts >= target


def test_a_lock_elsewhere_holds_pd_back_and_the_spans_decide(upstream_cluster: Any, upstream_client: Any,
                                                            fresh_db: str) -> None:
    cl = upstream_cluster.cluster
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE busy (id INT PRIMARY KEY); INSERT INTO busy VALUES (1);"
                            "CREATE TABLE quiet (id INT PRIMARY KEY)")
    held = upstream_cluster.call(lambda: cl.faults.hold_lock(fresh_db, "busy"))
    try:
        target = upstream_client.get_ts()
        res = asyncio.run(resolved_wait.wait_resolved(
            upstream_cluster.pd_addr, [_span(cl, fresh_db, "quiet")], target, poll_s=0.1, timeout_s=30,
            pd_grace_s=0.5))
        assert res.how == "resolved" and res.resolved_ts >= target  # the quiet table's regions are resolved
    finally:
        upstream_cluster.call(lambda: cl.faults.release_lock(held.start_ts))


def test_a_pd_without_the_api_falls_back_at_once(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY)")
    asked: list[list[str]] = []

    async def not_served(http: Any, addrs: list[str]) -> None:
        asked.append(addrs)
        return None

    monkeypatch.setattr(resolved_wait, "pd_min_resolved_ts", not_served)
    target = upstream_client.get_ts()
    res = asyncio.run(resolved_wait.wait_resolved(upstream_cluster.pd_addr, [_span(upstream_cluster.cluster,
                                                  fresh_db, "t")], target, poll_s=0.1, timeout_s=30))
    assert res.how == "resolved" and asked == [[upstream_cluster.pd_addr]]
