"""What an ended region request means, and what comes next: the failure policy of the subscription client.

After TiCDC's ``logservice/logpuller/region_failure_handler.go`` (and the error cases of
``subscription_client.go``'s ``handleErrors``): a region request ends with an EventFeed ``Error`` of the region, a
broken stream, or a ``RESYNC`` of the client's own; :func:`classify_error` names the kind, :func:`decide` says what
to do: fail the subscription (the store or the client cannot go on) or request again -- the region itself, or its
range re-divided from PD -- after which delay and at which priority. The client's scheduler carries the decision out
(:meth:`~cdc_core.puller.region_request_scheduler.RegionRequestScheduler.end_region`); this module holds no state and
does no I/O, so each rule is tested on its own (``tests/puller/test_region_failure.py``).

============================== =================================================================
error                          decision
============================== =================================================================
``not_leader``                 the same region on the new leader the error names (else from PD)
``epoch_not_match``            the range re-divided from PD at once (split, merge)
``region_not_found``           the range re-divided from PD at once (merged away)
``server_is_busy``             the same region after its backoff (at least the store's), low priority
``congested``                  the same region after a backoff, low priority
broken stream / unknown store  the range re-divided from PD after a backoff
``RESYNC`` (released path)     the same region at once, from its resolved ts
unknown / empty error          the range re-divided from PD after a backoff
``compatibility``              fail: the store requires another TiCDC version
``cluster_id_mismatch``        fail: the store belongs to another cluster
``duplicate_request``          fail: (request id, region) pairs are never live twice, so a client bug
============================== =================================================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.backoff import Backoff
from cdc_core.puller.region_request_worker import CLIENT_VERSION
from cdc_core.puller.region_state import RegionState, RegionTarget

__all__ = ["HIGH_PRIORITY", "LOW_PRIORITY", "ErrorKind", "Fail", "Retry", "StreamBroken", "classify_error", "decide"]

HIGH_PRIORITY = 0
LOW_PRIORITY = 1


class ErrorKind(enum.Enum):
    NOT_LEADER = "not_leader"
    EPOCH_NOT_MATCH = "epoch_not_match"
    REGION_NOT_FOUND = "region_not_found"
    SERVER_IS_BUSY = "server_is_busy"
    CONGESTED = "congested"
    DUPLICATE_REQUEST = "duplicate_request"
    COMPATIBILITY = "compatibility"
    CLUSTER_ID_MISMATCH = "cluster_id_mismatch"
    GC_SAFE_POINT = "snapshot_lost_by_gc"
    STREAM = "stream_broken"
    STORE = "store_unknown"
    RESYNC = "resync"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class StreamBroken:
    """The error of every region whose stream broke (or whose store could not be resolved)."""

    why: str
    kind: ErrorKind = ErrorKind.STREAM


def classify_error(err: cdcpb_pb2.Error | StreamBroken) -> ErrorKind:
    """The kind of a region's EventFeed error (the ``cdcpb.Error`` field the store set: it sets one) or of a broken
    stream; an error with none of the fields known here is ``UNKNOWN``."""
    if isinstance(err, StreamBroken):
        return err.kind
    for field_name, kind in _ERROR_FIELDS:
        if err.HasField(field_name):
            return kind
    return ErrorKind.UNKNOWN


_ERROR_FIELDS = (
    ("not_leader", ErrorKind.NOT_LEADER),
    ("epoch_not_match", ErrorKind.EPOCH_NOT_MATCH),
    ("region_not_found", ErrorKind.REGION_NOT_FOUND),
    ("server_is_busy", ErrorKind.SERVER_IS_BUSY),
    ("congested", ErrorKind.CONGESTED),
    ("duplicate_request", ErrorKind.DUPLICATE_REQUEST),
    ("compatibility", ErrorKind.COMPATIBILITY),
    ("cluster_id_mismatch", ErrorKind.CLUSTER_ID_MISMATCH),
)


@dataclass(frozen=True)
class Retry:
    """Request again, as attempt ``attempt``, after ``delay_s`` at ``priority``: the region ``region`` (its target:
    the same, or on another leader), or with ``region`` None the failed request's range re-divided from PD."""

    attempt: int
    delay_s: float
    region: RegionTarget | None = None
    priority: int = HIGH_PRIORITY


@dataclass(frozen=True)
class Fail:
    """The subscription cannot go on: it fails with ``message``."""

    message: str


def decide(span_id: int, state: RegionState, kind: ErrorKind, err: cdcpb_pb2.Error | StreamBroken,
           backoff: Backoff) -> Retry | Fail:
    """What follows the end of ``state``'s request (of span ``span_id``) with ``err`` of ``kind``; see the module
    docstring. Attempts count the range's consecutive failures (a request that initializes resets them): a
    re-request the error tells where to send (a named leader, a new layout in PD) goes at once the first time,
    only repeated failures back off."""
    t = state.target
    attempt = state.attempt + 1
    if kind is ErrorKind.COMPATIBILITY:
        assert isinstance(err, cdcpb_pb2.Error)
        return Fail(
            f"store {state.store_addr} is incompatible with this client (TiCDC {CLIENT_VERSION} behaviour): it "
            f"requires version {err.compatibility.required_version or '?'} (region {state.region_id}); "
            "upgrade cdcflow or use a TiKV it supports"
        )
    if kind is ErrorKind.CLUSTER_ID_MISMATCH:
        assert isinstance(err, cdcpb_pb2.Error)
        m = err.cluster_id_mismatch
        return Fail(
            f"store {state.store_addr} belongs to cluster {m.current}, but PD's cluster is {m.request} "
            f"(region {state.region_id}): PD and TiKV addresses point at different clusters"
        )
    if kind is ErrorKind.DUPLICATE_REQUEST:
        return Fail(
            f"region {state.region_id} of span {span_id}: the store reports a duplicate request "
            f"{state.request_id}; a (request id, region) pair is never live twice, so this is a client bug"
        )
    if kind is ErrorKind.NOT_LEADER:
        assert isinstance(err, cdcpb_pb2.Error)
        leader = err.not_leader.leader.store_id
        if leader:
            return Retry(attempt, backoff.delay_s(attempt - 1), replace(t, leader_store_id=leader))
    elif kind is ErrorKind.SERVER_IS_BUSY:
        assert isinstance(err, cdcpb_pb2.Error)
        return Retry(attempt, backoff.delay_s(attempt, at_least_ms=err.server_is_busy.backoff_ms), t, LOW_PRIORITY)
    elif kind is ErrorKind.CONGESTED:
        return Retry(attempt, backoff.delay_s(attempt), t, LOW_PRIORITY)
    elif kind is ErrorKind.RESYNC:
        return Retry(state.attempt, 0.0, t)  # the client's own doing: not a failure of the range
    elif kind in (ErrorKind.EPOCH_NOT_MATCH, ErrorKind.REGION_NOT_FOUND):
        return Retry(attempt, backoff.delay_s(attempt - 1))  # PD already knows the new layout
    return Retry(attempt, backoff.delay_s(attempt))
