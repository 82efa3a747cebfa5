"""The embedded PD's members as a TiDB-side client sees them on the wire: every member answers ``GetMembers`` with
the whole group and the leader; only the leader serves, a follower answers as PD's does (``UNAVAILABLE`` "not
leader", ``Tso`` ``UNKNOWN`` "... is not leader ..."), before it looks at the cluster id; a leader transfer moves
all of that to the new leader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from wire.pd import PdWire

from cdc_core.proto import pdpb_pb2
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.faults import FaultError, FaultKind


@pytest.fixture(scope="module")
def pd3() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(ClusterConfig(pd_members=3)) as ec:
        yield ec


@pytest.fixture(autouse=True)
def leader_back(pd3: EmbeddedCluster) -> Iterator[None]:
    yield
    pd3.faults.transfer_pd_leader(1)


def _calls(pd: PdWire) -> list[Any]:
    return [pd.all_stores, lambda: pd.store(1), lambda: pd.scan_regions(), lambda: pd.region(b""),
            lambda: pd.update_service_safe_point("x", 0),
            lambda: pd.stub.GetGCSafePoint(pdpb_pb2.GetGCSafePointRequest(header=pd.header()), timeout=10)]


def test_every_member_names_all_members_and_the_leader(pd3: EmbeddedCluster) -> None:
    addrs = pd3.cluster.pd_member_addrs
    assert len(addrs) == 3 and addrs[0] == pd3.pd_addr and len(set(addrs)) == 3
    answers = []
    for addr in addrs:
        with PdWire(addr) as pd:
            answers.append(pd.members)
    for m in answers:
        assert m.header.cluster_id == pd3.cluster.cluster_id
        assert [(x.member_id, list(x.client_urls)) for x in m.members] == [
            (i + 1, [f"http://{a}"]) for i, a in enumerate(addrs)]
        assert m.leader.member_id == 1 and m.leader.client_urls == [f"http://{addrs[0]}"]
        assert m.etcd_leader == m.leader


def test_a_follower_refuses_every_call_as_not_leader(pd3: EmbeddedCluster) -> None:
    follower = pd3.cluster.pd_member_addrs[1]
    for cluster_id in (None, 0):  # the leader check comes first: a wrong cluster id gets "not leader" too
        with PdWire(follower, cluster_id=cluster_id) as pd:
            for call in _calls(pd):
                with pytest.raises(grpc.RpcError) as ei:
                    call()
                assert (ei.value.code(), ei.value.details()) == (grpc.StatusCode.UNAVAILABLE, "not leader")
    with PdWire(follower) as pd:
        with pytest.raises(grpc.RpcError) as ei:
            pd.tso()
        assert ei.value.code() == grpc.StatusCode.UNKNOWN
        assert "requested pd is not leader of cluster" in str(ei.value.details())
    with PdWire(pd3.pd_addr) as leader:  # and the leader serves them
        assert leader.tso()[0] > 0 and [s.id for s in leader.all_stores()] == [1]


def test_a_leader_transfer_moves_the_service(pd3: EmbeddedCluster) -> None:
    addrs = pd3.cluster.pd_member_addrs
    with PdWire(addrs[0]) as old:
        before = old.tso()[0]
        assert pd3.faults.transfer_pd_leader(3) == addrs[2]
        with pytest.raises(grpc.RpcError) as ei:
            old.all_stores()
        assert ei.value.details() == "not leader"
        assert old.stub.GetMembers(pdpb_pb2.GetMembersRequest(), timeout=10).leader.member_id == 3
    with PdWire(addrs[2]) as new:
        assert new.tso()[0] > before, "one TSO across members: the new leader continues the old one's sequence"
        assert [s.id for s in new.all_stores()] == [1]
    with pytest.raises(FaultError) as fe:
        pd3.faults.transfer_pd_leader(4)
    assert fe.value.kind == FaultKind.NOT_FOUND and "PD member 4 does not exist (members: 1, 2, 3)" in fe.value.message
