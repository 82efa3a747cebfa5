"""Seed 000 at full size: one span of 500,000 regions, 10 % of them holes, a resolved-ts batch of every region
every 200 ms — with ``advance-interval-in-ms`` 100 and 0 side by side in one run.

The schedule is simulated (no sleeping); the work is real and measured in CPU time. Each 200 ms round the
store's batch arrives as ``CHUNKS`` ResolvedTs messages spread over the round; they go through the
:class:`EventStream` (coalescing on) into the span's consumer, which hands each popped batch to the
:class:`ResolvedTsAdvancer` as one vectorized update. The consumer is a discrete-event model: it is busy for
the CPU time its work really took, so if it could not keep up, events would pile up in the stream (peak
pending bytes would show it). Between rounds ``CHURN`` regions fail (their ranges become holes at their
resolved ts) and the ``CHURN`` oldest holes are locked again, so 10 % of the span is always unlocked.

Reported per mode: CPU time to process one popped batch and one whole round (p50/p99), span resolved-ts lag
(now - span ts; with holes present this is dominated by how long a hole lives, ``50,000 / CHURN`` rounds),
staleness (the exact minimum at that moment - the span ts: what throttling costs in freshness), minimum
computations, peak pending bytes, RSS.

Run: ``.venv/bin/pytest tests/bench/test_puller_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_SECONDS`` (simulated duration, default 60), ``CDCFLOW_BENCH_REGIONS`` (500000),
``CDCFLOW_BENCH_CHUNKS`` (messages per round, 10), ``CDCFLOW_BENCH_CHURN`` (regions per round, 1000).
"""

from __future__ import annotations

import gc
import os
import resource
import time
from dataclasses import dataclass, field

import numpy as np
from prometheus_client import CollectorRegistry

from cdc_core.puller.event_stream import EventKind, EventStream
from cdc_core.puller.range_lock import LockedRange, RangeLock
from cdc_core.puller.ts_advancer import ResolvedTsAdvancer

SECONDS = float(os.environ.get("CDCFLOW_BENCH_SECONDS", "60"))
REGIONS = int(os.environ.get("CDCFLOW_BENCH_REGIONS", "500000"))
CHUNKS = int(os.environ.get("CDCFLOW_BENCH_CHUNKS", "10"))
CHURN = int(os.environ.get("CDCFLOW_BENCH_CHURN", "1000"))
HOLE_RATIO = 0.10
ROUND_MS = 200
START_MS = 1_700_000_000_000


def tso(ms: int) -> int:
    return ms << 18


def key(i: int) -> bytes:
    return b"t\x80\x00\x00\x00\x00\x00\x00\x2a_r%08d" % i


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Result:
    interval: int
    setup_s: float = 0.0
    batch_ms: list[float] = field(default_factory=list)
    round_ms: list[float] = field(default_factory=list)
    lag_ms: list[int] = field(default_factory=list)
    stale_ms: list[float] = field(default_factory=list)
    computations: int = 0
    peak_pending: int = 0
    rss_mb: float = 0.0
    final_ts: int = 0


def run(interval: int) -> Result:
    res = Result(interval)
    rng = np.random.default_rng(42)
    t0 = time.process_time()
    lock = RangeLock(key(0), key(REGIONS), tso(START_MS))
    hole_idx = rng.choice(REGIONS, size=int(REGIONS * HOLE_RATIO), replace=False)
    is_hole = np.zeros(REGIONS, dtype=np.bool_)
    is_hole[hole_idx] = True
    states: dict[int, LockedRange] = {}
    for i in np.flatnonzero(~is_hole).tolist():
        st = lock.try_lock(key(i), key(i + 1), i + 1, 1).state
        assert st is not None
        lock.set_initialized(st)
        states[i] = st
    holes = [int(i) for i in rng.permutation(hole_idx)]  # FIFO: the oldest hole is re-locked first
    version = 2
    # TiKV reports regions per store; a store's message covers a slice of them.
    all_ids = rng.permutation(np.arange(1, REGIONS + 1, dtype=np.uint64))
    chunks = np.array_split(all_ids, CHUNKS)
    res.setup_s = time.process_time() - t0

    stream = EventStream(registry=CollectorRegistry())
    stream.add_area("cf")  # 1 GiB
    stream.add_path("cf", "span")
    now = START_MS
    adv = ResolvedTsAdvancer(
        lock, span="bench", advance_interval_ms=interval, clock_ms=lambda: now, registry=CollectorRegistry()
    )
    consumer_at = float(START_MS)  # sim time at which the consumer is free

    def consume_until(t: float) -> None:
        nonlocal consumer_at
        while consumer_at < t and not stream.path("span").empty:
            c0 = time.process_time()
            for ev in stream.pop_batch("span"):
                if ev.kind is EventKind.RESOLVED:
                    assert ev.region_ids is not None
                    adv.on_resolved_batch(ev.region_ids, ev.ts, now_ms=int(consumer_at))
            stream.done("span")
            spent = (time.process_time() - c0) * 1000
            res.batch_ms.append(spent)
            consumer_at += spent
        consumer_at = max(consumer_at, t)

    rounds = int(SECONDS * 1000 // ROUND_MS)
    gc.collect()
    for r in range(rounds):
        round_start = START_MS + r * ROUND_MS
        # Region churn (region workers, not the consumer): fail CHURN regions, re-lock the CHURN oldest holes.
        for i in rng.choice(np.fromiter(states.keys(), dtype=np.int64), size=CHURN, replace=False).tolist():
            lock.unlock(states.pop(i))
            holes.append(i)
        for i in holes[:CHURN]:
            st = lock.try_lock(key(i), key(i + 1), i + 1, version)
            assert st.state is not None
            lock.set_initialized(st.state)
            states[i] = st.state
        del holes[:CHURN]
        version += 1
        before = len(res.batch_ms)
        ts = tso(round_start)
        for c, ids in enumerate(chunks):
            arrive = round_start + c * ROUND_MS / CHUNKS
            consume_until(arrive)
            now = int(arrive)
            stream.push_resolved("span", ids, ts)
            res.peak_pending = max(res.peak_pending, stream.area("cf").pending_bytes)
        round_end = round_start + ROUND_MS
        consume_until(round_end)
        now = round_end
        c0 = time.process_time()
        adv.tick(now)
        res.batch_ms.append((time.process_time() - c0) * 1000)
        res.round_ms.append(sum(res.batch_ms[before:]))
        res.lag_ms.append(now - (adv.resolved_ts >> 18))
        res.stale_ms.append(((lock.min_resolved_ts() - adv.resolved_ts) >> 18) * 1.0)
    adv.advance_now(now)  # the throttled mode may owe the last computation
    res.computations = adv.min_computations
    res.final_ts = adv.resolved_ts
    res.rss_mb = rss_mb()
    return res


def pct(xs: list[float] | list[int], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if xs else float("nan")


def test_puller_bench() -> None:
    results = [run(100), run(0)]
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rounds = len(results[0].round_ms)
    warm = min(rounds - 1, int(REGIONS * HOLE_RATIO) // max(CHURN, 1))  # every initial hole re-locked once
    print()
    print(
        f"puller bench: {REGIONS:,} regions, {int(REGIONS * HOLE_RATIO):,} holes, a batch of every region each "
        f"{ROUND_MS} ms in {CHUNKS} messages, churn {CHURN}/round, {SECONDS:g} s simulated ({rounds} rounds)"
    )
    rows = [
        ("setup: lock all regions (s, CPU)", lambda x: f"{x.setup_s:.1f}"),
        ("batch CPU p50 (ms)", lambda x: f"{pct(x.batch_ms, 50):.2f}"),
        ("batch CPU p99 (ms)", lambda x: f"{pct(x.batch_ms, 99):.2f}"),
        ("round CPU p50 (ms, all regions)", lambda x: f"{pct(x.round_ms, 50):.1f}"),
        ("round CPU p99 (ms, all regions)", lambda x: f"{pct(x.round_ms, 99):.1f}"),
        ("resolved-ts lag p50 (ms)", lambda x: f"{pct(x.lag_ms, 50):.0f}"),
        ("resolved-ts lag p99 (ms)", lambda x: f"{pct(x.lag_ms, 99):.0f}"),
        ("lag p50 after the first hole turnover (ms)", lambda x: f"{pct(x.lag_ms[warm:], 50):.0f}"),
        ("lag p99 after the first hole turnover (ms)", lambda x: f"{pct(x.lag_ms[warm:], 99):.0f}"),
        ("staleness vs exact min p50 (ms)", lambda x: f"{pct(x.stale_ms, 50):.0f}"),
        ("staleness vs exact min p99 (ms)", lambda x: f"{pct(x.stale_ms, 99):.0f}"),
        ("min computations", lambda x: f"{x.computations:,}"),
        ("peak pending bytes", lambda x: f"{x.peak_pending:,}"),
        ("RSS after run (MiB)", lambda x: f"{x.rss_mb:.0f}"),
    ]
    w = max(len(name) for name, _ in rows)
    print(f"{'':<{w}}  {'interval 100 ms':>16}  {'interval 0':>16}")
    for name, fmt in rows:
        print(f"{name:<{w}}  {fmt(results[0]):>16}  {fmt(results[1]):>16}")
    print(f"{'peak RSS of the process (MiB)':<{w}}  {peak_rss:>16.0f}")
    # Both modes see the same schedule; at the end both have caught up with the same minimum.
    assert results[0].final_ts == results[1].final_ts
