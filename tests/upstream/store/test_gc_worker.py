"""MVCC GC: versions below the safe point go, reads and change scans below it fail clearly, service
safe points (with TTL) hold GC back, snapshot reads above it keep working, periodic passes run."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from wire.eventfeed import FeedClient, T, table_id, table_regions, wait_until
from wire.pd import PdWire

from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import key as keycodec
from cdc_core.errors import UpstreamError
from cdc_core.proto import adminpb_pb2, adminpb_pb2_grpc, pdpb_pb2
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.store.mvcc import GcSafePointPassedError, Mutation, MvccStore, Op


def _write(store: MvccStore, key: bytes, value: bytes | None, ts: list[int]) -> int:
    start, commit = ts[0] + 1, ts[0] + 2
    ts[0] = commit
    store.prewrite([Mutation(key, Op.PUT if value is not None else Op.DELETE, value or b"")], key, start)
    store.commit([key], start, commit)
    return commit


def test_gc_keeps_what_a_read_at_the_safe_point_sees() -> None:
    s, ts = MvccStore(), [0]
    c1 = _write(s, b"a", b"1", ts)
    c2 = _write(s, b"a", b"2", ts)
    c3 = _write(s, b"a", b"3", ts)
    _write(s, b"gone", b"x", ts)
    cdel = _write(s, b"gone", None, ts)
    stats = s.gc(c2)
    assert (stats.versions_removed, stats.keys_removed) == (1, 0)  # a@c1 only: a@c2 is what a read at c2 sees
    assert [v.commit_ts for v in s.versions(b"a")] == [c2, c3]
    assert s.get(b"a", c2) == b"2" and s.get(b"a", c3) == b"3"
    with pytest.raises(GcSafePointPassedError, match=f"GC safe point passed: ts {c1} < safe point {c2}"):
        s.get(b"a", c1)
    stats = s.gc(cdel)  # the tombstone at the safe point goes with everything below it
    assert s.versions(b"gone") == [] and stats.keys_removed == 1 and s.key_count() == 1
    assert s.gc(1).safe_point == cdel  # never backwards


def test_a_gc_pass_visits_only_the_keys_written_more_than_once() -> None:
    """A key written once has no garbage: a pass visits the keys with several versions or a tombstone, and a key
    it leaves with one version is not visited again until it is written again (a store of millions of rows loaded
    once is not walked every pass)."""
    s, ts = MvccStore(), [0]
    ingested = s.ingest(((b"k%06d" % i, b"v") for i in range(10_000)), 5)
    ts[0] = 10
    assert ingested == 10_000
    _write(s, b"k000007", b"new", ts)  # a second version
    _write(s, b"k000009", None, ts)  # a tombstone
    last = _write(s, b"only", b"x", ts)  # one version: nothing to collect
    stats = s.gc(last)
    assert (stats.keys_scanned, stats.versions_removed, stats.keys_removed) == (2, 3, 1)
    assert s.get(b"k000007", last) == b"new" and s.get(b"k000009", last) is None and s.key_count() == 10_000
    assert s.gc(last).keys_scanned == 0  # both settled
    again = _write(s, b"k000007", b"newer", ts)
    assert s.gc(again).keys_scanned == 1 and [v.commit_ts for v in s.versions(b"k000007")] == [again]


@pytest.fixture
def ec() -> Iterator[EmbeddedCluster]:
    # gc_life_time 0: a pass collects everything up to now unless a service safe point holds it back
    c = EmbeddedCluster(ClusterConfig(stores=2, min_ts_interval_ms=50, gc_life_time_s=0,
                                      control_addr="127.0.0.1:0")).start()
    yield c
    c.stop()


def _tso_past(c: UpstreamClient, ts: int) -> None:
    """Wait until PD's TSO is in a later millisecond than ``ts``: a safe point of "now less a life time of 0" is
    ``(physical, 0)``, below the ts PD handed out in the same tick (its physical part moves every 50 ms)."""
    wait_until(lambda: c.get_ts() >> 18 > ts >> 18, timeout=5, what=f"PD's TSO past ts {ts}")


def test_gc_pass_sql_reads_and_feed_registers_below_the_safe_point(ec: EmbeddedCluster) -> None:
    with UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY, b INT); INSERT INTO t VALUES (1, 1)")
        c1 = c.execute("UPDATE d.t SET b = 2 WHERE a = 1")[0].commit_ts
        c2 = c.execute("UPDATE d.t SET b = 3 WHERE a = 1")[0].commit_ts
        assert c.query("SELECT b FROM d.t", at_ts=c1) == [{"b": 2}]  # snapshot read before GC
        tid = table_id(ec, "d", "t")
        key = keycodec.row_key(tid, 1)
        assert len(ec.call(lambda: ec.cluster.store.versions(key))) == 3  # type: ignore[union-attr]
        _tso_past(c, c2)
        with grpc.insecure_channel(ec.control_addr) as ch:
            resp = adminpb_pb2_grpc.AdminStub(ch).RunGc(adminpb_pb2.GcRequest())
        sp = resp.safe_point
        assert sp > c2 and resp.versions_removed >= 2
        assert [v.commit_ts for v in ec.call(lambda: ec.cluster.store.versions(key))] == [c2]  # type: ignore
        with pytest.raises(UpstreamError, match=f"GC safe point passed: ts {c1} < safe point {sp}"):
            c.query("SELECT b FROM d.t", at_ts=c1)
        assert c.query("SELECT b FROM d.t", at_ts=sp) == [{"b": 3}]
        # A change feed from below the safe point is served as TiKV serves it, without the history GC took:
        # the scan from c1 has only the version GC kept (c2); the update c1 -> c2 is gone. Clients must
        # compare their checkpoint with PD's GC safe point themselves (the puller and the changefeed do).
        r = next(x for x in table_regions(ec.pd_addr, tid) if x.start_key <= key < x.end_key)
        fc = FeedClient(ec.store_addrs[r.leader_store - 1], pd_addr=ec.pd_addr)
        try:
            fc.register(r, 1, c1 - 1)
            fc.register(r, 2, sp)
            wait_until(lambda: fc.initialized(1) and fc.initialized(2))
            assert not fc.errors(1)
            assert [(x.type, x.commit_ts) for x in fc.rows(1) if x.key == key] == [(T.COMMITTED, c2)]
            assert [x.type for x in fc.rows(2)] == [T.INITIALIZED]
            with PdWire(ec.pd_addr) as pd:
                got = pd.stub.GetGCSafePoint(pdpb_pb2.GetGCSafePointRequest(header=pd.header()), timeout=10)
            assert got.safe_point == sp > c1
        finally:
            fc.close()


def test_service_safe_point_holds_gc_until_its_ttl_expires(ec: EmbeddedCluster) -> None:
    with UpstreamClient(ec.pd_addr) as c, PdWire(ec.pd_addr) as pd:
        c.execute("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY, b INT); INSERT INTO t VALUES (1, 1)")
        c1 = c.execute("UPDATE d.t SET b = 2")[0].commit_ts
        _tso_past(c, c.execute("UPDATE d.t SET b = 3")[0].commit_ts)
        assert pd.update_service_safe_point("cdcflow-test", 1, c1) == c1
        assert ec.faults.gc().safe_point == c1  # held back by the service
        assert c.query("SELECT b FROM d.t", at_ts=c1) == [{"b": 2}]
        # once the TTL has passed the service no longer counts and GC moves on
        sp = wait_until(lambda: (s := ec.faults.gc().safe_point) > c1 and s, timeout=10, what="TTL expiry")
        with pytest.raises(UpstreamError, match="GC safe point passed"):
            c.query("SELECT b FROM d.t", at_ts=c1)
        assert c.query("SELECT b FROM d.t", at_ts=sp) == [{"b": 3}]


def test_gc_life_time_and_periodic_passes() -> None:
    with EmbeddedCluster(ClusterConfig(gc_life_time_s=3600, gc_interval_s=0.05)) as ec, \
            UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY); INSERT INTO t VALUES (1)")
        start = c.get_ts()
        wait_until(lambda: ec.call(lambda: ec.cluster.gc.last is not None), what="a periodic GC pass")  # type: ignore
        sp = ec.call(lambda: ec.cluster.store.safe_point)  # type: ignore[union-attr]
        # an hour of life time: the safe point is about an hour before now, every recent version stays
        assert 0 < sp < start and (start >> 18) - (sp >> 18) >= 3600 * 1000 - 5000
        assert c.query("SELECT a FROM d.t", at_ts=start) == [{"a": 1}]
