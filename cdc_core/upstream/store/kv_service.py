"""A store's transactional reads, TiKV's ``tikvpb.Tikv`` ``KvGet`` / ``KvScan`` / ``KvBatchGet``: what a snapshot
read of the store (TiCDC's schema snapshot of TiDB's meta keys, client-go's ``KVSnapshot``) sends.

Each request is checked as TiKV checks it before reading, in this order, the first failure answered as the
response's ``region_error`` (TiKV ``components/raftstore/src/store/worker/read.rs`` and ``util.rs``, errors as
``raftstore/src/errors.rs`` fills ``errorpb.Error``):

1. ``Context.cluster_id`` (when not 0) must be the store's, else the call fails ``INVALID_ARGUMENT`` (TiKV
   ``src/server/service/kv.rs`` ``reject_if_cluster_id_mismatch``); a stopped store fails ``UNAVAILABLE``;
2. the peer's store must be this one (``store_not_match``), the region known (``region_not_found``), the peer id
   this store's peer of it (``mismatch_peer_id``), this store its leader (``not_leader``, with the leader), the
   epoch current (``epoch_not_match``, with the current regions), and every key inside the region
   (``key_not_in_region``; keys and boundaries memcomparable-encoded, as TiKV keeps them).

A read at ``version`` then meets locks as TiKV's snapshot isolation does (``txn_types/src/lock.rs``
``check_ts_conflict_si``): a lock whose transaction started at or below ``version`` (of a PUT or DELETE; a
transaction's lock-only keys take none here) is reported as ``KeyError.locked`` with its ``LockInfo``, unless the
context lists its start ts in ``resolved_locks`` (ignored) or ``committed_locks`` (its value read through).
``KvScan`` reports such a key as a pair with the error in place of its value and goes on (TiKV's scanner, then
``map_kv_pairs``: the pair's key empty, the lock's key in the ``LockInfo``); ``KvGet`` answers the error alone.
Read committed (``IsolationLevel.RC``) ignores locks. A scan stops at the region's end and after ``limit`` pairs
(errors count); ``key_only`` leaves values out; ``sample_step`` returns every n-th key and checks no lock.

The reads go through ``MvccStore``'s read methods, so they raise the store's ``max_ts`` as TiKV's reads raise the
concurrency manager's. One the store refuses (below its GC safe point, whose versions may be gone) is answered
``KeyError.abort`` with the reason, TiKV's answer to a storage error it has no variant for
(``src/storage/errors.rs`` ``extract_key_error``). TiKV itself serves such a read from whatever GC left; its
clients check PD's GC safe point first (client-go ``KVStore.CheckVisibility``), as ``cdc_core.client.kv_snapshot``
does.

Not served: reverse scans and ``RCCheckTS`` (``KeyError.abort`` says so); the other methods of ``tikvpb.Tikv``
are UNIMPLEMENTED.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import grpc

from cdc_core.codec.memcomparable import encode_key
from cdc_core.log import get_logger
from cdc_core.proto import errorpb_pb2, kvrpcpb_pb2, tikvpb_pb2_grpc
from cdc_core.upstream.pd.regions import PEER_ID_STRIDE, Region, RegionManager
from cdc_core.upstream.store.mvcc import Lock, MvccError, MvccStore, Op

log = get_logger("cdcflow.upstream.kv")

# The TTL reported for a lock: the store keeps none, and a small transaction's client sends client-go's
# defaultLockTTL (3 s, txnkv/transaction/txn.go), so a reader sees what a TiKV holding such a lock would say.
LOCK_TTL_MS = 3000
CLUSTER_ID_MISMATCH = "the cluster id of the request does not match the TiKV cluster"


class _KeyError(Exception):
    def __init__(self, error: kvrpcpb_pb2.KeyError) -> None:
        super().__init__(str(error))
        self.error = error


def lock_info(lock: Lock) -> kvrpcpb_pb2.LockInfo:
    """The ``LockInfo`` of a lock (TiKV ``Lock::into_lock_info``)."""
    return kvrpcpb_pb2.LockInfo(
        primary_lock=lock.primary, lock_version=lock.start_ts, key=lock.key, lock_ttl=LOCK_TTL_MS, txn_size=1,
        lock_type=kvrpcpb_pb2.Put if lock.op is Op.PUT else kvrpcpb_pb2.Del)


class KvService(tikvpb_pb2_grpc.TikvServicer):
    """The KV reads of store ``store_id``; ``up()`` says whether the store serves (a stopped one refuses)."""

    def __init__(self, store_id: int, store: MvccStore, regions: RegionManager, *, cluster_id: int,
                 up: Callable[[], bool]) -> None:
        self.store_id = store_id
        self.store = store
        self.regions = regions
        self.cluster_id = cluster_id
        self._up = up

    # --- checks -------------------------------------------------------------------------------------
    async def _serve(self, ctx: kvrpcpb_pb2.Context, context: grpc.aio.ServicerContext) -> None:
        if not self._up():
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"store {self.store_id} is stopped")
        if ctx.cluster_id and ctx.cluster_id != self.cluster_id:
            log.warning("KV request for another cluster", store_id=self.store_id, request=ctx.cluster_id,
                        cluster_id=self.cluster_id)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, CLUSTER_ID_MISMATCH)

    def region_error(self, ctx: kvrpcpb_pb2.Context, keys: Sequence[bytes]) -> errorpb_pb2.Error | None:
        """The region error TiKV would answer ``ctx`` and ``keys`` with (module docstring), or None."""
        if ctx.peer.store_id and ctx.peer.store_id != self.store_id:
            return errorpb_pb2.Error(message=f"store not match: request store {ctx.peer.store_id}, this store "
                                             f"{self.store_id}",
                                     store_not_match=errorpb_pb2.StoreNotMatch(
                                         request_store_id=ctx.peer.store_id, actual_store_id=self.store_id))
        region = self.regions.get(ctx.region_id)
        if region is None:
            return errorpb_pb2.Error(message=f"region {ctx.region_id} not found",
                                     region_not_found=errorpb_pb2.RegionNotFound(region_id=ctx.region_id))
        mine = region.id * PEER_ID_STRIDE + self.store_id
        if ctx.peer.id and ctx.peer.id != mine:
            return errorpb_pb2.Error(message=f"mismatch peer id {ctx.peer.id} != {mine}",
                                     mismatch_peer_id=errorpb_pb2.MismatchPeerId(request_peer_id=ctx.peer.id,
                                                                                 store_peer_id=mine))
        if region.leader_store_id != self.store_id:
            return errorpb_pb2.Error(message=f"peer is not leader for region {region.id}",
                                     not_leader=errorpb_pb2.NotLeader(region_id=region.id, leader=region.leader_pb()))
        ep = ctx.region_epoch
        if ep.version != region.version or ep.conf_ver != region.conf_ver:
            current = {r.id: r for r in [region, *(self.regions.locate(k) for k in keys)]}
            return errorpb_pb2.Error(
                message=f"epoch not match: request {ep.conf_ver}/{ep.version}, region {region.id} is at "
                        f"{region.conf_ver}/{region.version}",
                epoch_not_match=errorpb_pb2.EpochNotMatch(current_regions=[r.to_pb() for r in current.values()]))
        for key in keys:
            if not region.contains(key):
                return _key_not_in_region(key, region)
        return None

    def _check_lock(self, ctx: kvrpcpb_pb2.Context, key: bytes, ts: int) -> tuple[bool, bytes | None]:
        """``(False, None)``: no lock stands in the read's way; ``(True, value)``: a committed lock's value read
        through (None: a delete). Raises ``_KeyError`` for a lock that does stand in the way."""
        if ctx.isolation_level == kvrpcpb_pb2.RC:
            return False, None
        if ctx.isolation_level != kvrpcpb_pb2.SI:
            raise _KeyError(kvrpcpb_pb2.KeyError(abort="isolation level RCCheckTS is not served by this store"))
        lock = self.store.lock_of(key)
        if lock is None or lock.start_ts > ts or lock.op not in (Op.PUT, Op.DELETE):
            return False, None
        if lock.start_ts in ctx.resolved_locks:
            return False, None
        if lock.start_ts in ctx.committed_locks:
            return True, lock.value if lock.op is Op.PUT else None
        raise _KeyError(kvrpcpb_pb2.KeyError(locked=lock_info(lock)))

    # --- reads --------------------------------------------------------------------------------------
    async def KvGet(self, request: kvrpcpb_pb2.GetRequest, context: grpc.aio.ServicerContext
                    ) -> kvrpcpb_pb2.GetResponse:
        await self._serve(request.context, context)
        err = self.region_error(request.context, [request.key])
        if err is not None:
            return kvrpcpb_pb2.GetResponse(region_error=err)
        try:
            return self._get(request)
        except _KeyError as exc:
            return kvrpcpb_pb2.GetResponse(error=exc.error)

    def _get(self, request: kvrpcpb_pb2.GetRequest) -> kvrpcpb_pb2.GetResponse:
        key, ts = request.key, request.version
        try:
            version = self.store.version_at(key, ts)
        except MvccError as exc:
            raise _KeyError(kvrpcpb_pb2.KeyError(abort=str(exc))) from None
        through, value = self._check_lock(request.context, key, ts)
        if through:
            return kvrpcpb_pb2.GetResponse(value=value or b"", not_found=value is None)
        if version is None or version.op is not Op.PUT or version.value is None:
            return kvrpcpb_pb2.GetResponse(not_found=True)
        return kvrpcpb_pb2.GetResponse(value=version.value,
                                       commit_ts=version.commit_ts if request.need_commit_ts else 0)

    async def KvBatchGet(self, request: kvrpcpb_pb2.BatchGetRequest, context: grpc.aio.ServicerContext
                         ) -> kvrpcpb_pb2.BatchGetResponse:
        await self._serve(request.context, context)
        keys = list(request.keys)
        err = self.region_error(request.context, keys)
        if err is not None:
            return kvrpcpb_pb2.BatchGetResponse(region_error=err)
        pairs = []
        for key in keys:
            one = kvrpcpb_pb2.GetRequest(context=request.context, key=key, version=request.version,
                                         need_commit_ts=request.need_commit_ts)
            try:
                got = self._get(one)
            except _KeyError as exc:
                if exc.error.abort:
                    return kvrpcpb_pb2.BatchGetResponse(error=exc.error)
                pairs.append(kvrpcpb_pb2.KvPair(error=exc.error))
                continue
            if not got.not_found:
                pairs.append(kvrpcpb_pb2.KvPair(key=key, value=got.value, commit_ts=got.commit_ts))
        return kvrpcpb_pb2.BatchGetResponse(pairs=pairs)

    async def KvScan(self, request: kvrpcpb_pb2.ScanRequest, context: grpc.aio.ServicerContext
                     ) -> kvrpcpb_pb2.ScanResponse:
        await self._serve(request.context, context)
        err = self.region_error(request.context, [request.start_key])
        if err is not None:
            return kvrpcpb_pb2.ScanResponse(region_error=err)
        if request.reverse:
            return kvrpcpb_pb2.ScanResponse(error=kvrpcpb_pb2.KeyError(
                abort="reverse scans are not served by this store"))
        region = self.regions.get(request.context.region_id)
        assert region is not None  # checked above, in this same event-loop step
        end = _min_end(region.end_key, request.end_key)
        try:
            pairs = list(self._scan(request, end))
        except _KeyError as exc:
            return kvrpcpb_pb2.ScanResponse(error=exc.error)
        return kvrpcpb_pb2.ScanResponse(pairs=pairs)

    def _scan(self, request: kvrpcpb_pb2.ScanRequest, end: bytes) -> Iterator[kvrpcpb_pb2.KvPair]:
        ts, limit, step = request.version, request.limit, max(request.sample_step, 1)
        check = request.sample_step <= 1 and request.context.isolation_level != kvrpcpb_pb2.RC
        try:
            values = self.store.iter_scan(request.start_key, end, ts)
            locks = self.store.locks_in(request.start_key, end) if check else []
            n = seen = 0
            for key, value, lock in _merge(values, iter(locks)):
                if n >= limit:
                    return
                if lock is not None:
                    try:
                        through, lock_value = self._check_lock(request.context, key, ts)
                    except _KeyError as exc:
                        if exc.error.abort:
                            raise
                        n += 1
                        yield kvrpcpb_pb2.KvPair(error=exc.error)
                        continue
                    if through:
                        value = lock_value
                if value is None:
                    continue  # only a lock that does not count (or a committed delete read through)
                seen += 1
                if (seen - 1) % step:
                    continue
                n += 1
                yield kvrpcpb_pb2.KvPair(key=key, value=b"" if request.key_only else value)
        except MvccError as exc:
            raise _KeyError(kvrpcpb_pb2.KeyError(abort=str(exc))) from None


def _merge(values: Iterator[tuple[bytes, bytes]], locks: Iterator[Lock]
           ) -> Iterator[tuple[bytes, bytes | None, Lock | None]]:
    """Each key with a live value or a lock once, in key order: ``(key, value or None, lock or None)``."""
    lock = next(locks, None)
    for key, value in values:
        while lock is not None and lock.key < key:
            yield lock.key, None, lock
            lock = next(locks, None)
        if lock is not None and lock.key == key:
            yield key, value, lock
            lock = next(locks, None)
        else:
            yield key, value, None
    while lock is not None:
        yield lock.key, None, lock
        lock = next(locks, None)


def _min_end(a: bytes, b: bytes) -> bytes:
    if not a:
        return b
    if not b:
        return a
    return min(a, b)


def _key_not_in_region(key: bytes, region: Region) -> errorpb_pb2.Error:
    return errorpb_pb2.Error(
        message=f"key {key.hex()} is not in region {region.id}",
        key_not_in_region=errorpb_pb2.KeyNotInRegion(key=encode_key(key), region_id=region.id,
                                                     start_key=encode_key(region.start_key),
                                                     end_key=encode_key(region.end_key)))
