"""How a span's consumer handles one region's entries: plain functions of (span, state, event), after TiCDC's
``logservice/logpuller/region_event_handler.go`` (``handleEventEntries``).

The entries of a live request go through the region's :class:`~cdc_core.puller.matcher.Matcher`: the incremental
scan's COMMITTED rows become changes as they are; a PREWRITE waits for its COMMIT or ROLLBACK (commits before the
region is INITIALIZED are held, as TiKV may send a commit before the scan has shown its prewrite); INITIALIZED marks
the region initialized in the span's range lock, resets its retry count and releases what the matcher held.
TiKV can send commits at or below the span's start ts (``region_event_handler.go`` skips them as stale): so do
these. A change at or below the region's resolved ts breaks the store's promise: the subscription fails loudly
(:func:`broken_promise`), since a change below an emitted resolved ts would be lost downstream.
"""

from __future__ import annotations

from typing import NoReturn

from cdc_core.errors import ChangefeedError
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller import change_batch
from cdc_core.puller.event_stream import RegionEvent
from cdc_core.puller.matcher import LogType, RowChange
from cdc_core.puller.region_state import RegionState
from cdc_core.puller.subscribed_span import SubscribedSpan

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
