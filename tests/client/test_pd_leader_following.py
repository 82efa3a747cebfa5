"""cdcflow's PD clients (``UpstreamClient``, the puller's ``PDClient``) follow the PD leader as PD's own client
does: given any members, they find the leader through ``GetMembers``; a call a follower refuses ("not leader")
or that finds the leader gone makes them ask the members again and retry, a bounded number of times; with no
member answering, or none naming a leader, the error names every address and what it answered."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from cdc_core.client import pd_protocol
from cdc_core.client.pd_addrs import split_addrs
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import UpstreamError
from cdc_core.proto import pdpb_pb2, pdpb_pb2_grpc
from cdc_core.puller.pd_client import PDClient
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster


@pytest.fixture(scope="module")
def pd3() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(ClusterConfig(pd_members=3, stores=2)) as ec:
        yield ec


@pytest.fixture(autouse=True)
def leader_back(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "pd3" in request.fixturenames:
        request.getfixturevalue("pd3").faults.transfer_pd_leader(1)


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pd_protocol, "LEADER_BACKOFF_S", (0.01,))


# --- addresses and members (no server) ------------------------------------------------------------------
def test_pd_addresses_are_parsed_as_ticdc_takes_them() -> None:
    assert split_addrs("a:1") == ["a:1"]
    assert split_addrs(" http://a:1/, b:2 ,a:1,") == ["a:1", "b:2"]
    for bad, said in [("a", "'a' is not HOST:PORT"), ("a:x", "'a:x' is not HOST:PORT"), (" , ", "no PD address"),
                      ("https://a:1", "https:// needs the TLS files")]:
        with pytest.raises(UpstreamError, match=said):
            split_addrs(bad)


def _members(cluster_id: int, leader: int | None, n: int = 2) -> pdpb_pb2.GetMembersResponse:
    members = [pdpb_pb2.Member(member_id=i, name=f"pd-{i}", client_urls=[f"http://m{i}:2379"])
               for i in range(1, n + 1)]
    resp = pdpb_pb2.GetMembersResponse(header=pdpb_pb2.ResponseHeader(cluster_id=cluster_id), members=members)
    if leader is not None:
        resp.leader.CopyFrom(members[leader - 1])
    return resp


def test_members_learn_the_leader_and_refuse_another_cluster() -> None:
    m = pd_protocol.PdMembers("seed:1")
    assert list(m.candidates()) == ["seed:1"]
    assert m.learn("seed:1", _members(7, None)) is None  # an election under way
    assert m.learn("seed:1", _members(7, 2)) == "m2:2379" and m.cluster_id == 7
    assert list(m.candidates()) == ["m1:2379", "m2:2379", "seed:1"]  # learned members first
    with pytest.raises(pd_protocol.ClusterIdMismatch, match="PD m1:2379 belongs to another cluster: cluster id 8"):
        m.learn("m1:2379", _members(8, 1))


# --- against the embedded PD ----------------------------------------------------------------------------
def test_a_client_given_only_a_follower_finds_the_leader(pd3: EmbeddedCluster) -> None:
    leader, follower = pd3.cluster.pd_member_addrs[0], pd3.cluster.pd_member_addrs[2]
    with UpstreamClient(follower) as c:
        assert c.get_ts() > 0 and [s.id for s in c.all_stores()] == [1, 2]
        assert c.leader_addr == leader and c.leader_changes == 0  # found by asking, not by failing
        assert c.cluster_id() == pd3.cluster.cluster_id
        assert [(m["id"], m["leader"]) for m in c.members()] == [(1, True), (2, False), (3, False)]
        c.execute("CREATE DATABASE IF NOT EXISTS lf")  # cdcflow's own services go to the leader found too


def test_the_sync_client_follows_a_leader_transfer(pd3: EmbeddedCluster) -> None:
    addrs = pd3.cluster.pd_member_addrs
    with UpstreamClient(addrs[0]) as c:
        before = c.get_ts()
        pd3.faults.transfer_pd_leader(2)
        assert c.get_ts() > before  # Tso at the old leader: "... is not leader ...", asked again, served
        assert c.leader_addr == addrs[1] and c.leader_changes == 1
        pd3.faults.transfer_pd_leader(3)
        assert [s.id for s in c.all_stores()] == [1, 2]  # a unary call: UNAVAILABLE "not leader"
        assert c.leader_addr == addrs[2] and c.leader_changes == 2


def test_the_puller_pd_client_follows_a_leader_transfer(pd3: EmbeddedCluster) -> None:
    addrs = pd3.cluster.pd_member_addrs

    async def main() -> None:
        pd = PDClient(f"{addrs[1]},{addrs[2]}")  # the leader is not among the addresses given
        try:
            regions = await pd.scan_regions(b"", b"")
            assert regions and regions[0].start_key == b"" and regions[-1].end_key == b""
            assert pd.leader_addr == addrs[0] and pd.leader_changes == 0
            pd3.faults.transfer_pd_leader(2)
            assert await pd.store_address(2) == pd3.cluster.store_addr(2)
            assert pd.leader_addr == addrs[1] and pd.leader_changes == 1
            pd3.faults.transfer_pd_leader(3)
            ts = await pd.get_ts()
            assert await pd.update_service_safe_point("lf-test", 60, ts) <= ts
            assert await pd.gc_safe_point() <= ts
            assert await pd.update_service_safe_point("lf-test", 0, ts) >= 0
            assert pd.leader_addr == addrs[2] and pd.leader_changes == 2
        finally:
            await pd.close()

    asyncio.run(main())


def test_no_member_answering_names_every_address() -> None:
    with UpstreamClient("127.0.0.1:1,127.0.0.1:2", timeout=5) as c:
        with pytest.raises(UpstreamError) as ei:
            c.get_ts()
    said = str(ei.value)
    assert said.startswith("cannot reach the upstream at 127.0.0.1:1,127.0.0.1:2 (GetMembers): no PD member answered")
    assert "127.0.0.1:1: unreachable" in said and "127.0.0.1:2: unreachable" in said


class _StuckPd(pdpb_pb2_grpc.PDServicer):
    """A PD member that names ``leader_url`` the leader but refuses every call as not leader."""

    def __init__(self, leader_url: str | None) -> None:
        self.leader_url = leader_url
        self.calls = 0

    def GetMembers(self, request: Any, context: Any) -> pdpb_pb2.GetMembersResponse:
        resp = pdpb_pb2.GetMembersResponse(header=pdpb_pb2.ResponseHeader(cluster_id=42))
        if self.leader_url:
            resp.leader.CopyFrom(pdpb_pb2.Member(member_id=1, client_urls=[self.leader_url]))
            resp.members.append(resp.leader)
        return resp

    def GetAllStores(self, request: Any, context: Any) -> pdpb_pb2.GetAllStoresResponse:
        self.calls += 1
        context.abort(grpc.StatusCode.UNAVAILABLE, "not leader")
        raise AssertionError("abort raises")


@pytest.fixture
def stuck_pd() -> Iterator[tuple[str, _StuckPd]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = _StuckPd(None)
    pdpb_pb2_grpc.add_PDServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(0)


def test_a_member_that_never_leads_gives_up_after_bounded_retries(stuck_pd: tuple[str, _StuckPd],
                                                                  fast_retries: None) -> None:
    addr, servicer = stuck_pd
    servicer.leader_url = f"http://{addr}"
    with UpstreamClient(addr, timeout=5) as c:
        with pytest.raises(UpstreamError, match=rf"PD {addr}: GetAllStores: no leader after 6 attempts; "
                                                rf"last asked {addr}: not leader"):
            c.all_stores()
    assert servicer.calls == pd_protocol.LEADER_ATTEMPTS


def test_members_naming_no_leader_is_a_clear_error(stuck_pd: tuple[str, _StuckPd]) -> None:
    addr, _ = stuck_pd

    async def main() -> None:
        pd = PDClient(f"{addr},127.0.0.1:1")
        try:
            with pytest.raises(UpstreamError) as ei:
                await pd.gc_safe_point()
        finally:
            await pd.close()
        said = str(ei.value)
        assert said.startswith(f"PD {addr},127.0.0.1:1: no leader found (GetMembers): ")
        assert f"{addr}: no leader (an election may be under way)" in said and "127.0.0.1:1: unreachable" in said

    asyncio.run(main())
