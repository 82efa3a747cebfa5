"""PD's HTTP API on its gRPC address: TiKV's ReportMinResolvedTS is served, and the member's gRPC service works
through the same port (what the stores report: ``tests/upstream/store/test_resolved_ts_reporter.py``)."""

from __future__ import annotations

import socket
from typing import Any

import grpc
import httpx

from cdc_core.proto import pdpb_pb2, pdpb_pb2_grpc


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
