"""A snapshot read of the cluster's keys at one ts over TiKV's KV RPCs (``tikvpb.Tikv`` ``KvGet`` / ``KvScan``),
routed through PD: what client-go's ``KVSnapshot`` does for TiCDC's schema snapshot of TiDB's meta keys.

How it behaves, after client-go (``txnkv/txnsnapshot/snapshot.go``, ``scan.go``, ``internal/locate/
region_request.go`` ``onRegionError``, backoff configs in ``config/retry/config.go``):

- **Routing.** A key's region and leader come from PD (``GetRegion``), the leader's address from ``GetStore``; both
  are cached. The request's ``Context`` names the region, its epoch, the leader peer and the cluster id.
- **Region errors** are retried, the read never fails for them within ``deadline_s``: ``not_leader`` with a leader
  goes to it at once (without one, after ``regionScheduling`` backoff, 2..500 ms); ``epoch_not_match`` takes the
  region from its ``current_regions`` (keeping the old leader's store when it has a peer there) and retries at once;
  ``region_not_found``, ``key_not_in_region``, ``store_not_match``, ``mismatch_peer_id`` drop the cached region and
  ask PD again after ``regionMiss`` backoff (2..500 ms); ``server_is_busy`` waits its ``backoff_ms`` or
  ``tikvServerBusy`` (2..10 s); a store that cannot be reached (gRPC UNAVAILABLE) is asked again through PD
  after ``tikvRPC`` backoff (100 ms..2 s).
- **Locks.** A key locked by a transaction that started at or below the read's ts may commit below it: the read
  waits (``txnLockFast`` backoff, 2 ms..3 s) until the lock is gone and reads again, up to ``lock_wait_s``, then
  fails naming the key and the lock. (client-go resolves an expired lock itself; a reader here only waits.) A scan
  pair that carries a lock is read again with ``KvGet``, as client-go's scanner does.
- **GC.** A read below PD's GC safe point may miss versions GC removed, which TiKV does not report: the safe
  point is checked before the first request and after the last (client-go ``CheckVisibility``), and a read below
  it fails with TiCDC's "snapshot lost by GC"; a store that refuses such a read (``KeyError.abort``) fails it too.
- **Paging.** A scan asks for ``page`` pairs at a time within one region, the next page from after the last key
  or from the region's end (client-go ``Scanner.getData``): memory is one page, whatever the range holds.

A cluster-id mismatch (``INVALID_ARGUMENT`` from the store) is fatal (``pd_protocol.ClusterIdMismatch``); any
other failure is an ``UpstreamError`` naming the key and the store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar, cast

import grpc

from cdc_core import tls
from cdc_core.client import pd_protocol
from cdc_core.codec import tso
from cdc_core.codec.memcomparable import KeyDecodeError, decode_key
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.log import get_logger
from cdc_core.proto import errorpb_pb2, kvrpcpb_pb2, metapb_pb2, tikvpb_pb2_grpc
from cdc_core.puller.backoff import Backoff
from cdc_core.puller.pd_client import PDClient

log = get_logger("cdcflow.client.kv")
R = TypeVar("R")

SCAN_PAGE = 256  # client-go's scanBatchSize
DEADLINE_S = 60.0
LOCK_WAIT_S = 60.0
RPC_TIMEOUT_S = 20.0  # client-go's ReadTimeoutMedium
# client-go config/retry/config.go: (base ms, cap ms), EqualJitter = a random half of the exponential step.
REGION_MISS = Backoff(2, 500, 0.0)
REGION_SCHEDULING = Backoff(2, 500, 0.0)
TIKV_RPC = Backoff(100, 2000, 0.5)
SERVER_BUSY = Backoff(2000, 10000, 0.5)
TXN_LOCK_FAST = Backoff(2, 3000, 0.5)
CLUSTER_ID_MISMATCH = "the cluster id of the request does not match"


class SnapshotLostByGC(ChangefeedError):
    """The read's ts is below PD's GC safe point: what it would read may be gone (TiCDC's ErrSnapshotLostByGC)."""


@dataclass(frozen=True)
class _Region:
    id: int
    start_key: bytes  # raw
    end_key: bytes  # raw; b"": the end of the key space
    epoch: metapb_pb2.RegionEpoch
    peers: tuple[metapb_pb2.Peer, ...]
    leader: metapb_pb2.Peer

    def contains(self, key: bytes) -> bool:
        return self.start_key <= key and (not self.end_key or key < self.end_key)

    @classmethod
    def of(cls, region: metapb_pb2.Region, leader: metapb_pb2.Peer | None, where: str) -> _Region:
        try:
            start, end = decode_key(region.start_key), decode_key(region.end_key)
        except KeyDecodeError as exc:
            raise UpstreamError(f"{where}: region {region.id}'s boundaries are not memcomparable-encoded: "
                                f"{exc}") from exc
        peers = tuple(region.peers)
        if leader is None or not leader.store_id:
            if not peers:
                raise UpstreamError(f"{where}: region {region.id} has no peer")
            leader = peers[0]
        return cls(region.id, start, end, region.region_epoch, peers, leader)


class _Retry(Exception):
    """This attempt failed in a way the next one may not: wait ``delay_s`` and try again."""

    def __init__(self, why: str, delay_s: float) -> None:
        super().__init__(why)
        self.why = why
        self.delay_s = delay_s


class KvSnapshot:
    """Reads at ``ts`` through ``pd`` (which the caller owns and closes). ``close()`` closes the store channels."""

    def __init__(self, pd: PDClient, ts: int, *, deadline_s: float = DEADLINE_S, lock_wait_s: float = LOCK_WAIT_S,
                 page: int = SCAN_PAGE) -> None:
        if ts <= 0 or page < 1:
            raise ValueError(f"need a ts > 0 and a page >= 1, got ts {ts} and page {page}")
        self.pd = pd
        self.ts = ts
        self.deadline_s = deadline_s
        self.lock_wait_s = lock_wait_s
        self.page = page
        self._regions: dict[int, _Region] = {}
        self._addrs: dict[int, str] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, tikvpb_pb2_grpc.TikvStub] = {}
        self._cluster_id = 0
        self.retries = 0  # region errors, unreachable stores and locks waited out, for tests and logs
        self._checked_gc = False

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
        self._stubs.clear()

    async def __aenter__(self) -> KvSnapshot:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- GC -----------------------------------------------------------------------------------------------
    async def check_visibility(self) -> None:
        """Raise ``SnapshotLostByGC`` when the read's ts is below PD's GC safe point (client-go
        ``CheckVisibility``)."""
        safe_point = await self.pd.gc_safe_point()
        if self.ts < safe_point:
            raise SnapshotLostByGC(
                f"snapshot lost by GC: a read at ts {self.ts} ({tso.to_datetime(self.ts).isoformat()}) is below "
                f"PD's GC safe point {safe_point} ({tso.to_datetime(safe_point).isoformat()}); the versions it "
                "needs may be gone")
        self._checked_gc = True

    # --- routing ------------------------------------------------------------------------------------------
    async def _region(self, key: bytes) -> _Region:
        for r in self._regions.values():
            if r.contains(key):
                return r
        resp = await self.pd.get_region(key)
        if not resp.region.id:
            raise _Retry(f"PD knows no region for key {key.hex()} yet", REGION_MISS.delay_s(1))
        r = _Region.of(resp.region, resp.leader, f"PD {self.pd.pd_addr}")
        self._forget_overlapping(r)
        self._regions[r.id] = r
        return r

    def _forget_overlapping(self, r: _Region) -> None:
        for rid, old in list(self._regions.items()):
            if (not r.end_key or old.start_key < r.end_key) and (not old.end_key or r.start_key < old.end_key):
                del self._regions[rid]

    async def _stub(self, store_id: int) -> tuple[str, tikvpb_pb2_grpc.TikvStub]:
        addr = self._addrs.get(store_id)
        if addr is None:
            addr = self._addrs[store_id] = await self.pd.store_address(store_id)
        stub = self._stubs.get(addr)
        if stub is None:
            self._channels[addr] = ch = tls.aio_grpc_channel(addr)
            stub = self._stubs[addr] = tikvpb_pb2_grpc.TikvStub(ch)
        return addr, stub

    async def _context(self, r: _Region) -> kvrpcpb_pb2.Context:
        if not self._cluster_id:
            self._cluster_id = await self.pd.cluster_id()
        return kvrpcpb_pb2.Context(region_id=r.id, region_epoch=r.epoch, peer=r.leader, cluster_id=self._cluster_id,
                                   request_source="external_cdcflow_schema")

    def _on_region_error(self, r: _Region, err: errorpb_pb2.Error, attempt: int) -> None:
        """Update the cache as client-go's ``onRegionError`` does; raise ``_Retry`` with the wait."""
        what = _kind(err)
        if err.HasField("not_leader"):
            leader = err.not_leader.leader
            if leader.store_id and leader.store_id != r.leader.store_id:
                self._regions[r.id] = replace(r, leader=leader)
                raise _Retry(f"region {r.id}: not leader, the leader is on store {leader.store_id}", 0.0)
            self._regions.pop(r.id, None)
            raise _Retry(f"region {r.id}: not leader, no leader known", REGION_SCHEDULING.delay_s(attempt + 1))
        if err.HasField("epoch_not_match"):
            self._regions.pop(r.id, None)
            for cur in err.epoch_not_match.current_regions:
                old_leader = next((p for p in cur.peers if p.store_id == r.leader.store_id), None)
                fresh = _Region.of(cur, old_leader, f"region {r.id}'s epoch_not_match")
                self._forget_overlapping(fresh)
                self._regions[fresh.id] = fresh
            raise _Retry(f"region {r.id}: epoch not match", 0.0 if err.epoch_not_match.current_regions
                         else REGION_MISS.delay_s(attempt + 1))
        self._regions.pop(r.id, None)
        if err.HasField("server_is_busy"):
            busy = err.server_is_busy
            raise _Retry(f"region {r.id}: server is busy ({busy.reason})",
                         max(busy.backoff_ms / 1000.0, SERVER_BUSY.delay_s(attempt + 1)))
        if err.HasField("store_not_match"):
            self._addrs.pop(r.leader.store_id, None)
        raise _Retry(f"region {r.id}: {what}: {err.message}", REGION_MISS.delay_s(attempt + 1))

    async def _send(self, key: bytes, call: Callable[[tikvpb_pb2_grpc.TikvStub, kvrpcpb_pb2.Context], Awaitable[R]],
                    ) -> tuple[R, _Region]:
        """``call`` at the leader of ``key``'s region, retried (module docstring) until it answers without a
        region error, or the deadline passes."""
        deadline = time.monotonic() + self.deadline_s
        attempt = 0
        while True:
            addr = "PD"
            try:
                r = await self._region(key)
                addr, stub = await self._stub(r.leader.store_id)
                try:
                    resp = await call(stub, await self._context(r))
                except grpc.aio.AioRpcError as exc:
                    self._rpc_failed(exc, r, addr, key, attempt)
                err = getattr(resp, "region_error", None)
                if err is not None and err.ListFields():
                    self._on_region_error(r, err, attempt)
                return resp, r
            except _Retry as retry:
                attempt += 1
                self.retries += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise UpstreamError(f"reading key {key.hex()} at ts {self.ts}: still failing after "
                                        f"{self.deadline_s:g}s and {attempt} attempts, last at {addr}: "
                                        f"{retry.why}") from None
                log.debug("KV request retried", key=key.hex(), why=retry.why, attempt=attempt)
                await asyncio.sleep(min(retry.delay_s, left))

    def _rpc_failed(self, exc: grpc.aio.AioRpcError, r: _Region, addr: str, key: bytes, attempt: int) -> None:
        details = exc.details() or ""
        if exc.code() == grpc.StatusCode.INVALID_ARGUMENT and CLUSTER_ID_MISMATCH in details:
            raise pd_protocol.ClusterIdMismatch(f"store {r.leader.store_id} at {addr} belongs to another cluster "
                                                f"than PD {self.pd.pd_addr}: {details}")
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            self._regions.pop(r.id, None)
            self._addrs.pop(r.leader.store_id, None)
            raise _Retry(f"store {r.leader.store_id} at {addr}: {exc.code().name}: {details}"
                         f"{tls.handshake_hint(details)}", TIKV_RPC.delay_s(attempt + 1))
        raise UpstreamError(f"store {r.leader.store_id} at {addr}: reading key {key.hex()}: {exc.code().name}: "
                            f"{details}")

    # --- reads --------------------------------------------------------------------------------------------
    async def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` at the snapshot's ts (None: absent), after any lock on it is gone."""
        if not self._checked_gc:
            await self.check_visibility()
        waited = 0
        started = time.monotonic()
        while True:
            resp, _ = await self._send(key, lambda stub, ctx: stub.KvGet(
                kvrpcpb_pb2.GetRequest(context=ctx, key=key, version=self.ts), timeout=RPC_TIMEOUT_S))
            if resp.HasField("error"):
                await self._wait_lock(resp.error, key, started, waited)
                waited += 1
                continue
            return None if resp.not_found else bytes(resp.value)

    async def _wait_lock(self, error: kvrpcpb_pb2.KeyError, key: bytes, started: float, attempt: int) -> None:
        if not error.HasField("locked"):
            why = error.abort or error.retryable or str(error)
            if "safe point" in why.lower():
                raise SnapshotLostByGC(f"snapshot lost by GC: reading key {key.hex()} at ts {self.ts}: {why}")
            raise UpstreamError(f"reading key {key.hex()} at ts {self.ts}: the store refused: {why}")
        lock = error.locked
        if time.monotonic() - started > self.lock_wait_s:
            raise UpstreamError(
                f"reading key {key.hex()} at ts {self.ts}: still locked after {self.lock_wait_s:g}s by the "
                f"transaction started at ts {lock.lock_version} (primary key {lock.primary_lock.hex()}); it may "
                "commit below the read's ts, so the read cannot go on without it")
        self.retries += 1
        if attempt == 0:
            log.info("read waits for a lock", key=key.hex(), lock_ts=lock.lock_version, ts=self.ts)
        await asyncio.sleep(TXN_LOCK_FAST.delay_s(attempt + 1))

    async def scan(self, start: bytes, end: bytes) -> AsyncIterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` in ``[start, end)`` at the snapshot's ts, in key order, a page at a time; the
        GC safe point is checked again once the range is read."""
        if not self._checked_gc:
            await self.check_visibility()
        key = start
        waited, since = 0, time.monotonic()
        while not end or key < end:
            def request(stub: tikvpb_pb2_grpc.TikvStub, ctx: kvrpcpb_pb2.Context,
                        at: bytes = key) -> Awaitable[kvrpcpb_pb2.ScanResponse]:
                return stub.KvScan(kvrpcpb_pb2.ScanRequest(context=ctx, start_key=at, end_key=end, limit=self.page,
                                                           version=self.ts), timeout=RPC_TIMEOUT_S)

            resp, r = await self._send(key, request)
            if resp.HasField("error"):  # a lock stopped the whole page: the same page again once it is gone
                await self._wait_lock(cast(kvrpcpb_pb2.KeyError, resp.error), key, since, waited)
                waited += 1
                continue
            waited, since = 0, time.monotonic()
            last = None
            for pair in resp.pairs:
                if pair.HasField("error"):
                    error = cast(kvrpcpb_pb2.KeyError, pair.error)
                    if not error.HasField("locked"):
                        await self._wait_lock(error, key, since, 0)  # raises: not a lock
                    # A locked key is read on its own, which waits for the lock (client-go's Scanner.Next).
                    last = bytes(error.locked.key)
                    value = await self.get(last)
                    if value is not None:
                        yield last, value
                    continue
                last = bytes(pair.key)
                yield last, bytes(pair.value)
            if len(resp.pairs) >= self.page and last is not None:
                key = last + b"\x00"  # client-go's Key.Next: the smallest key after the page's last
            elif not r.end_key:
                break
            else:
                key = r.end_key
        await self.check_visibility()


def _kind(err: errorpb_pb2.Error) -> str:
    set_fields = [f.name for f, _ in err.ListFields() if f.name != "message"]
    return set_fields[0] if set_fields else "region error"
