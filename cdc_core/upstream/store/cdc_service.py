"""The store's change feed (TiKV's CDC endpoint, ``components/cdc``): ``ChangeData.EventFeed``/``EventFeedV2``.

**A connection's features** come from the client, as TiKV sets them (``service.rs`` ``FeatureGate``): the
``Header.ticdc_version`` of the stream's first request (empty or not semver: 0.0.0) enables batched
``ResolvedTs`` from 4.0.8 and the cluster-id check from 5.3.0; ``EventFeedV2`` also reads the call's
``features`` metadata, where ``stream-multiplexing`` groups resolved ts by request id (an unknown feature fails
the call with UNIMPLEMENTED).

Per stream (a ``_Connection``) the client registers regions (``request_id``, ``region_id``,
epoch, ``checkpoint_ts``, key range). For each registration (a ``_Subscription``), in this order:

1. the checks of ``endpoint.rs`` ``on_register``: ``cluster_id_mismatch`` (clients with the check),
   ``compatibility`` (a ``kv_api`` other than TiDB needs API v2: required version 6.2.0; and, a cdcflow
   fault, a store told to require a newer client), ``server_is_busy`` "too many pending incremental scans" past
   ``scan_limit`` running scans (TiKV's ``incremental-scan-concurrency-limit``), ``region_not_found``,
   ``duplicate_request``; then the delegate's: ``epoch_not_match`` / ``not_leader``, and a store (made) busy.
   A checkpoint below the GC safe point is served like any other, as TiKV does: the history GC removed is
   simply absent, which is why clients check PD's GC safe point themselves;
2. in the same event-loop step, register the live listener (live rows are buffered) and
   snapshot the locks held in the range;
3. incremental scan (once one of the store's ``incremental-scan-concurrency`` permits is free, its reads paid for
   through the scan speed limit: ``incremental_scan``), in chunks that yield the loop: every version with ``commit_ts >
   checkpoint_ts`` as COMMITTED rows, then the snapshotted locks as PREWRITE rows, then one
   INITIALIZED row, then the buffered live rows minus those the scan already covered (same key
   and start ts) - nothing is lost or duplicated between the scan and the live phase;
4. live PREWRITE / COMMIT / ROLLBACK rows as the MVCC store reports them, a region's rows written together in one
   event: TiKV's delegate sinks the rows of one applied command batch to each downstream as one ``Event`` of many
   entries (``components/cdc/src/delegate.rs`` ``sink_data``), so a 500-row prewrite is an event, not 500. Here a
   live row joins the region's event last in the connection's queue while it is there, its rows stay under 32 KiB
   and it ends with a live row (so never across an INITIALIZED row, a resolved ts or an error: the order of the
   queue is unchanged).

Every ``min_ts_interval`` the connection computes, in one event-loop step, ``ts = TSO now`` and
for each initialized subscription ``min(ts, smallest start ts of a lock in its range)`` (never
below what it sent before), and queues them as the connection's features say (``delegate.rs``
``on_min_ts``, ``endpoint.rs`` ``emit_resolved_ts``): one ``ResolvedTs`` per (request id, ts) with
stream-multiplexing, one per ts with request id 0 for other clients from 4.0.8, and for older ones an
``Event.resolved_ts`` per region. That ts first raises the store's ``max_ts`` (async-commit and 1PC commits go above
it, ``concurrency_manager``); a 2PC commit takes its TSO commit ts in one step with its writes; and every row goes
through the same per-connection FIFO outbox as the resolved ts, so a resolved ts never precedes a commit it covers.
A 1PC write, which no lock precedes, is a live COMMITTED row with its value, as TiKV sends it.

**Messages** are cut as TiKV's ``channel.rs`` cuts them: an event's rows up to 32 KiB
(``CDC_EVENT_MAX_BYTES``), at most 64 events drained at once, a response up to 6 MB (``CDC_RESP_MAX_BYTES``),
a ``ResolvedTs`` always alone.

**Transaction heartbeats.** While a transaction holds a lock, its client refreshes the lock's TTL; TiKV
rewrites the lock, and the change feed reports that rewrite as another PREWRITE of the same key and start ts
with an empty value (the value of a large row lives in the default CF, not in the lock). Every
``txn_heartbeat_interval`` the store sends such a "fake" prewrite for every lock older than that, so that
clients meet them in ordinary runs (TiCDC's matcher must ignore them).

Region changes reach open subscriptions the way TiKV reports them: a split ends the region's
subscriptions with ``epoch_not_match`` (the current regions), a merge ends the target's with
``epoch_not_match`` and the source's with ``region_not_found``, a leader transfer ends them on the
old leader's store with ``not_leader`` (the new leader). ``stop()`` (a stopped store) and
``drop_streams()`` abort every EventFeed call of this store with UNAVAILABLE; while stopped, new
calls are refused with UNAVAILABLE. ``make_busy(seconds)`` answers new registrations with
``server_is_busy`` for that long.

**Sink memory quota.** A connection's queue holds at most ``sink_memory_quota`` bytes of live rows (TiKV's
``cdc.sink-memory-quota``): a live row that would pass it ends its region's subscription with ``congested``
(TiKV's ``SendError::Congested``), and the client re-requests the region. Scan results, errors and resolved ts
are queued regardless; bounding the scan itself is the table-size issue's.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
from prometheus_client import CollectorRegistry, Gauge

from cdc_core.codec.key import min_end
from cdc_core.codec.memcomparable import KeyDecodeError, decode_key
from cdc_core.log import get_logger
from cdc_core.proto import cdcpb_pb2, cdcpb_pb2_grpc, errorpb_pb2, kvrpcpb_pb2
from cdc_core.upstream.pd.regions import ChangeKind, RegionChange, RegionManager
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.store.incremental_scan import ScanCosts, ScanGate
from cdc_core.upstream.store.mvcc import Lock, MvccStore, Op, VersionRecord

log = get_logger("cdcflow.upstream.cdc")

Row = cdcpb_pb2.Event.Row
LogType = cdcpb_pb2.Event
SCAN_KEYS_PER_STEP = 512
EVENT_MAX_BYTES = 32 * 1024  # TiKV channel.rs CDC_EVENT_MAX_BYTES
EVENT_MAX_COUNT = 64  # CDC_EVENT_MAX_COUNT
RESP_MAX_BYTES = 6 * 1024 * 1024  # CDC_RESP_MAX_BYTES
ROW_OVERHEAD = 24  # a row's fixed fields on the wire, roughly: sizes are estimates, as TiKV's are
BUSY_BACKOFF_MS = 200
SCAN_LIMIT = 10_000  # TiKV's cdc.incremental-scan-concurrency-limit default
SINK_MEMORY_QUOTA = 512 * 1024 * 1024  # TiKV's cdc.sink-memory-quota default
STREAM_MULTIPLEXING = "stream-multiplexing"
KNOWN_FEATURES = (STREAM_MULTIPLEXING,)
_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


def parse_version(text: str) -> tuple[int, int, int, int]:
    """A client's semver as a comparable tuple; a pre-release sorts before its release; invalid: 0.0.0."""
    m = _SEMVER.match(text.strip())
    if m is None:
        return (0, 0, 0, 1)
    return (int(m[1]), int(m[2]), int(m[3]), 0 if m[4] else 1)


@dataclass(frozen=True)
class Features:
    """What a connection's client can take (TiKV ``service.rs`` ``FeatureGate::default_features``)."""

    version: tuple[int, int, int, int]
    multiplexing: bool = False

    @property
    def batch_resolved_ts(self) -> bool:
        return self.version >= (4, 0, 8, 1)

    @property
    def validate_cluster_id(self) -> bool:
        return self.version >= (5, 3, 0, 1)


def row_size(row: Row) -> int:
    return len(row.key) + len(row.value) + len(row.old_value) + ROW_OVERHEAD



def _requested_range(req: cdcpb_pb2.ChangeDataRequest) -> tuple[bytes, bytes]:
    """The raw key range a request asks for. TiCDC sends it memcomparable-encoded; TiKV observes the whole region
    when it does not decode (``components/cdc/src/service.rs`` ``handle_register``: "cdc invalid observed start key
    or end key version", then ``ObservedRange::default()``)."""
    try:
        return decode_key(req.start_key), decode_key(req.end_key)
    except KeyDecodeError:
        log.warning("request range does not decode: observing the whole region", region_id=req.region_id,
                    start_key=req.start_key.hex(), end_key=req.end_key.hex())
        return b"", b""


class _StreamAborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def _op(op: Op) -> cdcpb_pb2.Event.Row.OpType:
    return Row.PUT if op is Op.PUT else Row.DELETE


@dataclass(eq=False)
class _Subscription:
    conn: _Connection
    region_id: int
    request_id: int
    start_key: bytes
    end_key: bytes  # b"" = unbounded
    checkpoint_ts: int
    old_value: bool
    resolved_ts: int = 0
    initialized: bool = False
    pending: list[Row] = field(default_factory=list)
    locks_at_register: list[Lock] = field(default_factory=list)
    scan_task: asyncio.Task[bool] | None = None

    def covers(self, key: bytes) -> bool:
        return self.start_key <= key and (not self.end_key or key < self.end_key)

    def event(self, rows: list[Row]) -> cdcpb_pb2.Event:
        return cdcpb_pb2.Event(region_id=self.region_id, request_id=self.request_id,
                               entries=cdcpb_pb2.Event.Entries(entries=rows))

    def push_rows(self, rows: list[Row]) -> None:
        """Queue ``rows`` as events of up to ``EVENT_MAX_BYTES`` each (a larger row is an event of its own)."""
        chunk: list[Row] = []
        size = 0
        for row in rows:
            n = row_size(row)
            if chunk and size + n >= EVENT_MAX_BYTES:
                self.conn.push(self.event(chunk), size)
                chunk, size = [], 0
            chunk.append(row)
            size += n
        if chunk:
            self.conn.push(self.event(chunk), size)

    def deliver(self, row: Row, quota: int) -> bool:
        """Send a live row (buffered until INITIALIZED); False when the connection's queue is over ``quota``."""
        if not self.initialized:
            self.pending.append(row)
            return True
        n = row_size(row)
        if quota and self.conn.pending_bytes + n > quota:
            return False
        if not self.conn.append_row(self.region_id, self.request_id, row, n):
            self.conn.push(self.event([row]), n)
        return True


class _Connection:
    """One EventFeed stream: its subscriptions and its FIFO outbox."""

    ids = itertools.count(1)

    def __init__(self, multiplexing: bool = False) -> None:
        self.id = next(self.ids)
        self.subs: dict[tuple[int, int], _Subscription] = {}  # (request_id, region_id)
        # Set by the stream's first request (TiKV reads the version there too); None until then.
        self.features: Features | None = None
        self.multiplexing = multiplexing
        self.pending_bytes = 0  # what the outbox holds, by the sizes pushed
        self._outbox: collections.deque[tuple[cdcpb_pb2.Event | cdcpb_pb2.ResolvedTs, int]] = collections.deque()
        self._wakeup = asyncio.Event()
        self.closed = False
        self._abort: _StreamAborted | None = None

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        """End the stream with ``code`` at its next message (the RPC handler raises it)."""
        if self._abort is None:
            self._abort = _StreamAborted(code, details)
        self._wakeup.set()

    def push(self, item: cdcpb_pb2.Event | cdcpb_pb2.ResolvedTs, size: int = 64) -> None:
        self._outbox.append((item, size))
        self.pending_bytes += size
        self._wakeup.set()

    def append_row(self, region_id: int, request_id: int, row: Row, size: int) -> bool:
        """Add a live ``row`` to the last queued event when that is region ``region_id``'s (of ``request_id``) live
        rows and stays under ``EVENT_MAX_BYTES`` with it (TiKV's delegate: the rows of a command batch are one
        event); False when the row needs an event of its own."""
        if not self._outbox:
            return False
        last, queued = self._outbox[-1]
        if (not isinstance(last, cdcpb_pb2.Event) or last.region_id != region_id or last.request_id != request_id
                or last.WhichOneof("event") != "entries" or queued + size >= EVENT_MAX_BYTES):
            return False
        rows = last.entries.entries
        if not rows or rows[-1].type == LogType.INITIALIZED:
            return False
        rows.append(row)
        self._outbox[-1] = (last, queued + size)
        self.pending_bytes += size
        self._wakeup.set()
        return True

    async def next_message(self) -> cdcpb_pb2.ChangeDataEvent:
        """The next message: consecutive region events batched (TiKV ``EventBatcher``), or one resolved ts."""
        while not self._outbox or self._abort is not None:
            if self._abort is not None:
                raise self._abort
            self._wakeup.clear()
            await self._wakeup.wait()
        first, size = self._outbox.popleft()
        self.pending_bytes -= size
        if isinstance(first, cdcpb_pb2.ResolvedTs):
            return cdcpb_pb2.ChangeDataEvent(resolved_ts=first)
        events = [first]
        total = size
        outbox = self._outbox
        while outbox and len(events) < EVENT_MAX_COUNT:
            item, n = outbox[0]
            if not isinstance(item, cdcpb_pb2.Event) or total + n >= RESP_MAX_BYTES:
                break
            outbox.popleft()
            events.append(item)
            total += n
        self.pending_bytes -= total - size
        return cdcpb_pb2.ChangeDataEvent(events=events)


class CdcService(cdcpb_pb2_grpc.ChangeDataServicer):
    def __init__(self, store_id: int, store: MvccStore, regions: RegionManager, tso: TsoAllocator,
                 min_ts_interval: float = 0.2, *, cluster_id: int = 0, scan_limit: int = SCAN_LIMIT,
                 txn_heartbeat_interval: float = 0.0, sink_memory_quota: int = SINK_MEMORY_QUOTA,
                 scan_costs: ScanCosts | None = None) -> None:
        self.store_id = store_id
        self.store = store
        self.regions = regions
        self.tso = tso
        self.min_ts_interval = min_ts_interval
        self.cluster_id = cluster_id
        self.scan_limit = scan_limit
        self.txn_heartbeat_interval = txn_heartbeat_interval  # 0: no heartbeats
        self.sink_memory_quota = sink_memory_quota  # per connection; 0: unbounded
        # A cdcflow fault: answer clients older than this with `compatibility` (None: any client).
        self.required_version: str | None = None
        # False: answer EventFeedV2 with UNIMPLEMENTED, as a TiKV from before it did (tests of the client's fallback).
        self.serves_v2 = True
        self._scans = 0  # scan tasks pending or running (what scan_limit bounds, as TiKV's scan task counter)
        # The store's metrics (its status server's /metrics): the scans' and the captured regions', TiKV's names
        self.metrics = CollectorRegistry()
        self.scan_gate = ScanGate(scan_costs or ScanCosts(), self.metrics)
        Gauge("tikv_cdc_captured_region_total", "Total number of CDC captured regions",
              registry=self.metrics).set_function(self.captured_regions)
        self._lock_born: dict[tuple[bytes, int], float] = {}  # (key, start ts) -> when its prewrite was seen
        self._heartbeat_task: asyncio.Task[None] | None = None
        self.fake_prewrites_sent = 0
        self.congested_sent = 0
        self._by_region: dict[int, set[_Subscription]] = {}
        self._connections: set[_Connection] = set()
        self.up = True
        self._busy_until = 0.0
        self.busy_reason = ""
        store.add_observer(self)
        regions.add_observer(self._on_region_change)

    # --- store state (faults) -----------------------------------------------------------------
    def stop(self) -> int:
        """The store goes down: abort every stream with UNAVAILABLE and refuse new ones."""
        self.up = False
        return self.drop_streams(f"store {self.store_id} is stopped")

    def start(self) -> None:
        self.up = True

    def drop_streams(self, why: str = "") -> int:
        """Abort every EventFeed call of this store with UNAVAILABLE; returns how many."""
        conns = list(self._connections)
        for conn in conns:
            conn.abort(grpc.StatusCode.UNAVAILABLE, why or f"store {self.store_id} dropped the stream")
        log.info("event feed streams dropped", store_id=self.store_id, streams=len(conns), why=why)
        return len(conns)

    def make_busy(self, seconds: float, reason: str = "") -> None:
        self._busy_until = time.monotonic() + seconds
        self.busy_reason = reason or f"store {self.store_id} is busy (injected)"

    @property
    def busy(self) -> bool:
        return time.monotonic() < self._busy_until

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def subscription_count(self) -> int:
        return sum(len(g) for g in self._by_region.values())

    def captured_regions(self) -> int:
        """Regions with at least one registration now (TiKV's ``tikv_cdc_captured_region_total``)."""
        return len(self._by_region)

    # --- MVCC observer (synchronous, in commit order) -----------------------------------------
    def _subs_for(self, key: bytes) -> list[_Subscription]:
        if not self._by_region:
            return []
        region = self.regions.locate(key)
        return [s for s in self._by_region.get(region.id, ()) if s.covers(key)]

    def on_prewrite(self, lock: Lock) -> None:
        if self.txn_heartbeat_interval:
            self._lock_born.setdefault((lock.key, lock.start_ts), time.monotonic())
        for s in self._subs_for(lock.key):
            row = Row(start_ts=lock.start_ts, type=LogType.PREWRITE, op_type=_op(lock.op), key=lock.key,
                      value=lock.value or b"")
            if s.old_value and lock.old_value is not None:
                row.old_value = lock.old_value
            self._deliver(s, row)

    def on_commit(self, rec: VersionRecord) -> None:
        if rec.one_pc:
            # No prewrite came before a 1PC write: TiKV sends it as a COMMITTED row, value and old value included
            # (delegate.rs, ``rows.is_one_pc``).
            for s in self._subs_for(rec.key):
                row = Row(start_ts=rec.start_ts, commit_ts=rec.commit_ts, type=LogType.COMMITTED,
                          op_type=_op(rec.op), key=rec.key, value=rec.value or b"")
                if s.old_value and rec.old_value is not None:
                    row.old_value = rec.old_value
                self._deliver(s, row)
            return
        self._lock_born.pop((rec.key, rec.start_ts), None)
        for s in self._subs_for(rec.key):
            self._deliver(s, Row(start_ts=rec.start_ts, commit_ts=rec.commit_ts, type=LogType.COMMIT,
                                 op_type=_op(rec.op), key=rec.key))

    def on_rollback(self, lock: Lock) -> None:
        self._lock_born.pop((lock.key, lock.start_ts), None)
        for s in self._subs_for(lock.key):
            self._deliver(s, Row(start_ts=lock.start_ts, type=LogType.ROLLBACK, op_type=_op(lock.op), key=lock.key))

    def _deliver(self, s: _Subscription, row: Row) -> None:
        if s.deliver(row, self.sink_memory_quota) or s.conn.closed:
            return
        # The connection's queue is past the sink memory quota (the client reads too slowly): TiKV stops the
        # region's downstream with `congested` (delegate.rs / errors.rs, SendError::Congested) rather than
        # queue without bound; the client re-requests the region from its resolved ts.
        self._drop(s)
        s.conn.push(cdcpb_pb2.Event(region_id=s.region_id, request_id=s.request_id,
                                    error=cdcpb_pb2.Error(congested=cdcpb_pb2.Congested(region_id=s.region_id))))
        self.congested_sent += 1
        log.info("region downstream congested", store_id=self.store_id, region_id=s.region_id,
                 request_id=s.request_id, pending_bytes=s.conn.pending_bytes)

    def heartbeat(self) -> int:
        """Send the fake prewrite of every lock held longer than the heartbeat interval; returns how many."""
        now = time.monotonic()
        sent = 0
        for (key, start_ts), born in list(self._lock_born.items()):
            if now - born < self.txn_heartbeat_interval:
                continue
            lock = self.store.lock_of(key)
            if lock is None or lock.start_ts != start_ts:
                self._lock_born.pop((key, start_ts), None)
                continue
            for s in self._subs_for(key):
                row = Row(start_ts=start_ts, type=LogType.PREWRITE, op_type=_op(lock.op), key=key)
                if s.old_value and lock.old_value is not None:
                    row.old_value = lock.old_value
                self._deliver(s, row)
                sent += 1
        self.fake_prewrites_sent += sent
        return sent

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.txn_heartbeat_interval)
            if self._connections:
                self.heartbeat()

    def _end(self, region_id: int, err: cdcpb_pb2.Error, what: str) -> None:
        """End every subscription on ``region_id`` with ``err`` (the client re-subscribes)."""
        for s in self._by_region.pop(region_id, set()):
            self._drop(s)
            s.conn.push(cdcpb_pb2.Event(region_id=s.region_id, request_id=s.request_id, error=err))
            log.info("subscription ended by a region change", change=what, store_id=self.store_id,
                     region_id=region_id, request_id=s.request_id)

    def _on_region_change(self, ch: RegionChange) -> None:
        if not self._by_region:
            return
        if ch.kind is ChangeKind.SPLIT:
            old = ch.before[0]
            self._end(old.id, cdcpb_pb2.Error(epoch_not_match=errorpb_pb2.EpochNotMatch(
                current_regions=[p.to_pb() for p in ch.after])), "split")
        elif ch.kind is ChangeKind.MERGE:
            source, target = ch.before
            [grown] = ch.after
            self._end(source.id, cdcpb_pb2.Error(region_not_found=errorpb_pb2.RegionNotFound(region_id=source.id)),
                      "merged away")
            self._end(target.id, cdcpb_pb2.Error(epoch_not_match=errorpb_pb2.EpochNotMatch(
                current_regions=[grown.to_pb()])), "merge")
        elif ch.kind is ChangeKind.LEADER:
            [new] = ch.after
            if new.leader_store_id != self.store_id:
                self._end(new.id, cdcpb_pb2.Error(not_leader=errorpb_pb2.NotLeader(
                    region_id=new.id, leader=new.leader_pb())), "leader transferred")

    # --- subscriptions ------------------------------------------------------------------------
    def _drop(self, s: _Subscription) -> None:
        s.conn.subs.pop((s.request_id, s.region_id), None)
        group = self._by_region.get(s.region_id)
        if group is not None:
            group.discard(s)
            if not group:
                del self._by_region[s.region_id]
        if s.scan_task is not None and not s.scan_task.done():
            s.scan_task.cancel()

    @staticmethod
    def _error(conn: _Connection, req: cdcpb_pb2.ChangeDataRequest, err: cdcpb_pb2.Error) -> None:
        conn.push(cdcpb_pb2.Event(region_id=req.region_id, request_id=req.request_id, error=err))

    def _register(self, conn: _Connection, req: cdcpb_pb2.ChangeDataRequest) -> None:
        features = conn.features
        assert features is not None
        if features.validate_cluster_id and req.header.cluster_id != self.cluster_id:
            self._error(conn, req, cdcpb_pb2.Error(cluster_id_mismatch=cdcpb_pb2.ClusterIDMismatch(
                current=self.cluster_id, request=req.header.cluster_id)))
            return
        if req.kv_api != cdcpb_pb2.ChangeDataRequest.TiDB:
            # A store on API v1 captures TiDB's data only (endpoint.rs `validate_kv_api`).
            self._error(conn, req, cdcpb_pb2.Error(compatibility=cdcpb_pb2.Compatibility(required_version="6.2.0")))
            return
        if self.required_version is not None and features.version < parse_version(self.required_version):
            self._error(conn, req, cdcpb_pb2.Error(compatibility=cdcpb_pb2.Compatibility(
                required_version=self.required_version)))
            return
        if self._scans >= self.scan_limit:
            self._error(conn, req, cdcpb_pb2.Error(server_is_busy=errorpb_pb2.ServerIsBusy(
                reason="too many pending incremental scans")))
            return
        region = self.regions.get(req.region_id)
        if region is None:
            self._error(conn, req, cdcpb_pb2.Error(
                region_not_found=errorpb_pb2.RegionNotFound(region_id=req.region_id)))
            return
        req_start, req_end = _requested_range(req)
        ep = req.region_epoch
        if ep.version != region.version or ep.conf_ver != region.conf_ver:
            current = self.regions.scan(region.start_key, region.end_key) or [region]
            if req_start or req_end:
                current = self.regions.scan(req_start, req_end) or current
            self._error(conn, req, cdcpb_pb2.Error(
                epoch_not_match=errorpb_pb2.EpochNotMatch(current_regions=[r.to_pb() for r in current])))
            return
        if region.leader_store_id != self.store_id:
            self._error(conn, req, cdcpb_pb2.Error(not_leader=errorpb_pb2.NotLeader(
                region_id=region.id, leader=region.leader_pb())))
            return
        if (req.request_id, req.region_id) in conn.subs:
            self._error(conn, req, cdcpb_pb2.Error(
                duplicate_request=cdcpb_pb2.DuplicateRequest(region_id=req.region_id)))
            return
        if self.busy:
            self._error(conn, req, cdcpb_pb2.Error(server_is_busy=errorpb_pb2.ServerIsBusy(
                reason=self.busy_reason, backoff_ms=BUSY_BACKOFF_MS)))
            return
        start = max(region.start_key, req_start)
        end = min_end(region.end_key, req_end)
        s = _Subscription(conn=conn, region_id=region.id, request_id=req.request_id, start_key=start, end_key=end,
                          checkpoint_ts=req.checkpoint_ts, old_value=req.extra_op == kvrpcpb_pb2.ReadOldValue,
                          resolved_ts=req.checkpoint_ts)
        # Listener first, lock snapshot in the same step: no change can fall between them.
        conn.subs[(s.request_id, s.region_id)] = s
        self._by_region.setdefault(region.id, set()).add(s)
        s.locks_at_register = self.store.locks_in(start, end)
        self._scans += 1
        self.scan_gate.spawned()
        s.scan_task = asyncio.create_task(self._scan(s), name=f"cdc-scan-{region.id}-{req.request_id}")
        s.scan_task.add_done_callback(self._scan_done)
        log.info("region registered", conn=conn.id, region_id=region.id, request_id=req.request_id,
                 checkpoint_ts=req.checkpoint_ts)

    def _deregister(self, conn: _Connection, req: cdcpb_pb2.ChangeDataRequest) -> None:
        for (rid, region_id), s in list(conn.subs.items()):
            if rid == req.request_id and (not req.region_id or region_id == req.region_id):
                self._drop(s)

    def _scan_done(self, task: asyncio.Task[bool]) -> None:
        self._scans -= 1  # a callback, not a finally: a scan cancelled before it ran counts too
        self.scan_gate.ended(ok=not task.cancelled() and task.result())

    async def _scan(self, s: _Subscription) -> bool:
        """The registration's incremental scan; False when it failed (the region got ``server_is_busy``)."""
        async with self.scan_gate.permit():
            return await self._scan_permitted(s)

    async def _scan_permitted(self, s: _Subscription) -> bool:
        gate = self.scan_gate
        try:
            rows: list[Row] = []
            covered: set[tuple[bytes, int]] = set()
            cursor: bytes | None = None
            _keys, region_bytes = self.store.approximate_range_size(s.start_key, s.end_key)
            newer = 0
            while True:
                records, cursor = self.store.versions_after(
                    s.start_key, s.end_key, s.checkpoint_ts, from_key=cursor, key_limit=SCAN_KEYS_PER_STEP)
                step = 0
                for r in records:
                    row = Row(start_ts=r.start_ts, commit_ts=r.commit_ts, type=LogType.COMMITTED,
                              op_type=_op(r.op), key=r.key, value=r.value or b"")
                    if s.old_value and r.old_value is not None:
                        row.old_value = r.old_value
                    rows.append(row)
                    covered.add((r.key, r.start_ts))
                    step += len(r.key) + 8 + len(r.value or b"")
                newer += step
                await gate.charge(step)
                if cursor is None:
                    break
                await asyncio.sleep(0)
            # Without the ts filter TiKV reads the whole range, not only the versions it sends: pay for the rest.
            await gate.charge(gate.disk_read(region_bytes, newer) - newer)
            # From here on, one step: emit the scan, INITIALIZED, then the buffered live rows.
            for lk in s.locks_at_register:
                if (lk.key, lk.start_ts) in covered:
                    continue
                row = Row(start_ts=lk.start_ts, type=LogType.PREWRITE, op_type=_op(lk.op), key=lk.key,
                          value=lk.value or b"")
                if s.old_value and lk.old_value is not None:
                    row.old_value = lk.old_value
                rows.append(row)
            rows.append(Row(type=LogType.INITIALIZED))
            rows.extend(r for r in s.pending if (r.key, r.start_ts) not in covered)
            s.pending = []
            s.locks_at_register = []
            s.push_rows(rows)
            s.initialized = True
            log.info("region initialized", region_id=s.region_id, request_id=s.request_id, scanned=len(rows) - 1)
            return True
        except asyncio.CancelledError:
            raise
        except Exception:
            log.error("incremental scan failed", region_id=s.region_id, exc_info=True)
            self._drop(s)
            s.conn.push(cdcpb_pb2.Event(region_id=s.region_id, request_id=s.request_id, error=cdcpb_pb2.Error(
                server_is_busy=errorpb_pb2.ServerIsBusy(reason="incremental scan failed", backoff_ms=1000))))
            return False

    # --- resolved ts --------------------------------------------------------------------------
    def resolved_batches(self, conn: _Connection) -> list[cdcpb_pb2.ResolvedTs | cdcpb_pb2.Event]:
        """Compute and record the resolved ts of every initialized subscription (one step), in the form the
        connection's client takes: grouped by (request id, ts) with stream-multiplexing, by ts (request id 0)
        for clients from 4.0.8, one ``Event.resolved_ts`` per region for older ones."""
        subs = [s for s in conn.subs.values() if s.initialized]
        if not subs or conn.features is None:
            return []
        now = self.tso.next()
        # Before any lock is read: no async-commit or 1PC transaction may commit at or below the ts about to be
        # published (endpoint.rs: ``cm.update_max_ts(min_ts)`` before the resolvers are asked).
        self.store.update_max_ts(now)
        batch = conn.features.batch_resolved_ts
        groups: dict[tuple[int, int], list[int]] = {}
        singles: list[cdcpb_pb2.ResolvedTs | cdcpb_pb2.Event] = []
        for s in subs:
            lock_ts = self.store.min_lock_ts(s.start_key, s.end_key)
            ts = now if lock_ts is None else min(now, lock_ts)
            ts = max(ts, s.resolved_ts)
            s.resolved_ts = ts
            if not batch:
                singles.append(cdcpb_pb2.Event(region_id=s.region_id, request_id=s.request_id, resolved_ts=ts))
            else:
                groups.setdefault((s.request_id if conn.multiplexing else 0, ts), []).append(s.region_id)
        if not batch:
            return singles
        return [
            cdcpb_pb2.ResolvedTs(regions=sorted(r), ts=ts, request_id=rid) for (rid, ts), r in sorted(groups.items())
        ]

    async def _advance(self, conn: _Connection) -> None:
        while True:
            await asyncio.sleep(self.min_ts_interval)
            for item in self.resolved_batches(conn):
                conn.push(item)

    # --- the RPC ------------------------------------------------------------------------------
    async def _read(self, conn: _Connection, requests: AsyncIterator[cdcpb_pb2.ChangeDataRequest]) -> None:
        async for req in requests:
            if conn.features is None:
                # TiKV takes the client's version from the stream's first request only (service.rs).
                conn.features = Features(parse_version(req.header.ticdc_version), conn.multiplexing)
                if conn.features.version < (4, 0, 8, 1):
                    log.warning("empty, invalid or old TiCDC version: per-region resolved ts", conn=conn.id,
                                version=req.header.ticdc_version)
            kind = req.WhichOneof("request")
            if kind == "deregister":
                self._deregister(conn, req)
            else:  # register (also the default when a client leaves the oneof unset, as old TiCDC does)
                self._register(conn, req)

    async def EventFeed(
        self, request_iterator: AsyncIterator[cdcpb_pb2.ChangeDataRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[cdcpb_pb2.ChangeDataEvent]:
        async for msg in self._serve(request_iterator, context, multiplexing=False):
            yield msg

    async def EventFeedV2(
        self, request_iterator: AsyncIterator[cdcpb_pb2.ChangeDataRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[cdcpb_pb2.ChangeDataEvent]:
        if not self.serves_v2:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        # The requested features come as call metadata, `features: a,b` (service.rs `EventFeedHeaders`).
        features: list[str] = []
        for key, value in context.invocation_metadata() or ():
            if key == "features":
                text = value.decode() if isinstance(value, bytes) else value
                features += [f.strip() for f in text.split(",") if f.strip()]
        unknown = [f for f in features if f not in KNOWN_FEATURES]
        if unknown:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"unknown features: {unknown}")
        async for msg in self._serve(request_iterator, context, multiplexing=STREAM_MULTIPLEXING in features):
            yield msg

    async def _serve(
        self, request_iterator: AsyncIterator[cdcpb_pb2.ChangeDataRequest], context: grpc.aio.ServicerContext,
        *, multiplexing: bool,
    ) -> AsyncIterator[cdcpb_pb2.ChangeDataEvent]:
        if not self.up:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"store {self.store_id} is stopped")
        conn = _Connection(multiplexing)
        self._connections.add(conn)
        if self.txn_heartbeat_interval and (self._heartbeat_task is None or self._heartbeat_task.done()):
            self._heartbeat_task = asyncio.create_task(self._heartbeats(), name=f"cdc-heartbeat-{self.store_id}")
        reader = asyncio.create_task(self._read(conn, request_iterator), name=f"cdc-read-{conn.id}")
        advancer = asyncio.create_task(self._advance(conn), name=f"cdc-resolved-{conn.id}")
        log.info("event feed opened", conn=conn.id, store_id=self.store_id, peer=context.peer())
        msg_task: asyncio.Future[cdcpb_pb2.ChangeDataEvent] | None = None
        aborted: _StreamAborted | None = None
        try:
            while True:
                msg_task = asyncio.ensure_future(conn.next_message())
                done, _ = await asyncio.wait({msg_task, reader}, return_when=asyncio.FIRST_COMPLETED)
                if msg_task in done:
                    yield msg_task.result()
                    continue
                msg_task.cancel()
                exc = reader.exception() if not reader.cancelled() else None
                if exc is not None:
                    log.info("event feed request stream failed", conn=conn.id, error=str(exc))
                    return
                # The client half-closed: keep serving what it registered until it cancels.
                while True:
                    yield await conn.next_message()
        except _StreamAborted as exc:
            aborted = exc
        finally:
            conn.closed = True
            # The stream can be closed while we wait for the next message: that wait goes too.
            for t in (reader, advancer, msg_task):
                if t is not None:
                    t.cancel()
            for s in list(conn.subs.values()):
                self._drop(s)
            self._connections.discard(conn)
            if not self._connections and self._heartbeat_task is not None:
                self._heartbeat_task.cancel()  # no stream to send to; the next one starts it again
                self._heartbeat_task = None
            log.info("event feed closed", conn=conn.id, store_id=self.store_id,
                     aborted=aborted.details if aborted else "")
        if aborted is not None:  # outside the finally: abort raises, and the subscriptions are gone
            await context.abort(aborted.code, aborted.details)

