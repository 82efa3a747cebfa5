"""Fault injection on a running cluster: region operations, PD leader moves, store outages, held locks, busy
stores, GC.

``FaultInjector`` is the one implementation behind both the admin gRPC service (``cdcflow
upstream fault ...``) and tests (``EmbeddedCluster.faults``). Every method is synchronous and must
run on the cluster's event loop (one step: atomic with respect to the cluster); the region
operations reach open feeds through the region observers (epoch_not_match, region_not_found,
not_leader), store operations through the stores' change-feed services (UNAVAILABLE,
server_is_busy, compatibility, cluster_id_mismatch). Failures raise ``FaultError`` with a kind the admin
service maps to a status code.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from cdc_core.codec import key as keycodec
from cdc_core.errors import EmbeddedUpstreamError
from cdc_core.log import get_logger
from cdc_core.upstream.pd.pd_members import PdMembers
from cdc_core.upstream.pd.regions import Region, RegionError, RegionManager, handle_split_keys
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.sql.ddl.catalog import Catalog
from cdc_core.upstream.store.gc_worker import GcWorker
from cdc_core.upstream.store.mvcc import GcStats, Mutation, MvccError, MvccStore, Op
from cdc_core.upstream.store.store_node import StoreNode

log = get_logger("cdcflow.upstream.faults")


class FaultKind(enum.Enum):
    INVALID = "invalid"
    NOT_FOUND = "not_found"
    PRECONDITION = "precondition"


class FaultError(EmbeddedUpstreamError):
    def __init__(self, message: str, kind: FaultKind = FaultKind.INVALID) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


@dataclass(frozen=True)
class HeldLock:
    start_ts: int
    keys: tuple[bytes, ...]


class FaultTarget(Protocol):
    """What the injector acts on: the parts of ``cluster.Cluster`` it reaches (a protocol, so that this module does
    not import the cluster that creates it)."""

    catalog: Catalog
    gc: GcWorker
    pd_members: PdMembers
    regions: RegionManager
    store: MvccStore
    stores: dict[int, StoreNode]
    tso: TsoAllocator

    @property
    def pd_leader_addr(self) -> str: ...


class FaultInjector:
    def __init__(self, cluster: FaultTarget) -> None:
        self.cluster = cluster
        self._held: dict[int, HeldLock] = {}

    # --- lookups ------------------------------------------------------------------------------
    def table_id(self, db: str, table: str) -> int:
        info = self.cluster.catalog.table(db, table)
        if info is None:
            raise FaultError(f"table {db}.{table} does not exist", FaultKind.NOT_FOUND)
        return int(info.id)

    def table_regions(self, db: str, table: str) -> list[Region]:
        """The regions of the table's row span ``[t{id}_r, t{id}_s)``."""
        start, end = keycodec.table_span(self.table_id(db, table))
        return self.cluster.regions.scan(start, end)

    def _region(self, region_id: int) -> Region:
        r = self.cluster.regions.get(region_id)
        if r is None:
            raise FaultError(f"region {region_id} does not exist", FaultKind.NOT_FOUND)
        return r

    def _store(self, store_id: int) -> None:
        if store_id not in self.cluster.stores:
            raise FaultError(f"store {store_id} does not exist (stores: {sorted(self.cluster.stores)})",
                             FaultKind.NOT_FOUND)

    # --- regions ------------------------------------------------------------------------------
    def split_region(self, region_id: int, keys: list[bytes]) -> list[Region]:
        """Split a region at keys inside it (in one batch); returns the parts."""
        r = self._region(region_id)
        if not keys:
            raise FaultError("give at least one split key")
        outside = [k.hex() for k in keys if not r.contains(k) or k == r.start_key]
        if outside:
            raise FaultError(f"split keys {outside} are not strictly inside region {region_id}")
        self.cluster.regions.split(keys)
        return self.cluster.regions.scan(r.start_key, r.end_key)

    def split_table(self, db: str, table: str, *, handles: list[int] | None = None, lo: int = 0, hi: int = 0,
                    regions: int = 0) -> list[Region]:
        """Split a table's rows at ``handles``, or evenly ``BETWEEN lo AND hi REGIONS regions``."""
        tid = self.table_id(db, table)
        if handles:
            keys = [keycodec.row_key(tid, h) for h in handles]
        elif regions:
            try:
                keys = handle_split_keys(tid, lo, hi, regions)
            except ValueError as exc:
                raise FaultError(str(exc)) from exc
        else:
            raise FaultError("give handles, or lo/hi/regions")
        self.cluster.regions.split(keys)
        return self.table_regions(db, table)

    def merge(self, region_id: int, target_id: int | None = None) -> Region:
        try:
            return self.cluster.regions.merge(region_id, target_id)
        except RegionError as exc:
            kind = FaultKind.NOT_FOUND if "does not exist" in str(exc) else FaultKind.PRECONDITION
            raise FaultError(str(exc), kind) from exc

    def merge_table(self, db: str, table: str) -> list[Region]:
        """Merge every row region of a table into one (the last region of its span absorbs the rest)."""
        start, end = keycodec.table_span(self.table_id(db, table))
        while True:
            inside = [r for r in self.cluster.regions.scan(start, end) if r.start_key >= start
                      and r.end_key and r.end_key <= end]
            if len(inside) < 2:
                return self.table_regions(db, table)
            self.merge(inside[0].id, inside[1].id)

    def transfer_leader(self, region_id: int, store_id: int) -> Region:
        self._region(region_id)
        self._store(store_id)
        return self.cluster.regions.transfer_leader(region_id, store_id)

    def transfer_table_leaders(self, db: str, table: str, store_id: int) -> list[Region]:
        self._store(store_id)
        return [self.cluster.regions.transfer_leader(r.id, store_id) for r in self.table_regions(db, table)]

    # --- PD ---------------------------------------------------------------------------------------
    def transfer_pd_leader(self, member_id: int) -> str:
        """Make PD member ``member_id`` the leader; the old leader answers "not leader" from the next call on.
        Member 0: no leader (as during an election: every member refuses, ``GetMembers`` names none) until the
        next transfer. Returns the new leader's address ("" for none)."""
        try:
            self.cluster.pd_members.transfer(member_id)
        except KeyError as exc:
            raise FaultError(str(exc.args[0]), FaultKind.NOT_FOUND) from exc
        log.info("PD leader transferred", member_id=member_id, address=self.cluster.pd_leader_addr)
        return self.cluster.pd_leader_addr

    # --- stores -------------------------------------------------------------------------------
    def stop_store(self, store_id: int, *, move_leaders: bool = False) -> tuple[int, int]:
        """Stop a store: its streams break (UNAVAILABLE), new ones are refused until it starts again.

        With ``move_leaders`` its regions' leaders move round-robin to the live stores (as an
        election after the store went down would); returns ``(streams dropped, leaders moved)``.
        """
        self._store(store_id)
        node = self.cluster.stores[store_id]
        dropped = node.cdc.stop()
        moved = 0
        if move_leaders:
            live = [n.id for n in self.cluster.stores.values() if n.up]
            if not live:
                raise FaultError("no live store to move the leaders to", FaultKind.PRECONDITION)
            led = [r for r in self.cluster.regions.all() if r.leader_store_id == store_id]
            for i, r in enumerate(led):
                self.cluster.regions.transfer_leader(r.id, live[i % len(live)])
            moved = len(led)
        log.info("store stopped", store_id=store_id, streams_dropped=dropped, leaders_moved=moved)
        return dropped, moved

    def start_store(self, store_id: int) -> None:
        self._store(store_id)
        self.cluster.stores[store_id].cdc.start()
        log.info("store started", store_id=store_id)

    def drop_streams(self, store_id: int = 0) -> int:
        """Break every EventFeed stream of a store (0: of every store) with UNAVAILABLE."""
        if store_id:
            self._store(store_id)
        nodes = [self.cluster.stores[store_id]] if store_id else list(self.cluster.stores.values())
        return sum(n.cdc.drop_streams("streams dropped (injected fault)") for n in nodes)

    def busy(self, store_id: int, seconds: float) -> None:
        """The store answers new region requests with server_is_busy for ``seconds``."""
        self._store(store_id)
        if seconds < 0:
            raise FaultError("the busy duration must be >= 0")
        self.cluster.stores[store_id].cdc.make_busy(seconds)

    def require_client_version(self, store_id: int, version: str | None) -> None:
        """The store answers region requests of clients older than ``version`` with ``compatibility`` (None: any
        client), as a TiKV newer than its clients does."""
        self._store(store_id)
        self.cluster.stores[store_id].cdc.required_version = version

    def store_cluster_id(self, store_id: int, cluster_id: int) -> None:
        """The store believes it belongs to cluster ``cluster_id`` (a PD pointing at another cluster's TiKV)."""
        self._store(store_id)
        self.cluster.stores[store_id].cdc.cluster_id = cluster_id

    # --- locks --------------------------------------------------------------------------------
    def hold_lock(self, db: str, table: str, *, handles: list[int] | None = None, count: int = 1) -> HeldLock:
        """Prewrite rows of a table and keep the locks (a transaction stuck between its two phases).

        Each locked row is rewritten with its current value, so committing changes nothing but
        the versions; the locks hold the resolved ts of their regions back until released.
        """
        tid = self.table_id(db, table)
        store, tso = self.cluster.store, self.cluster.tso
        now = tso.next()
        if handles:
            rows = []
            for h in handles:
                key = keycodec.row_key(tid, h)
                value = store.get(key, now)
                if value is None:
                    raise FaultError(f"table {db}.{table} has no row with handle {h}", FaultKind.NOT_FOUND)
                rows.append((key, value))
        else:
            start, end = keycodec.table_span(tid)
            rows = store.scan(start, end, now, limit=max(count, 1))
            if not rows:
                raise FaultError(f"table {db}.{table} has no rows to lock", FaultKind.PRECONDITION)
        start_ts = tso.next()
        try:
            store.prewrite([Mutation(k, Op.PUT, v) for k, v in rows], rows[0][0], start_ts)
        except MvccError as exc:
            raise FaultError(f"cannot lock: {exc}", FaultKind.PRECONDITION) from exc
        held = HeldLock(start_ts, tuple(k for k, _ in rows))
        self._held[start_ts] = held
        log.info("lock held", table=f"{db}.{table}", start_ts=start_ts, keys=len(rows))
        return held

    def held_locks(self) -> list[HeldLock]:
        return list(self._held.values())

    def release_lock(self, start_ts: int, *, commit: bool = True) -> int:
        """Commit (returns the commit ts) or roll back (returns 0) a held lock."""
        held = self._held.pop(start_ts, None)
        if held is None:
            raise FaultError(f"no held lock with start ts {start_ts} (held: {sorted(self._held)})",
                             FaultKind.NOT_FOUND)
        if not commit:
            self.cluster.store.rollback(held.keys, start_ts)
            return 0
        commit_ts = self.cluster.tso.next()
        self.cluster.store.commit(held.keys, start_ts, commit_ts)
        return commit_ts

    # --- corrupt data ---------------------------------------------------------------------------
    def write_raw_value(self, db: str, table: str, handle: int, value: bytes) -> int:
        """Commit ``value`` as the stored bytes of a row, bypassing the row codec (a corrupt value on a store, or
        a writer's bug); returns the commit ts. The change feed delivers it like any other write."""
        key = keycodec.row_key(self.table_id(db, table), handle)
        store, tso = self.cluster.store, self.cluster.tso
        start_ts = tso.next()
        try:
            store.prewrite([Mutation(key, Op.PUT, value)], key, start_ts)
        except MvccError as exc:
            raise FaultError(f"cannot write: {exc}", FaultKind.PRECONDITION) from exc
        commit_ts = tso.next()
        store.commit([key], start_ts, commit_ts)
        log.info("raw value written", table=f"{db}.{table}", handle=handle, bytes=len(value), commit_ts=commit_ts)
        return commit_ts

    # --- GC -----------------------------------------------------------------------------------
    def gc(self) -> GcStats:
        return self.cluster.gc.run_once()
