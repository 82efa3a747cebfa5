"""The cluster: wires TSO, MVCC, regions, catalog, SQL, GC and faults into gRPC servers on one loop.

One server per PD member (PD + etcd + Admin services, and PD's HTTP API through ``pd_http.PdFront`` on the same
port; member 1 leads at start, ``pd_members``), the SQL front over the MySQL protocol (``mysql_front``) and one
store server per store (ChangeData and Tikv's KV reads, store ids 1..N, each on its own port), bound to loopback on
ephemeral ports unless told otherwise; the real ports are reported by ``pd_addr`` / ``pd_member_addrs`` /
``mysql_addr`` / ``store_addrs`` once ``start`` returns. Everything runs on the event loop that called
``start``; nothing blocks it.

All stores share the one MVCC store (in-process, like replicas that are always in sync); what
differs per store is which regions it leads, and so which subscriptions it serves. A stopped store
keeps its data but refuses and breaks its EventFeed streams (``faults.FaultInjector``).

Region layout at start: ``["", t5_r)``, ``[t5_r, t5_s)`` (the DDL history table, one region),
``[t5_s, "")``; each CREATE TABLE / TRUNCATE splits the new table's row span into
``regions_per_table`` regions (see ``regions.table_split_keys``); leaders go round-robin over the
stores. Each store reports its min resolved ts to PD every second (``min_resolved_ts``). Optional: automatic
split by size (``split_checker``), periodic GC (``gc``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import grpc
from prometheus_client import CollectorRegistry

from cdc_core.codec import key as keycodec
from cdc_core.errors import EmbeddedUpstreamError
from cdc_core.log import get_logger
from cdc_core.memory import MemoryLimitConfig
from cdc_core.proto import (
    adminpb_pb2_grpc,
    cdcpb_pb2_grpc,
    etcdserverpb_pb2_grpc,
    metapb_pb2,
    pdpb_pb2_grpc,
    tikvpb_pb2_grpc,
)
from cdc_core.schema import ddl_history
from cdc_core.tls import TlsConfig
from cdc_core.upstream.admin_service import AdminService
from cdc_core.upstream.faults import FaultInjector
from cdc_core.upstream.pd.etcd_service import EtcdKeySpace, EtcdKvService
from cdc_core.upstream.pd.gc_safe_points import GcSafePoints
from cdc_core.upstream.pd.min_resolved_ts import MinResolvedTs
from cdc_core.upstream.pd.pd_http import PdFront
from cdc_core.upstream.pd.pd_members import PdMembers
from cdc_core.upstream.pd.pd_service import PdService
from cdc_core.upstream.pd.regions import PEER_ID_STRIDE, RegionManager
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.sql.bulk_import import DEFAULT_REGION_KEYS
from cdc_core.upstream.sql.ddl.catalog import Catalog
from cdc_core.upstream.sql.ddl.executor import DdlExecutor
from cdc_core.upstream.sql.ddl.schema_meta import MetaIngest
from cdc_core.upstream.sql.mysql_front import Accounts, MysqlFront
from cdc_core.upstream.sql.sql_front import SqlEngine
from cdc_core.upstream.sql.table_listing import TableListing
from cdc_core.upstream.store.cdc_service import CdcService
from cdc_core.upstream.store.gc_worker import GcWorker
from cdc_core.upstream.store.incremental_scan import ScanCosts
from cdc_core.upstream.store.kv_service import KvService
from cdc_core.upstream.store.mvcc import MvccStore
from cdc_core.upstream.store.resolved_ts_reporter import Reporter
from cdc_core.upstream.store.split_checker import SplitChecker
from cdc_core.upstream.store.status_server import StatusServer
from cdc_core.upstream.store.store_node import StoreNode

log = get_logger("cdcflow.upstream")

MAX_STORES = PEER_ID_STRIDE - 1
_WILDCARDS = frozenset({"0.0.0.0", "::", "[::]"})
MAX_PD_MEMBERS = 7


class ClusterError(EmbeddedUpstreamError):
    """The cluster cannot start as configured."""


def new_cluster_id() -> int:
    """A cluster id as PD makes one at bootstrap (pd ``server/util.go`` ``initOrGetClusterID``)."""
    return (int(time.time()) << 32) + random.getrandbits(32)


@dataclass
class ClusterConfig:
    pd_addr: str = "127.0.0.1:0"
    # The SQL front over the MySQL protocol ("": not served).
    mysql_addr: str = "127.0.0.1:0"
    # PD members (member 1 on pd_addr and the leader at start, the others on ephemeral ports of the same host).
    pd_members: int = 1
    stores: int = 1
    regions_per_table: int = 2
    min_ts_interval_ms: int = 200
    # How often each store reports its min resolved ts to PD (TiKV's raftstore.report-min-resolved-ts-interval;
    # 0: never, and PD's min-resolved-ts stays 0).
    min_resolved_ts_report_interval_ms: int = 1000
    # Automatic split of a region past this many keys / bytes (0: off).
    split_region_keys: int = 0
    split_region_bytes: int = 0
    # GC: versions older than now - gc_life_time (held back by service safe points) go at each pass.
    gc_life_time_s: float = 600.0
    gc_interval_s: float = 0.0  # seconds between GC passes; 0: no periodic GC (tests run passes)
    # 0: made up at start as PD makes one (unix seconds << 32 | random), so no two clusters share it.
    cluster_id: int = 0
    # Fake prewrites of locks held longer than this (a transaction's TTL heartbeat, as TiKV reports it); 0: off.
    txn_heartbeat_interval_ms: int = 1000
    # Region registrations past this many running incremental scans get server_is_busy (TiKV's
    # cdc.incremental-scan-concurrency-limit).
    incremental_scan_concurrency_limit: int = 10_000
    # What each store's incremental scans cost (TiKV's cdc.incremental-scan-concurrency, -speed-limit and
    # -ts-filter-ratio; store/incremental_scan.py).
    scan_costs: ScanCosts = field(default_factory=ScanCosts)
    # Bytes of live rows an EventFeed connection may queue before its regions get `congested` (TiKV's
    # cdc.sink-memory-quota); 0: unbounded.
    sink_memory_quota_bytes: int = 512 * 1024 * 1024
    # Memory of table listings over information_schema.TABLES (seed 001; `cdcflow upstream start --catalog-*`).
    catalog_memory: MemoryLimitConfig = field(default_factory=MemoryLimitConfig)
    # Where the catalog limiter's metrics go (None: prometheus_client's process-wide registry).
    metrics_registry: CollectorRegistry | None = field(default=None, compare=False, repr=False)
    # The hosts stores bind, store i on store_hosts[(i - 1) % len] (empty: pd_addr's host), as TiKV nodes each
    # have their own address; e.g. 127.0.0.2, 127.0.0.3 on one machine.
    store_hosts: tuple[str, ...] = ()
    # The host PD members, stores and the SQL front publish to clients (PD's advertise-client-urls, TiKV's
    # advertise-addr; empty: the host each binds). Needed when binding 0.0.0.0 (a container): clients elsewhere
    # must be given an address they can reach.
    advertise_host: str = ""
    # HOST:PORT of the control service (``adminpb.Admin``: faults, GC on demand, PD leader moves) -- a server of
    # its own, never on a port TiDB's clients use, and only when asked for (tests, `upstream start --control-addr`):
    # "" serves none. A deployment runs without it.
    control_addr: str = ""
    # The SQL front's account: with a password, only this user with it logs in; without one (the default, a fresh
    # TiDB's root), any user without a password does -- a loopback default, not for a shared network.
    sql_user: str = "root"
    sql_password: str = field(default="", repr=False)
    # Mutual TLS on PD (gRPC and HTTP), the stores and the control service, TLS on the SQL front (cdc_core.tls);
    # None: plaintext, as a cluster without `[security]`.
    tls: TlsConfig | None = None

    def validate(self) -> None:
        if not 1 <= self.stores <= MAX_STORES:
            raise ClusterError(f"--stores {self.stores}: the number of stores must be in 1..{MAX_STORES}")
        if self.split_region_keys < 0 or self.split_region_bytes < 0:
            raise ClusterError("split limits must be >= 0 (0 disables)")
        if self.gc_life_time_s < 0 or self.gc_interval_s < 0:
            raise ClusterError("GC life time and interval must be >= 0")
        if not 1 <= self.pd_members <= MAX_PD_MEMBERS:
            raise ClusterError(
                f"--pd-members {self.pd_members}: the number of PD members must be in 1..{MAX_PD_MEMBERS}")
        if self.regions_per_table < 1:
            raise ClusterError(f"regions per table must be >= 1, got {self.regions_per_table}")
        if self.txn_heartbeat_interval_ms < 0 or self.incremental_scan_concurrency_limit < 1:
            raise ClusterError("the heartbeat interval must be >= 0 and the scan limit >= 1")
        if self.sink_memory_quota_bytes < 0:
            raise ClusterError("the sink memory quota must be >= 0 (0: unbounded)")
        if self.min_ts_interval_ms < 1:
            raise ClusterError(f"min-ts interval must be >= 1 ms, got {self.min_ts_interval_ms}")
        host, _, port = self.pd_addr.rpartition(":")
        if not host or not port.isdigit():
            raise ClusterError(f"PD address {self.pd_addr!r} is not HOST:PORT")
        if self.mysql_addr:
            host, _, port = self.mysql_addr.rpartition(":")
            if not host or not port.isdigit():
                raise ClusterError(f"MySQL address {self.mysql_addr!r} is not HOST:PORT")
        if self.control_addr:
            host, _, port = self.control_addr.rpartition(":")
            if not host or not port.isdigit():
                raise ClusterError(f"control address {self.control_addr!r} is not HOST:PORT")
        wildcard = [h for h in (self.host, *self.store_hosts, self.mysql_addr.rpartition(":")[0]) if h in _WILDCARDS]
        if wildcard and not self.advertise_host:
            raise ClusterError(
                f"binding {wildcard[0]} needs --advertise-host: PD tells clients where the stores and members are, "
                "and a wildcard address is not one they can reach")
        if self.advertise_host and (self.advertise_host in _WILDCARDS or ":" in self.advertise_host):
            raise ClusterError(f"--advertise-host {self.advertise_host!r} must be a host clients can reach, no port")

    def published(self, bound_host: str) -> str:
        """The host to publish for a server bound to ``bound_host``."""
        return self.advertise_host or bound_host

    def store_host(self, store_id: int) -> str:
        return self.store_hosts[(store_id - 1) % len(self.store_hosts)] if self.store_hosts else self.host

    @property
    def host(self) -> str:
        return self.pd_addr.rpartition(":")[0]


class Cluster:
    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config or ClusterConfig()
        self.config.validate()
        self.tso = TsoAllocator()
        self.store = MvccStore()
        store_ids = list(range(1, self.config.stores + 1))
        self.regions = RegionManager(store_ids)
        for table_id in (ddl_history.JOB_TABLE_ID, ddl_history.HISTORY_TABLE_ID):
            self.regions.split(keycodec.table_span(table_id))
        self.catalog = Catalog(MetaIngest(self.store, self.tso))  # the system tables' meta keys at boot
        self.ddl = DdlExecutor(self.store, self.tso, self.catalog, self.regions, self.config.regions_per_table)
        self.sql = SqlEngine(self.store, self.tso, self.catalog, self.ddl,
                             import_region_keys=self.config.split_region_keys or DEFAULT_REGION_KEYS)
        self.cluster_id = self.config.cluster_id or new_cluster_id()
        self.stores: dict[int, StoreNode] = {sid: self._store_node(sid) for sid in store_ids}
        self.min_resolved = MinResolvedTs()
        self.gc_safe_points = GcSafePoints()
        self.gc = GcWorker(self.store, self.tso, self.gc_safe_points, life_time=self.config.gc_life_time_s,
                           interval=self.config.gc_interval_s)
        self.split_checker = SplitChecker(self.store, self.regions, max_keys=self.config.split_region_keys,
                                          max_bytes=self.config.split_region_bytes)
        self.pd_members = PdMembers(self.config.pd_members)
        self.pd_services = [
            PdService(self.cluster_id, self.tso, self.regions, self._store_list, self.gc_safe_points,
                      gc_safe_point=lambda: self.store.safe_point, members=self.pd_members, member_id=m.member_id,
                      min_resolved=self.min_resolved)
            for m in self.pd_members.members
        ]
        self.faults = FaultInjector(self)
        self._pd_servers: list[grpc.aio.Server] = []
        self._pd_fronts: list[PdFront] = []
        self.min_resolved_reporter = Reporter(
            self.store, self.regions, self.tso, self.min_resolved,
            lambda: [sid for sid, n in self.stores.items() if n.up],
            interval=self.config.min_resolved_ts_report_interval_ms / 1000.0)
        self.table_listing = TableListing(self.config.catalog_memory, registry=self.config.metrics_registry)
        self.mysql = MysqlFront(self.sql, self.table_listing,
                                Accounts(self.config.sql_user, self.config.sql_password),
                                ssl=self.config.tls.server_context(require_client_cert=False) if self.config.tls
                                else None)
        self.mysql_addr = ""  # once serving; "" when not served
        self.etcd = EtcdKeySpace()  # PD's embedded etcd, where the SQL front registers as TiDB does
        self.pd_addr = ""  # member 1's address (the leader at start)
        self.control_addr = ""  # the control service's, once serving (config.control_addr); "" when not served
        self._control_server: grpc.aio.Server | None = None
        self.pd_member_addrs: list[str] = []

    def _store_node(self, sid: int) -> StoreNode:
        cdc = CdcService(
            sid, self.store, self.regions, self.tso, min_ts_interval=self.config.min_ts_interval_ms / 1000.0,
            cluster_id=self.cluster_id, scan_limit=self.config.incremental_scan_concurrency_limit,
            txn_heartbeat_interval=self.config.txn_heartbeat_interval_ms / 1000.0,
            sink_memory_quota=self.config.sink_memory_quota_bytes, scan_costs=self.config.scan_costs)
        # A stopped store refuses its KV reads as it refuses its feeds (faults.stop_store stops its CdcService).
        kv = KvService(sid, self.store, self.regions, cluster_id=self.cluster_id, up=lambda: cdc.up)
        return StoreNode(sid, cdc, kv)

    @property
    def pd(self) -> PdService:
        """Member 1's PD service."""
        return self.pd_services[0]

    @property
    def pd_leader_addr(self) -> str:
        """The PD leader's address ("" while there is none)."""
        leader = self.pd_members.leader_id
        return self.pd_member_addrs[leader - 1] if leader else ""

    @property
    def cdc(self) -> CdcService:
        """The first store's change-feed service."""
        return self.stores[1].cdc

    @property
    def store_addrs(self) -> list[str]:
        return [n.addr for n in self.stores.values() if n.addr]

    def store_addr(self, store_id: int) -> str:
        return self.stores[store_id].addr

    def _store_list(self) -> list[metapb_pb2.Store]:
        return [metapb_pb2.Store(id=n.id, address=n.addr, status_address=n.status_addr,
                                 state=metapb_pb2.Up if n.up else metapb_pb2.Offline)
                for n in self.stores.values() if n.addr]

    def _add_port(self, server: grpc.aio.Server, addr: str) -> int:
        if self.config.tls is None:
            return server.add_insecure_port(addr)
        return server.add_secure_port(addr, self.config.tls.server_credentials())

    async def start(self) -> None:
        host = self.config.host
        # A call the busy loop has not picked up yet is cancelled by gRPC core after this many seconds
        # (default 30) with a bare CANCELLED; a loop busy with a large load must not turn into spurious
        # failures of PD calls, so give it longer to pick them up.
        servers: list[tuple[grpc.aio.Server, int]] = []
        for i, service in enumerate(self.pd_services):
            # Every member serves etcd's Range too (it reads the shared state), so any listed address works for
            # it; PD's own calls follow the leader.
            pd = grpc.aio.server(options=[("grpc.server_max_unrequested_time_in_server", 600)])
            pdpb_pb2_grpc.add_PDServicer_to_server(service, pd)
            etcdserverpb_pb2_grpc.add_KVServicer_to_server(
                EtcdKvService(self.etcd, service.cluster_id, service.member_id), pd)
            addr = self.config.pd_addr if i == 0 else f"{host}:0"
            internal = "127.0.0.1" if host in _WILDCARDS else host  # reached by the member's front only
            grpc_port = pd.add_insecure_port(f"{internal}:0")
            front = PdFront(internal, grpc_port, service.cluster_min_resolved_ts)
            # With TLS the front terminates it (ALPN h2 for gRPC, http/1.1 for the HTTP API) and pipes plaintext
            # to the member's gRPC server, which only listens on loopback.
            front_tls = self.config.tls.server_context(alpn=["h2", "http/1.1"]) if self.config.tls else None
            try:  # the member's address: its gRPC and its HTTP API (pd_http.py)
                pd_port = await front.start(addr.rpartition(":")[0] or host, int(addr.rpartition(":")[2]),
                                            ssl=front_tls)
            except OSError as exc:
                raise ClusterError(f"cannot bind PD member {service.member_id} to {addr}: {exc}") from exc
            if grpc_port == 0:
                raise ClusterError(f"cannot bind PD member {service.member_id}'s gRPC server on {host}")
            self._pd_fronts.append(front)
            servers.append((pd, pd_port))
        for node in self.stores.values():
            srv = grpc.aio.server()
            cdcpb_pb2_grpc.add_ChangeDataServicer_to_server(node.cdc, srv)
            tikvpb_pb2_grpc.add_TikvServicer_to_server(node.kv, srv)
            store_host = self.config.store_host(node.id)
            port = self._add_port(srv, f"{store_host}:0")
            if port == 0:
                raise ClusterError(f"cannot bind a server for store {node.id} on {store_host}")
            node.server, node.addr = srv, f"{self.config.published(store_host)}:{port}"
            node.status = StatusServer(node.cdc.metrics)
            status_tls = self.config.tls.server_context(require_client_cert=False) if self.config.tls else None
            try:
                status_port = await node.status.start(store_host, 0, ssl_context=status_tls)
            except OSError as exc:
                raise ClusterError(f"cannot bind the status server of store {node.id} on {store_host}: {exc}") from exc
            node.status_addr = f"{self.config.published(store_host)}:{status_port}"
        for (server, port), service in zip(servers, self.pd_services, strict=True):
            scheme = "https" if self.config.tls else "http"
            service.client_url = f"{scheme}://{self.config.published(host)}:{port}"
            await server.start()
            self._pd_servers.append(server)
            self.pd_member_addrs.append(f"{self.config.published(host)}:{port}")
        for node in self.stores.values():
            assert node.server is not None
            await node.server.start()
        self.pd_addr = self.pd_member_addrs[0]
        if self.config.control_addr:
            control = grpc.aio.server()
            adminpb_pb2_grpc.add_AdminServicer_to_server(AdminService(self.faults), control)
            control_host = self.config.control_addr.rpartition(":")[0]
            port = self._add_port(control, self.config.control_addr)
            if port == 0:
                raise ClusterError(f"cannot bind the control service to {self.config.control_addr}")
            await control.start()
            self._control_server = control
            self.control_addr = f"{self.config.published(control_host)}:{port}"
        if self.config.mysql_addr:
            mysql_host, _, mysql_port = self.config.mysql_addr.rpartition(":")
            try:
                bound = await self.mysql.start(mysql_host, int(mysql_port))
                self.mysql_addr = f"{self.config.published(mysql_host)}:{bound.rpartition(':')[2]}"
            except OSError as exc:
                raise ClusterError(f"cannot bind the MySQL server to {self.config.mysql_addr}: {exc}") from exc
            self.etcd.register_tidb(self.mysql_addr)
        self.gc.start()
        self.min_resolved_reporter.start()
        log.info("upstream serving", pd_addr=self.pd_addr, pd_members=self.pd_member_addrs,
                 mysql_addr=self.mysql_addr, store_addrs=self.store_addrs, control_addr=self.control_addr or None)

    async def stop(self, grace: float = 1.0) -> None:
        await self.gc.stop()
        await self.min_resolved_reporter.stop()
        if self.mysql_addr:
            self.etcd.unregister_tidb(self.mysql_addr)
            await self.mysql.stop()
            self.mysql_addr = ""
        for node in self.stores.values():
            if node.server is not None:
                await node.server.stop(grace)
                node.server = None
            if node.status is not None:
                await node.status.stop()
                node.status, node.status_addr = None, ""
        if self._control_server is not None:
            await self._control_server.stop(grace)
            self._control_server, self.control_addr = None, ""
        for front in self._pd_fronts:
            await front.stop()
        self._pd_fronts = []
        for server in self._pd_servers:
            await server.stop(grace)
        self._pd_servers = []
        log.info("upstream stopped", pd_addr=self.pd_addr)
