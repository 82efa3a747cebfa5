"""EventStream: pause ≥ 80 % / resume < 50 % with the operator log lines, resolved-ts coalescing (bounded,
order-preserving, starvation-free), release of blocked paths with RESYNC, metrics — and seed 000 at small
scale: the same scenario stalls with coalescing and the blocked-path rule switched off, and does not with them.
Time comes from an injected clock; the consumers are driven step by step."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from cdc_core.puller.event_stream import EVENT_OVERHEAD_BYTES, EventKind, EventStream, RegionEvent
from cdc_core.puller.range_lock import RangeLock
from cdc_core.puller.ts_advancer import ResolvedTsAdvancer

PAUSE = "subscription client pause push region event"
RESUME = "subscription client resume push region event"


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def tso(ms: int) -> int:
    return ms << 18


def new_stream(clock: Clock | None = None, **kw: object) -> tuple[EventStream, CollectorRegistry]:
    reg = CollectorRegistry()
    return EventStream(registry=reg, clock_ms=clock or Clock(), **kw), reg  # type: ignore[arg-type]


def data_of(size: int) -> int:
    """Payload size so that the event costs exactly ``size`` bytes."""
    return size - EVENT_OVERHEAD_BYTES


# --- pause / resume -------------------------------------------------------------------------------
def test_pause_at_80_percent_and_resume_below_50_percent_with_log_lines() -> None:
    stream, reg = new_stream()
    stream.add_area("cf", max_pending_bytes=10_000)
    stream.add_path("cf", "span")
    with capture_logs() as logs:
        for i in range(7):
            stream.push_entries("span", i, b"x", data_of(1000))
        assert not stream.is_paused("cf")  # 70 %
        stream.push_entries("span", 7, b"x", data_of(1000))
        assert stream.is_paused("cf")  # 80 %
        assert reg.get_sample_value("cdcflow_puller_stream_paused", {"area": "cf"}) == 1
        assert reg.get_sample_value("cdcflow_puller_stream_pending_bytes", {"area": "cf"}) == 8000
        assert len(stream.pop_batch("span", max_events=3)) == 3
        assert stream.is_paused("cf")  # exactly 50 %: not below
        stream.pop_batch("span", max_events=1)
        assert not stream.is_paused("cf")  # 40 %
    events = [e for e in logs if e["event"] in (PAUSE, RESUME)]
    assert [e["event"] for e in events] == [PAUSE, RESUME]
    assert events[0]["pending_bytes"] == 8000 and events[0]["max_pending_bytes"] == 10_000
    assert events[1]["pending_bytes"] == 4000
    assert reg.get_sample_value("cdcflow_puller_stream_paused", {"area": "cf"}) == 0


def test_producers_wait_while_paused() -> None:
    async def main() -> None:
        stream, _ = new_stream()
        stream.add_area("cf", max_pending_bytes=1000)
        stream.add_path("cf", "span")
        stream.push_entries("span", 1, b"x", data_of(900))
        waiter = asyncio.create_task(stream.wait_pushable("cf"))
        await asyncio.sleep(0)
        assert not waiter.done()
        # Resolved ts are coalesced (bounded), so they are accepted while paused.
        await asyncio.wait_for(stream.wait_pushable("cf", EventKind.RESOLVED), 1)
        stream.pop_batch("span")
        await asyncio.wait_for(waiter, 5)

    asyncio.run(main())


# --- coalescing -----------------------------------------------------------------------------------
def test_coalescing_bounds_pending_resolved_by_the_number_of_regions() -> None:
    regions = np.arange(1, 1001, dtype=np.uint64)
    results = {}
    for coalesce in (True, False):
        stream, reg = new_stream(coalesce_resolved=coalesce)
        stream.add_area("cf", max_pending_bytes=1 << 40)
        path = stream.add_path("cf", "span")
        for i in range(100):
            stream.push_resolved("span", regions, tso(1000 + i))
            stream.push_resolved("span", regions[::2], tso(1000 + i))  # another store's subset
        results[coalesce] = (path.pending_resolved_regions, path.pending_bytes)
        if coalesce:
            assert reg.get_sample_value("cdcflow_puller_stream_resolved_coalesced_total", {"area": "cf"}) == 199
            (ev,) = stream.pop_batch("span")
            assert ev.kind is EventKind.RESOLVED and ev.region_ids is not None
            assert ev.region_ids.tolist() == regions.tolist()
            assert set(np.asarray(ev.ts).tolist()) == {tso(1099)}
    assert results[True][0] <= 1000  # bounded by the regions ...
    assert results[False][0] == 100 * 1500  # ... not by the backlog
    assert results[True][1] < results[False][1] / 50


def test_coalescing_never_delivers_a_region_ts_before_that_regions_earlier_data() -> None:
    stream, _ = new_stream()
    stream.add_area("cf")
    stream.add_path("cf", "span")
    stream.push_resolved("span", [1, 2, 3], tso(10))
    stream.push_entries("span", 2, "row@11", 10)
    stream.push_resolved("span", [1, 2, 3], tso(20))  # 1 and 3 join the head; 2 must wait behind its row
    stream.push_entries("span", 3, "row@21", 10)
    stream.push_resolved("span", [1, 2, 3], tso(30))  # 1 joins the head; 2 and 3 go to the tail
    batch = stream.pop_batch("span")
    seen: list[tuple[str, dict[int, int]]] = []
    for ev in batch:
        if ev.kind is EventKind.RESOLVED:
            assert ev.region_ids is not None
            ts = np.broadcast_to(np.asarray(ev.ts), ev.region_ids.shape)
            seen.append(("resolved", dict(zip(ev.region_ids.tolist(), ts.tolist(), strict=True))))
        else:
            seen.append((str(ev.payload), {}))
    assert seen == [
        ("resolved", {1: tso(30), 2: tso(10), 3: tso(20)}),
        ("row@11", {}),
        ("row@21", {}),
        ("resolved", {2: tso(30), 3: tso(30)}),
    ]


def test_a_slow_consumer_still_receives_resolved_ts() -> None:
    """Two rows and a resolved batch per step, two events popped per step: were the merged resolved event
    moved to the end of the queue on every push, it would never be delivered. The head keeps its place."""
    stream, _ = new_stream()
    stream.add_area("cf")
    stream.add_path("cf", "span")
    delivered = []
    for step in range(100):
        stream.push_entries("span", step % 7, "row", 10)
        stream.push_entries("span", (step + 3) % 7, "row", 10)
        stream.push_resolved("span", list(range(7)), tso(step))
        for ev in stream.pop_batch("span", max_events=2):
            if ev.kind is EventKind.RESOLVED:
                delivered.append(int(np.min(np.asarray(ev.ts))))
        stream.done("span")
    # The consumer is saturated by rows, so resolved ts trail the backlog, but they keep coming.
    assert len(delivered) >= 15 and delivered == sorted(delivered) and delivered[-1] >= tso(80)


# --- blocked paths ------------------------------------------------------------------------------
def test_a_blocked_path_is_released_with_resync_and_errors_kept() -> None:
    clock = Clock()
    stream, reg = new_stream(clock, blocked_after_ms=1000)
    stream.add_area("cf", max_pending_bytes=10_000)
    stream.add_path("cf", "ok")
    stream.add_path("cf", "stuck")
    stream.push_entries("stuck", 1, "a", data_of(1000))
    assert len(stream.pop_batch("stuck")) == 1  # the consumer takes it and never calls done()
    with capture_logs() as logs:
        for i in range(5):
            stream.push_entries("stuck", 10 + i, "row", data_of(1000))
        stream.push_error("stuck", 99, "epoch_not_match")
        stream.push_resolved("stuck", [10, 11], tso(5))
        stream.push_entries("ok", 50, "first", data_of(1500))
        stream.push_entries("ok", 51, "second", data_of(1500))
        assert stream.is_paused("cf")
        clock.now += 999
        stream.tick()
        assert [e.payload for e in stream.pop_batch("ok", max_events=1)] == ["first"]  # "ok" makes progress
        stream.done("ok")
        assert stream.is_paused("cf")  # 66 %, and "stuck" is not blocked long enough yet
        clock.now += 1
        stream.tick()
    assert not stream.is_paused("cf")  # released: 5 kB of data + the resolved batch dropped
    assert any(e["event"] == RESUME for e in logs)
    assert any(e["event"] == "subscription client release blocked path" for e in logs)
    stream.push_entries("stuck", 20, "row", data_of(100))  # dropped while released, and recorded
    batch = stream.pop_batch("stuck")
    assert batch[0].kind is EventKind.RESYNC and batch[0].region_ids is not None
    assert batch[0].region_ids.tolist() == [10, 11, 12, 13, 14, 20]
    assert [(e.kind, e.region_id) for e in batch[1:]] == [(EventKind.ERROR, 99)]
    assert [e.payload for e in stream.pop_batch("ok")] == ["second"]  # the healthy path lost nothing
    assert reg.get_sample_value("cdcflow_puller_stream_paths_released_total", {"area": "cf"}) == 1
    assert reg.get_sample_value("cdcflow_puller_stream_events_dropped_total", {"area": "cf", "kind": "data"}) == 6
    # After the RESYNC the path is normal again.
    stream.done("stuck")
    assert stream.push_entries("stuck", 21, "row", 10)


def test_metrics_count_pushed_and_popped_by_kind() -> None:
    stream, reg = new_stream()
    stream.add_area("cf")
    stream.add_path("cf", "span")
    stream.push_entries("span", 1, "r", 10)
    stream.push_resolved("span", [1], tso(1))
    stream.push_resolved("span", [1], tso(2))
    stream.push_error("span", 1, "e")
    stream.pop_batch("span")

    def v(name: str, kind: str) -> float | None:
        return reg.get_sample_value(f"cdcflow_puller_stream_events_{name}_total", {"area": "cf", "kind": kind})

    assert (v("pushed", "data"), v("pushed", "resolved"), v("pushed", "error")) == (1, 2, 1)
    assert (v("popped", "data"), v("popped", "resolved"), v("popped", "error")) == (1, 1, 1)
    assert reg.get_sample_value("cdcflow_puller_stream_pending_bytes", {"area": "cf"}) == 0


# --- seed 000 at small scale ------------------------------------------------------------------------
QUOTA = 512 * 1024
STEP_MS = 50
STEPS = 400  # 20 s
REGIONS = 2000
HOLES = 200


@dataclass
class Outcome:
    lag_ms: int
    paused_at_end: bool
    span_ts_history: list[int]
    resync: set[int] = field(default_factory=set)
    stuck_data_pushed: int = 0
    stuck_data_popped: int = 0
    stuck_data_dropped: int = 0
    stuck_data_queued: int = 0
    pauses: int = 0


def run_seed_000(coalesce: bool, release: bool) -> Outcome:
    """Two spans of one changefeed on one store stream. Span A: 2000 regions, 10 % holes being re-locked,
    a consumer that handles 2 events per step (a row and a resolved batch arrive per step). Span B: a consumer
    that takes one batch and never finishes (blocked).
    The store stream is one ordered inbox: the receiver pushes in order and stops at the first event the
    stream does not accept (a gRPC stream cannot skip a message)."""
    clock = Clock()
    stream, reg = new_stream(clock, coalesce_resolved=coalesce, release_blocked_paths=release, blocked_after_ms=1000)
    stream.add_area("cf", max_pending_bytes=QUOTA)
    stream.add_path("cf", "A")
    stream.add_path("cf", "B")
    start = clock.now
    lock = RangeLock(b"a00000", b"b", tso(start))
    holes = list(range(0, REGIONS, REGIONS // HOLES))
    for i in range(REGIONS):
        if i not in holes:
            s = lock.try_lock(b"a%05d" % i, b"a%05d" % (i + 1) if i + 1 < REGIONS else b"b", i + 1, 1).state
            assert s is not None
            lock.set_initialized(s)
    adv = ResolvedTsAdvancer(lock, span="A", advance_interval_ms=100, clock_ms=clock, registry=CollectorRegistry())
    a_ids = np.arange(1, REGIONS + 1, dtype=np.uint64)
    b_ids = np.arange(100_001, 100_001 + REGIONS, dtype=np.uint64)
    inbox: deque[tuple[str, str, int]] = deque()
    out = Outcome(lag_ms=0, paused_at_end=False, span_ts_history=[])

    def accepts(kind: str) -> bool:
        return not stream.is_paused("cf") or (kind == "resolved" and stream.coalesce_resolved)

    def step(n: int) -> None:
        clock.now += STEP_MS
        now_ts = tso(clock.now)
        # What the store sends this step.
        inbox.append(("A", "data", (n * 7) % REGIONS + 1))
        for j in range(8):
            inbox.append(("B", "data", 100_001 + (n * 8 + j) % REGIONS))
        inbox.append(("A", "resolved", now_ts))
        inbox.append(("B", "resolved", now_ts))
        # The receiver.
        while inbox and accepts(inbox[0][1]):
            path, kind, arg = inbox.popleft()
            if kind == "data":
                stream.push_entries(path, arg, "row", 4096 if path == "B" else 1024)
                out.stuck_data_pushed += path == "B"
            else:
                stream.push_resolved(path, a_ids if path == "A" else b_ids, arg)
        # Region workers re-lock 50 holes per step.
        for i in holes[:50]:
            s = lock.try_lock(b"a%05d" % i, b"a%05d" % (i + 1), i + 1, 2).state
            assert s is not None
            lock.set_initialized(s)
        del holes[:50]
        # Span A's consumer: 2 events per step.
        for ev in stream.pop_batch("A", max_events=2):
            if ev.kind is EventKind.RESOLVED:
                assert ev.region_ids is not None
                adv.on_resolved_batch(ev.region_ids, ev.ts)
        stream.done("A")
        adv.tick()
        # Span B's consumer: takes one batch at the start, then is stuck in its handler forever.
        if n == 0:
            out.stuck_data_popped += sum(1 for ev in stream.pop_batch("B", 1000) if ev.kind is EventKind.DATA)
        stream.tick()
        stream._check()
        out.span_ts_history.append(adv.resolved_ts)

    with capture_logs() as logs:
        for n in range(STEPS):
            step(n)
    out.pauses = sum(1 for e in logs if e["event"] == PAUSE)
    out.lag_ms = clock.now - (adv.resolved_ts >> 18)
    out.paused_at_end = stream.is_paused("cf")
    path_b = stream.path("B")
    out.resync = set(path_b.resync)
    out.stuck_data_queued = sum(1 for ev in path_b.queue if ev.kind is EventKind.DATA)
    dropped = reg.get_sample_value("cdcflow_puller_stream_events_dropped_total", {"area": "cf", "kind": "data"})
    out.stuck_data_dropped = int(dropped or 0)  # only B ever drops
    return out


def test_seed_000_stalls_without_coalescing_and_blocked_path_release() -> None:
    out = run_seed_000(coalesce=False, release=False)
    assert out.paused_at_end
    assert out.lag_ms > 15_000  # span A's resolved ts stopped seconds into the run and never moved again
    assert out.span_ts_history[-1] == out.span_ts_history[STEPS // 4]


def test_seed_000_coalescing_alone_still_stalls_on_the_blocked_path() -> None:
    out = run_seed_000(coalesce=True, release=False)
    assert out.paused_at_end and out.lag_ms > 15_000


def test_seed_000_release_without_coalescing_leaves_a_backlog_of_resolved_batches() -> None:
    """Releasing the blocked span alone un-stalls the area, but the resolved batches that piled up while it was
    paused are never worked off by span A's saturated consumer, so A stays behind; coalesced, they are one."""
    out = run_seed_000(coalesce=False, release=True)
    fixed = run_seed_000(coalesce=True, release=True)
    assert not out.paused_at_end and out.span_ts_history[-1] > out.span_ts_history[STEPS // 2]
    assert out.lag_ms >= 5 * fixed.lag_ms


def test_seed_000_does_not_stall_with_coalescing_and_blocked_path_release() -> None:
    out = run_seed_000(coalesce=True, release=True)
    assert not out.paused_at_end
    assert out.lag_ms <= 500  # span A keeps up with the store despite the blocked span B
    assert all(a <= b for a, b in zip(out.span_ts_history, out.span_ts_history[1:], strict=False))
    # Nothing of B was silently lost: every data event was popped, or dropped with its region marked for resync.
    assert out.stuck_data_dropped > 0
    assert out.stuck_data_pushed == out.stuck_data_popped + out.stuck_data_dropped + out.stuck_data_queued
    assert out.pauses == 1
    assert len(out.resync) > 0 and all(100_001 <= r < 100_001 + REGIONS for r in out.resync)


def test_consumers_run_as_tasks_and_a_blocked_handler_does_not_hold_other_paths() -> None:
    async def main() -> None:
        clock = Clock()
        stream, _ = new_stream(clock, blocked_after_ms=1000)
        stream.add_area("cf", max_pending_bytes=20_000)
        stream.add_path("cf", "A")
        stream.add_path("cf", "B")
        got_a: list[RegionEvent] = []
        a_seen = asyncio.Event()
        never = asyncio.Event()

        async def handle_a(batch: list[RegionEvent]) -> None:
            got_a.extend(batch)
            a_seen.set()

        async def handle_b(batch: list[RegionEvent]) -> None:
            await never.wait()

        tasks = [
            asyncio.create_task(stream.run_consumer("A", handle_a)),
            asyncio.create_task(stream.run_consumer("B", handle_b)),
        ]
        stream.push_entries("B", 1, "first", 10)
        await asyncio.sleep(0)  # B's consumer takes it and blocks
        for i in range(20):
            stream.push_entries("B", 2 + i, "row", data_of(1000))
        assert stream.is_paused("cf")
        stream.push_resolved("A", [7], tso(1))
        await asyncio.wait_for(a_seen.wait(), 5)
        assert [e.kind for e in got_a] == [EventKind.RESOLVED]
        clock.now += 1000
        stream.tick()
        assert not stream.is_paused("cf") and stream.path("B").released
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(1, 40), max_size=30),  # region ids of a batch (repeats allowed)
            st.integers(1, 1000),  # its ts
            st.booleans(),  # per-region ts instead of one ts
            st.lists(st.integers(1, 40), max_size=2),  # rows pushed after it
        ),
        max_size=25,
    )
)
def test_coalesced_batches_equal_the_per_region_maximum(
    batches: list[tuple[list[int], int, bool, list[int]]],
) -> None:
    stream, _ = new_stream()
    stream.add_area("cf")
    stream.add_path("cf", "span")
    expected: dict[int, int] = {}
    for ids, ts, per_region, rows in batches:
        if per_region:
            tss = [ts + i for i in range(len(ids))]
            stream.push_resolved("span", np.array(ids, dtype=np.uint64), np.array(tss, dtype=np.uint64))
        else:
            tss = [ts] * len(ids)
            stream.push_resolved("span", ids, ts)
        for rid, t in zip(ids, tss, strict=True):
            expected[rid] = max(expected.get(rid, 0), t)
        for rid in rows:
            stream.push_entries("span", rid, "row", 10)
        stream._check()
    got: dict[int, int] = {}
    path = stream.path("span")
    assert path.pending_resolved_regions <= 2 * 40
    for ev in stream.pop_batch("span", max_events=10_000):
        if ev.kind is EventKind.RESOLVED:
            assert ev.region_ids is not None
            tss_arr = np.broadcast_to(np.asarray(ev.ts), ev.region_ids.shape)
            for rid, t in zip(ev.region_ids.tolist(), tss_arr.tolist(), strict=True):
                got[rid] = max(got.get(rid, 0), t)
    assert got == expected
    assert path.pending_bytes == 0 and stream.area("cf").pending_bytes == 0


def test_check_finds_a_broken_structure() -> None:
    """``_check`` (called after every step of the seed-000 simulation and the coalescing property test) fails on
    each kind of corruption."""
    for how in ("bytes off", "out of order", "tail without head", "resync while not released", "paused missed"):
        stream, _ = new_stream()
        stream.add_area("cf", max_pending_bytes=10_000)
        stream.add_path("cf", "span")
        stream.push_entries("span", 1, "row", 100)
        stream.push_resolved("span", [1, 2], 5)
        stream.push_entries("span", 2, "row", 100)
        stream._check()
        path, area = stream.path("span"), stream.area("cf")
        if how == "bytes off":
            path.pending_bytes += 1
            area.pending_bytes += 1
        elif how == "out of order":
            path.queue.rotate(1)
        elif how == "tail without head":
            path.tail, path.head = path.head, None
        elif how == "resync while not released":
            path.resync.add(3)
        elif how == "paused missed":
            area.max_pending_bytes = 100
        with pytest.raises(AssertionError):
            stream._check()
