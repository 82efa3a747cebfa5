"""The PD service: TSO, region routing, stores and service GC safe points.

Thin over ``tso``, ``regions`` and the cluster's store list. GC safe points are recorded per
service with a TTL and the minimum of the live ones is reported; no GC runs yet (a later issue
adds it, and then a scan below the safe point answers ``gc_safe_point_passed``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc

from cdc_core.codec import tso as tso_codec
from cdc_core.proto import metapb_pb2, pdpb_pb2, pdpb_pb2_grpc
from cdc_core.upstream.regions import RegionManager
from cdc_core.upstream.tso import TsoAllocator

MAX_SCAN_REGIONS = 1024


class GcSafePoints:
    """Service GC safe points (``service_id -> (safe_point, expires_at)``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._points: dict[str, tuple[int, float]] = {}

    def update(self, service_id: str, ttl: int, safe_point: int) -> int:
        now = self._clock()
        self._points = {k: v for k, v in self._points.items() if v[1] > now}
        if ttl <= 0:
            self._points.pop(service_id, None)
        elif safe_point >= self.min_safe_point() or service_id in self._points:
            self._points[service_id] = (safe_point, now + ttl)
        return self.min_safe_point()

    def min_safe_point(self) -> int:
        now = self._clock()
        live = [sp for sp, exp in self._points.values() if exp > now]
        return min(live) if live else 0


class PdService(pdpb_pb2_grpc.PDServicer):
    def __init__(self, cluster_id: int, tso: TsoAllocator, regions: RegionManager,
                 stores: Callable[[], list[metapb_pb2.Store]]) -> None:
        self.cluster_id = cluster_id
        self.tso = tso
        self.regions = regions
        self._stores = stores
        self.gc = GcSafePoints()

    def _header(self) -> pdpb_pb2.ResponseHeader:
        return pdpb_pb2.ResponseHeader(cluster_id=self.cluster_id)

    async def GetTS(self, request: pdpb_pb2.GetTSRequest, context: grpc.aio.ServicerContext
                    ) -> pdpb_pb2.GetTSResponse:
        count = request.count or 1
        try:
            ts = self.tso.next(count)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        phys, logical = tso_codec.parse(ts)
        return pdpb_pb2.GetTSResponse(header=self._header(), count=count,
                                      timestamp=pdpb_pb2.Timestamp(physical=phys, logical=logical))

    async def GetRegion(self, request: pdpb_pb2.GetRegionRequest, context: grpc.aio.ServicerContext
                        ) -> pdpb_pb2.GetRegionResponse:
        r = self.regions.locate(request.region_key)
        return pdpb_pb2.GetRegionResponse(header=self._header(), region=r.to_pb(), leader=r.leader_pb())

    async def ScanRegions(self, request: pdpb_pb2.ScanRegionsRequest, context: grpc.aio.ServicerContext
                          ) -> pdpb_pb2.ScanRegionsResponse:
        limit = request.limit if 0 < request.limit <= MAX_SCAN_REGIONS else MAX_SCAN_REGIONS
        regions = self.regions.scan(request.start_key, request.end_key, limit)
        return pdpb_pb2.ScanRegionsResponse(
            header=self._header(),
            regions=[pdpb_pb2.RegionWithLeader(region=r.to_pb(), leader=r.leader_pb()) for r in regions],
        )

    async def GetStore(self, request: pdpb_pb2.GetStoreRequest, context: grpc.aio.ServicerContext
                       ) -> pdpb_pb2.GetStoreResponse:
        for s in self._stores():
            if s.id == request.store_id:
                return pdpb_pb2.GetStoreResponse(header=self._header(), store=s)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"store {request.store_id} does not exist")
        raise AssertionError("unreachable")

    async def GetAllStores(self, request: pdpb_pb2.GetAllStoresRequest, context: grpc.aio.ServicerContext
                           ) -> pdpb_pb2.GetAllStoresResponse:
        return pdpb_pb2.GetAllStoresResponse(header=self._header(), stores=self._stores())

    async def UpdateServiceGCSafePoint(
        self, request: pdpb_pb2.UpdateServiceGCSafePointRequest, context: grpc.aio.ServicerContext
    ) -> pdpb_pb2.UpdateServiceGCSafePointResponse:
        if not request.service_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "service_id is required")
        min_sp = self.gc.update(request.service_id, request.ttl, request.safe_point)
        return pdpb_pb2.UpdateServiceGCSafePointResponse(
            header=self._header(), service_id=request.service_id, ttl=request.ttl, min_safe_point=min_sp)
