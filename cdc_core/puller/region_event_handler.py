"""How a span's consumer handles its events, after TiCDC's ``logservice/logpuller/region_event_handler.go``:
:class:`RegionEventHandler` takes a batch of a span's events in order (``Handle``), the entries of one region through
plain functions of (span, state, event) (``handleEventEntries``).

A batch's resolved events go to the span's advancer, vectorized; its errors and ``RESYNC`` end the region requests
they name (:mod:`~cdc_core.puller.region_failure` classifies them, the scheduler carries the decision out). The
row changes go to the client's one output: per row, as lists, or with ``on_batch`` the changes of the whole batch
of events as one Arrow record batch (Arrow's cost is per call), handed on before any resolved ts moves, and at the
end.

The entries of a live request go through the region's :class:`~cdc_core.puller.matcher.Matcher`: the incremental
scan's COMMITTED rows become changes as they are; a PREWRITE waits for its COMMIT or ROLLBACK (commits before the
region is INITIALIZED are held, as TiKV may send a commit before the scan has shown its prewrite); INITIALIZED marks
the region initialized in the span's range lock, resets its retry count and releases what the matcher held.
TiKV can send commits at or below the span's start ts (``region_event_handler.go`` skips them as stale): so do
these. A change at or below the region's resolved ts breaks the store's promise: the subscription fails loudly
(:func:`broken_promise`), since a change below an emitted resolved ts would be lost downstream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import pyarrow as pa
from prometheus_client import Counter

from cdc_core.errors import ChangefeedError
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller import change_batch
from cdc_core.puller.event_stream import EventKind, RegionEvent
from cdc_core.puller.matcher import LogType, RowChange
from cdc_core.puller.region_failure import ErrorKind, StreamBroken, classify_error
from cdc_core.puller.region_state import RegionState
from cdc_core.puller.subscribed_span import SubscribedSpan

OnChange = Callable[[int, RowChange], None]
OnChanges = Callable[[int, list[RowChange]], None]
OnBatch = Callable[[int, pa.RecordBatch], None]
EndRegion = Callable[[SubscribedSpan, RegionState, ErrorKind, cdcpb_pb2.Error | StreamBroken], None]
BATCH_ROWS = 65_536  # on_batch: at most this many rows (plus one event's) wait in the buffer

# Plain ints: attribute lookups on protobuf enum wrappers are slow on a per-row path.
_COMMITTED = int(LogType.COMMITTED)
_PREWRITE = int(LogType.PREWRITE)
_COMMIT = int(LogType.COMMIT)
_ROLLBACK = int(LogType.ROLLBACK)
_INITIALIZED = int(LogType.INITIALIZED)


def handle_entries(span: SubscribedSpan, ev: RegionEvent, buf: change_batch.ChangeBuffer | None
                   ) -> list[RowChange] | None:
    """The row changes of the entries event ``ev`` of one of ``span``'s regions, in order, or None when there are
    none to hand on: the event is of a request that ended, holds only matcher state (prewrites, rollbacks), or
    went into ``buf`` whole (a scan's COMMITTED rows, columnar, when the client batches its changes).

    Raises ``ChangefeedError`` for a change at or below the region's resolved ts and for an unknown log type (a
    corrupt event)."""
    fe: cdcpb_pb2.Event = ev.payload
    state = span.regions.get(ev.region_id)
    if state is None or state.request_id != fe.request_id or state.stale:
        return None  # a late event of a request that ended
    m = state.matcher
    # The region's resolved ts only moves on resolved events, handled by this same consumer: read it once.
    floor = state.locked.resolved_ts
    rows = fe.entries.entries
    if buf is not None and rows:
        # The scan's events are all COMMITTED: columnar, no matcher state involved.
        rl = list(rows)  # one Python wrapper per row, reused by every pass below
        types: list[int] = [r.type for r in rl]
        if types.count(_COMMITTED) == len(types):
            commits = [r.commit_ts for r in rl]
            low = min(commits)
            if low <= floor:
                broken_promise(span, state, low, rl[commits.index(low)].key, floor)
            buf.add_committed(state.region_id, rl, commits)
            return None
    out: list[RowChange] = []
    committed = m.committed
    for row in rows:
        t = row.type
        if t == _COMMITTED:  # the incremental scan: the bulk of a window, kept to one call per row
            out.append(committed(row))
        elif t == _PREWRITE:
            m.prewrite(row)
        elif t == _COMMIT:
            ch = m.commit(row, state.initialized)
            if ch is not None and ch.commit_ts > span.start_ts:
                out.append(ch)
        elif t == _ROLLBACK:
            m.rollback(row, state.initialized)
        elif t == _INITIALIZED:
            state.initialized = True
            state.attempt = 0
            span.lock.set_initialized(state.locked)
            out.extend(ch for ch in m.initialized() if ch.commit_ts > span.start_ts)
        else:
            raise ChangefeedError(f"region {state.region_id}: corrupt event: unknown log type {t}")
    if not out:
        return None
    if min(ch.commit_ts for ch in out) <= floor:
        bad = next(ch for ch in out if ch.commit_ts <= floor)
        broken_promise(span, state, bad.commit_ts, bad.key, floor)
    return out


def broken_promise(span: SubscribedSpan, state: RegionState, commit_ts: int, key: bytes, floor: int) -> NoReturn:
    """Fail the subscription: a change at ``commit_ts`` arrived at or below its region's resolved ts ``floor``."""
    raise ChangefeedError(
        f"region {state.region_id} of span {span.id}: commit ts {commit_ts} arrived at or below the "
        f"region's resolved ts {floor} (key {key.hex()}); the upstream broke its resolved-ts promise"
    )


class RegionEventHandler:
    """Handles the batches of every span's consumer (one consumer per span, so a span's events in order): row
    changes to exactly one of ``on_change`` / ``on_changes`` / ``on_batch``, a moved resolved ts to ``advanced``, a
    region's end to ``end_region``. ``failed`` says whether the client stopped (nothing more is handled), ``fail``
    stops it; ``changes`` counts the changes handed on. The client checks that exactly one output is given."""

    def __init__(self, *, on_change: OnChange | None, on_changes: OnChanges | None, on_batch: OnBatch | None,
                 advanced: Callable[[SubscribedSpan, int], None], end_region: EndRegion,
                 failed: Callable[[], bool], fail: Callable[[BaseException], None], changes: Counter) -> None:
        assert sum(cb is not None for cb in (on_change, on_changes, on_batch)) == 1
        self._on_change, self._on_changes, self._on_batch = on_change, on_changes, on_batch
        self._advanced, self._end_region = advanced, end_region
        self._failed, self._fail = failed, fail
        self._m_changes = changes
        self.changes_emitted = 0

    def handle(self, span: SubscribedSpan, batch: list[RegionEvent]) -> None:
        """Handle ``batch``, events of ``span`` in the order they arrived; a failure stops the client."""
        if self._failed() or span.stopped:
            return
        buf = change_batch.ChangeBuffer() if self._on_batch is not None else None
        try:
            for ev in batch:
                k = ev.kind
                if k is EventKind.DATA:
                    self._on_entries(span, ev, buf)
                elif k is EventKind.RESOLVED:
                    assert ev.region_ids is not None
                    if buf:
                        self._hand_on(span, buf)
                    ts = span.adv.on_resolved_batch(ev.region_ids, ev.ts)
                    if ts is not None:
                        self._advanced(span, ts)
                elif k is EventKind.ERROR:
                    request_id, err = ev.payload
                    state = span.regions.get(ev.region_id)
                    if state is not None and state.request_id == request_id:
                        self._end_region(span, state, classify_error(err), err)
                elif k is EventKind.RESYNC:
                    assert ev.region_ids is not None
                    for rid in ev.region_ids.tolist():
                        state = span.regions.get(rid)
                        if state is not None:
                            self._end_region(span, state, ErrorKind.RESYNC, StreamBroken("resync", ErrorKind.RESYNC))
                if self._failed():
                    return
                if buf is not None and len(buf) >= BATCH_ROWS:
                    self._hand_on(span, buf)
            if buf:
                self._hand_on(span, buf)
        except Exception as exc:
            self._fail(exc)

    def _hand_on(self, span: SubscribedSpan, buf: change_batch.ChangeBuffer) -> None:
        n = len(buf)
        assert self._on_batch is not None
        self._on_batch(span.id, buf.take())
        self.changes_emitted += n
        self._m_changes.inc(n)

    def _on_entries(self, span: SubscribedSpan, ev: RegionEvent, buf: change_batch.ChangeBuffer | None) -> None:
        out = handle_entries(span, ev, buf)
        if not out:
            return
        if buf is not None:
            buf.add_changes(out)
            return
        if self._on_changes is not None:
            self._on_changes(span.id, out)
        else:
            on_change, span_id = self._on_change, span.id
            assert on_change is not None
            for ch in out:
                on_change(span_id, ch)
        self.changes_emitted += len(out)
        self._m_changes.inc(len(out))
