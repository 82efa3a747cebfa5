"""The PD service: TSO, region routing, stores and service GC safe points.

Thin over ``tso``, ``regions`` and the cluster's store list. Service GC safe points are recorded
per service with a TTL (``gc.GcSafePoints``) and the minimum of the live ones is reported; the GC
worker (``gc.GcWorker``) holds GC back to them. ScanRegions answers at most 1024 regions a call.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from cdc_core.codec import tso as tso_codec
from cdc_core.proto import metapb_pb2, pdpb_pb2, pdpb_pb2_grpc
from cdc_core.upstream.gc import GcSafePoints
from cdc_core.upstream.regions import RegionManager
from cdc_core.upstream.tso import TsoAllocator

MAX_SCAN_REGIONS = 1024

__all__ = ["MAX_SCAN_REGIONS", "GcSafePoints", "PdService"]


class PdService(pdpb_pb2_grpc.PDServicer):
    def __init__(self, cluster_id: int, tso: TsoAllocator, regions: RegionManager,
                 stores: Callable[[], list[metapb_pb2.Store]], gc: GcSafePoints | None = None) -> None:
        self.cluster_id = cluster_id
        self.tso = tso
        self.regions = regions
        self._stores = stores
        self.gc = gc or GcSafePoints()

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
        resp = pdpb_pb2.ScanRegionsResponse(header=self._header())
        add = resp.regions.add
        for r in regions:
            rw = add()
            r.fill_pb(rw.region)
            r.fill_leader_pb(rw.leader)
        return resp

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
