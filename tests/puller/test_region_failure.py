"""The subscription client's failure policy (``cdc_core.puller.region_failure``), rule by rule, without a server:
each EventFeed error kind and what follows it -- fail, the same region again, or its range re-divided from PD --
with the delay and priority of each."""

from __future__ import annotations

import pytest

from cdc_core.proto import cdcpb_pb2, errorpb_pb2, metapb_pb2
from cdc_core.puller.backoff import Backoff
from cdc_core.puller.range_lock import RangeLock
from cdc_core.puller.region_failure import (
    HIGH_PRIORITY,
    LOW_PRIORITY,
    ErrorKind,
    Fail,
    Retry,
    StreamBroken,
    classify_error,
    decide,
)
from cdc_core.puller.region_state import RegionState, RegionTarget

NO_JITTER = Backoff(base_ms=100, max_ms=1_000, jitter=0.0)


def _state(attempt: int) -> RegionState:
    lock = RangeLock(b"a", b"z", 100)
    target = RegionTarget(region_id=7, version=3, conf_ver=1, leader_store_id=1, start_key=b"c", end_key=b"f")
    locked = lock.try_lock(b"c", b"f", 7, 3, tag=11).state
    assert locked is not None
    return RegionState(11, 5, target, locked, attempt=attempt, store_addr="127.0.0.1:20160")


def _error(**fields: object) -> cdcpb_pb2.Error:
    return cdcpb_pb2.Error(**fields)  # type: ignore[arg-type]


def test_each_region_error_field_names_its_kind() -> None:
    cases = {
        ErrorKind.NOT_LEADER: _error(not_leader=errorpb_pb2.NotLeader(region_id=7)),
        ErrorKind.EPOCH_NOT_MATCH: _error(epoch_not_match=errorpb_pb2.EpochNotMatch()),
        ErrorKind.REGION_NOT_FOUND: _error(region_not_found=errorpb_pb2.RegionNotFound(region_id=7)),
        ErrorKind.SERVER_IS_BUSY: _error(server_is_busy=errorpb_pb2.ServerIsBusy(backoff_ms=300)),
        ErrorKind.CONGESTED: _error(congested=cdcpb_pb2.Congested(region_id=7)),
        ErrorKind.DUPLICATE_REQUEST: _error(duplicate_request=cdcpb_pb2.DuplicateRequest(region_id=7)),
        ErrorKind.COMPATIBILITY: _error(compatibility=cdcpb_pb2.Compatibility(required_version="9.0.0")),
        ErrorKind.CLUSTER_ID_MISMATCH: _error(cluster_id_mismatch=cdcpb_pb2.ClusterIDMismatch(current=1, request=2)),
        ErrorKind.UNKNOWN: _error(),
    }
    for kind, err in cases.items():
        assert classify_error(err) is kind, kind
    assert classify_error(StreamBroken("gone")) is ErrorKind.STREAM
    assert classify_error(StreamBroken("no store", ErrorKind.STORE)) is ErrorKind.STORE


def test_a_named_leader_gets_the_same_region_at_once_the_first_time() -> None:
    err = _error(not_leader=errorpb_pb2.NotLeader(region_id=7, leader=metapb_pb2.Peer(id=9, store_id=3)))
    first = decide(5, _state(0), ErrorKind.NOT_LEADER, err, NO_JITTER)
    assert isinstance(first, Retry) and first.region is not None
    assert (first.attempt, first.delay_s, first.priority) == (1, 0.0, HIGH_PRIORITY)
    assert first.region.leader_store_id == 3 and first.region.region_id == 7 and first.region.start_key == b"c"
    again = decide(5, _state(2), ErrorKind.NOT_LEADER, err, NO_JITTER)
    assert isinstance(again, Retry) and (again.attempt, again.delay_s) == (3, 0.2)  # repeated failures back off
    # no leader named: the range from PD, after a backoff
    unknown = decide(5, _state(0), ErrorKind.NOT_LEADER, _error(not_leader=errorpb_pb2.NotLeader()), NO_JITTER)
    assert unknown == Retry(1, 0.1)


@pytest.mark.parametrize("kind", [ErrorKind.EPOCH_NOT_MATCH, ErrorKind.REGION_NOT_FOUND])
def test_a_changed_region_is_re_divided_from_pd_at_once(kind: ErrorKind) -> None:
    assert decide(5, _state(0), kind, _error(), NO_JITTER) == Retry(1, 0.0)
    assert decide(5, _state(1), kind, _error(), NO_JITTER) == Retry(2, 0.1)


def test_a_busy_store_gets_the_region_again_later_at_low_priority() -> None:
    busy = _error(server_is_busy=errorpb_pb2.ServerIsBusy(backoff_ms=300))
    assert decide(5, _state(0), ErrorKind.SERVER_IS_BUSY, busy, NO_JITTER) == Retry(1, 0.3, _state(0).target,
                                                                                    LOW_PRIORITY)
    later = decide(5, _state(2), ErrorKind.SERVER_IS_BUSY, busy, NO_JITTER)  # its own backoff, once the longer
    assert isinstance(later, Retry) and later.delay_s == 0.4
    congested = decide(5, _state(0), ErrorKind.CONGESTED, _error(), NO_JITTER)
    assert congested == Retry(1, 0.1, _state(0).target, LOW_PRIORITY)


def test_a_resync_is_not_a_failure_of_the_range() -> None:
    resync = decide(5, _state(2), ErrorKind.RESYNC, StreamBroken("resync", ErrorKind.RESYNC), NO_JITTER)
    assert resync == Retry(2, 0.0, _state(2).target, HIGH_PRIORITY)


@pytest.mark.parametrize("kind", [ErrorKind.STREAM, ErrorKind.STORE, ErrorKind.UNKNOWN])
def test_anything_else_re_divides_the_range_after_a_backoff(kind: ErrorKind) -> None:
    err = _error() if kind is ErrorKind.UNKNOWN else StreamBroken("stream to store 1 broke", kind)
    assert decide(5, _state(0), kind, err, NO_JITTER) == Retry(1, 0.1)
    assert decide(5, _state(9), kind, err, NO_JITTER) == Retry(10, 1.0)  # capped


def test_what_cannot_go_on_fails_the_subscription_naming_the_store_and_region() -> None:
    compat = decide(5, _state(0), ErrorKind.COMPATIBILITY,
                    _error(compatibility=cdcpb_pb2.Compatibility(required_version="9.0.0")), NO_JITTER)
    assert isinstance(compat, Fail)
    assert "store 127.0.0.1:20160" in compat.message and "requires version 9.0.0" in compat.message
    assert "region 7" in compat.message
    other = decide(5, _state(0), ErrorKind.CLUSTER_ID_MISMATCH,
                   _error(cluster_id_mismatch=cdcpb_pb2.ClusterIDMismatch(current=1, request=2)), NO_JITTER)
    assert isinstance(other, Fail) and "belongs to cluster 1, but PD's cluster is 2" in other.message
    dup = decide(5, _state(0), ErrorKind.DUPLICATE_REQUEST,
                 _error(duplicate_request=cdcpb_pb2.DuplicateRequest(region_id=7)), NO_JITTER)
    assert isinstance(dup, Fail) and "region 7 of span 5" in dup.message and "request 11" in dup.message
