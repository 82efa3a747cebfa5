"""Puller fixtures (the helpers the puller tests share are ``testkit.puller``).

``multi_cluster`` (module) is an embedded cluster with three stores and three PD members, for the faults that
need more than one (leader transfers, stopped stores, PD leader moves); ``multi_client`` is a synchronous client of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def multi_cluster() -> Iterator[Any]:
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    # Heartbeats every 200 ms: held locks send fake prewrites in the ordinary puller tests. Three PD members: the
    # fault storm moves PD's leader too (tests that move it leave member 1 leading again). Each store on its own
    # loopback address, as TiKV nodes are: the puller reaches them by the addresses PD gives it.
    ec = EmbeddedCluster(ClusterConfig(stores=3, pd_members=3, min_ts_interval_ms=50, txn_heartbeat_interval_ms=200,
                                       store_hosts=("127.0.0.2", "127.0.0.3", "127.0.0.4"))).start()
    yield ec
    ec.stop()


@pytest.fixture
def multi_client(multi_cluster: Any) -> Iterator[Any]:
    from cdc_core.client.upstream import UpstreamClient

    with UpstreamClient(multi_cluster.pd_addr, timeout=30) as c:
        yield c
