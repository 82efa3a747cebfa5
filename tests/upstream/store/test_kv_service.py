"""A store's ``tikvpb.Tikv`` reads over gRPC, as a TiKV client sends them: values and paging match the MVCC store,
region errors come as TiKV's (``errorpb.Error``), a lock at or below the read's ts is ``KeyError.locked`` with its
``LockInfo``, and a read below the GC safe point is refused. The session's upstream serves all but the cases that
need two stores or move the GC safe point for good (a cluster of their own)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cdc_core.codec import key as keycodec
from cdc_core.codec import meta_key
from cdc_core.codec import tso as tso_codec
from cdc_core.codec.memcomparable import encode_bytes
from cdc_core.proto import kvrpcpb_pb2, metapb_pb2, tikvpb_pb2_grpc
from cdc_core.schema import ddl_history
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.pd.regions import Region
from cdc_core.upstream.sql.txn import Transaction
from cdc_core.upstream.store.mvcc import Mutation, Op


def stub_for(addr: str) -> tuple[grpc.Channel, tikvpb_pb2_grpc.TikvStub]:
    ch = grpc.insecure_channel(addr)
    return ch, tikvpb_pb2_grpc.TikvStub(ch)


@pytest.fixture
def kv(store_addr: str) -> Iterator[tikvpb_pb2_grpc.TikvStub]:
    ch, stub = stub_for(store_addr)
    yield stub
    ch.close()


def region_of(ec: Any, key: bytes) -> Region:
    return ec.call(lambda: ec.cluster.regions.locate(key))  # type: ignore[no-any-return]


def context(ec: Any, region: Region, **kw: Any) -> kvrpcpb_pb2.Context:
    """The context a client sends ``region``'s leader (``kw`` overrides or adds fields)."""
    fields: dict[str, Any] = {
        "region_id": region.id, "region_epoch": metapb_pb2.RegionEpoch(conf_ver=region.conf_ver,
                                                                       version=region.version),
        "peer": region.leader_pb(), "cluster_id": ec.cluster.cluster_id, **kw}
    return kvrpcpb_pb2.Context(**fields)


def now(ec: Any) -> int:
    return ec.call(lambda: ec.cluster.tso.next())  # type: ignore[no-any-return]


def write(ec: Any, pairs: dict[bytes, bytes | None]) -> int:
    """Commit ``pairs`` (None: delete) in one transaction on the cluster's loop; its commit ts."""
    def run() -> int:
        txn = Transaction(ec.cluster.store, ec.cluster.tso)
        for k, v in pairs.items():
            txn.delete(k) if v is None else txn.put(k, v)
        return txn.commit_now()

    return ec.call(run)  # type: ignore[no-any-return]


def hash_keys(n: int) -> tuple[bytes, list[bytes]]:
    """A hash of its own in the meta range and ``n`` field keys of it, in key order."""
    name = f"kvtest-{uuid.uuid4().hex}".encode()
    return name, [meta_key.hash_field_key(name, f"f{i:03d}".encode()) for i in range(n)]


def test_get_and_batch_get_read_the_snapshot(upstream_cluster: Any, kv: tikvpb_pb2_grpc.TikvStub) -> None:
    ec = upstream_cluster
    _, (a, b, c) = hash_keys(3)
    t1 = write(ec, {a: b"one", b: b"bee"})
    t2 = write(ec, {a: b"two", b: None})
    ctx = context(ec, region_of(ec, a))
    assert kv.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=a, version=t1 - 1)).not_found
    got = kv.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=a, version=t1, need_commit_ts=True))
    assert (got.value, got.commit_ts, got.not_found) == (b"one", t1, False)
    assert kv.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=a, version=t2)).value == b"two"
    assert kv.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=b, version=t2)).not_found  # deleted at t2
    batch = kv.KvBatchGet(kvrpcpb_pb2.BatchGetRequest(context=ctx, keys=[a, b, c], version=t1))
    assert [(p.key, p.value) for p in batch.pairs] == [(a, b"one"), (b, b"bee")]  # absent keys have no pair


def test_scan_pages_within_the_region(upstream_cluster: Any, kv: tikvpb_pb2_grpc.TikvStub) -> None:
    ec = upstream_cluster
    name, keys = hash_keys(7)
    ts = write(ec, {k: f"v{i}".encode() for i, k in enumerate(keys)})
    start, end = meta_key.hash_range(name)
    ctx = context(ec, region_of(ec, start))
    got: list[tuple[bytes, bytes]] = []
    at = start
    while True:  # a client's pages: from after the last key of a full page
        resp = kv.KvScan(kvrpcpb_pb2.ScanRequest(context=ctx, start_key=at, end_key=end, limit=3, version=ts))
        assert not resp.HasField("region_error") and not resp.HasField("error")
        got += [(p.key, p.value) for p in resp.pairs]
        if len(resp.pairs) < 3:
            break
        at = resp.pairs[-1].key + b"\x00"
    assert got == [(k, f"v{i}".encode()) for i, k in enumerate(keys)]
    only = kv.KvScan(kvrpcpb_pb2.ScanRequest(context=ctx, start_key=start, end_key=end, limit=10, version=ts,
                                             key_only=True, sample_step=3))
    assert [(p.key, p.value) for p in only.pairs] == [(keys[0], b""), (keys[3], b""), (keys[6], b"")]
    assert not kv.KvScan(kvrpcpb_pb2.ScanRequest(context=ctx, start_key=start, end_key=end, limit=10,
                                                 version=ts - 1)).pairs


def test_region_errors_are_tikvs(upstream_cluster: Any, kv: tikvpb_pb2_grpc.TikvStub) -> None:
    ec = upstream_cluster
    _, (key,) = hash_keys(1)
    ts = write(ec, {key: b"v"})
    region = region_of(ec, key)

    def get(ctx: kvrpcpb_pb2.Context, k: bytes = key) -> kvrpcpb_pb2.GetResponse:
        return kv.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=k, version=ts))

    stale = context(ec, region)
    stale.region_epoch.version -= 1
    err = get(stale).region_error
    assert [r.id for r in err.epoch_not_match.current_regions] == [region.id]
    assert get(context(ec, region, region_id=10**9)).region_error.region_not_found.region_id == 10**9
    wrong_store = context(ec, region)
    wrong_store.peer.store_id = 99
    assert get(wrong_store).region_error.store_not_match.request_store_id == 99
    wrong_peer = context(ec, region)
    wrong_peer.peer.id += 1_000_000
    assert get(wrong_peer).region_error.mismatch_peer_id.store_peer_id == region.leader.id
    # The DDL job table's rows are in a region of their own, not the meta range's.
    row_region = region_of(ec, keycodec.table_span(ddl_history.JOB_TABLE_ID)[0])
    assert row_region.id != region.id
    outside = get(context(ec, row_region), key).region_error.key_not_in_region
    assert (outside.region_id, outside.key) == (row_region.id, encode_bytes(key))
    scan_outside = kv.KvScan(kvrpcpb_pb2.ScanRequest(context=context(ec, row_region), start_key=key, limit=1,
                                                     version=ts))
    assert scan_outside.region_error.HasField("key_not_in_region")
    with pytest.raises(grpc.RpcError) as info:
        get(context(ec, region, cluster_id=ec.cluster.cluster_id + 1))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cluster id of the request does not match" in (info.value.details() or "")


def test_a_lock_at_or_below_the_read_ts_is_reported(upstream_cluster: Any, kv: tikvpb_pb2_grpc.TikvStub) -> None:
    ec = upstream_cluster
    name, (before, locked, after) = hash_keys(3)
    committed = write(ec, {before: b"b", locked: b"old", after: b"a"})
    store = ec.cluster.store
    lock_ts = now(ec)
    ec.call(lambda: store.prewrite([Mutation(locked, Op.PUT, b"new")], locked, lock_ts))
    try:
        read_ts = now(ec)
        ctx = context(ec, region_of(ec, locked))
        assert kv.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=locked, version=lock_ts - 1)).value == b"old"
        err = kv.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=locked, version=read_ts)).error
        info = err.locked
        assert (info.key, info.primary_lock, info.lock_version, info.lock_type) == (
            locked, locked, lock_ts, kvrpcpb_pb2.Put)
        assert info.lock_ttl > 0
        # Listed as resolved, the lock is passed by; as committed, its value is read through.
        resolved = context(ec, region_of(ec, locked), resolved_locks=[lock_ts])
        assert kv.KvGet(kvrpcpb_pb2.GetRequest(context=resolved, key=locked, version=read_ts)).value == b"old"
        through = context(ec, region_of(ec, locked), committed_locks=[lock_ts])
        assert kv.KvGet(kvrpcpb_pb2.GetRequest(context=through, key=locked, version=read_ts)).value == b"new"
        rc = context(ec, region_of(ec, locked), isolation_level=kvrpcpb_pb2.RC)
        assert kv.KvGet(kvrpcpb_pb2.GetRequest(context=rc, key=locked, version=read_ts)).value == b"old"
        # A scan reports the locked key as a pair carrying the lock and goes on.
        start, end = meta_key.hash_range(name)
        pairs = kv.KvScan(kvrpcpb_pb2.ScanRequest(context=ctx, start_key=start, end_key=end, limit=10,
                                                  version=read_ts)).pairs
        assert [(p.key, p.value, p.error.locked.key) for p in pairs] == [
            (before, b"b", b""), (b"", b"", locked), (after, b"a", b"")]
        batch = kv.KvBatchGet(kvrpcpb_pb2.BatchGetRequest(context=ctx, keys=[before, locked], version=read_ts))
        assert [(p.key, p.error.locked.lock_version) for p in batch.pairs] == [(before, 0), (b"", lock_ts)]
    finally:
        ec.call(lambda: store.rollback([locked], lock_ts))
    assert committed < lock_ts


@pytest.fixture(scope="module")
def two_stores() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(ClusterConfig(stores=2)) as ec:
        yield ec


def test_not_leader_names_the_leader_and_a_stopped_store_refuses(two_stores: EmbeddedCluster) -> None:
    ec = two_stores
    _, (key,) = hash_keys(1)
    ts = write(ec, {key: b"v"})
    region = region_of(ec, key)
    follower = next(n for n in ec.cluster.stores.values() if n.id != region.leader_store_id)  # type: ignore[union-attr]
    ch, stub = stub_for(follower.addr)
    try:
        ctx = context(ec, region)
        ctx.peer.CopyFrom(metapb_pb2.Peer(id=region.id * 1024 + follower.id, store_id=follower.id))
        err = stub.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=key, version=ts)).region_error
        assert (err.not_leader.region_id, err.not_leader.leader.store_id) == (region.id, region.leader_store_id)
        ec.faults.stop_store(follower.id)
        try:
            with pytest.raises(grpc.RpcError) as info:
                stub.KvGet(kvrpcpb_pb2.GetRequest(context=ctx, key=key, version=ts))
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            ec.faults.start_store(follower.id)
    finally:
        ch.close()


def test_a_read_below_the_gc_safe_point_is_refused(two_stores: EmbeddedCluster) -> None:
    ec = two_stores
    _, (key,) = hash_keys(1)
    write(ec, {key: b"v"})
    assert ec.cluster is not None
    stats = ec.faults.gc()  # the safe point: now - GC life time (10 min)
    too_old = tso_codec.compose(tso_codec.physical_ms(stats.safe_point) - 60_000, 0)
    region = region_of(ec, key)
    leader = ec.cluster.stores[region.leader_store_id]
    ch, stub = stub_for(leader.addr)
    try:
        resp = stub.KvGet(kvrpcpb_pb2.GetRequest(context=context(ec, region), key=key, version=too_old))
        assert "GC safe point passed" in resp.error.abort
        scan = stub.KvScan(kvrpcpb_pb2.ScanRequest(context=context(ec, region), start_key=key, limit=1,
                                                   version=too_old))
        assert "GC safe point passed" in scan.error.abort
        assert stub.KvGet(kvrpcpb_pb2.GetRequest(context=context(ec, region), key=key,
                                                 version=now(ec))).value == b"v"
    finally:
        ch.close()
