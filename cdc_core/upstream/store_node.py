"""One store of the embedded cluster: its change-feed service (TiKV's ``ChangeData``) and the gRPC server it runs on."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cdc_core.upstream.cdc_service import CdcService


@dataclass
class StoreNode:
    """One store: its change-feed service and its gRPC server (None until the cluster starts it)."""

    id: int
    cdc: CdcService
    server: grpc.aio.Server | None = None
    addr: str = ""

    @property
    def up(self) -> bool:
        return self.cdc.up
