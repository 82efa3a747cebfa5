"""One store of the embedded cluster: its change-feed service (TiKV's ``ChangeData``), its KV reads (TiKV's
``Tikv``), the gRPC server they run on and its status server (TiKV's ``status-addr``)."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cdc_core.upstream.store.cdc_service import CdcService
from cdc_core.upstream.store.kv_service import KvService
from cdc_core.upstream.store.status_server import StatusServer


@dataclass
class StoreNode:
    """One store: its change-feed service, its KV reads, its gRPC server (None until the cluster starts it) and its
    status server (``/metrics``, at ``status_addr``)."""

    id: int
    cdc: CdcService
    kv: KvService
    server: grpc.aio.Server | None = None
    addr: str = ""
    status: StatusServer | None = None
    status_addr: str = ""

    @property
    def up(self) -> bool:
        return self.cdc.up
