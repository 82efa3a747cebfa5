"""PD as a TiDB-side client sees it, for the tests: plain ``pdpb`` messages over a channel, the cluster id from
``GetMembers`` in every other request's header (independent of cdcflow's own PD clients)."""

from __future__ import annotations

from typing import Any

import grpc

from cdc_core.codec import tso
from cdc_core.proto import pdpb_pb2, pdpb_pb2_grpc


class PdWire:
    def __init__(self, pd_addr: str, *, cluster_id: int | None = None) -> None:
        self.channel = grpc.insecure_channel(pd_addr)
        self.stub = pdpb_pb2_grpc.PDStub(self.channel)
        self.members = self.stub.GetMembers(pdpb_pb2.GetMembersRequest(), timeout=10)
        self.cluster_id = self.members.header.cluster_id if cluster_id is None else cluster_id

    def header(self) -> pdpb_pb2.RequestHeader:
        return pdpb_pb2.RequestHeader(cluster_id=self.cluster_id)

    def tso(self, count: int = 1) -> tuple[int, pdpb_pb2.TsoResponse]:
        [resp] = list(self.stub.Tso(iter([pdpb_pb2.TsoRequest(header=self.header(), count=count)]), timeout=10))
        return tso.compose(resp.timestamp.physical, resp.timestamp.logical), resp

    def scan_regions(self, start: bytes = b"", end: bytes = b"", limit: int = 1024) -> Any:
        return self.stub.ScanRegions(pdpb_pb2.ScanRegionsRequest(header=self.header(), start_key=start,
                                                                  end_key=end, limit=limit), timeout=60)

    def all_stores(self) -> Any:
        return self.stub.GetAllStores(pdpb_pb2.GetAllStoresRequest(header=self.header()), timeout=10).stores

    def store(self, store_id: int) -> pdpb_pb2.GetStoreResponse:
        return self.stub.GetStore(pdpb_pb2.GetStoreRequest(header=self.header(), store_id=store_id), timeout=10)

    def region(self, key: bytes) -> pdpb_pb2.GetRegionResponse:
        return self.stub.GetRegion(pdpb_pb2.GetRegionRequest(header=self.header(), region_key=key), timeout=10)

    def update_service_safe_point(self, service: str, ttl: int, safe_point: int = 0) -> int:
        req = pdpb_pb2.UpdateServiceGCSafePointRequest(header=self.header(), service_id=service.encode(), TTL=ttl,
                                                       safe_point=safe_point)
        return int(self.stub.UpdateServiceGCSafePoint(req, timeout=10).min_safe_point)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> PdWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
