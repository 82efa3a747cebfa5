"""Asynchronous client of PD (kvproto's ``pdpb.PD``): TSO, region routing (batched scans), stores, GC safe points.

It follows PD's client rules (``cdc_core.client.pd_protocol``): the cluster id from ``GetMembers`` on every
request, errors from the response header, a cluster-id mismatch fatal.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cdc_core.client import pd_protocol
from cdc_core.codec.memcomparable import KeyDecodeError, decode_key, encode_key
from cdc_core.errors import UpstreamError
from cdc_core.proto import metapb_pb2, pdpb_pb2, pdpb_pb2_grpc

SCAN_REGIONS_BATCH = 1024


@dataclass(frozen=True)
class RegionInfo:
    id: int
    start_key: bytes
    end_key: bytes  # b"" = end of the key space
    conf_ver: int
    version: int
    leader_store_id: int

    def epoch(self) -> metapb_pb2.RegionEpoch:
        return metapb_pb2.RegionEpoch(conf_ver=self.conf_ver, version=self.version)


def _raw(key: bytes, pd_addr: str) -> bytes:
    """A region boundary as PD sends it (memcomparable-encoded) as the raw key the puller works on."""
    try:
        return decode_key(key)
    except KeyDecodeError as exc:
        raise UpstreamError(f"PD {pd_addr}: a region boundary is not memcomparable-encoded: {exc}") from exc


class PDClient:
    def __init__(self, pd_addr: str) -> None:
        self.pd_addr = pd_addr
        self._channel = grpc.aio.insecure_channel(pd_addr)
        self._stub = pdpb_pb2_grpc.PDStub(self._channel)
        self._cluster_id: int | None = None

    async def close(self) -> None:
        await self._channel.close()

    def _error(self, what: str, exc: grpc.aio.AioRpcError) -> UpstreamError:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and pd_protocol.is_cluster_id_mismatch(exc.details()):
            return pd_protocol.mismatch_error(self.pd_addr, exc.details())
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return UpstreamError(f"cannot reach the upstream at {self.pd_addr} ({what}): {exc.details()}")
        return UpstreamError(f"PD {self.pd_addr}: {what} failed: {exc.details()}")

    async def cluster_id(self) -> int:
        """The cluster id (``GetMembers``, once per client), which every other call carries."""
        if self._cluster_id is None:
            try:
                resp = await self._stub.GetMembers(pdpb_pb2.GetMembersRequest(), timeout=10)
            except grpc.aio.AioRpcError as exc:
                raise self._error("GetMembers", exc) from exc
            self._cluster_id = pd_protocol.cluster_id_of(resp, self.pd_addr)
        return self._cluster_id

    async def _header(self) -> pdpb_pb2.RequestHeader:
        return pd_protocol.header(await self.cluster_id())

    async def get_ts(self) -> int:
        request = pd_protocol.tso_request(await self.cluster_id())
        call = self._stub.Tso(timeout=10)
        try:
            await call.write(request)
            await call.done_writing()
            resp = await call.read()
        except grpc.aio.AioRpcError as exc:
            raise self._error("Tso", exc) from exc
        finally:
            call.cancel()
        if resp is grpc.aio.EOF:
            raise UpstreamError(f"PD {self.pd_addr}: the Tso stream ended without a timestamp")
        return pd_protocol.last_ts(resp, self.pd_addr)

    async def scan_regions(self, start: bytes, end: bytes) -> list[RegionInfo]:
        """Every region overlapping ``[start, end)``, in key order, fetched in batches of 1024."""
        out: list[RegionInfo] = []
        key = start
        header = await self._header()
        encoded_end = encode_key(end)
        while True:
            try:
                resp = await self._stub.ScanRegions(
                    pdpb_pb2.ScanRegionsRequest(header=header, start_key=encode_key(key), end_key=encoded_end,
                                                limit=SCAN_REGIONS_BATCH),
                    timeout=30)
            except grpc.aio.AioRpcError as exc:
                raise self._error("ScanRegions", exc) from exc
            pd_protocol.check(resp, self.pd_addr, "ScanRegions")
            if not resp.regions:
                break
            for rw in resp.regions:
                r = rw.region
                out.append(
                    RegionInfo(
                        id=r.id, start_key=_raw(r.start_key, self.pd_addr), end_key=_raw(r.end_key, self.pd_addr),
                        conf_ver=r.region_epoch.conf_ver,
                        version=r.region_epoch.version, leader_store_id=rw.leader.store_id,
                    )
                )
            last_end = out[-1].end_key
            if not last_end or (end and last_end >= end) or len(resp.regions) < SCAN_REGIONS_BATCH:
                break
            key = last_end
        return out

    async def store_address(self, store_id: int) -> str:
        try:
            resp = await self._stub.GetStore(
                pdpb_pb2.GetStoreRequest(header=await self._header(), store_id=store_id), timeout=10)
        except grpc.aio.AioRpcError as exc:
            raise self._error(f"GetStore({store_id})", exc) from exc
        pd_protocol.check(resp, self.pd_addr, f"GetStore({store_id})")
        if not resp.store.address:
            raise UpstreamError(f"PD {self.pd_addr}: store {store_id} has no address")
        return resp.store.address

    async def update_service_safe_point(self, service_id: str, ttl_s: int, safe_point: int) -> int:
        """Set (``ttl_s > 0``) or remove (``ttl_s <= 0``) a service GC safe point; PD's minimum after it."""
        request = pdpb_pb2.UpdateServiceGCSafePointRequest(
            header=await self._header(), service_id=service_id.encode(), TTL=int(ttl_s), safe_point=safe_point)
        try:
            resp = await self._stub.UpdateServiceGCSafePoint(request, timeout=10)
        except grpc.aio.AioRpcError as exc:
            raise self._error(f"UpdateServiceGCSafePoint({service_id})", exc) from exc
        pd_protocol.check(resp, self.pd_addr, f"UpdateServiceGCSafePoint({service_id})")
        return int(resp.min_safe_point)

    async def gc_safe_point(self) -> int:
        """PD's GC safe point (``GetGCSafePoint``): data below it may be gone."""
        try:
            resp = await self._stub.GetGCSafePoint(pdpb_pb2.GetGCSafePointRequest(header=await self._header()),
                                                   timeout=10)
        except grpc.aio.AioRpcError as exc:
            raise self._error("GetGCSafePoint", exc) from exc
        return int(pd_protocol.check(resp, self.pd_addr, "GetGCSafePoint").safe_point)
