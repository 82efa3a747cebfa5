"""Asynchronous client of the PD-like service: TSO, region routing (batched scans) and stores."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cdc_core.codec import tso
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


class PDClient:
    def __init__(self, pd_addr: str) -> None:
        self.pd_addr = pd_addr
        self._channel = grpc.aio.insecure_channel(pd_addr)
        self._stub = pdpb_pb2_grpc.PDStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def get_ts(self) -> int:
        try:
            resp = await self._stub.GetTS(pdpb_pb2.GetTSRequest(count=1), timeout=10)
        except grpc.aio.AioRpcError as exc:
            raise UpstreamError(f"PD {self.pd_addr}: GetTS failed: {exc.details()}") from exc
        return tso.compose(resp.timestamp.physical, resp.timestamp.logical)

    async def scan_regions(self, start: bytes, end: bytes) -> list[RegionInfo]:
        """Every region overlapping ``[start, end)``, in key order, fetched in batches of 1024."""
        out: list[RegionInfo] = []
        key = start
        while True:
            try:
                resp = await self._stub.ScanRegions(
                    pdpb_pb2.ScanRegionsRequest(start_key=key, end_key=end, limit=SCAN_REGIONS_BATCH), timeout=30
                )
            except grpc.aio.AioRpcError as exc:
                raise UpstreamError(f"PD {self.pd_addr}: ScanRegions failed: {exc.details()}") from exc
            if not resp.regions:
                break
            for rw in resp.regions:
                r = rw.region
                out.append(
                    RegionInfo(
                        id=r.id, start_key=r.start_key, end_key=r.end_key, conf_ver=r.region_epoch.conf_ver,
                        version=r.region_epoch.version, leader_store_id=rw.leader.store_id,
                    )
                )
            last_end = resp.regions[-1].region.end_key
            if not last_end or (end and last_end >= end) or len(resp.regions) < SCAN_REGIONS_BATCH:
                break
            key = last_end
        return out

    async def store_address(self, store_id: int) -> str:
        try:
            resp = await self._stub.GetStore(pdpb_pb2.GetStoreRequest(store_id=store_id), timeout=10)
        except grpc.aio.AioRpcError as exc:
            raise UpstreamError(f"PD {self.pd_addr}: GetStore({store_id}) failed: {exc.details()}") from exc
        if not resp.store.address:
            raise UpstreamError(f"PD {self.pd_addr}: store {store_id} has no address")
        return resp.store.address
