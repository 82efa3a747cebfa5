"""Upstream scale figures: regions created/s and memory for 500,000 regions, ScanRegions throughput, and
the events/s one store streams to one feed (incremental scan and live prewrite+commit).

Run: ``.venv/bin/pytest tests/bench/test_upstream_scale_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_REGIONS`` (500000), ``CDCFLOW_BENCH_ROWS`` (rows for the feed bench, 200000).
"""

from __future__ import annotations

import gc
import itertools
import os
import queue
import threading
import time
import tracemalloc

import grpc
from wire.pd import PdWire

from cdc_core.codec import key as keycodec
from cdc_core.codec.memcomparable import encode_key
from cdc_core.proto import cdcpb_pb2, cdcpb_pb2_grpc, kvrpcpb_pb2, metapb_pb2
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.pd.regions import RegionManager
from cdc_core.upstream.store.mvcc import Mutation, Op

REGIONS = int(os.environ.get("CDCFLOW_BENCH_REGIONS", "500000"))
ROWS = int(os.environ.get("CDCFLOW_BENCH_ROWS", "200000"))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_bench_regions_created_per_second_and_memory() -> None:
    tid = 4242
    start, end = keycodec.table_span(tid)
    keys = [start, *(keycodec.row_key(tid, h) for h in range(1, REGIONS)), end]
    # rate and RSS growth, without tracing (tracemalloc slows allocation and costs memory itself)
    gc.collect()
    rss0 = _rss()
    m = RegionManager([1, 2, 3])
    t0 = time.perf_counter()
    m.split(keys)
    rate = REGIONS / (time.perf_counter() - t0)
    gc.collect()
    rss = _rss() - rss0
    del m
    gc.collect()
    # the Python heap the region map holds (the split keys, shared with the regions, are counted apart)
    tracemalloc.start()
    m = RegionManager([1, 2, 3])
    m.split(keys)
    heap, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    key_bytes = sum(len(k) + 33 for k in keys)  # a bytes object: 33 B header + its data
    print(f"\nregions: {REGIONS:,} created at {rate:,.0f}/s; region map heap {heap / 2**20:.1f} MiB "
          f"({heap / REGIONS:.0f} B/region) + keys {key_bytes / 2**20:.1f} MiB; "
          f"RSS +{rss / 2**20:.1f} MiB")
    assert len(m) == REGIONS + 2


def test_bench_scan_regions_throughput() -> None:
    with EmbeddedCluster(ClusterConfig(stores=3)) as ec:
        tid = 4243
        start, end = keycodec.table_span(tid)
        keys = [start, *(keycodec.row_key(tid, h) for h in range(1, REGIONS)), end]
        ec.call(lambda: ec.cluster.regions.split(keys), timeout=300)  # type: ignore[union-attr]
        t0 = time.perf_counter()
        n = calls = 0
        key, stop = encode_key(start), encode_key(end)  # PD keeps region boundaries memcomparable-encoded
        with PdWire(ec.pd_addr) as pd:
            while True:
                resp = pd.scan_regions(key, stop)
                calls += 1
                n += len(resp.regions)
                key = resp.regions[-1].region.end_key
                if key >= stop:
                    break
        dt = time.perf_counter() - t0
        print(f"\nScanRegions: {n:,} regions in {calls} calls, {dt:.2f}s ({n / dt:,.0f} regions/s, "
              f"{dt / calls * 1000:.1f} ms per 1024-region call)")
        assert n == REGIONS


class _Counter:
    """A bare EventFeed consumer: counts rows by type, no per-row bookkeeping."""

    def __init__(self, addr: str) -> None:
        self.channel = grpc.insecure_channel(addr)
        self.requests: queue.Queue[cdcpb_pb2.ChangeDataRequest | None] = queue.Queue()
        self.call = cdcpb_pb2_grpc.ChangeDataStub(self.channel).EventFeedV2(
            iter(self.requests.get, None), metadata=(("features", "stream-multiplexing"),))
        self.rows = 0
        self.initialized_at = 0.0
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        try:
            for msg in self.call:
                for ev in msg.events:
                    for row in ev.entries.entries:
                        if row.type == cdcpb_pb2.Event.INITIALIZED:
                            self.initialized_at = time.perf_counter()
                        else:
                            self.rows += 1
        except grpc.RpcError:
            pass

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()
        self.thread.join(10)
        self.channel.close()


def test_bench_events_per_second_one_store_one_feed() -> None:
    with EmbeddedCluster(ClusterConfig(stores=1, min_ts_interval_ms=200)) as ec:
        c = ec.cluster
        assert c is not None
        tid = 4244
        start, end = keycodec.table_span(tid)
        c_regions = ec.call(lambda: c.regions.split([start, end]))
        [region] = [r for r in c_regions if r.start_key == start]
        value = b"x" * 100

        def load(lo: int, hi: int) -> None:
            ts = c.tso.next()
            muts = [Mutation(keycodec.row_key(tid, h), Op.PUT, value) for h in range(lo, hi)]
            c.store.prewrite(muts, muts[0].key, ts)
            c.store.commit([m.key for m in muts], ts, c.tso.next())

        for lo in range(0, ROWS, 10_000):
            ec.call(lambda lo=lo: load(lo, min(lo + 10_000, ROWS)))
        feed = _Counter(ec.store_addr)
        try:
            t0 = time.perf_counter()
            feed.requests.put(cdcpb_pb2.ChangeDataRequest(
                header=cdcpb_pb2.Header(cluster_id=c.cluster_id, ticdc_version="8.5.0"),
                region_id=region.id, region_epoch=metapb_pb2.RegionEpoch(version=region.version,
                                                                         conf_ver=region.conf_ver),
                checkpoint_ts=0, start_key=encode_key(start), end_key=encode_key(end), request_id=1,
                extra_op=kvrpcpb_pb2.ReadOldValue,
                register=cdcpb_pb2.ChangeDataRequest.Register()))
            deadline = time.monotonic() + 300
            while (feed.rows < ROWS or not feed.initialized_at) and time.monotonic() < deadline:
                time.sleep(0.01)
            scan_s = feed.initialized_at - t0
            print(f"\nincremental scan: {ROWS:,} COMMITTED rows to one feed in {scan_s:.2f}s "
                  f"({ROWS / scan_s:,.0f} events/s)")
            # live: transactions of 100 rows, each row a PREWRITE and a COMMIT event
            live_rows = ROWS // 4
            before = feed.rows
            t1 = time.perf_counter()
            for lo in range(ROWS, ROWS + live_rows, 1000):
                ec.call(lambda lo=lo: [load(x, x + 100) for x in range(lo, lo + 1000, 100)])
            want = before + 2 * live_rows
            while feed.rows < want and time.monotonic() < deadline:
                time.sleep(0.01)
            live_s = time.perf_counter() - t1
            print(f"live: {2 * live_rows:,} PREWRITE+COMMIT events to one feed in {live_s:.2f}s "
                  f"({2 * live_rows / live_s:,.0f} events/s, writes included)")
            assert feed.rows == want
        finally:
            feed.close()


def test_bench_count_from_statistics_against_the_key_walk() -> None:
    """``COUNT(*)`` of a table of ``CDCFLOW_BENCH_COUNT_ROWS`` (1,000,000) ingested keys after 10,000 changes, at a
    ts 1,000 changes back (a window's barrier, the workload going on): the order statistics against the walk."""
    from cdc_core.upstream.store.mvcc import MvccStore

    rows = int(os.environ.get("CDCFLOW_BENCH_COUNT_ROWS", "1000000"))
    s = MvccStore()
    s.ingest(((keycodec.row_key(7, h), b"v" * 100) for h in range(rows)), 5)
    ts = 10
    for i in range(10_000):
        key = keycodec.row_key(7, (i * 7919) % (rows + 5000))
        op = Op.DELETE if i % 4 == 0 else Op.PUT
        s.prewrite([Mutation(key, op, b"w" if op is Op.PUT else b"")], key, ts)
        s.commit([key], ts, ts + 1)
        ts += 2
    at = ts - 2000
    start, end = keycodec.table_span(7)
    t0 = time.perf_counter()
    fast = s.count(start, end, at)
    fast_s = time.perf_counter() - t0
    s.index_scan_ratio = 0.0
    t0 = time.perf_counter()
    walked = s.count(start, end, at)
    walk_s = time.perf_counter() - t0
    print(f"\nCOUNT(*) of {rows:,} keys: statistics {fast_s * 1000:.2f} ms, walk {walk_s * 1000:.0f} ms "
          f"({walk_s / fast_s:,.0f}x)")
    assert fast == walked


def test_bench_a_pull_of_many_regions_from_one_checkpoint() -> None:
    """A window's pull: ``CDCFLOW_BENCH_PULL_REGIONS`` (60) regions of a table of ``CDCFLOW_BENCH_COUNT_ROWS``
    (1,000,000) ingested keys, each scanned from one checkpoint (512 keys a step, as the CDC service asks) after
    50,000 changes. The kept set of keys changed after the checkpoint (``MvccStore._keys_after``) against what each
    region's scan did before it (written out here as the baseline): a pass over every version after the checkpoint
    for each step, or a walk of the region's keys when those versions outnumbered them -- with 60 regions of
    16,667 keys and 50,000 changes, the walk."""
    from cdc_core.upstream.store.mvcc import MvccStore

    rows = int(os.environ.get("CDCFLOW_BENCH_COUNT_ROWS", "1000000"))
    regions = int(os.environ.get("CDCFLOW_BENCH_PULL_REGIONS", "60"))
    s = MvccStore()
    s.ingest(((keycodec.row_key(7, h), b"v" * 100) for h in range(rows)), 5)
    ts, checkpoint = 10, 10
    for i in range(50_000):
        key = keycodec.row_key(7, (i * 7919) % rows)
        s.prewrite([Mutation(key, Op.PUT, b"w")], key, ts)
        s.commit([key], ts, ts + 1)
        ts += 2
    bounds = [keycodec.row_key(7, rows * i // regions) for i in range(regions)] + [keycodec.table_span(7)[1]]
    spans = list(itertools.pairwise(bounds))

    def kept() -> int:
        n = 0
        for lo, hi in spans:
            cur = None
            while True:
                recs, cur = s.versions_after(lo, hi, checkpoint, from_key=cur, key_limit=512)
                n += len(recs)
                if cur is None:
                    break
        return n

    def before_keeping() -> int:
        """Each step's keys as the store found them before: a pass over every version after the checkpoint,
        filtered to the step's range, or, when those outnumbered the range's keys, a walk of the range."""
        first = s._by_ts.bisect_left((checkpoint + 1, b""))
        after = len(s._by_ts) - first
        n = 0
        for lo, hi in spans:
            cur: bytes | None = None
            while True:
                if after < s._writes.bisect_left(hi) - s._writes.bisect_left(lo):
                    keys = sorted({k for _, k in s._by_ts.islice(first)
                                   if (k > cur if cur is not None else k >= lo) and k < hi})[:512]
                else:
                    keys = list(itertools.islice(s._writes.irange(cur or lo, hi, inclusive=(cur is None, False)),
                                                 512))
                n += sum(1 for k in keys for v in s.versions(k) if v.commit_ts > checkpoint)
                if len(keys) < 512:
                    break
                cur = keys[-1]
        return n

    t0 = time.perf_counter()
    before = before_keeping()
    before_s = time.perf_counter() - t0
    s._after.clear()
    t0 = time.perf_counter()
    now = kept()
    now_s = time.perf_counter() - t0
    print(f"\npull of {regions} regions of {rows:,} keys, 50,000 changes after the checkpoint: kept set "
          f"{now_s * 1000:.0f} ms, as before {before_s * 1000:.0f} ms (ratio {now_s / before_s:.3f})")
    assert now == before == 50_000
