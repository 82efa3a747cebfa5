"""TiDB's topology in PD's etcd: where every SQL server registers itself (``pkg/domain/infosync/info.go``), the keys
the embedded upstream writes for its MySQL front and a client reads to find the SQL endpoints from PD alone::

    /topology/tidb/<host:port>/info   topologyInfo JSON, without a lease
    /topology/tidb/<host:port>/ttl    the registration's refresh time, under the topology session's 45 s lease

A server that is gone leaves its ``info`` behind: only an address with both keys is alive.
"""

from __future__ import annotations

from collections.abc import Iterable

TOPOLOGY_TIDB = "/topology/tidb"  # TiDB's TopologyInformationPath


def server_prefix(addr: str) -> str:
    """The prefix of the SQL server at ``addr``'s keys."""
    return f"{TOPOLOGY_TIDB}/{addr}/"


def info_key(addr: str) -> str:
    return server_prefix(addr) + "info"


def ttl_key(addr: str) -> str:
    return server_prefix(addr) + "ttl"


def live_addresses(keys: Iterable[str]) -> list[str]:
    """The addresses, sorted, of the servers ``keys`` (keys under ``TOPOLOGY_TIDB``) hold both keys of."""
    prefix = TOPOLOGY_TIDB + "/"
    under = {k[len(prefix):] for k in keys if k.startswith(prefix)}
    return sorted(k[: -len("/info")] for k in under if k.endswith("/info") and k[: -len("info")] + "ttl" in under)
