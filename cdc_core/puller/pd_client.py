"""Asynchronous client of PD (kvproto's ``pdpb.PD``): TSO, region routing (batched scans), stores, GC safe points.

It follows PD's client rules (``cdc_core.client.pd_protocol``): the cluster id from ``GetMembers`` on every
request, errors from the response header, a cluster-id mismatch fatal, every call at the leader (found through
``GetMembers`` on any member given, followed when it moves).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from cdc_core import tls
from cdc_core.client import pd_protocol
from cdc_core.codec.memcomparable import KeyDecodeError, decode_key, encode_key
from cdc_core.errors import UpstreamError
from cdc_core.proto import metapb_pb2, pdpb_pb2, pdpb_pb2_grpc

SCAN_REGIONS_BATCH = 1024
R = TypeVar("R")


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
    """``pd_addr``: one PD address or several, comma-separated (members of one cluster)."""

    def __init__(self, pd_addr: str) -> None:
        self.pd_addr = pd_addr
        self._members = pd_protocol.PdMembers(pd_addr)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, pdpb_pb2_grpc.PDStub] = {}

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
        self._stubs.clear()

    def _stub(self, addr: str) -> pdpb_pb2_grpc.PDStub:
        stub = self._stubs.get(addr)
        if stub is None:
            self._channels[addr] = ch = tls.aio_grpc_channel(addr)
            stub = self._stubs[addr] = pdpb_pb2_grpc.PDStub(ch)
        return stub

    @property
    def leader_changes(self) -> int:
        """Calls that found no leader where they went and asked the members again."""
        return self._members.leader_changes

    @property
    def leader_addr(self) -> str | None:
        """The leader's address as last learned (None before the first call or after it was lost)."""
        return self._members.leader

    def _error(self, what: str, addr: str, exc: grpc.aio.AioRpcError) -> UpstreamError:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and pd_protocol.is_cluster_id_mismatch(exc.details()):
            return pd_protocol.mismatch_error(addr, exc.details())
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return UpstreamError(f"cannot reach the upstream at {addr} ({what}): {exc.details()}")
        return UpstreamError(f"PD {addr}: {what} failed: {exc.details()}")

    async def _discover(self, what: str) -> str:
        """The leader's address, asking the members (``GetMembers``) when it is not known."""
        m = self._members
        if m.leader is not None:
            return m.leader
        m.start_round()
        for addr in m.candidates():
            try:
                resp = await self._stub(addr).GetMembers(
                    pdpb_pb2.GetMembersRequest(header=pd_protocol.header(0)), timeout=5)
            except grpc.aio.AioRpcError as exc:
                m.members_failed(addr, exc.code(), exc.details())
                continue
            leader = m.learn(addr, resp)
            if leader is not None:
                return leader
        raise m.no_leader(what, m.all_unreachable())

    async def _call(self, what: str, rpc: Callable[[pdpb_pb2_grpc.PDStub], Awaitable[R]]) -> R:
        """``rpc`` at the leader; when it found no leader there (a follower, or the leader gone), the members are
        asked again and it is retried, a bounded number of times (every PD call cdcflow makes is idempotent)."""
        attempts = pd_protocol.LEADER_ATTEMPTS
        for attempt in range(attempts):
            addr = await self._discover(what)
            try:
                return await rpc(self._stub(addr))
            except grpc.aio.AioRpcError as exc:
                wait = self._members.retry_after(what, addr, attempt, attempts, exc.code(), exc.details())
                if wait is None:
                    raise self._error(what, addr, exc) from exc
                await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt raises")

    async def cluster_id(self) -> int:
        """The cluster id (from ``GetMembers``), which every other call carries."""
        await self._discover("GetMembers")
        assert self._members.cluster_id is not None
        return self._members.cluster_id

    async def _header(self) -> pdpb_pb2.RequestHeader:
        return pd_protocol.header(await self.cluster_id())

    async def get_ts(self) -> int:
        request = pd_protocol.tso_request(await self.cluster_id())

        async def tso(stub: pdpb_pb2_grpc.PDStub) -> pdpb_pb2.TsoResponse:
            call = stub.Tso(timeout=10)
            try:
                await call.write(request)
                await call.done_writing()
                resp = await call.read()
            finally:
                call.cancel()
            if resp is grpc.aio.EOF:
                raise UpstreamError(f"PD {self.pd_addr}: the Tso stream ended without a timestamp")
            return resp

        return pd_protocol.last_ts(await self._call("Tso", tso), self.pd_addr)

    async def scan_regions(self, start: bytes, end: bytes) -> list[RegionInfo]:
        """Every region overlapping ``[start, end)``, in key order, fetched in batches of 1024."""
        out: list[RegionInfo] = []
        key = start
        header = await self._header()
        encoded_end = encode_key(end)
        while True:
            request = pdpb_pb2.ScanRegionsRequest(header=header, start_key=encode_key(key), end_key=encoded_end,
                                                  limit=SCAN_REGIONS_BATCH)
            resp = await self._call("ScanRegions", self._scan_regions(request))
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

    @staticmethod
    def _scan_regions(request: pdpb_pb2.ScanRegionsRequest
                      ) -> Callable[[pdpb_pb2_grpc.PDStub], Awaitable[pdpb_pb2.ScanRegionsResponse]]:
        return lambda stub: stub.ScanRegions(request, timeout=30)

    async def get_region(self, key: bytes) -> pdpb_pb2.GetRegionResponse:
        """The region holding the raw ``key`` and its leader, as PD answers ``GetRegion`` (boundaries and peers as
        metapb has them: a KV request's context names the leader peer)."""
        request = pdpb_pb2.GetRegionRequest(header=await self._header(), region_key=encode_key(key))
        resp = await self._call("GetRegion", lambda stub: stub.GetRegion(request, timeout=10))
        return pd_protocol.check(resp, self.pd_addr, "GetRegion")  # type: ignore[no-any-return]

    async def store_address(self, store_id: int) -> str:
        request = pdpb_pb2.GetStoreRequest(header=await self._header(), store_id=store_id)
        resp = await self._call(f"GetStore({store_id})", lambda stub: stub.GetStore(request, timeout=10))
        pd_protocol.check(resp, self.pd_addr, f"GetStore({store_id})")
        if not resp.store.address:
            raise UpstreamError(f"PD {self.pd_addr}: store {store_id} has no address")
        return str(resp.store.address)

    async def update_service_safe_point(self, service_id: str, ttl_s: int, safe_point: int) -> int:
        """Set (``ttl_s > 0``) or remove (``ttl_s <= 0``) a service GC safe point; PD's minimum after it."""
        request = pdpb_pb2.UpdateServiceGCSafePointRequest(
            header=await self._header(), service_id=service_id.encode(), TTL=int(ttl_s), safe_point=safe_point)
        what = f"UpdateServiceGCSafePoint({service_id})"
        resp = await self._call(what, lambda stub: stub.UpdateServiceGCSafePoint(request, timeout=10))
        pd_protocol.check(resp, self.pd_addr, what)
        return int(resp.min_safe_point)

    async def gc_safe_point(self) -> int:
        """PD's GC safe point (``GetGCSafePoint``): data below it may be gone."""
        request = pdpb_pb2.GetGCSafePointRequest(header=await self._header())
        resp = await self._call("GetGCSafePoint", lambda stub: stub.GetGCSafePoint(request, timeout=10))
        return int(pd_protocol.check(resp, self.pd_addr, "GetGCSafePoint").safe_point)
