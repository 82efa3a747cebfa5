"""The PD service (kvproto's ``pdpb.PD``): members, TSO, region routing, stores and GC safe points.

Thin over ``tso``, ``regions`` and the cluster's store list, with the behaviour a PD client depends on:

- One ``PdService`` per PD member (``pd_members``). ``GetMembers`` answers without a cluster id, on any member,
  with every member and the leader. Every other call is served by the leader only: a follower answers
  ``UNAVAILABLE`` "not leader", and the leader checks ``header.cluster_id``, answering ``FAILED_PRECONDITION``
  "mismatch cluster id, need N but got M" (pd ``server/grpc_service.go`` ``validateRequest``, leader check
  first). PD's followers can forward a call whose gRPC metadata names the leader (``pd-forwarded-host``); TiCDC
  does not ask for that, so this one does not forward.
- ``Tso`` is a bidirectional stream; each response's timestamp is the largest of the ``count`` allocated. A
  follower fails it with ``UNKNOWN`` "... requested pd is not leader of cluster" (PD's ``Tso`` skips the leader
  check and the TSO allocator refuses; PD's client treats "is not leader" as a leader change).
- ``ScanRegions`` fills ``regions`` and, in step, the older ``region_metas``/``leaders``, as PD does; at most
  1024 regions a call. ``BatchScanRegions`` scans several ranges under one limit.
- Region boundaries are memcomparable-encoded (``EncodeBytes``) in both directions, as PD keeps them.
- Failures PD reports in the response header (``pdpb.Error``), e.g. an unknown store id, are reported there.
- Service GC safe points are recorded per service with a TTL (``gc.GcSafePoints``) and the minimum of the live
  ones is reported; the GC worker (``gc.GcWorker``) holds GC back to them. ``GetGCSafePoint`` is the safe point
  GC has reached.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from cdc_core.codec import tso as tso_codec
from cdc_core.codec.memcomparable import KeyDecodeError, decode_key
from cdc_core.proto import metapb_pb2, pdpb_pb2, pdpb_pb2_grpc
from cdc_core.upstream.pd.gc_safe_points import GcSafePoints
from cdc_core.upstream.pd.min_resolved_ts import MinResolvedTs
from cdc_core.upstream.pd.pd_members import PdMembers
from cdc_core.upstream.pd.regions import RegionManager
from cdc_core.upstream.pd.tso import TsoAllocator

MAX_SCAN_REGIONS = 1024
# pd server/grpc_service.go ErrNotLeader; pkg/errs ErrGenerateTimestamp as the TSO allocator of a follower gives it.
NOT_LEADER = "not leader"
TSO_NOT_LEADER = "[PD:tso:ErrGenerateTimestamp]generate timestamp failed, requested pd is not leader of cluster"

__all__ = ["MAX_SCAN_REGIONS", "GcSafePoints", "PdService"]


class PdService(pdpb_pb2_grpc.PDServicer):
    def __init__(self, cluster_id: int, tso: TsoAllocator, regions: RegionManager,
                 stores: Callable[[], list[metapb_pb2.Store]], gc: GcSafePoints | None = None,
                 gc_safe_point: Callable[[], int] = lambda: 0, members: PdMembers | None = None,
                 member_id: int = 1, min_resolved: MinResolvedTs | None = None) -> None:
        self.cluster_id = cluster_id
        self.members = members or PdMembers(1)
        self.member_id = member_id
        self.tso = tso
        self.regions = regions
        self._stores = stores
        self.gc = gc or GcSafePoints()
        self._gc_safe_point = gc_safe_point
        self.min_resolved = min_resolved or MinResolvedTs()

    @property
    def client_url(self) -> str:
        """This member's URL (``http://host:port``) as ``GetMembers`` reports it; set once its server is bound."""
        return self.members.member(self.member_id).client_url

    @client_url.setter
    def client_url(self, url: str) -> None:
        self.members.member(self.member_id).client_url = url

    @property
    def is_leader(self) -> bool:
        return self.members.is_leader(self.member_id)

    def _header(self) -> pdpb_pb2.ResponseHeader:
        return pdpb_pb2.ResponseHeader(cluster_id=self.cluster_id)

    def _error_header(self, type_: pdpb_pb2.ErrorType, message: str) -> pdpb_pb2.ResponseHeader:
        return pdpb_pb2.ResponseHeader(cluster_id=self.cluster_id, error=pdpb_pb2.Error(type=type_, message=message))

    async def _validate(self, header: pdpb_pb2.RequestHeader, context: grpc.aio.ServicerContext) -> None:
        if not self.is_leader:
            await context.abort(grpc.StatusCode.UNAVAILABLE, NOT_LEADER)
        if header.cluster_id != self.cluster_id:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"mismatch cluster id, need {self.cluster_id} but got {header.cluster_id}")

    async def _raw(self, key: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """A request's region key, which PD's clients send memcomparable-encoded (client-go's codec PD client
        encodes before every call), as the raw key the region manager works on."""
        try:
            return decode_key(key)
        except KeyDecodeError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"region key is not memcomparable-encoded: {exc}")
            raise

    async def GetMembers(self, request: pdpb_pb2.GetMembersRequest, context: grpc.aio.ServicerContext
                         ) -> pdpb_pb2.GetMembersResponse:
        leader = self.members.leader_pb()  # None during an election: the response names no leader
        return pdpb_pb2.GetMembersResponse(header=self._header(), members=self.members.members_pb(), leader=leader,
                                           etcd_leader=leader)

    async def Tso(self, request_iterator: AsyncIterator[pdpb_pb2.TsoRequest], context: grpc.aio.ServicerContext
                  ) -> AsyncIterator[pdpb_pb2.TsoResponse]:
        async for request in request_iterator:
            if request.header.cluster_id != self.cluster_id:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"mismatch cluster id, need {self.cluster_id} but got {request.header.cluster_id}")
            if not self.is_leader:
                await context.abort(grpc.StatusCode.UNKNOWN, TSO_NOT_LEADER)
            count = request.count or 1
            try:
                ts = self.tso.next(count)
            except ValueError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            phys, logical = tso_codec.parse(ts)
            yield pdpb_pb2.TsoResponse(header=self._header(), count=count,
                                       timestamp=pdpb_pb2.Timestamp(physical=phys, logical=logical))

    async def GetRegion(self, request: pdpb_pb2.GetRegionRequest, context: grpc.aio.ServicerContext
                        ) -> pdpb_pb2.GetRegionResponse:
        await self._validate(request.header, context)
        key = await self._raw(request.region_key, context)
        r = self.regions.locate(key)
        return pdpb_pb2.GetRegionResponse(header=self._header(), region=r.to_pb(), leader=r.leader_pb())

    async def ScanRegions(self, request: pdpb_pb2.ScanRegionsRequest, context: grpc.aio.ServicerContext
                          ) -> pdpb_pb2.ScanRegionsResponse:
        await self._validate(request.header, context)
        limit = request.limit if 0 < request.limit <= MAX_SCAN_REGIONS else MAX_SCAN_REGIONS
        start, end = await self._raw(request.start_key, context), await self._raw(request.end_key, context)
        regions = self.regions.scan(start, end, limit)
        resp = pdpb_pb2.ScanRegionsResponse(header=self._header())
        add, add_meta, add_leader = resp.regions.add, resp.region_metas.add, resp.leaders.add
        for r in regions:
            rw = add()
            r.fill_pb(rw.region)
            r.fill_leader_pb(rw.leader)
            add_meta().CopyFrom(rw.region)
            add_leader().CopyFrom(rw.leader)
        return resp

    async def BatchScanRegions(self, request: pdpb_pb2.BatchScanRegionsRequest,
                               context: grpc.aio.ServicerContext) -> pdpb_pb2.BatchScanRegionsResponse:
        await self._validate(request.header, context)
        limit = request.limit if 0 < request.limit <= MAX_SCAN_REGIONS else MAX_SCAN_REGIONS
        resp = pdpb_pb2.BatchScanRegionsResponse(header=self._header())
        last_id = 0
        for kr in request.ranges:
            start, end = await self._raw(kr.start_key, context), await self._raw(kr.end_key, context)
            for r in self.regions.scan(start, end, limit - len(resp.regions)):
                if r.id == last_id:  # a region spanning two adjacent ranges is listed once
                    continue
                rw = resp.regions.add()
                r.fill_pb(rw.region)
                r.fill_leader_pb(rw.leader)
                last_id = r.id
            if len(resp.regions) >= limit:
                break
        return resp

    async def GetStore(self, request: pdpb_pb2.GetStoreRequest, context: grpc.aio.ServicerContext
                       ) -> pdpb_pb2.GetStoreResponse:
        await self._validate(request.header, context)
        for s in self._stores():
            if s.id == request.store_id:
                return pdpb_pb2.GetStoreResponse(header=self._header(), store=s)
        return pdpb_pb2.GetStoreResponse(header=self._error_header(
            pdpb_pb2.UNKNOWN, f"invalid store ID {request.store_id}, not found"))

    async def GetAllStores(self, request: pdpb_pb2.GetAllStoresRequest, context: grpc.aio.ServicerContext
                           ) -> pdpb_pb2.GetAllStoresResponse:
        await self._validate(request.header, context)
        stores = [s for s in self._stores()
                  if not (request.exclude_tombstone_stores and s.state == metapb_pb2.Tombstone)]
        return pdpb_pb2.GetAllStoresResponse(header=self._header(), stores=stores)

    async def GetGCSafePoint(self, request: pdpb_pb2.GetGCSafePointRequest, context: grpc.aio.ServicerContext
                             ) -> pdpb_pb2.GetGCSafePointResponse:
        await self._validate(request.header, context)
        return pdpb_pb2.GetGCSafePointResponse(header=self._header(), safe_point=self._gc_safe_point())

    async def UpdateServiceGCSafePoint(
        self, request: pdpb_pb2.UpdateServiceGCSafePointRequest, context: grpc.aio.ServicerContext
    ) -> pdpb_pb2.UpdateServiceGCSafePointResponse:
        await self._validate(request.header, context)
        if not request.service_id:
            return pdpb_pb2.UpdateServiceGCSafePointResponse(header=self._error_header(
                pdpb_pb2.INVALID_VALUE, "service id is required"))
        min_sp = self.gc.update(request.service_id.decode(errors="replace"), request.TTL, request.safe_point)
        return pdpb_pb2.UpdateServiceGCSafePointResponse(
            header=self._header(), service_id=request.service_id, TTL=request.TTL, min_safe_point=min_sp)

    async def ReportMinResolvedTS(self, request: pdpb_pb2.ReportMinResolvedTsRequest,
                                  context: grpc.aio.ServicerContext) -> pdpb_pb2.ReportMinResolvedTsResponse:
        await self._validate(request.header, context)
        self.min_resolved.report(request.store_id, request.min_resolved_ts)
        return pdpb_pb2.ReportMinResolvedTsResponse(header=self._header())

    def cluster_min_resolved_ts(self) -> int:
        """The minimum over the stores that are up of what each reported (0 until each has)."""
        return self.min_resolved.cluster([s.id for s in self._stores() if s.state == metapb_pb2.Up])
