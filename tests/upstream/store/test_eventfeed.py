"""EventFeed: incremental scan, INITIALIZED, live rows, resolved ts, region errors, deregister."""
from __future__ import annotations

import random
import threading
from typing import Any

import grpc
import pytest
from wire.eventfeed import (
    FeedClient,
    RegionRef,
    T,
    changes_by_commit,
    int_row,
    ref,
    register_all,
    scan_regions,
    table_id,
    table_regions,
    wait_resolved,
    wait_until,
)
from wire.pd import PdWire

from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import key as keycodec
from cdc_core.codec.memcomparable import encode_bytes
from cdc_core.errors import UpstreamError
from cdc_core.schema import ddl_history
from cdc_core.upstream.store import cdc_service
from cdc_core.upstream.store.mvcc import Mutation, Op


def _table(client: Any, db: str, cluster: Any, sql: str = "") -> tuple[int, list[RegionRef]]:
    client.execute(f"USE {db}; CREATE TABLE t (a INT PRIMARY KEY, b INT); {sql}")
    tid = table_id(cluster, db, "t")
    return tid, table_regions(cluster.pd_addr, tid)


def test_table_gets_two_regions_split_at_handle_zero(upstream_cluster: Any, upstream_client: Any,
                                                      fresh_db: str) -> None:
    tid, regions = _table(upstream_client, fresh_db, upstream_cluster)
    start, end = keycodec.table_span(tid)
    assert [(r.start_key, r.end_key) for r in regions] == [(start, keycodec.row_key(tid, 0)),
                                                           (keycodec.row_key(tid, 0), end)]


def test_scan_then_initialized_then_live(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                         feed: FeedClient) -> None:
    tid, regions = _table(upstream_client, fresh_db, upstream_cluster)
    c1 = upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES (-1, 0), (1, 10), (2, 20)")[0].commit_ts
    c2 = upstream_client.execute(f"UPDATE {fresh_db}.t SET b = 11 WHERE a = 1")[0].commit_ts
    c3 = upstream_client.execute(f"DELETE FROM {fresh_db}.t WHERE a = 2")[0].commit_ts
    k = lambda h: keycodec.row_key(tid, h)  # noqa: E731
    ids = register_all(feed, regions, 0, 1)
    neg, pos = (feed.rows(i) for i in ids)
    assert [(r.type, r.key, r.commit_ts) for r in neg] == [(T.COMMITTED, k(-1), c1), (T.INITIALIZED, b"", 0)]
    assert [(r.type, r.op_type, r.key, r.commit_ts, r.value, r.old_value) for r in pos] == [
        (T.COMMITTED, T.Row.PUT, k(1), c1, int_row(1, 10), b""),
        (T.COMMITTED, T.Row.PUT, k(1), c2, int_row(1, 11), int_row(1, 10)),
        (T.COMMITTED, T.Row.PUT, k(2), c1, int_row(2, 20), b""),
        (T.COMMITTED, T.Row.DELETE, k(2), c3, b"", int_row(2, 20)),
        (T.INITIALIZED, 0, b"", 0, b"", b""),
    ]
    # live, one region: 1PC (TiDB's default) -- no lock, one COMMITTED row with its value and old value, as TiKV
    # sends a 1PC write; then a resolved ts that covers it
    c4 = upstream_client.execute(f"UPDATE {fresh_db}.t SET b = 12 WHERE a = 1")[0].commit_ts
    wait_resolved(feed, ids, regions, c4)
    live = [r for r in feed.rows(ids[1]) if r.type in (T.PREWRITE, T.COMMIT, T.COMMITTED) and r.commit_ts != c1
            and r.commit_ts not in (c2, c3)]
    assert [(r.type, r.key, r.commit_ts) for r in live] == [(T.COMMITTED, k(1), c4)]
    assert live[0].value == int_row(1, 12) and live[0].old_value == int_row(1, 11) and live[0].start_ts < c4
    # live with 1PC and async commit off (2PC): PREWRITE (value, old value) then COMMIT
    c5 = upstream_client.execute("SET tidb_enable_1pc = OFF; SET tidb_enable_async_commit = OFF; "
                                 f"UPDATE {fresh_db}.t SET b = 13 WHERE a = 1; SET tidb_enable_1pc = ON; "
                                 "SET tidb_enable_async_commit = ON")[2].commit_ts
    wait_resolved(feed, ids, regions, c5)
    live = [r for r in feed.rows(ids[1]) if r.type in (T.PREWRITE, T.COMMIT)]
    assert [(r.type, r.key) for r in live] == [(T.PREWRITE, k(1)), (T.COMMIT, k(1))]
    assert live[0].value == int_row(1, 13) and live[0].old_value == int_row(1, 12)
    assert live[1].commit_ts == c5 and live[1].start_ts == live[0].start_ts < c5
    order = [(kind, p.type if kind == "row" else p) for kind, rq, _, p in feed.snapshot() if rq == ids[1]]
    for ts, row_type in ((c4, T.COMMITTED), (c5, T.COMMIT)):
        at = next(i for i, (kind, p) in enumerate(order) if kind == "row" and p == row_type
                  and (row_type != T.COMMITTED or i > order.index(("row", T.INITIALIZED))))
        assert all(x < ts for kind, x in order[:at] if kind == "resolved")


def test_the_live_rows_of_one_write_come_in_few_events(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                                       feed: FeedClient) -> None:
    """A 2PC write of 300 rows in one region: its PREWRITE rows and then its COMMIT rows reach the feed in events of
    many rows (up to 32 KiB each), as TiKV's delegate sinks a command batch, in the order the store wrote them."""
    tid, regions = _table(upstream_client, fresh_db, upstream_cluster)
    ids = register_all(feed, regions, 0, 1)
    wait_until(lambda: all(feed.initialized(i) for i in ids))
    before = feed.row_events[ids[1]]
    values = ", ".join(f"({h}, {h})" for h in range(1, 301))
    ts = upstream_client.execute("SET tidb_enable_1pc = OFF; SET tidb_enable_async_commit = OFF; "
                                 f"INSERT INTO {fresh_db}.t VALUES {values}; SET tidb_enable_1pc = ON; "
                                 "SET tidb_enable_async_commit = ON")[2].commit_ts
    wait_resolved(feed, ids, regions, ts)
    live = [r for r in feed.rows(ids[1]) if r.type in (T.PREWRITE, T.COMMIT)]
    assert [r.type for r in live] == [T.PREWRITE] * 300 + [T.COMMIT] * 300
    assert sorted(r.key for r in live[:300]) == [keycodec.row_key(tid, h) for h in range(1, 301)]
    assert all(r.commit_ts == ts for r in live[300:])
    assert feed.row_events[ids[1]] - before <= 10, "each live row came in an event of its own"


def test_checkpoint_filters_scan_and_old_value_is_optional(upstream_cluster: Any, upstream_client: Any,
                                                           fresh_db: str, feed: FeedClient) -> None:
    _tid, regions = _table(upstream_client, fresh_db, upstream_cluster, "INSERT INTO t VALUES (1, 1)")
    c2 = upstream_client.execute(f"UPDATE {fresh_db}.t SET b = 2")[0].commit_ts
    feed.register(regions[1], 7, c2 - 1, old_value=False)
    wait_until(lambda: feed.initialized(7))
    rows = feed.rows(7)
    assert [(r.type, r.commit_ts, r.old_value) for r in rows] == [(T.COMMITTED, c2, b""), (T.INITIALIZED, 0, b"")]


def test_request_range_narrows_the_region(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                          feed: FeedClient) -> None:
    tid, regions = _table(upstream_client, fresh_db, upstream_cluster, "INSERT INTO t VALUES (1, 1), (5, 5)")
    feed.register(regions[1], 3, 0, start_key=keycodec.row_key(tid, 2), end_key=keycodec.row_key(tid, 10))
    wait_until(lambda: feed.initialized(3))
    assert [r.key for r in feed.rows(3) if r.type == T.COMMITTED] == [keycodec.row_key(tid, 5)]


def test_a_range_that_is_not_memcomparable_encoded_observes_the_whole_region(
        upstream_cluster: Any, upstream_client: Any, fresh_db: str, feed: FeedClient) -> None:
    """TiKV takes EventFeed ranges memcomparable-encoded; a raw range does not decode, and it falls back to the
    region's own range (rows outside the asked-for range then arrive too)."""
    tid, regions = _table(upstream_client, fresh_db, upstream_cluster, "INSERT INTO t VALUES (1, 1), (5, 5)")
    feed.register(regions[1], 4, 0, start_key=keycodec.row_key(tid, 2), end_key=keycodec.row_key(tid, 10),
                  raw_range=True)
    wait_until(lambda: feed.initialized(4))
    assert [r.key for r in feed.rows(4) if r.type == T.COMMITTED] == [keycodec.row_key(tid, 1),
                                                                      keycodec.row_key(tid, 5)]


def test_pd_keeps_region_boundaries_memcomparable_encoded(upstream_cluster: Any, upstream_client: Any,
                                                          fresh_db: str) -> None:
    tid, _ = _table(upstream_client, fresh_db, upstream_cluster)
    start, end = keycodec.table_span(tid)
    with PdWire(upstream_cluster.pd_addr) as pd:
        got = pd.scan_regions(encode_bytes(start), encode_bytes(end)).regions
        assert [r.region.start_key for r in got] == [encode_bytes(start), encode_bytes(keycodec.row_key(tid, 0))]
        assert pd.region(encode_bytes(keycodec.row_key(tid, 7))).region.start_key == \
            encode_bytes(keycodec.row_key(tid, 0))
        with pytest.raises(grpc.RpcError, match="not memcomparable-encoded"):
            pd.region(start)  # a raw key


def test_lock_is_scanned_as_prewrite_and_holds_resolved_ts(upstream_cluster: Any, upstream_client: Any,
                                                           fresh_db: str, feed: FeedClient) -> None:
    tid, regions = _table(upstream_client, fresh_db, upstream_cluster)
    c = upstream_cluster.cluster
    key = keycodec.row_key(tid, 3)
    value = int_row(3, 3)

    def prewrite() -> int:
        start = c.tso.next()
        c.store.prewrite([Mutation(key, Op.PUT, value)], key, start)
        return start

    start_ts = upstream_cluster.call(prewrite)
    ids = register_all(feed, regions, 0, 1)
    # (what follows INITIALIZED may include the lock's heartbeat prewrites)
    assert [(r.type, r.key, r.start_ts, r.value) for r in feed.rows(ids[1])][:2] == [
        (T.PREWRITE, key, start_ts, value), (T.INITIALIZED, b"", 0, b"")]
    # the other region moves on; the locked one stays at or below the lock's start ts
    wait_until(lambda: feed.resolved(ids[0], regions[0].id) > start_ts, what="unlocked region advances")
    wait_until(lambda: sum(1 for kind, rq, _, _ in feed.snapshot() if kind == "resolved" and rq == ids[1]) >= 3,
               what="several resolved ts batches for the locked region")
    assert 0 < feed.resolved(ids[1], regions[1].id) <= start_ts
    commit_ts = upstream_cluster.call(lambda: (ts := c.tso.next(), c.store.commit([key], start_ts, ts))[0])
    wait_resolved(feed, ids, regions, commit_ts)
    assert changes_by_commit(feed, ids)[commit_ts] == [(key, T.Row.PUT, value, b"")]
    assert upstream_client.query(f"SELECT b FROM {fresh_db}.t") == [{"b": 3}]


def test_region_errors(upstream_cluster: Any, upstream_client: Any, fresh_db: str, feed: FeedClient) -> None:
    _, regions = _table(upstream_client, fresh_db, upstream_cluster)
    r = regions[0]
    feed.register(RegionRef(999_999, r.start_key, r.end_key, 1, 1), 1, 0)
    feed.register(r, 2, 0, epoch=(r.version - 1, r.conf_ver))
    feed.register(r, 3, 0)
    feed.register(r, 3, 0)
    wait_until(lambda: feed.errors(1) and feed.errors(2) and feed.errors(3), what="three errors")
    assert feed.errors(1)[0].region_not_found.region_id == 999_999
    current = feed.errors(2)[0].epoch_not_match.current_regions
    assert [(x.id, x.region_epoch.version) for x in current] == [(r.id, r.version)]
    assert feed.errors(3)[0].duplicate_request.region_id == r.id


def test_deregister_stops_a_region(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                   feed: FeedClient) -> None:
    _tid, regions = _table(upstream_client, fresh_db, upstream_cluster)
    feed.register(regions[1], 1, 0)
    wait_until(lambda: feed.initialized(1))
    feed.deregister(regions[1].id, 1)
    # The store reads a stream's requests in order: once a later request is initialized, the deregister has
    # been handled, and the insert below cannot reach request 1 (sent alone, it raced the insert).
    feed.register(regions[0], 3, 0)
    wait_until(lambda: feed.initialized(3))
    ts = upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES (1, 1)")[0].commit_ts
    feed.register(regions[1], 2, 0)  # same stream, after the insert: FIFO puts request 1's rows first
    wait_until(lambda: feed.initialized(2))
    assert [r.commit_ts for r in feed.rows(2) if r.type == T.COMMITTED] == [ts]
    assert [r.type for r in feed.rows(1)] == [T.INITIALIZED]
    n = len([x for x in feed.snapshot() if x[1] == 1])
    wait_until(lambda: feed.resolved(2, regions[1].id) > ts)
    assert len([x for x in feed.snapshot() if x[1] == 1]) == n  # no resolved ts for a deregistered region


def test_split_sends_epoch_not_match(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                     feed: FeedClient) -> None:
    # New tables land in the region between the user tables and TiDB's system tables, whose ids are the
    # largest (metadef.TiDBDDLHistoryTableID is below TiDBDDLJobTableID).
    system_start = keycodec.table_span(ddl_history.HISTORY_TABLE_ID)[0]
    [gap, *_] = scan_regions(upstream_cluster.pd_addr, keycodec.table_span(ddl_history.HISTORY_TABLE_ID - 1)[1],
                             system_start)
    assert gap.end_key == system_start
    feed.register(gap, 1, 0)
    wait_until(lambda: feed.initialized(1))
    upstream_client.execute(f"CREATE TABLE {fresh_db}.newt (a INT PRIMARY KEY)")
    wait_until(lambda: feed.errors(1), what="epoch_not_match after the split")
    err = feed.errors(1)[0]
    # one batch split: [gap, t_r), [t_r, t_0), [t_0, t_s), [t_s, system tables) replace the gap region
    current = err.epoch_not_match.current_regions
    assert err.HasField("epoch_not_match") and len(current) == 4
    assert current[0].id == gap.id and ref(current[0]).start_key == gap.start_key
    assert ref(current[-1]).end_key == system_start


def test_resolved_ts_never_precedes_a_commit_it_covers(upstream_cluster: Any, upstream_client: Any,
                                                       fresh_db: str, feed_factory: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Property: while writers run, no COMMIT/COMMITTED at or below an earlier resolved ts of its region;
    every change arrives exactly once; the feed reproduces the table."""
    monkeypatch.setattr(cdc_service, "SCAN_KEYS_PER_STEP", 2)  # many scan steps: live rows race the scan
    tid, regions = _table(upstream_client, fresh_db, upstream_cluster)
    early = feed_factory()
    early_ids = register_all(early, regions, 0, 1)
    errors: list[BaseException] = []
    started = threading.Barrier(4)

    def writer(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with UpstreamClient(upstream_cluster.pd_addr) as c:
                started.wait()
                for i in range(25):
                    h = rnd.randint(-20, 20)
                    stmt = rnd.choice([
                        f"INSERT INTO t VALUES ({seed * 1000 + i}, {i})",
                        f"UPDATE t SET b = b + 1 WHERE a = {h} OR a = {-h}",
                        f"DELETE FROM t WHERE a = {h}",
                        f"BEGIN; UPDATE t SET b = {i} WHERE a < 0; "
                        f"INSERT INTO t VALUES ({-seed * 1000 - i}, 0); COMMIT",
                    ])
                    try:
                        c.execute(f"USE {fresh_db}; {stmt}")
                    except UpstreamError as exc:
                        assert "conflict" in str(exc) or "Duplicate" in str(exc), exc
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s,)) for s in range(1, 4)]
    for t in threads:
        t.start()
    started.wait()
    late = feed_factory()  # registers while the writers run
    late_ids = register_all(late, regions, 0, 1)
    for t in threads:
        t.join(60)
    assert not errors, errors
    final_ts = upstream_client.get_ts()
    start, end = keycodec.table_span(tid)
    stored = upstream_cluster.call(lambda: upstream_cluster.cluster.store.scan(start, end, final_ts))
    assert len(stored) > 10
    for fc, ids in ((early, early_ids), (late, late_ids)):
        wait_resolved(fc, ids, regions, final_ts)
        for rq in ids:
            resolved = 0
            seen: set[tuple[bytes, int]] = set()
            for kind, r, _, payload in fc.snapshot():
                if r != rq:
                    continue
                if kind == "resolved":
                    assert payload >= resolved, "resolved ts went backwards"
                    resolved = payload
                elif kind == "row" and payload.type in (T.COMMIT, T.COMMITTED):
                    assert payload.commit_ts > resolved, (
                        f"commit {payload.commit_ts} after resolved ts {resolved} (request {rq})")
                    assert (payload.key, payload.commit_ts) not in seen, "duplicate change"
                    seen.add((payload.key, payload.commit_ts))
        # the feed's last version per key is exactly the table at final_ts
        latest: dict[bytes, tuple[int, int, bytes]] = {}
        for ts, changes in changes_by_commit(fc, ids).items():
            for key, op, value, _ in changes:
                if key not in latest or latest[key][0] < ts:
                    latest[key] = (ts, op, value)
        from_feed = sorted((k, v) for k, (_, op, v) in latest.items() if op == T.Row.PUT)
        assert from_feed == sorted(stored)
