"""PD service: TSO, regions, stores, GC safe points."""

from __future__ import annotations

import itertools
from typing import Any

import grpc
import pytest

from cdc_core.codec import tso
from cdc_core.proto import pdpb_pb2, pdpb_pb2_grpc
from cdc_core.upstream.pd_service import GcSafePoints


@pytest.fixture
def pd(pd_addr: str) -> Any:
    with grpc.insecure_channel(pd_addr) as ch:
        yield pdpb_pb2_grpc.PDStub(ch)


def test_get_ts_is_monotonic_and_batches(pd: Any) -> None:
    seen = []
    for _ in range(50):
        r = pd.GetTS(pdpb_pb2.GetTSRequest(count=1))
        seen.append(tso.compose(r.timestamp.physical, r.timestamp.logical))
    assert seen == sorted(seen) and len(set(seen)) == 50
    r = pd.GetTS(pdpb_pb2.GetTSRequest(count=10))
    last = tso.compose(r.timestamp.physical, r.timestamp.logical)
    assert r.count == 10 and last >= seen[-1] + 10


def test_stores_and_regions(pd: Any, store_addr: str) -> None:
    stores = pd.GetAllStores(pdpb_pb2.GetAllStoresRequest()).stores
    assert [(s.id, s.address) for s in stores] == [(1, store_addr)]
    assert pd.GetStore(pdpb_pb2.GetStoreRequest(store_id=1)).store.address == store_addr
    with pytest.raises(grpc.RpcError) as ei:
        pd.GetStore(pdpb_pb2.GetStoreRequest(store_id=42))
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND
    regions = pd.ScanRegions(pdpb_pb2.ScanRegionsRequest(start_key=b"", end_key=b"")).regions
    assert regions[0].region.start_key == b"" and regions[-1].region.end_key == b""
    for a, b in itertools.pairwise(regions):
        assert a.region.end_key == b.region.start_key
    assert all(r.leader.store_id == 1 for r in regions)
    assert len(pd.ScanRegions(pdpb_pb2.ScanRegionsRequest(limit=2)).regions) == 2
    got = pd.GetRegion(pdpb_pb2.GetRegionRequest(region_key=regions[1].region.start_key))
    assert got.region.id == regions[1].region.id


def test_gc_safe_points() -> None:
    now = [0.0]
    gc = GcSafePoints(clock=lambda: now[0])
    assert gc.update("cdc-a", 10, 100) == 100
    assert gc.update("cdc-b", 10, 200) == 100
    assert gc.update("cdc-a", 0, 0) == 200  # ttl 0 removes
    now[0] = 11.0
    assert gc.min_safe_point() == 0  # expired


def test_update_service_gc_safe_point_rpc(pd: Any) -> None:
    def update(service: str, ttl: int, sp: int = 0) -> int:
        req = pdpb_pb2.UpdateServiceGCSafePointRequest(service_id=service, ttl=ttl, safe_point=sp)
        return int(pd.UpdateServiceGCSafePoint(req).min_safe_point)

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
