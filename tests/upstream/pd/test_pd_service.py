"""PD service (kvproto's ``pdpb.PD``), seen on the wire as a TiDB-side client sees it: golden bytes of the
messages from kvproto's field numbers, the cluster-id rule, the TSO stream, regions, stores, GC safe points."""

from __future__ import annotations

import itertools
from typing import Any

import grpc
import pytest
from wire.pd import PdWire

from cdc_core.codec import tso
from cdc_core.proto import metapb_pb2, pdpb_pb2


@pytest.fixture
def pd(pd_addr: str) -> Any:
    with PdWire(pd_addr) as wire:
        yield wire


# Each message as kvproto numbers its fields (pingcap/kvproto proto/pdpb.proto, metapb.proto), encoded by hand:
# tag = field << 3 | wire type (0 varint, 2 length-delimited).
GOLDEN: list[tuple[Any, bytes]] = [
    (pdpb_pb2.RequestHeader(cluster_id=7), b"\x08\x07"),
    (pdpb_pb2.TsoRequest(header=pdpb_pb2.RequestHeader(cluster_id=7), count=1), b"\x0a\x02\x08\x07\x10\x01"),
    (pdpb_pb2.TsoResponse(header=pdpb_pb2.ResponseHeader(cluster_id=7), count=1,
                          timestamp=pdpb_pb2.Timestamp(physical=5, logical=2)),
     b"\x0a\x02\x08\x07\x10\x01\x1a\x04\x08\x05\x10\x02"),
    (pdpb_pb2.ResponseHeader(cluster_id=7, error=pdpb_pb2.Error(type=pdpb_pb2.UNKNOWN, message="x")),
     b"\x08\x07\x12\x05\x08\x01\x12\x01x"),
    (pdpb_pb2.ScanRegionsRequest(header=pdpb_pb2.RequestHeader(cluster_id=7), start_key=b"a", limit=3, end_key=b"b"),
     b"\x0a\x02\x08\x07\x12\x01a\x18\x03\x22\x01b"),
    (pdpb_pb2.ScanRegionsResponse(regions=[pdpb_pb2.Region(region=metapb_pb2.Region(id=9),
                                                           leader=metapb_pb2.Peer(id=3, store_id=1))]),
     b"\x22\x0a\x0a\x02\x08\x09\x12\x04\x08\x03\x10\x01"),
    (pdpb_pb2.GetMembersResponse(header=pdpb_pb2.ResponseHeader(cluster_id=7),
                                 leader=pdpb_pb2.Member(name="p", client_urls=["u"])),
     b"\x0a\x02\x08\x07\x1a\x06\x0a\x01p\x22\x01u"),
    (pdpb_pb2.GetStoreResponse(store=metapb_pb2.Store(id=1, address="a", state=metapb_pb2.Offline)),
     b"\x12\x07\x08\x01\x12\x01a\x18\x01"),
    (pdpb_pb2.UpdateServiceGCSafePointRequest(header=pdpb_pb2.RequestHeader(cluster_id=7), service_id=b"s", TTL=10,
                                              safe_point=5),
     b"\x0a\x02\x08\x07\x12\x01s\x18\x0a\x20\x05"),
    (pdpb_pb2.GetGCSafePointResponse(safe_point=300), b"\x10\xac\x02"),
    (pdpb_pb2.BatchScanRegionsRequest(ranges=[pdpb_pb2.KeyRange(start_key=b"a", end_key=b"b")], limit=2),
     b"\x1a\x06\x0a\x01a\x12\x01b\x20\x02"),
]


@pytest.mark.parametrize(("msg", "wire"), GOLDEN, ids=[type(m).__name__ for m, _ in GOLDEN])
def test_messages_encode_and_decode_as_kvproto_numbers_them(msg: Any, wire: bytes) -> None:
    assert msg.SerializeToString(deterministic=True) == wire
    assert type(msg).FromString(wire) == msg


def test_members_name_the_leader_and_the_cluster_id(pd: PdWire, pd_addr: str) -> None:
    m = pd.members
    assert m.header.cluster_id > 1 << 32, "a cluster id as PD makes one: unix seconds << 32 | random"
    assert m.leader.client_urls == [f"http://{pd_addr}"] and list(m.members) == [m.leader]


def test_every_call_but_get_members_checks_the_cluster_id(pd_addr: str) -> None:
    with PdWire(pd_addr) as good:
        right = good.cluster_id
    for wrong in (0, right + 1):
        with PdWire(pd_addr, cluster_id=wrong) as bad:
            for call in (bad.tso, bad.all_stores, lambda: bad.store(1), lambda: bad.scan_regions(),
                         lambda: bad.region(b""), lambda: bad.update_service_safe_point("x", 0)):
                with pytest.raises(grpc.RpcError) as ei:
                    call()
                assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert ei.value.details() == f"mismatch cluster id, need {right} but got {wrong}"


def test_the_tso_stream_is_monotonic_and_batches(pd: PdWire) -> None:
    seen = [pd.tso()[0] for _ in range(50)]
    assert seen == sorted(seen) and len(set(seen)) == 50
    last, resp = pd.tso(10)
    assert resp.count == 10 and last >= seen[-1] + 10
    # one stream, several requests: one response each, in order
    reqs = [pdpb_pb2.TsoRequest(header=pd.header(), count=c) for c in (1, 2, 3)]
    resps = list(pd.stub.Tso(iter(reqs), timeout=10))
    assert [r.count for r in resps] == [1, 2, 3]
    lasts = [tso.compose(r.timestamp.physical, r.timestamp.logical) for r in resps]
    assert all(b - a >= r.count for a, b, r in zip(lasts, lasts[1:], resps[1:], strict=False)), lasts


def test_stores_and_regions(pd: PdWire, store_addr: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.upstream.pd import pd_service

    assert [(s.id, s.address) for s in pd.all_stores()] == [(1, store_addr)]
    assert pd.store(1).store.address == store_addr
    missing = pd.store(42)  # PD reports it in the header, with gRPC status OK
    assert (missing.header.error.type, missing.header.error.message) == (pdpb_pb2.UNKNOWN,
                                                                         "invalid store ID 42, not found")
    # The session's upstream may hold more regions than one scan returns (MAX_SCAN_REGIONS): page on, as a client
    # does, from the end key of the last region returned (pages of 2 here, so that paging is what is tested).
    monkeypatch.setattr(pd_service, "MAX_SCAN_REGIONS", 2)
    resp = pd.scan_regions()
    regions = list(resp.regions)
    while regions[-1].region.end_key != b"":
        page = pd.scan_regions(start=regions[-1].region.end_key).regions
        assert page and page[0].region.start_key == regions[-1].region.end_key
        regions += page
    monkeypatch.undo()
    assert regions[0].region.start_key == b""
    for a, b in itertools.pairwise(regions):
        assert a.region.end_key == b.region.start_key
    assert all(r.leader.store_id == 1 for r in regions)
    # the older fields, in step, for clients that read them
    assert list(resp.region_metas) == [r.region for r in resp.regions]
    assert list(resp.leaders) == [r.leader for r in resp.regions]
    assert len(pd.scan_regions(limit=2).regions) == 2
    assert pd.region(regions[1].region.start_key).region.id == regions[1].region.id
    batch = pd.stub.BatchScanRegions(pdpb_pb2.BatchScanRegionsRequest(header=pd.header(), ranges=[
        pdpb_pb2.KeyRange(start_key=b"", end_key=regions[1].region.start_key),
        pdpb_pb2.KeyRange(start_key=regions[1].region.start_key, end_key=regions[2].region.end_key)]), timeout=10)
    assert [r.region.id for r in batch.regions] == [r.region.id for r in regions[:3]]


def test_update_service_gc_safe_point_rpc(pd: PdWire) -> None:
    update = pd.update_service_safe_point
    # The session cluster is shared: changefeeds of earlier tests may hold safe points, so the
    # figures are taken relative to the minimum in force (ttl 0 on an unknown service only reads it).
    floor = update("t-probe", 0)
    if floor == 0:
        assert update("t", 60, 5) == 5
        assert update("t-low", 60, 3) == 5, "a new service below the minimum is refused"
        assert update("t", 60, 2) == 2, "a registered service may move its own point back"
    else:
        assert update("t", 60, floor - 1) == floor, "a new service below the minimum is refused"
        assert update("t", 60, floor + 5) == floor
    update("t", 0)
    assert update("t-probe", 0) == floor
    sp = pd.stub.GetGCSafePoint(pdpb_pb2.GetGCSafePointRequest(header=pd.header()), timeout=10)
    assert sp.header.error.type == pdpb_pb2.OK
    if floor:
        assert sp.safe_point <= floor, "GC never passes a service safe point in force"
