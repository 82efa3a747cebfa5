"""EventFeed as TiKV serves it to clients of different kinds, seen with plain cdcpb messages (tests/wire):
features by client version and call metadata, the cluster-id and compatibility checks, the scan limit, message
sizes and transaction heartbeats. Each test names the TiKV behaviour (components/cdc) it checks."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from wire.eventfeed import (
    FeedClient,
    T,
    changes_by_commit,
    int_row,
    register_all,
    table_id,
    table_regions,
    wait_until,
)

from cdc_core.codec import key as keycodec
from cdc_core.proto import cdcpb_pb2, kvrpcpb_pb2, metapb_pb2
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.store import cdc_service


def _table(client: Any, db: str, cluster: Any, rows: str = "(-1, 1), (1, 1)") -> tuple[int, list[Any]]:
    client.execute(f"USE {db}; CREATE TABLE t (a INT PRIMARY KEY, b INT); INSERT INTO t VALUES {rows}")
    tid = table_id(cluster, db, "t")
    return tid, table_regions(cluster.pd_addr, tid)


def _kinds(fc: FeedClient) -> set[tuple[str, int]]:
    return {(k, rq) for k, rq, _, _ in fc.snapshot() if k in ("resolved", "region_resolved")}


@pytest.mark.parametrize(("v2", "version", "kind", "request_id_seen"), [
    (True, "8.5.0", "resolved", "own"),  # stream-multiplexing: batched per request id
    (False, "8.5.0", "resolved", 0),  # EventFeed from 4.0.8: batched per stream, request id 0
    (False, "4.0.8", "resolved", 0),
    (False, "4.0.7", "region_resolved", "own"),  # older: Event.resolved_ts per region
    (False, "", "region_resolved", "own"),  # no version (as 0.0.0)
    (False, "not-semver", "region_resolved", "own"),
])
def test_resolved_ts_form_follows_the_client(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                             v2: bool, version: str, kind: str, request_id_seen: Any) -> None:
    # delegate.rs on_min_ts / endpoint.rs emit_resolved_ts: multiplexing, exclusive (batched) or compat.
    _, regions = _table(upstream_client, fresh_db, upstream_cluster)
    fc = FeedClient(upstream_cluster.store_addr, pd_addr=upstream_cluster.pd_addr, version=version, v2=v2)
    try:
        ids = register_all(fc, regions, 0, 41)
        wait_until(lambda: all(fc.resolved(i, r.id) > 0 for i, r in zip(ids, regions, strict=True)),
                   what="resolved ts of both regions")
        seen = _kinds(fc)
        expected = {(kind, i if request_id_seen == "own" else request_id_seen) for i in ids}
        assert seen == expected
    finally:
        fc.close()


def test_cluster_id_is_checked_for_clients_from_5_3_0(upstream_cluster: Any, upstream_client: Any,
                                                       fresh_db: str) -> None:
    # endpoint.rs on_register: FeatureGate::VALIDATE_CLUSTER_ID (>= 5.3.0) -> cluster_id_mismatch{current, request}
    _, regions = _table(upstream_client, fresh_db, upstream_cluster)
    real = upstream_cluster.cluster.cluster_id
    new = FeedClient(upstream_cluster.store_addr, cluster_id=real + 1)
    old = FeedClient(upstream_cluster.store_addr, cluster_id=real + 1, version="5.2.0", v2=False)
    try:
        new.register(regions[0], 1, 0)
        old.register(regions[0], 1, 0)
        wait_until(lambda: new.errors(1) and old.initialized(1), what="the mismatch and the unchecked client")
        m = new.errors(1)[0].cluster_id_mismatch
        assert (m.current, m.request) == (real, real + 1)
        assert not new.initialized(1) and not old.errors(1)
    finally:
        new.close()
        old.close()


def test_compatibility_for_other_kv_apis_and_for_clients_a_store_requires_newer(
        upstream_cluster: Any, upstream_client: Any, fresh_db: str, feed: FeedClient) -> None:
    _, regions = _table(upstream_client, fresh_db, upstream_cluster)
    # endpoint.rs validate_kv_api: RawKV needs API v2 -> compatibility{required_version "6.2.0"}
    feed.register(regions[0], 1, 0, kv_api=cdcpb_pb2.ChangeDataRequest.RawKV)
    wait_until(lambda: feed.errors(1), what="compatibility error")
    assert feed.errors(1)[0].compatibility.required_version == "6.2.0"
    upstream_cluster.faults.require_client_version(1, "9.1.0")
    try:
        feed.register(regions[0], 2, 0)
        wait_until(lambda: feed.errors(2), what="compatibility error")
        assert feed.errors(2)[0].compatibility.required_version == "9.1.0"
    finally:
        upstream_cluster.faults.require_client_version(1, None)


def test_event_feed_v2_refuses_unknown_features(upstream_cluster: Any) -> None:
    # service.rs parse_headers: an unknown feature fails the call with UNIMPLEMENTED.
    fc = FeedClient(upstream_cluster.store_addr, pd_addr=upstream_cluster.pd_addr,
                    features="stream-multiplexing,time-travel")
    try:
        wait_until(lambda: fc.error_code() is not None, what="the call to fail")
        assert fc.error_code() == grpc.StatusCode.UNIMPLEMENTED
        assert "time-travel" in str(fc.error.details())  # type: ignore[union-attr]
    finally:
        fc.close()


def test_too_many_pending_incremental_scans_is_busy(upstream_cluster: Any, upstream_client: Any,
                                                    fresh_db: str) -> None:
    # endpoint.rs on_register: past incremental_scan_concurrency_limit running scans, server_is_busy.
    _, regions = _table(upstream_client, fresh_db, upstream_cluster)
    cdc = upstream_cluster.cluster.cdc
    conn = cdc_service._Connection(multiplexing=True)
    conn.features = cdc_service.Features(cdc_service.parse_version("8.5.0"), True)

    def req(region: Any, request_id: int) -> cdcpb_pb2.ChangeDataRequest:
        return cdcpb_pb2.ChangeDataRequest(
            header=cdcpb_pb2.Header(cluster_id=upstream_cluster.cluster.cluster_id, ticdc_version="8.5.0"),
            region_id=region.id, region_epoch=metapb_pb2.RegionEpoch(version=region.version,
                                                                     conf_ver=region.conf_ver),
            request_id=request_id, extra_op=kvrpcpb_pb2.ReadOldValue)

    def register_two_in_one_step() -> list[Any]:
        limit, cdc.scan_limit = cdc.scan_limit, cdc._scans + 1
        try:
            cdc._register(conn, req(regions[0], 1))  # takes the last scan slot
            cdc._register(conn, req(regions[1], 2))  # in the same step: that scan is still running
        finally:
            cdc.scan_limit = limit
        return [item for item, _ in conn._outbox]

    [err] = upstream_cluster.call(register_two_in_one_step)
    assert err.request_id == 2 and err.error.server_is_busy.reason == "too many pending incremental scans"
    upstream_cluster.call(lambda: [cdc._drop(s) for s in list(conn.subs.values())])


def test_responses_batch_events_up_to_6_mb(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    # channel.rs: events of up to 32 KiB of rows, up to 64 events a batch, responses up to 6 MB; a client
    # must take more than gRPC's default 4 MiB (TiCDC: 256 MiB).
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY, b MEDIUMTEXT)")
    big = "x" * 100_000
    for lo in range(0, 60, 20):
        upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES " +
                                ", ".join(f"({i}, '{big}')" for i in range(lo + 1, lo + 21)))
    tid = table_id(upstream_cluster, fresh_db, "t")
    regions = table_regions(upstream_cluster.pd_addr, tid)
    fc = FeedClient(upstream_cluster.store_addr, pd_addr=upstream_cluster.pd_addr)
    try:
        ids = register_all(fc, regions, 0, 1)
        rows = [r for i in ids for r in fc.rows(i) if r.type == T.COMMITTED]
        assert len(rows) == 60 and all(len(r.value) > 100_000 for r in rows)
        sizes = fc.message_sizes
        assert 4 * 1024 * 1024 < max(sizes) <= cdc_service.RESP_MAX_BYTES + 200_000
    finally:
        fc.close()


def test_long_transactions_send_fake_prewrites(upstream_client: Any) -> None:
    # A lock held past the heartbeat interval is reported again with an empty value (TiKV's view of a TTL
    # heartbeat rewriting the lock); the real value and the commit still match.
    with EmbeddedCluster(ClusterConfig(min_ts_interval_ms=50, txn_heartbeat_interval_ms=100)) as ec:
        from cdc_core.client.upstream import UpstreamClient

        with UpstreamClient(ec.pd_addr) as c:
            c.execute("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY, b INT); "
                      "INSERT INTO t VALUES (5, 5)")
        tid = table_id(ec, "d", "t")
        regions = table_regions(ec.pd_addr, tid)
        key = keycodec.row_key(tid, 5)
        fc = FeedClient(ec.store_addr, pd_addr=ec.pd_addr)
        try:
            ids = register_all(fc, regions, 0, 1)
            held = ec.faults.hold_lock("d", "t", handles=[5])
            prewrites = lambda: [r for r in fc.rows(ids[1]) if r.type == T.PREWRITE and r.key == key]  # noqa: E731
            wait_until(lambda: len(prewrites()) >= 3, what="heartbeat prewrites")
            real, *fakes = prewrites()
            assert real.value == int_row(5, 5) and real.start_ts == held.start_ts
            assert all(f.value == b"" and f.start_ts == held.start_ts and f.old_value == real.old_value
                       for f in fakes)
            commit_ts = ec.faults.release_lock(held.start_ts)
            wait_until(lambda: fc.resolved(ids[1], regions[1].id) >= commit_ts, what="resolved past the commit")
            assert changes_by_commit(fc, ids)[commit_ts] == [(key, T.Row.PUT, real.value, real.old_value)]
            n = ec.cluster.cdc.fake_prewrites_sent
            assert ec.call(lambda: ec.cluster.cdc.heartbeat()) == 0  # released: no more heartbeats
            assert ec.cluster.cdc.fake_prewrites_sent == n
        finally:
            fc.close()


def test_a_connection_past_the_sink_memory_quota_gets_congested(upstream_cluster: Any, upstream_client: Any,
                                                                fresh_db: str) -> None:
    # delegate.rs/errors.rs: a live event the sink's memory quota cannot take stops the region's downstream with
    # Congested{region_id}. Here a connection nobody reads: its queue only grows.
    _, regions = _table(upstream_client, fresh_db, upstream_cluster)
    cdc = upstream_cluster.cluster.cdc
    conn = cdc_service._Connection(multiplexing=True)
    conn.features = cdc_service.Features(cdc_service.parse_version("8.5.0"), True)
    r = regions[1]
    req = cdcpb_pb2.ChangeDataRequest(
        header=cdcpb_pb2.Header(cluster_id=upstream_cluster.cluster.cluster_id, ticdc_version="8.5.0"),
        region_id=r.id, region_epoch=metapb_pb2.RegionEpoch(version=r.version, conf_ver=r.conf_ver),
        request_id=1, extra_op=kvrpcpb_pb2.ReadOldValue)
    upstream_cluster.call(lambda: cdc._register(conn, req))
    wait_until(lambda: upstream_cluster.call(lambda: all(s.initialized for s in conn.subs.values())),
               what="the scan to finish")
    quota = upstream_cluster.call(lambda: conn.pending_bytes) + 4_000
    upstream_cluster.call(lambda: setattr(cdc, "sink_memory_quota", quota))
    try:
        for lo in range(100, 400, 100):
            upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES " +
                                    ", ".join(f"({i}, {i})" for i in range(lo, lo + 100)))
        items = upstream_cluster.call(lambda: [item for item, _ in conn._outbox])
    finally:
        upstream_cluster.call(lambda: setattr(cdc, "sink_memory_quota", cdc_service.SINK_MEMORY_QUOTA))
        upstream_cluster.call(lambda: [cdc._drop(s) for s in list(conn.subs.values())])
    errors = [e for e in items if isinstance(e, cdcpb_pb2.Event) and e.HasField("error")]
    assert [(e.region_id, e.error.congested.region_id) for e in errors] == [(r.id, r.id)]
    assert items[-1] is errors[0]  # nothing after the error: the downstream is stopped
    assert not conn.subs
    assert conn.pending_bytes <= quota + 200
