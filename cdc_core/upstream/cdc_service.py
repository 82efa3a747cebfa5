"""The store's change feed (TiKV's CDC endpoint): the ``ChangeData.EventFeed`` bidi stream.

Per stream (a ``_Connection``) the client registers regions (``request_id``, ``region_id``,
epoch, ``checkpoint_ts``, key range). For each registration (a ``_Subscription``), in this order:

1. validate the region and its epoch (``region_not_found`` / ``epoch_not_match`` /
   ``not_leader`` / ``duplicate_request`` errors otherwise), that the store is not (made) busy
   (``server_is_busy``) and that ``checkpoint_ts`` is not below the GC safe point
   (``gc_safe_point_passed``: the versions the scan needs may be gone);
2. in the same event-loop step, register the live listener (live rows are buffered) and
   snapshot the locks held in the range;
3. incremental scan, in chunks that yield the loop: every version with ``commit_ts >
   checkpoint_ts`` as COMMITTED rows, then the snapshotted locks as PREWRITE rows, then one
   INITIALIZED row, then the buffered live rows minus those the scan already covered (same key
   and start ts) - nothing is lost or duplicated between the scan and the live phase;
4. live PREWRITE / COMMIT / ROLLBACK rows as the MVCC store reports them.

Every ``min_ts_interval`` the connection computes, in one event-loop step, ``ts = TSO now`` and
for each initialized subscription ``min(ts, smallest start ts of a lock in its range)`` (never
below what it sent before), and queues one ``ResolvedTs`` message per (request id, ts) group. The
MVCC store commits with a TSO commit ts in one step too, and every row goes through the same
per-connection FIFO outbox as the resolved ts, so a resolved ts never precedes a commit it covers.

Region changes reach open subscriptions the way TiKV reports them: a split ends the region's
subscriptions with ``epoch_not_match`` (the current regions), a merge ends the target's with
``epoch_not_match`` and the source's with ``region_not_found``, a leader transfer ends them on the
old leader's store with ``not_leader`` (the new leader). ``stop()`` (a stopped store) and
``drop_streams()`` abort every EventFeed call of this store with UNAVAILABLE; while stopped, new
calls are refused with UNAVAILABLE. ``make_busy(seconds)`` answers new registrations with
``server_is_busy`` for that long.

The outbox is unbounded for now; the memory-quota issue bounds it (TiKV answers
``server_is_busy`` when its CDC memory quota is exhausted).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from cdc_core.codec.key import min_end
from cdc_core.codec.memcomparable import KeyDecodeError, decode_key
from cdc_core.log import get_logger
from cdc_core.proto import cdcpb_pb2, cdcpb_pb2_grpc
from cdc_core.upstream.mvcc import Lock, MvccStore, Op, VersionRecord
from cdc_core.upstream.regions import ChangeKind, RegionChange, RegionManager
from cdc_core.upstream.tso import TsoAllocator

log = get_logger("cdcflow.upstream.cdc")

Row = cdcpb_pb2.Event.Row
LogType = cdcpb_pb2.Event
SCAN_KEYS_PER_STEP = 512
ROWS_PER_EVENT = 256
MESSAGES_PER_BATCH = 64
BUSY_BACKOFF_MS = 200



def _requested_range(req: cdcpb_pb2.ChangeDataRequest) -> tuple[bytes, bytes]:
    """The raw key range a request asks for. TiCDC sends it memcomparable-encoded; TiKV observes the whole region
    when it does not decode (``components/cdc`` ``Delegate``: the range falls back to the region's)."""
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
    scan_task: asyncio.Task[None] | None = None

    def covers(self, key: bytes) -> bool:
        return self.start_key <= key and (not self.end_key or key < self.end_key)

    def event(self, rows: list[Row]) -> cdcpb_pb2.Event:
        return cdcpb_pb2.Event(region_id=self.region_id, request_id=self.request_id,
                               entries=cdcpb_pb2.Event.Entries(entries=rows))

    def deliver(self, row: Row) -> None:
        if self.initialized:
            self.conn.push(self.event([row]))
        else:
            self.pending.append(row)


class _Connection:
    """One EventFeed stream: its subscriptions and its FIFO outbox."""

    ids = itertools.count(1)

    def __init__(self) -> None:
        self.id = next(self.ids)
        self.subs: dict[tuple[int, int], _Subscription] = {}  # (request_id, region_id)
        self._outbox: collections.deque[cdcpb_pb2.Event | cdcpb_pb2.ResolvedTs] = collections.deque()
        self._wakeup = asyncio.Event()
        self.closed = False
        self._abort: _StreamAborted | None = None

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        """End the stream with ``code`` at its next message (the RPC handler raises it)."""
        if self._abort is None:
            self._abort = _StreamAborted(code, details)
        self._wakeup.set()

    def push(self, item: cdcpb_pb2.Event | cdcpb_pb2.ResolvedTs) -> None:
        self._outbox.append(item)
        self._wakeup.set()

    async def next_message(self) -> cdcpb_pb2.ChangeDataEvent:
        """The next message: consecutive region events batched, or one resolved-ts batch."""
        while not self._outbox or self._abort is not None:
            if self._abort is not None:
                raise self._abort
            self._wakeup.clear()
            await self._wakeup.wait()
        first = self._outbox.popleft()
        if isinstance(first, cdcpb_pb2.ResolvedTs):
            return cdcpb_pb2.ChangeDataEvent(resolved_ts=first)
        events = [first]
        while self._outbox and isinstance(self._outbox[0], cdcpb_pb2.Event) and len(events) < MESSAGES_PER_BATCH:
            events.append(self._outbox.popleft())  # type: ignore[arg-type]
        return cdcpb_pb2.ChangeDataEvent(events=events)


class CdcService(cdcpb_pb2_grpc.ChangeDataServicer):
    def __init__(self, store_id: int, store: MvccStore, regions: RegionManager, tso: TsoAllocator,
                 min_ts_interval: float = 0.2) -> None:
        self.store_id = store_id
        self.store = store
        self.regions = regions
        self.tso = tso
        self.min_ts_interval = min_ts_interval
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

    # --- MVCC observer (synchronous, in commit order) -----------------------------------------
    def _subs_for(self, key: bytes) -> list[_Subscription]:
        if not self._by_region:
            return []
        region = self.regions.locate(key)
        return [s for s in self._by_region.get(region.id, ()) if s.covers(key)]

    def on_prewrite(self, lock: Lock) -> None:
        for s in self._subs_for(lock.key):
            row = Row(start_ts=lock.start_ts, type=LogType.PREWRITE, op_type=_op(lock.op), key=lock.key,
                      value=lock.value or b"")
            if s.old_value and lock.old_value is not None:
                row.old_value = lock.old_value
            s.deliver(row)

    def on_commit(self, rec: VersionRecord) -> None:
        for s in self._subs_for(rec.key):
            s.deliver(Row(start_ts=rec.start_ts, commit_ts=rec.commit_ts, type=LogType.COMMIT,
                          op_type=_op(rec.op), key=rec.key))

    def on_rollback(self, lock: Lock) -> None:
        for s in self._subs_for(lock.key):
            s.deliver(Row(start_ts=lock.start_ts, type=LogType.ROLLBACK, op_type=_op(lock.op), key=lock.key))

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
            self._end(old.id, cdcpb_pb2.Error(epoch_not_match=cdcpb_pb2.EpochNotMatch(
                current_regions=[p.to_pb() for p in ch.after])), "split")
        elif ch.kind is ChangeKind.MERGE:
            source, target = ch.before
            [grown] = ch.after
            self._end(source.id, cdcpb_pb2.Error(region_not_found=cdcpb_pb2.RegionNotFound(region_id=source.id)),
                      "merged away")
            self._end(target.id, cdcpb_pb2.Error(epoch_not_match=cdcpb_pb2.EpochNotMatch(
                current_regions=[grown.to_pb()])), "merge")
        elif ch.kind is ChangeKind.LEADER:
            [new] = ch.after
            if new.leader_store_id != self.store_id:
                self._end(new.id, cdcpb_pb2.Error(not_leader=cdcpb_pb2.NotLeader(
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
        region = self.regions.get(req.region_id)
        if region is None:
            self._error(conn, req, cdcpb_pb2.Error(region_not_found=cdcpb_pb2.RegionNotFound(region_id=req.region_id)))
            return
        req_start, req_end = _requested_range(req)
        ep = req.region_epoch
        if ep.version != region.version or ep.conf_ver != region.conf_ver:
            current = self.regions.scan(region.start_key, region.end_key) or [region]
            if req_start or req_end:
                current = self.regions.scan(req_start, req_end) or current
            self._error(conn, req, cdcpb_pb2.Error(
                epoch_not_match=cdcpb_pb2.EpochNotMatch(current_regions=[r.to_pb() for r in current])))
            return
        if region.leader_store_id != self.store_id:
            self._error(conn, req, cdcpb_pb2.Error(not_leader=cdcpb_pb2.NotLeader(
                region_id=region.id, leader=region.leader_pb())))
            return
        if (req.request_id, req.region_id) in conn.subs:
            self._error(conn, req, cdcpb_pb2.Error(
                duplicate_request=cdcpb_pb2.DuplicateRequest(region_id=req.region_id)))
            return
        if self.busy:
            self._error(conn, req, cdcpb_pb2.Error(server_is_busy=cdcpb_pb2.ServerIsBusy(
                reason=self.busy_reason, backoff_ms=BUSY_BACKOFF_MS)))
            return
        if req.checkpoint_ts < self.store.safe_point:
            self._error(conn, req, _gc_error(req.checkpoint_ts, self.store.safe_point))
            return
        start = max(region.start_key, req_start)
        end = min_end(region.end_key, req_end)
        s = _Subscription(conn=conn, region_id=region.id, request_id=req.request_id, start_key=start, end_key=end,
                          checkpoint_ts=req.checkpoint_ts, old_value=req.extra_op == cdcpb_pb2.ReadOldValue,
                          resolved_ts=req.checkpoint_ts)
        # Listener first, lock snapshot in the same step: no change can fall between them.
        conn.subs[(s.request_id, s.region_id)] = s
        self._by_region.setdefault(region.id, set()).add(s)
        s.locks_at_register = self.store.locks_in(start, end)
        s.scan_task = asyncio.create_task(self._scan(s), name=f"cdc-scan-{region.id}-{req.request_id}")
        log.info("region registered", conn=conn.id, region_id=region.id, request_id=req.request_id,
                 checkpoint_ts=req.checkpoint_ts)

    def _deregister(self, conn: _Connection, req: cdcpb_pb2.ChangeDataRequest) -> None:
        for (rid, region_id), s in list(conn.subs.items()):
            if rid == req.request_id and (not req.region_id or region_id == req.region_id):
                self._drop(s)

    async def _scan(self, s: _Subscription) -> None:
        try:
            rows: list[Row] = []
            covered: set[tuple[bytes, int]] = set()
            cursor: bytes | None = None
            while True:
                if s.checkpoint_ts < self.store.safe_point:  # GC ran while we scanned
                    self._drop(s)
                    s.conn.push(cdcpb_pb2.Event(region_id=s.region_id, request_id=s.request_id,
                                                error=_gc_error(s.checkpoint_ts, self.store.safe_point)))
                    return
                records, cursor = self.store.versions_after(
                    s.start_key, s.end_key, s.checkpoint_ts, from_key=cursor, key_limit=SCAN_KEYS_PER_STEP)
                for r in records:
                    row = Row(start_ts=r.start_ts, commit_ts=r.commit_ts, type=LogType.COMMITTED,
                              op_type=_op(r.op), key=r.key, value=r.value or b"")
                    if s.old_value and r.old_value is not None:
                        row.old_value = r.old_value
                    rows.append(row)
                    covered.add((r.key, r.start_ts))
                if cursor is None:
                    break
                await asyncio.sleep(0)
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
            for i in range(0, len(rows), ROWS_PER_EVENT):
                s.conn.push(s.event(rows[i : i + ROWS_PER_EVENT]))
            s.initialized = True
            log.info("region initialized", region_id=s.region_id, request_id=s.request_id, scanned=len(rows) - 1)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.error("incremental scan failed", region_id=s.region_id, exc_info=True)
            self._drop(s)
            s.conn.push(cdcpb_pb2.Event(region_id=s.region_id, request_id=s.request_id, error=cdcpb_pb2.Error(
                server_is_busy=cdcpb_pb2.ServerIsBusy(reason="incremental scan failed", backoff_ms=1000))))

    # --- resolved ts --------------------------------------------------------------------------
    def resolved_batches(self, conn: _Connection) -> list[cdcpb_pb2.ResolvedTs]:
        """Compute and record the resolved ts of every initialized subscription (one step)."""
        subs = [s for s in conn.subs.values() if s.initialized]
        if not subs:
            return []
        now = self.tso.next()
        groups: dict[tuple[int, int], list[int]] = {}
        for s in subs:
            lock_ts = self.store.min_lock_ts(s.start_key, s.end_key)
            ts = now if lock_ts is None else min(now, lock_ts)
            ts = max(ts, s.resolved_ts)
            s.resolved_ts = ts
            groups.setdefault((s.request_id, ts), []).append(s.region_id)
        return [
            cdcpb_pb2.ResolvedTs(regions=sorted(r), ts=ts, request_id=rid) for (rid, ts), r in sorted(groups.items())
        ]

    async def _advance(self, conn: _Connection) -> None:
        while True:
            await asyncio.sleep(self.min_ts_interval)
            for batch in self.resolved_batches(conn):
                conn.push(batch)

    # --- the RPC ------------------------------------------------------------------------------
    async def _read(self, conn: _Connection, requests: AsyncIterator[cdcpb_pb2.ChangeDataRequest]) -> None:
        async for req in requests:
            kind = req.WhichOneof("request")
            if kind == "deregister":
                self._deregister(conn, req)
            else:  # register (also the default when a client leaves the oneof unset, as old TiCDC does)
                self._register(conn, req)

    async def EventFeed(
        self, request_iterator: AsyncIterator[cdcpb_pb2.ChangeDataRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[cdcpb_pb2.ChangeDataEvent]:
        if not self.up:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"store {self.store_id} is stopped")
        conn = _Connection()
        self._connections.add(conn)
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
            log.info("event feed closed", conn=conn.id, store_id=self.store_id,
                     aborted=aborted.details if aborted else "")
        if aborted is not None:  # outside the finally: abort raises, and the subscriptions are gone
            await context.abort(aborted.code, aborted.details)


def _gc_error(ts: int, safe_point: int) -> cdcpb_pb2.Error:
    return cdcpb_pb2.Error(gc_safe_point_passed=f"GC safe point passed: checkpoint ts {ts} < safe point {safe_point}")
