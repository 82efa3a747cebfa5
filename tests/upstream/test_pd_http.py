"""PD's HTTP API on its gRPC address and the stores' min resolved ts reports: PD's min-resolved-ts is the
minimum over the stores, a held lock keeps it at the lock's start ts, TiKV's ReportMinResolvedTS is served, and
the member's gRPC service works through the same port."""

from __future__ import annotations

import socket
from typing import Any

import grpc
import httpx

from cdc_core.proto import pdpb_pb2, pdpb_pb2_grpc
from cdc_core.upstream.min_resolved_ts import MinResolvedTs


def _min_resolved_ts(pd_addr: str) -> int:
    r = httpx.get(f"http://{pd_addr}/pd/api/v1/min-resolved-ts")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["is_real_time"] is True and body["persist_interval"] == "1s"
    return int(body["min_resolved_ts"])


def test_min_resolved_ts_follows_the_tso_and_stops_at_a_held_lock(upstream_cluster: Any, upstream_client: Any,
                                                                 fresh_db: str) -> None:
    cl = upstream_cluster.cluster
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 1)")
    before = upstream_client.get_ts()
    upstream_cluster.call(cl.min_resolved_reporter.report_once)
    assert _min_resolved_ts(upstream_cluster.pd_addr) > before
    held = upstream_cluster.call(lambda: cl.faults.hold_lock(fresh_db, "t"))
    try:
        upstream_cluster.call(cl.min_resolved_reporter.report_once)
        stuck = _min_resolved_ts(upstream_cluster.pd_addr)
        assert stuck == held.start_ts  # the region's resolved ts stops at the lock's start ts
        upstream_cluster.call(cl.min_resolved_reporter.report_once)
        assert _min_resolved_ts(upstream_cluster.pd_addr) == stuck
    finally:
        upstream_cluster.call(lambda: cl.faults.release_lock(held.start_ts))
    after = upstream_client.get_ts()
    upstream_cluster.call(cl.min_resolved_reporter.report_once)
    assert _min_resolved_ts(upstream_cluster.pd_addr) > after


def test_the_cluster_value_is_the_minimum_over_the_stores_that_are_up() -> None:
    state = MinResolvedTs()
    state.report(1, 100)
    assert state.cluster([1, 2]) == 0  # store 2 has not reported: nothing is known to be resolved
    state.report(2, 90)
    state.report(1, 80)  # a late, older report does not lower store 1
    assert state.cluster([1, 2]) == 90 and state.cluster([1]) == 100


def test_tikv_reports_over_grpc_and_http_errors_are_http(upstream_cluster: Any) -> None:
    pd_addr = upstream_cluster.pd_addr
    cluster_id = upstream_cluster.cluster.cluster_id
    with grpc.insecure_channel(pd_addr) as ch:
        stub = pdpb_pb2_grpc.PDStub(ch)
        resp = stub.ReportMinResolvedTS(pdpb_pb2.ReportMinResolvedTsRequest(
            header=pdpb_pb2.RequestHeader(cluster_id=cluster_id), store_id=99, min_resolved_ts=7))
        assert resp.header.cluster_id == cluster_id and not resp.header.HasField("error")
        members = stub.GetMembers(pdpb_pb2.GetMembersRequest())  # gRPC and HTTP share the member's port
        assert members.leader.client_urls == [f"http://{pd_addr}"]
    upstream_cluster.cluster.min_resolved.forget(99)
    assert httpx.get(f"http://{pd_addr}/pd/api/v1/nothing-here").status_code == 404
    host, _, port = pd_addr.rpartition(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"NONSENSE\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400 Bad Request")
