"""Addresses the upstream publishes: stores on their own hosts, and a cluster bound to every interface that tells
clients the host they can reach (PD's advertise-client-urls, TiKV's advertise-addr) -- what a puller in another
container needs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cdc_core.client.upstream import UpstreamClient
from cdc_core.upstream.cluster import ClusterConfig, ClusterError
from cdc_core.upstream.embedded import EmbeddedCluster
from testkit.puller import SPAN, make_table, pulling, until


def test_each_store_serves_and_is_published_on_its_own_host(multi_cluster: Any) -> None:
    hosts = sorted(a.rpartition(":")[0] for a in multi_cluster.cluster.store_addrs)
    assert hosts == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    with UpstreamClient(multi_cluster.pd_addr) as c:  # what PD tells a client about each store
        assert sorted(s.address.rpartition(":")[0] for s in c.all_stores()) == hosts


def test_a_cluster_bound_to_every_interface_publishes_the_advertised_host() -> None:
    with pytest.raises(ClusterError, match=r"binding 0\.0\.0\.0 needs --advertise-host"):
        ClusterConfig(pd_addr="0.0.0.0:0", mysql_addr="0.0.0.0:0").validate()
    with pytest.raises(ClusterError, match="must be a host clients can reach"):
        ClusterConfig(pd_addr="0.0.0.0:0", advertise_host="0.0.0.0").validate()
    cfg = ClusterConfig(pd_addr="0.0.0.0:0", mysql_addr="0.0.0.0:0", stores=2, advertise_host="127.0.0.1",
                        min_ts_interval_ms=50)
    cfg.validate()
    ec = EmbeddedCluster(cfg).start()
    try:
        c = ec.cluster
        published = [c.pd_addr, *c.pd_member_addrs, c.mysql_addr, *c.store_addrs]
        assert all(a.startswith("127.0.0.1:") for a in published), published
        with UpstreamClient(c.pd_addr) as client:
            _, span = make_table(client, ec, "adv", create_db=True)
            start = client.get_ts()

            async def pull() -> None:
                async with pulling(c.pd_addr, span, start) as (sub, rec, _reg):
                    await asyncio.to_thread(client.execute, "INSERT INTO adv.t VALUES (1, 1), (2, 2)")
                    await until(lambda: len({k for k, _, _ in rec.keys(SPAN)}) == 2, what="both rows",
                                check=sub.check)

            asyncio.run(pull())
    finally:
        ec.stop()
