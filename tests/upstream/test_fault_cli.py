"""``cdcflow upstream fault ...`` and ``cdcflow upstream workload`` in-process (CliRunner) against an
embedded 2-store cluster: each command goes through the admin gRPC service, on the control port, and prints JSON;
an upstream started without a control port serves no fault to anyone, on any of its ports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from cdc_core.cli import upstream_cmd
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import UpstreamError
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster


@pytest.fixture(scope="module")
def ec() -> Iterator[EmbeddedCluster]:
    c = EmbeddedCluster(ClusterConfig(stores=2, min_ts_interval_ms=50, control_addr="127.0.0.1:0")).start()
    with UpstreamClient(c.pd_addr) as u:
        u.execute("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY, b INT); "
                  "INSERT INTO t VALUES (-1, 1), (1, 1)")
    yield c
    c.stop()


def run(ec: EmbeddedCluster, *args: str) -> Any:
    where = ["--control", ec.control_addr] if args[0] == "fault" else ["--pd", ec.pd_addr]
    res = CliRunner().invoke(upstream_cmd.app, [*args, *where])
    if res.exception is not None:
        raise res.exception
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])  # the cluster logs to the same stdout


def test_region_faults(ec: EmbeddedCluster) -> None:
    split = run(ec, "fault", "split", "--table", "d.t", "--lo", "0", "--hi", "100", "--regions", "4")
    assert len(split) == 5 and {r["leader_store_id"] for r in split} == {1, 2}
    key = split[3]["start_key"]
    parts = run(ec, "fault", "split", "--region", str(split[3]["id"]), "--key", key[:-2] + "3c")  # handle 50 -> 60
    assert parts[0]["id"] == split[3]["id"] and len(parts) == 2
    moved = run(ec, "fault", "transfer-leader", "--table", "d.t", "--to-store", "2")
    assert {r["leader_store_id"] for r in moved} == {2}
    one = run(ec, "fault", "transfer-leader", "--region", str(split[0]["id"]), "--to-store", "1")
    assert one[0]["leader_store_id"] == 1
    merged = run(ec, "fault", "merge", "--region", str(split[1]["id"]))
    assert merged[0]["id"] == split[2]["id"] and merged[0]["start_key"] == split[1]["start_key"]
    whole = run(ec, "fault", "merge", "--table", "d.t")
    assert len(whole) == 1
    with pytest.raises(UpstreamError, match="region 999999 does not exist"):
        run(ec, "fault", "transfer-leader", "--region", "999999", "--to-store", "1")
    with pytest.raises(UpstreamError, match="not strictly inside"):
        run(ec, "fault", "split", "--region", str(whole[0]["id"]), "--key", "00")


def test_store_lock_busy_and_gc_faults(ec: EmbeddedCluster) -> None:
    held = run(ec, "fault", "hold-lock", "--table", "d.t", "--count", "2")
    assert len(held["keys"]) == 2
    assert ec.call(lambda: len(ec.cluster.store.locks_in(b"", b""))) == 2  # type: ignore[union-attr]
    released = run(ec, "fault", "release-lock", "--start-ts", str(held["start_ts"]), "--rollback")
    assert released == {"commit_ts": 0, "keys": 2}
    stopped = run(ec, "fault", "stop-store", "--store", "2", "--move-leaders")
    assert stopped["up"] is False and stopped["leaders_moved"] > 0
    with UpstreamClient(ec.pd_addr) as u:
        assert [s.state for s in u.all_stores()] == ["Up", "Offline"]
    assert run(ec, "fault", "start-store", "--store", "2")["up"] is True
    assert run(ec, "fault", "drop-streams", "--store", "1") == {"streams_dropped": 0}
    assert run(ec, "fault", "busy", "--store", "1", "--duration-ms", "1")["store_id"] == 1
    gc = run(ec, "fault", "gc")
    assert gc["safe_point"] > 0  # 10 minutes before now by default
    with pytest.raises(UpstreamError, match="store 7 does not exist"):
        run(ec, "fault", "busy", "--store", "7")


def test_workload_command(ec: EmbeddedCluster) -> None:
    summary = run(ec, "workload", "--txns", "60", "--threads", "2", "--tables", "1", "--id-range", "50",
                  "--initial-rows", "20", "--db", "wcli")
    assert summary["txns"] == 60 and summary["committed"] > 0 and summary["txn_per_s"] > 0
    assert summary["seed"] > 0  # --seed 0 (the default): one from the clock, reported to run the same mix again
    with UpstreamClient(ec.pd_addr) as u:
        assert u.query("SELECT COUNT(*) AS n FROM wcli.sbtest1")[0]["n"] > 0


def test_without_a_control_port_no_port_serves_faults(tmp_path, monkeypatch) -> None:
    import grpc

    from cdc_core.proto import adminpb_pb2, adminpb_pb2_grpc

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))  # no upstream.json: nothing names a control port
    monkeypatch.delenv("CDCFLOW_UPSTREAM_CONTROL", raising=False)
    with EmbeddedCluster(ClusterConfig(stores=1, min_ts_interval_ms=50)) as plain:
        assert plain.control_addr == ""
        for addr in (plain.pd_addr, plain.store_addr):  # PD (gRPC and HTTP on one port) and a store
            with grpc.insecure_channel(addr) as ch, pytest.raises(grpc.RpcError) as e:
                adminpb_pb2_grpc.AdminStub(ch).StopStore(adminpb_pb2.StoreRequest(store_id=1), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED, addr
        res = CliRunner().invoke(upstream_cmd.app, ["fault", "gc"])
        assert isinstance(res.exception, UpstreamError) and "--control-addr" in str(res.exception)
        res = CliRunner().invoke(upstream_cmd.app, ["fault", "gc", "--control", plain.pd_addr])
        assert isinstance(res.exception, UpstreamError) and "no control service there" in str(res.exception)
