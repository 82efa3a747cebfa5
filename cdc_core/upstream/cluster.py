"""The cluster: wires TSO, MVCC, regions, catalog and SQL into gRPC servers on one event loop.

A PD server (PD + SQL + Catalog services on one port) and one store server per store
(ChangeData service), bound to loopback on ephemeral ports unless told otherwise; the real
ports are reported by ``pd_addr`` / ``store_addrs`` once ``start`` returns. Everything runs on
the event loop that called ``start``; nothing blocks it.

Region layout at start: ``["", t5_r)``, ``[t5_r, t5_s)`` (the DDL history table, one region),
``[t5_s, "")``; each CREATE TABLE / TRUNCATE splits the new table's row span into
``regions_per_table`` regions (see ``regions.table_split_keys``).

Only one store for now (N stores, data persistence and faults come with a later issue: the
store list, region peers and leaders are already modelled for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry

from cdc_core.codec import key as keycodec
from cdc_core.log import get_logger
from cdc_core.memory import MemoryLimitConfig
from cdc_core.proto import (
    cdcpb_pb2_grpc,
    metapb_pb2,
    pdpb_pb2_grpc,
    sqlpb_pb2_grpc,
)
from cdc_core.schema import ddl_history
from cdc_core.upstream.catalog import Catalog
from cdc_core.upstream.catalog_service import CatalogService
from cdc_core.upstream.cdc_service import CdcService
from cdc_core.upstream.ddl import DdlExecutor
from cdc_core.upstream.mvcc import MvccStore
from cdc_core.upstream.pd_service import PdService
from cdc_core.upstream.regions import RegionManager
from cdc_core.upstream.sql_front import SqlEngine
from cdc_core.upstream.sql_service import SqlService
from cdc_core.upstream.tso import TsoAllocator

log = get_logger("cdcflow.upstream")

STORE_ID = 1


class ClusterError(Exception):
    """The cluster cannot start as configured."""


@dataclass
class ClusterConfig:
    pd_addr: str = "127.0.0.1:0"
    stores: int = 1
    regions_per_table: int = 2
    min_ts_interval_ms: int = 200
    data_dir: Path | None = None  # accepted; data is kept in memory only for now
    cluster_id: int = 1
    # The catalog service's listing memory (seed 001; `cdcflow upstream start --catalog-*`).
    catalog_memory: MemoryLimitConfig = field(default_factory=MemoryLimitConfig)
    # Where the catalog limiter's metrics go (None: prometheus_client's process-wide registry).
    metrics_registry: CollectorRegistry | None = field(default=None, compare=False, repr=False)

    def validate(self) -> None:
        if self.stores != 1:
            raise ClusterError(f"--stores {self.stores}: only 1 store is supported for now")
        if self.regions_per_table < 1:
            raise ClusterError(f"regions per table must be >= 1, got {self.regions_per_table}")
        if self.min_ts_interval_ms < 1:
            raise ClusterError(f"min-ts interval must be >= 1 ms, got {self.min_ts_interval_ms}")
        host, _, port = self.pd_addr.rpartition(":")
        if not host or not port.isdigit():
            raise ClusterError(f"PD address {self.pd_addr!r} is not HOST:PORT")

    @property
    def host(self) -> str:
        return self.pd_addr.rpartition(":")[0]


class Cluster:
    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config or ClusterConfig()
        self.config.validate()
        self.tso = TsoAllocator()
        self.store = MvccStore()
        self.regions = RegionManager([STORE_ID])
        self.regions.split(keycodec.table_span(ddl_history.TABLE_ID))
        self.catalog = Catalog()
        self.ddl = DdlExecutor(self.store, self.tso, self.catalog, self.regions, self.config.regions_per_table)
        self.sql = SqlEngine(self.store, self.tso, self.catalog, self.ddl)
        self.cdc = CdcService(STORE_ID, self.store, self.regions, self.tso,
                              min_ts_interval=self.config.min_ts_interval_ms / 1000.0)
        self.pd = PdService(self.config.cluster_id, self.tso, self.regions, self._store_list)
        self.catalog_service = CatalogService(self.catalog, self.config.catalog_memory,
                                              registry=self.config.metrics_registry)
        self._pd_server: grpc.aio.Server | None = None
        self._store_server: grpc.aio.Server | None = None
        self.pd_addr = ""
        self.store_addrs: list[str] = []

    def _store_list(self) -> list[metapb_pb2.Store]:
        return [metapb_pb2.Store(id=STORE_ID, address=a, state=metapb_pb2.Up) for a in self.store_addrs[:1]]

    async def start(self) -> None:
        host = self.config.host
        # A call the busy loop has not picked up yet is cancelled by gRPC core after this many seconds
        # (default 30) with a bare CANCELLED. Catalog listings must instead wait in the catalog limiter's
        # queue, whose acquire timeout answers RESOURCE_EXHAUSTED with the limit named; so give the loop
        # longer than any sane acquire timeout to pick calls up.
        pd = grpc.aio.server(options=[("grpc.server_max_unrequested_time_in_server", 600)])
        pdpb_pb2_grpc.add_PDServicer_to_server(self.pd, pd)
        sqlpb_pb2_grpc.add_SQLServicer_to_server(SqlService(self.sql), pd)
        self.catalog_service.add_to_server(pd)
        pd_port = pd.add_insecure_port(self.config.pd_addr)
        if pd_port == 0:
            raise ClusterError(f"cannot bind the PD server to {self.config.pd_addr}")
        store = grpc.aio.server()
        cdcpb_pb2_grpc.add_ChangeDataServicer_to_server(self.cdc, store)
        store_port = store.add_insecure_port(f"{host}:0")
        if store_port == 0:
            raise ClusterError(f"cannot bind a store server on {host}")
        await pd.start()
        await store.start()
        self._pd_server, self._store_server = pd, store
        self.pd_addr = f"{host}:{pd_port}"
        self.store_addrs = [f"{host}:{store_port}"]
        log.info("upstream serving", pd_addr=self.pd_addr, store_addrs=self.store_addrs)

    async def stop(self, grace: float = 1.0) -> None:
        for srv in (self._store_server, self._pd_server):
            if srv is not None:
                await srv.stop(grace)
        self._pd_server = self._store_server = None
        log.info("upstream stopped", pd_addr=self.pd_addr)
