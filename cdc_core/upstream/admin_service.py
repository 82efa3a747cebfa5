"""The admin gRPC service (``adminpb.Admin``): fault injection over the wire, on the control address only
(``ClusterConfig.control_addr``: a server of its own, started only when asked for).

Each RPC is one call of ``faults.FaultInjector`` (run in one event-loop step); ``FaultError`` kinds
map to INVALID_ARGUMENT, NOT_FOUND and FAILED_PRECONDITION, with the injector's message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

import grpc

from cdc_core.proto import adminpb_pb2, adminpb_pb2_grpc
from cdc_core.upstream.faults import FaultError, FaultInjector, FaultKind
from cdc_core.upstream.pd.regions import Region

T = TypeVar("T")

STATUS = {
    FaultKind.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    FaultKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    FaultKind.PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
}


def _regions(rs: list[Region]) -> adminpb_pb2.RegionsResponse:
    return adminpb_pb2.RegionsResponse(
        regions=[adminpb_pb2.RegionInfo(region=r.to_pb(), leader_store_id=r.leader_store_id) for r in rs])


class AdminService(adminpb_pb2_grpc.AdminServicer):
    def __init__(self, faults: FaultInjector) -> None:
        self.faults = faults

    async def _run(self, context: grpc.aio.ServicerContext, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except FaultError as exc:
            await context.abort(STATUS[exc.kind], exc.message)
            raise AssertionError("unreachable") from exc

    async def _invalid(self, context: grpc.aio.ServicerContext, message: str) -> NoReturn:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        raise AssertionError("unreachable")

    async def Split(self, request: adminpb_pb2.SplitRequest, context: grpc.aio.ServicerContext
                    ) -> adminpb_pb2.RegionsResponse:
        f = self.faults
        if request.HasField("table"):
            t = request.table
            rs = await self._run(context, lambda: f.split_table(
                t.db, t.table, handles=list(request.handles), lo=request.lo, hi=request.hi, regions=request.regions))
        elif request.region_id:
            rs = await self._run(context, lambda: f.split_region(request.region_id, list(request.keys)))
        else:
            await self._invalid(context, "give a region id or a table")
        return _regions(rs)

    async def Merge(self, request: adminpb_pb2.MergeRequest, context: grpc.aio.ServicerContext
                    ) -> adminpb_pb2.RegionsResponse:
        f = self.faults
        if request.HasField("table"):
            rs = await self._run(context, lambda: f.merge_table(request.table.db, request.table.table))
        elif request.region_id:
            target = request.target_region_id or None
            rs = [await self._run(context, lambda: f.merge(request.region_id, target))]
        else:
            await self._invalid(context, "give a region id or a table")
        return _regions(rs)

    async def TransferLeader(self, request: adminpb_pb2.TransferLeaderRequest, context: grpc.aio.ServicerContext
                             ) -> adminpb_pb2.RegionsResponse:
        f = self.faults
        if request.HasField("table"):
            rs = await self._run(context, lambda: f.transfer_table_leaders(
                request.table.db, request.table.table, request.to_store_id))
        elif request.region_id:
            rs = [await self._run(context, lambda: f.transfer_leader(request.region_id, request.to_store_id))]
        else:
            await self._invalid(context, "give a region id or a table")
        return _regions(rs)

    async def StopStore(self, request: adminpb_pb2.StoreRequest, context: grpc.aio.ServicerContext
                        ) -> adminpb_pb2.StoreResponse:
        dropped, moved = await self._run(
            context, lambda: self.faults.stop_store(request.store_id, move_leaders=request.move_leaders))
        return adminpb_pb2.StoreResponse(store_id=request.store_id, up=False, streams_dropped=dropped,
                                         leaders_moved=moved)

    async def StartStore(self, request: adminpb_pb2.StoreRequest, context: grpc.aio.ServicerContext
                         ) -> adminpb_pb2.StoreResponse:
        await self._run(context, lambda: self.faults.start_store(request.store_id))
        return adminpb_pb2.StoreResponse(store_id=request.store_id, up=True)

    async def DropStreams(self, request: adminpb_pb2.DropStreamsRequest, context: grpc.aio.ServicerContext
                          ) -> adminpb_pb2.DropStreamsResponse:
        n = await self._run(context, lambda: self.faults.drop_streams(request.store_id))
        return adminpb_pb2.DropStreamsResponse(streams_dropped=n)

    async def HoldLock(self, request: adminpb_pb2.HoldLockRequest, context: grpc.aio.ServicerContext
                       ) -> adminpb_pb2.HoldLockResponse:
        t = request.table
        held = await self._run(context, lambda: self.faults.hold_lock(
            t.db, t.table, handles=list(request.handles), count=request.count or 1))
        return adminpb_pb2.HoldLockResponse(start_ts=held.start_ts, keys=list(held.keys))

    async def ReleaseLock(self, request: adminpb_pb2.ReleaseLockRequest, context: grpc.aio.ServicerContext
                          ) -> adminpb_pb2.ReleaseLockResponse:
        held = {h.start_ts: h for h in self.faults.held_locks()}.get(request.start_ts)
        ts = await self._run(context, lambda: self.faults.release_lock(request.start_ts, commit=not request.rollback))
        return adminpb_pb2.ReleaseLockResponse(commit_ts=ts, keys=len(held.keys) if held else 0)

    async def Busy(self, request: adminpb_pb2.BusyRequest, context: grpc.aio.ServicerContext
                   ) -> adminpb_pb2.BusyResponse:
        await self._run(context, lambda: self.faults.busy(request.store_id, request.duration_ms / 1000.0))
        return adminpb_pb2.BusyResponse(store_id=request.store_id)

    async def RunGc(self, request: adminpb_pb2.GcRequest, context: grpc.aio.ServicerContext
                    ) -> adminpb_pb2.GcResponse:
        stats = await self._run(context, self.faults.gc)
        return adminpb_pb2.GcResponse(safe_point=stats.safe_point, versions_removed=stats.versions_removed,
                                      keys_removed=stats.keys_removed)

    async def TransferPdLeader(self, request: adminpb_pb2.PdLeaderRequest, context: grpc.aio.ServicerContext
                               ) -> adminpb_pb2.PdLeaderResponse:
        addr = await self._run(context, lambda: self.faults.transfer_pd_leader(request.member_id))
        return adminpb_pb2.PdLeaderResponse(member_id=request.member_id, address=addr)
