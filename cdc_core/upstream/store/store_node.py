"""One store of the embedded cluster: its change-feed service (TiKV's ``ChangeData``), its KV reads (TiKV's
``Tikv``) and the gRPC server they run on."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cdc_core.upstream.store.cdc_service import CdcService
from cdc_core.upstream.store.kv_service import KvService


@dataclass
class StoreNode:
    """One store: its change-feed service, its KV reads and its gRPC server (None until the cluster starts it)."""

    id: int
    cdc: CdcService
    kv: KvService
    server: grpc.aio.Server | None = None
    addr: str = ""

    @property
    def up(self) -> bool:
        return self.cdc.up
