"""Several stores: leaders spread over stores, each store serving only its leaders, and the errors
region operations and store faults produce on open feeds (split, merge, transfer-leader, stop/start
store, dropped streams, busy, held locks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest
from wire.eventfeed import (
    FeedClient,
    RegionRef,
    T,
    changes_by_commit,
    ref,
    register_all,
    table_id,
    table_regions,
    wait_until,
)
from wire.pd import PdWire

from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import key as keycodec
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.faults import FaultError


@pytest.fixture
def ec() -> Iterator[EmbeddedCluster]:
    c = EmbeddedCluster(ClusterConfig(stores=3, min_ts_interval_ms=50)).start()
    yield c
    c.stop()


@pytest.fixture
def sql(ec: EmbeddedCluster) -> Iterator[UpstreamClient]:
    with UpstreamClient(ec.pd_addr, timeout=30) as c:
        c.execute("CREATE DATABASE d")
        yield c


@pytest.fixture
def feeds(ec: EmbeddedCluster) -> Iterator[Callable[[int], FeedClient]]:
    """``feeds(store_id)``: a new feed stream to that store (closed at the end of the test)."""
    made: list[FeedClient] = []

    def make(store_id: int) -> FeedClient:
        fc = FeedClient(ec.store_addrs[store_id - 1], pd_addr=ec.pd_addr)
        made.append(fc)
        return fc

    yield make
    for fc in made:
        fc.close()


def _table(ec: EmbeddedCluster, sql: UpstreamClient, regions: int = 6, rows: str = "") -> tuple[int, list[RegionRef]]:
    sql.execute(f"USE d; CREATE TABLE t (a INT PRIMARY KEY, b INT); SPLIT TABLE t BETWEEN (-300) AND (300) "
                f"REGIONS {regions}; {rows}")
    tid = table_id(ec, "d", "t")
    return tid, table_regions(ec.pd_addr, tid)


def test_stores_registered_in_pd(ec: EmbeddedCluster) -> None:
    with PdWire(ec.pd_addr) as pd:
        stores = pd.all_stores()
        assert [(s.id, s.address, s.state) for s in stores] == [
            (i + 1, a, 0) for i, a in enumerate(ec.store_addrs)]
        assert len(set(ec.store_addrs)) == 3
        assert pd.store(2).store.address == ec.store_addrs[1]


def test_leaders_spread_and_each_store_serves_only_its_leaders(ec: EmbeddedCluster, sql: UpstreamClient,
                                                               feeds: Callable[[int], FeedClient]) -> None:
    tid, regions = _table(ec, sql)
    assert len(regions) == 7  # [t_r, -300), then one from each of -300, -200, ..., 200 (the last to t_s)
    by_store: dict[int, list[RegionRef]] = {}
    for r in regions:
        by_store.setdefault(r.leader_store, []).append(r)
    assert sorted(by_store) == [1, 2, 3]
    counts = ec.call(lambda: ec.cluster.regions.leader_counts())  # type: ignore[union-attr]
    assert max(counts.values()) - min(counts.values()) <= 1, counts  # balanced over the whole cluster

    # a request to a store that does not lead the region gets not_leader naming the leader
    r0 = regions[0]
    other = next(s for s in (1, 2, 3) if s != r0.leader_store)
    wrong = feeds(other)
    wrong.register(r0, 99, 0)
    wait_until(lambda: wrong.errors(99), what="not_leader")
    assert wrong.errors(99)[0].not_leader.leader.store_id == r0.leader_store

    # one feed per store, each registering only its leaders; a transaction across all regions
    fcs = {s: feeds(s) for s in by_store}
    ids = {s: register_all(fcs[s], rs, 0, 1) for s, rs in by_store.items()}
    handles = [-400, -250, -150, -50, 50, 150, 250, 400]
    values = ", ".join(f"({h}, {h * 10})" for h in handles)
    commit_ts = sql.execute(f"BEGIN; INSERT INTO d.t VALUES {values}; COMMIT")[-1].commit_ts
    assert commit_ts
    for s, fc in fcs.items():
        wait_until(lambda fc=fc, s=s: commit_ts in changes_by_commit(fc, ids[s]), what=f"store {s} commit")
    for s, fc in fcs.items():
        keys = sorted(k for k, *_ in changes_by_commit(fc, ids[s])[commit_ts])
        expect = sorted(keycodec.row_key(tid, h) for h in handles
                        if any(r.start_key <= keycodec.row_key(tid, h) < r.end_key for r in by_store[s]))
        assert keys == expect and keys, f"store {s} streamed keys outside its leaders"
        # every row event on this stream belongs to a region this store leads
        led = {r.id for r in by_store[s]}
        assert {rg for kind, _, rg, _ in fc.snapshot() if kind == "row"} <= led


def test_split_on_open_feed_sends_epoch_not_match(ec: EmbeddedCluster, sql: UpstreamClient,
                                                  feeds: Callable[[int], FeedClient]) -> None:
    tid, regions = _table(ec, sql, regions=2, rows="INSERT INTO t VALUES (1, 1), (100, 2)")
    r = next(x for x in regions if x.start_key <= keycodec.row_key(tid, 1) < x.end_key)
    fc = feeds(r.leader_store)
    fc.register(r, 1, 0)
    wait_until(lambda: fc.initialized(1))
    parts = ec.faults.split_region(r.id, [keycodec.row_key(tid, 50)])
    wait_until(lambda: fc.errors(1), what="epoch_not_match")
    current = fc.errors(1)[0].epoch_not_match.current_regions
    assert [(c.id, c.start_key, c.end_key) for c in map(ref, current)] == [(p.id, p.start_key, p.end_key)
                                                                           for p in parts]
    assert current[0].id == r.id and current[0].region_epoch.version == r.version + 1
    # re-registering the parts at their leaders scans each half
    for i, p in enumerate(parts):
        f = feeds(p.leader_store_id)
        f.register(ref(current[i]), 10 + i, 0)
        wait_until(lambda f=f, i=i: f.initialized(10 + i))
        assert len([x for x in f.rows(10 + i) if x.type == T.COMMITTED]) == 1
    # the old epoch is refused with the current regions
    stale = feeds(r.leader_store)
    stale.register(r, 5, 0)
    wait_until(lambda: stale.errors(5))
    assert stale.errors(5)[0].HasField("epoch_not_match")


def test_merge_sends_region_not_found_and_epoch_not_match(ec: EmbeddedCluster, sql: UpstreamClient,
                                                          feeds: Callable[[int], FeedClient]) -> None:
    _tid, regions = _table(ec, sql, regions=4)
    source, target = regions[1], regions[2]
    fs, ft = feeds(source.leader_store), feeds(target.leader_store)
    fs.register(source, 1, 0)
    ft.register(target, 2, 0)
    wait_until(lambda: fs.initialized(1) and ft.initialized(2))
    grown = ec.faults.merge(source.id)
    assert grown.id == target.id and (grown.start_key, grown.end_key) == (source.start_key, target.end_key)
    assert grown.version == max(source.version, target.version) + 1
    wait_until(lambda: fs.errors(1) and ft.errors(2), what="merge errors")
    assert fs.errors(1)[0].region_not_found.region_id == source.id
    assert [c.id for c in ft.errors(2)[0].epoch_not_match.current_regions] == [target.id]
    # the merged-away id is unknown from now on
    again = feeds(source.leader_store)
    again.register(source, 3, 0)
    wait_until(lambda: again.errors(3))
    assert again.errors(3)[0].region_not_found.region_id == source.id
    assert [r.id for r in table_regions(ec.pd_addr, table_id(ec, "d", "t"))] == [
        regions[0].id, target.id, *[r.id for r in regions[3:]]]
    with pytest.raises(FaultError, match="not adjacent"):
        ec.faults.merge(regions[0].id, regions[3].id)


def test_transfer_leader_sends_not_leader(ec: EmbeddedCluster, sql: UpstreamClient,
                                          feeds: Callable[[int], FeedClient]) -> None:
    tid, regions = _table(ec, sql, regions=2)
    r = regions[1]
    old = feeds(r.leader_store)
    old.register(r, 1, 0)
    wait_until(lambda: old.initialized(1))
    to = r.leader_store % 3 + 1
    moved = ec.faults.transfer_leader(r.id, to)
    assert moved.leader_store_id == to and moved.version == r.version  # no epoch change
    wait_until(lambda: old.errors(1), what="not_leader")
    nl = old.errors(1)[0].not_leader
    assert (nl.region_id, nl.leader.store_id) == (r.id, to)
    assert table_regions(ec.pd_addr, tid)[1].leader_store == to
    new = feeds(to)
    new.register(r, 2, 0)
    wait_until(lambda: new.initialized(2))
    ts = sql.execute("INSERT INTO d.t VALUES (-200, 1)")[0].commit_ts
    wait_until(lambda: ts in changes_by_commit(new, [2]), what="the new leader streams the region")
    refused = feeds(r.leader_store)
    refused.register(r, 3, 0)
    wait_until(lambda: refused.errors(3))
    assert refused.errors(3)[0].not_leader.leader.store_id == to


def test_stop_store_breaks_streams_until_started(ec: EmbeddedCluster, sql: UpstreamClient,
                                                 feeds: Callable[[int], FeedClient]) -> None:
    _tid, regions = _table(ec, sql)
    r = next(x for x in regions if x.leader_store == 2)
    fc = feeds(2)
    fc.register(r, 1, 0)
    wait_until(lambda: fc.initialized(1))
    dropped, moved = ec.faults.stop_store(2)
    assert (dropped, moved) == (1, 0)
    wait_until(lambda: fc.error_code() == grpc.StatusCode.UNAVAILABLE, what="stream broken with UNAVAILABLE")
    assert "store 2 is stopped" in fc.error.details()  # type: ignore[union-attr]
    refused = feeds(2)
    wait_until(lambda: refused.error_code() == grpc.StatusCode.UNAVAILABLE, what="new stream refused")
    with UpstreamClient(ec.pd_addr) as c:
        assert [s.state for s in c.all_stores()] == ["Up", "Offline", "Up"]
    # other stores keep serving
    ok = feeds(1)
    r1 = next(x for x in regions if x.leader_store == 1)
    ok.register(r1, 1, 0)
    wait_until(lambda: ok.initialized(1))
    ec.faults.start_store(2)
    back = feeds(2)
    back.register(r, 2, 0)
    wait_until(lambda: back.initialized(2), what="store 2 serves again")


def test_stop_store_moving_leaders(ec: EmbeddedCluster, sql: UpstreamClient,
                                   feeds: Callable[[int], FeedClient]) -> None:
    _tid, regions = _table(ec, sql)
    led = [x for x in regions if x.leader_store == 3]
    _, moved = ec.faults.stop_store(3, move_leaders=True)
    assert moved >= len(led)
    after = {x.id: x for x in table_regions(ec.pd_addr, table_id(ec, "d", "t"))}
    assert all(after[x.id].leader_store in (1, 2) for x in led)
    r = after[led[0].id]
    fc = feeds(r.leader_store)
    fc.register(r, 1, 0)
    wait_until(lambda: fc.initialized(1))


def test_drop_streams(ec: EmbeddedCluster, sql: UpstreamClient, feeds: Callable[[int], FeedClient]) -> None:
    _tid, regions = _table(ec, sql, regions=2)
    f1, f2 = feeds(1), feeds(2)
    wait_until(lambda: ec.call(lambda: sum(n.cdc.connection_count for n in ec.cluster.stores.values())) == 2)
    assert ec.faults.drop_streams(1) == 1
    wait_until(lambda: f1.error_code() == grpc.StatusCode.UNAVAILABLE)
    assert f2.error is None
    assert ec.faults.drop_streams() == 1
    wait_until(lambda: f2.error_code() == grpc.StatusCode.UNAVAILABLE)
    again = feeds(1)  # the store is still up
    r = next(x for x in regions if x.leader_store == 1)
    again.register(r, 1, 0)
    wait_until(lambda: again.initialized(1))


def test_busy_store_answers_server_is_busy_for_a_while(ec: EmbeddedCluster, sql: UpstreamClient,
                                                       feeds: Callable[[int], FeedClient]) -> None:
    _tid, regions = _table(ec, sql, regions=2)
    r = regions[0]
    fc = feeds(r.leader_store)
    ec.faults.busy(r.leader_store, 0.5)
    fc.register(r, 1, 0)
    wait_until(lambda: fc.errors(1))
    busy = fc.errors(1)[0].server_is_busy
    assert "busy" in busy.reason and busy.backoff_ms > 0

    def retried() -> bool:
        n = len(fc.errors(2))
        fc.register(r, 2, 0)
        wait_until(lambda: len(fc.errors(2)) > n or fc.initialized(2))
        return fc.initialized(2)

    wait_until(retried, timeout=10, what="registration accepted once the busy period ends")


def test_hold_lock_holds_resolved_ts_until_released(ec: EmbeddedCluster, sql: UpstreamClient,
                                                    feeds: Callable[[int], FeedClient]) -> None:
    tid, regions = _table(ec, sql, regions=2, rows="INSERT INTO t VALUES (-100, 1), (100, 2)")
    locked = next(x for x in regions if x.start_key <= keycodec.row_key(tid, 100) < x.end_key)
    free = next(x for x in regions if x.start_key <= keycodec.row_key(tid, -100) < x.end_key)
    held = ec.faults.hold_lock("d", "t", handles=[100])
    assert held.keys == (keycodec.row_key(tid, 100),)
    fl, ff = feeds(locked.leader_store), feeds(free.leader_store)
    fl.register(locked, 1, 0)
    ff.register(free, 2, 0)
    wait_until(lambda: fl.initialized(1) and ff.initialized(2))
    assert [x.type for x in fl.rows(1)] == [T.COMMITTED, T.PREWRITE, T.INITIALIZED]
    wait_until(lambda: ff.resolved(2, free.id) > held.start_ts, what="the free region advances")
    wait_until(lambda: len([x for x in fl.snapshot() if x[0] == "resolved"]) >= 3, what="resolved ts batches")
    assert 0 < fl.resolved(1, locked.id) <= held.start_ts
    # writers of the locked key conflict while it is held
    with pytest.raises(Exception, match=r"conflict|locked"):
        sql.execute("UPDATE d.t SET b = 9 WHERE a = 100")
    commit_ts = ec.faults.release_lock(held.start_ts)
    assert commit_ts > held.start_ts
    wait_until(lambda: fl.resolved(1, locked.id) >= commit_ts, what="resolved ts passes the commit")
    assert commit_ts in changes_by_commit(fl, [1])
    # rolled back: a ROLLBACK row, the resolved ts moves on, the data is unchanged
    held2 = ec.faults.hold_lock("d", "t", count=5)
    assert len(held2.keys) == 2
    assert ec.faults.release_lock(held2.start_ts, commit=False) == 0
    wait_until(lambda: any(x.type == T.ROLLBACK for x in fl.rows(1)), what="rollback row")
    ts = sql.get_ts()
    wait_until(lambda: fl.resolved(1, locked.id) >= ts)
    assert sql.query("SELECT a, b FROM d.t ORDER BY a") == [{"a": -100, "b": 1}, {"a": 100, "b": 2}]
    with pytest.raises(FaultError, match="no held lock"):
        ec.faults.release_lock(held2.start_ts)


def test_split_table_statement(ec: EmbeddedCluster, sql: UpstreamClient) -> None:
    sql.execute("USE d; CREATE TABLE s (a INT PRIMARY KEY)")
    tid = table_id(ec, "d", "s")
    [res] = sql.execute("SPLIT TABLE d.s BETWEEN (0) AND (1000) REGIONS 10")
    assert res.rows == [{"TOTAL_SPLIT_REGION": 9, "SCATTER_FINISH_RATIO": 1.0}]  # 0 already splits the table
    starts = [r.start_key for r in table_regions(ec.pd_addr, tid)]
    assert [keycodec.row_key(tid, h) for h in range(0, 1000, 100)] == starts[1:]
    [res] = sql.execute("SPLIT TABLE d.s BY (5), (-5), (5)")
    assert res.rows[0]["TOTAL_SPLIT_REGION"] == 2
    with pytest.raises(Exception, match="must be greater"):
        sql.execute("SPLIT TABLE d.s BETWEEN (10) AND (0) REGIONS 2")
    with pytest.raises(Exception, match="doesn't exist"):
        sql.execute("SPLIT TABLE d.nope BY (1)")


def test_auto_split_by_key_count() -> None:
    with EmbeddedCluster(ClusterConfig(stores=2, split_region_keys=40, min_ts_interval_ms=50)) as ec, \
            UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY, b INT)")
        tid = table_id(ec, "d", "t")
        assert len(table_regions(ec.pd_addr, tid)) == 2
        for i in range(0, 200, 20):
            c.execute("INSERT INTO d.t VALUES " + ", ".join(f"({h}, {h})" for h in range(i, i + 20)))
        wait_until(lambda: len(table_regions(ec.pd_addr, tid)) >= 4, what="automatic splits")
        regions = table_regions(ec.pd_addr, tid)
        start, end = keycodec.table_span(tid)
        counts = ec.call(lambda: [ec.cluster.store.range_stats(r.start_key, r.end_key)[0] for r in regions])
        assert sum(counts) == 200 and max(counts) < 200
        assert regions[0].start_key == start and regions[-1].end_key == end


def test_fault_errors(ec: EmbeddedCluster, sql: UpstreamClient) -> None:
    _table(ec, sql, regions=2)
    with pytest.raises(FaultError, match="region 424242 does not exist"):
        ec.faults.transfer_leader(424242, 1)
    with pytest.raises(FaultError, match="store 9 does not exist"):
        ec.faults.stop_store(9)
    with pytest.raises(FaultError, match="does not exist"):
        ec.faults.hold_lock("d", "nope")
    with pytest.raises(FaultError, match="no row with handle"):
        ec.faults.hold_lock("d", "t", handles=[12345])
    with pytest.raises(FaultError, match="no rows to lock"):
        ec.faults.hold_lock("d", "t")
    assert ec.faults.merge_table("d", "t")[0].start_key == keycodec.table_span(table_id(ec, "d", "t"))[0]
    assert len(ec.faults.table_regions("d", "t")) == 1
