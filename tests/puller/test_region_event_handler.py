"""region_event_handler: one region's entries become its row changes, in order; what a request that ended sends is
dropped; commits wait for INITIALIZED; stale commits are skipped; a change at or below the region's resolved ts or
an unknown log type fails loudly. A span's batch (``RegionEventHandler``): changes to the one output, resolved ts to
the advancer, errors and RESYNC to the end of their requests, in the batch's order; a failure stops it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from cdc_core.codec.key import row_key
from cdc_core.errors import ChangefeedError
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.change_batch import ChangeBuffer
from cdc_core.puller.client_metrics import ClientMetrics
from cdc_core.puller.event_stream import EventKind, RegionEvent
from cdc_core.puller.range_lock import LockStatus, RangeLock
from cdc_core.puller.region_event_handler import RegionEventHandler, handle_entries
from cdc_core.puller.region_failure import ErrorKind, StreamBroken
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


class Outputs:
    """What a handler hands on, in one list in the order it happened."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.failures: list[BaseException] = []
        self.registry = CollectorRegistry()

    def handler(self, **outputs: Any) -> RegionEventHandler:
        return RegionEventHandler(
            **{"on_change": None, "on_changes": None, "on_batch": None, **outputs},
            advanced=lambda span, ts: self.log.append(("resolved", ts)),
            end_region=lambda span, state, kind, err: self.log.append(("end", state.region_id, kind, err)),
            failed=lambda: bool(self.failures), fail=self.failures.append,
            changes=ClientMetrics.for_registry(self.registry).changes)


def _resolved(ts: int) -> RegionEvent:
    return RegionEvent(EventKind.RESOLVED, region_ids=np.array([REGION], dtype=np.uint64), ts=ts)


def test_a_batch_is_handled_in_order_changes_resolved_ts_and_ended_requests() -> None:
    span, state = _span()
    out = Outputs()
    h = out.handler(on_change=lambda span_id, ch: out.log.append(("change", ch.key, ch.commit_ts)))
    error = cdcpb_pb2.Error(epoch_not_match={})
    h.handle(span, [
        _event(_row(cdcpb_pb2.Event.COMMITTED, b"t1", 90, 105), _row(cdcpb_pb2.Event.INITIALIZED, b"", 0)),
        _resolved(110),
        _event(_row(cdcpb_pb2.Event.COMMITTED, b"t2", 111, 112)),
        RegionEvent(EventKind.ERROR, REGION, (REQUEST + 1, error)),  # of an ended request: not this one's end
        RegionEvent(EventKind.ERROR, REGION, (REQUEST, error)),
    ])
    assert out.log == [("change", b"t1", 105), ("resolved", 110), ("change", b"t2", 112),
                       ("end", REGION, ErrorKind.EPOCH_NOT_MATCH, error)]
    assert h.changes_emitted == 2 and out.registry.get_sample_value("cdcflow_puller_changes_emitted_total") == 2
    # RESYNC: the regions that lost data end as resync (re-requested from their resolved ts)
    h.handle(span, [RegionEvent(EventKind.RESYNC, region_ids=np.array([REGION, 99], dtype=np.uint64))])
    (_, rid, kind, err) = out.log[-1]
    assert (rid, kind, err) == (REGION, ErrorKind.RESYNC, StreamBroken("resync", ErrorKind.RESYNC))
    assert not out.failures and state.initialized


def test_batched_changes_are_handed_on_before_a_resolved_ts_moves() -> None:
    span, _ = _span()
    out = Outputs()
    h = out.handler(on_batch=lambda span_id, batch: out.log.append(("batch", batch.num_rows)))
    scan = [_row(cdcpb_pb2.Event.COMMITTED, row_key(5, i), 90, 101 + i) for i in range(3)]
    h.handle(span, [_event(*scan), _event(_row(cdcpb_pb2.Event.INITIALIZED, b"", 0)), _resolved(120),
                    _event(_row(cdcpb_pb2.Event.COMMITTED, row_key(5, 9), 121, 125))])
    assert not out.failures
    assert out.log == [("batch", 3), ("resolved", 120), ("batch", 1)] and h.changes_emitted == 4


def test_a_failure_stops_the_batch_and_nothing_more_is_handled() -> None:
    span, _ = _span()
    out = Outputs()

    def broken(span_id: int, changes: list[Any]) -> None:
        raise RuntimeError("downstream is gone")

    h = out.handler(on_changes=broken)
    h.handle(span, [_event(_row(cdcpb_pb2.Event.COMMITTED, b"t1", 90, 105)), _resolved(110)])
    assert [str(e) for e in out.failures] == ["downstream is gone"] and out.log == []
    h.handle(span, [_resolved(120)])  # the client stopped: the next batch is not looked at
    assert out.log == [] and span.adv.resolved_ts < 120
