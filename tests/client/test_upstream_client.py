"""The synchronous upstream client: SQL, snapshot reads, TSO, stores, errors, address resolution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_core.client.upstream import NO_UPSTREAM, UpstreamClient, resolve_pd_addr
from cdc_core.errors import UpstreamError


def test_execute_query_and_results(upstream_client: Any, fresh_db: str) -> None:
    res = upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY, d DECIMAL(6,3));"
                                  "INSERT INTO t VALUES (1, 2.5); SELECT * FROM t")
    assert [r.affected_rows for r in res] == [0, 0, 1, 0]
    assert res[-1].columns == ["a", "d"] and res[-1].rows == [{"a": 1, "d": "2.500"}]
    assert upstream_client.query(f"SELECT a FROM {fresh_db}.t WHERE d > 2") == [{"a": 1}]


def test_snapshot_reads_at_ts(upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY, b INT); INSERT INTO t VALUES (1, 1)")
    ts = upstream_client.get_ts()
    upstream_client.execute(f"UPDATE {fresh_db}.t SET b = 2")
    assert upstream_client.query(f"SELECT b FROM {fresh_db}.t", at_ts=ts) == [{"b": 1}]
    assert upstream_client.query(f"SELECT b FROM {fresh_db}.t") == [{"b": 2}]
    with pytest.raises(UpstreamError, match="SELECT and USE only"):
        upstream_client.execute(f"UPDATE {fresh_db}.t SET b = 3", at_ts=ts)
    with pytest.raises(UpstreamError, match="in the future"):
        upstream_client.query(f"SELECT b FROM {fresh_db}.t", at_ts=upstream_client.get_ts() + (1000 << 18))


def test_tso_and_stores(upstream_client: Any, store_addr: str) -> None:
    a, b = upstream_client.get_ts(), upstream_client.get_ts()
    assert 0 < a < b
    [s] = upstream_client.all_stores()
    assert (s.id, s.address, s.state) == (1, store_addr, "Up")
    assert upstream_client.ping()


def test_errors_carry_the_server_message(upstream_client: Any) -> None:
    with pytest.raises(UpstreamError, match=r"statement 1 `CREATE VIEW v AS SELECT 1`: unsupported statement"):
        upstream_client.execute("CREATE VIEW v AS SELECT 1")
    with UpstreamClient("127.0.0.1:1", timeout=2) as dead:
        with pytest.raises(UpstreamError, match=r"cannot reach the upstream at 127\.0\.0\.1:1"):
            dead.get_ts()
        assert not dead.ping()


def test_resolve_pd_addr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("CDCFLOW_UPSTREAM", raising=False)
    with pytest.raises(UpstreamError) as ei:
        resolve_pd_addr(None)
    assert str(ei.value) == NO_UPSTREAM
    (tmp_path / "upstream.json").write_text(json.dumps({"pd_addr": "127.0.0.1:3", "pid": 1}))
    assert resolve_pd_addr(None) == "127.0.0.1:3"
    monkeypatch.setenv("CDCFLOW_UPSTREAM", "127.0.0.1:2")
    assert resolve_pd_addr(None) == "127.0.0.1:2"
    assert resolve_pd_addr("127.0.0.1:1") == "127.0.0.1:1"
    monkeypatch.delenv("CDCFLOW_UPSTREAM")
    (tmp_path / "upstream.json").write_text("{not json")
    with pytest.raises(UpstreamError, match="cannot read"):
        resolve_pd_addr(None)


def test_a_pd_of_another_cluster_is_a_changefeed_error_naming_both_ids(pd_addr: str) -> None:
    """The cluster id learned from GetMembers goes on every call; a PD that answers for another cluster (here: a
    client holding a stale id, as after the upstream was replaced on the same address) is fatal, not retried."""
    import asyncio

    from cdc_core.client.pd_protocol import ClusterIdMismatch
    from cdc_core.errors import ChangefeedError
    from cdc_core.puller.pd_client import PDClient

    with UpstreamClient(pd_addr) as c:
        right = c.cluster_id()
        assert c.get_ts() > 0
        c._members.cluster_id = right + 1
        with pytest.raises(ClusterIdMismatch, match=f"mismatch cluster id, need {right} but got {right + 1}") as ei:
            c.get_ts()
        assert isinstance(ei.value, ChangefeedError)

    async def stale() -> None:
        pd = PDClient(pd_addr)
        try:
            assert await pd.cluster_id() == right
            pd._members.cluster_id = 7
            with pytest.raises(ClusterIdMismatch, match=f"need {right} but got 7"):
                await pd.store_address(1)
        finally:
            await pd.close()

    asyncio.run(stale())
