"""region_event_handler: one region's entries become its row changes, in order; what a request that ended sends is
dropped; commits wait for INITIALIZED; stale commits are skipped; a change at or below the region's resolved ts or
an unknown log type fails loudly."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from cdc_core.errors import ChangefeedError
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.change_batch import ChangeBuffer
from cdc_core.puller.event_stream import EventKind, RegionEvent
from cdc_core.puller.range_lock import LockStatus, RangeLock
from cdc_core.puller.region_event_handler import handle_entries
from cdc_core.puller.region_state import RegionState, RegionTarget
from cdc_core.puller.subscribed_span import SubscribedSpan
from cdc_core.puller.ts_advancer import ResolvedTsAdvancer

Row = cdcpb_pb2.Event.Row
START_TS = 100
REGION = 7
REQUEST = 3


def _span() -> tuple[SubscribedSpan, RegionState]:
    lock = RangeLock(b"t", b"u", START_TS)
    res = lock.try_lock(b"t", b"u", region_id=REGION, version=1, tag=REQUEST)
    assert res.status is LockStatus.LOCKED and res.state is not None
    span = SubscribedSpan(1, b"t", b"u", START_TS, "path", lock,
                          ResolvedTsAdvancer(lock, span="1", registry=CollectorRegistry()), request_id=REQUEST)
    state = RegionState(REQUEST, span.id, RegionTarget(REGION, 1, 1, 1, b"t", b"u"), res.state)
    span.regions[REGION] = state
    return span, state


def _event(*rows: Row, request_id: int = REQUEST) -> RegionEvent:
    fe = cdcpb_pb2.Event(region_id=REGION, request_id=request_id,
                         entries=cdcpb_pb2.Event.Entries(entries=list(rows)))
    return RegionEvent(EventKind.DATA, REGION, fe)


def _row(t: int, key: bytes, start_ts: int, commit_ts: int = 0, value: bytes = b"v") -> Row:
    return Row(type=t, key=key, start_ts=start_ts, commit_ts=commit_ts, op_type=Row.PUT, value=value)


def test_scan_rows_prewrites_and_commits_become_changes_in_order() -> None:
    span, state = _span()
    out = handle_entries(span, _event(_row(cdcpb_pb2.Event.COMMITTED, b"t1", 90, 105, b"a"),
                                      _row(cdcpb_pb2.Event.PREWRITE, b"t2", 110, value=b"b"),
                                      _row(cdcpb_pb2.Event.INITIALIZED, b"", 0),
                                      _row(cdcpb_pb2.Event.COMMIT, b"t2", 110, 120)), None)
    assert out is not None
    assert [(c.key, c.op, c.commit_ts, c.value) for c in out] == [(b"t1", "put", 105, b"a"), (b"t2", "put", 120, b"b")]
    assert state.initialized and state.locked.initialized and state.attempt == 0


def test_a_commit_before_initialized_waits_for_it_and_a_stale_one_is_skipped() -> None:
    span, state = _span()
    # a prewrite with an empty value before INITIALIZED may be a heartbeat's stand-in: its commit waits
    assert handle_entries(span, _event(_row(cdcpb_pb2.Event.PREWRITE, b"t1", 110, value=b""),
                                       _row(cdcpb_pb2.Event.COMMIT, b"t1", 110, 130)), None) is None
    # the real prewrite; and a commit at the span's start ts, matched at once, is stale (TiKV sends such)
    assert handle_entries(span, _event(_row(cdcpb_pb2.Event.PREWRITE, b"t1", 110, value=b"x"),
                                       _row(cdcpb_pb2.Event.PREWRITE, b"t0", 50, value=b"old"),
                                       _row(cdcpb_pb2.Event.COMMIT, b"t0", 50, START_TS)), None) is None
    assert state.matcher.pending == 1  # t1's prewrite, its commit held
    out = handle_entries(span, _event(_row(cdcpb_pb2.Event.INITIALIZED, b"", 0)), None)
    assert out is not None and [(c.key, c.commit_ts, c.value) for c in out] == [(b"t1", 130, b"x")]
    assert state.matcher.pending == 0


def test_events_of_a_request_that_ended_are_dropped() -> None:
    span, state = _span()
    committed = _row(cdcpb_pb2.Event.COMMITTED, b"t1", 90, 95)
    assert handle_entries(span, _event(committed, request_id=REQUEST + 1), None) is None
    state.stale = True
    assert handle_entries(span, _event(committed), None) is None
    del span.regions[REGION]
    assert handle_entries(span, _event(committed), None) is None


def test_scan_rows_go_into_the_buffer_whole_when_the_client_batches() -> None:
    span, _ = _span()
    buf = ChangeBuffer()
    rows = [_row(cdcpb_pb2.Event.COMMITTED, b"t%d" % i, 90, 101 + i) for i in range(5)]
    assert handle_entries(span, _event(*rows), buf) is None and len(buf) == 5


def test_a_change_at_or_below_the_resolved_ts_breaks_the_promise_loudly() -> None:
    span, state = _span()
    span.lock.set_initialized(state.locked)
    assert span.lock.update_resolved_ts(state.locked, 200)
    for buf in (None, ChangeBuffer()):  # row by row, and the columnar scan path
        with pytest.raises(ChangefeedError, match=r"commit ts 200 arrived at or below the region's resolved ts "
                                                  r"200 \(key 7431\); the upstream broke its resolved-ts promise"):
            handle_entries(span, _event(_row(cdcpb_pb2.Event.COMMITTED, b"t1", 150, 200)), buf)


def test_an_unknown_log_type_is_a_corrupt_event() -> None:
    span, _ = _span()
    with pytest.raises(ChangefeedError, match=f"region {REGION}: corrupt event: unknown log type 42"):
        handle_entries(span, _event(_row(42, b"t1", 90, 95)), None)
