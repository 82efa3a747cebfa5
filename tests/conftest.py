"""Shared fixtures: one embedded upstream cluster per test session, on a background thread.

``upstream_cluster`` (session) is an ``EmbeddedCluster`` on ephemeral loopback ports with a 50 ms
resolved-ts interval and one store (``CDCFLOW_TEST_STORES=3`` runs it with three, e.g. for the
end-to-end test: the EventFeed tests of ``tests/upstream`` assume the one store leads every region);
``pd_addr`` / ``store_addr`` are its addresses; ``upstream_client`` is a
synchronous ``UpstreamClient``; ``fresh_db`` creates a database with a unique name per test so that
tests sharing the cluster never see each other's tables; ``cdc_home`` is a private ``CDCFLOW_HOME`` pointed at
the cluster.

``multi_cluster`` (session) is a second embedded cluster, with three stores and three PD members, for the faults
that need more than one (leader transfers, stopped stores, PD leader moves): the puller's and the capture's fault
tests share it (one start per session); ``multi_client`` is a synchronous client of it. Tests that move PD's
leader leave member 1 leading again, and tests that stop a store start it again.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# how `make test` spreads the suite over two workers, and the summary of where its minutes went (the helper packages
# under tests/, scripts/ and plugins/ are importable by pyproject's pytest `pythonpath`)
pytest_plugins = ["testkit.suite_schedule"]

_db_counter = itertools.count(1)


@pytest.fixture(scope="session", autouse=True)
def _stop_spark_at_exit() -> Iterator[None]:
    """Stop the shared SparkSession (if a test started one) while logging still has its streams."""
    yield

    if "pyspark.sql" in sys.modules:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()


@pytest.fixture(scope="session")
def upstream_cluster() -> Iterator[Any]:
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    stores = int(os.environ.get("CDCFLOW_TEST_STORES", "1"))
    ec = EmbeddedCluster(ClusterConfig(min_ts_interval_ms=50, stores=stores)).start()
    yield ec
    ec.stop()


@pytest.fixture
def cdc_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream_cluster: Any) -> Path:
    """A private CDCFLOW_HOME (``tmp_path / "home"``) pointed at the session's embedded upstream; ``tmp_path``."""
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CDCFLOW_UPSTREAM", upstream_cluster.pd_addr)
    return tmp_path


@pytest.fixture(scope="session")
def multi_cluster() -> Iterator[Any]:
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    # Heartbeats every 200 ms: held locks send fake prewrites in the ordinary puller tests. Three PD members: the
    # fault storm moves PD's leader too. Each store on its own loopback address, as TiKV nodes are: the puller
    # reaches them by the addresses PD gives it.
    ec = EmbeddedCluster(ClusterConfig(stores=3, pd_members=3, min_ts_interval_ms=50, txn_heartbeat_interval_ms=200,
                                       store_hosts=("127.0.0.2", "127.0.0.3", "127.0.0.4"))).start()
    yield ec
    ec.stop()


@pytest.fixture
def multi_client(multi_cluster: Any) -> Iterator[Any]:
    from cdc_core.client.upstream import UpstreamClient

    with UpstreamClient(multi_cluster.pd_addr, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def pd_addr(upstream_cluster: Any) -> str:
    return str(upstream_cluster.pd_addr)


@pytest.fixture(scope="session")
def store_addr(upstream_cluster: Any) -> str:
    return str(upstream_cluster.store_addr)


@pytest.fixture
def upstream_client(pd_addr: str) -> Iterator[Any]:
    from cdc_core.client.upstream import UpstreamClient

    with UpstreamClient(pd_addr, timeout=30) as c:
        yield c


@pytest.fixture
def fresh_db(upstream_client: Any, request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]", "_", f"db{next(_db_counter)}_{request.node.name}")[:60]
    upstream_client.execute(f"CREATE DATABASE `{name}`")
    return name
