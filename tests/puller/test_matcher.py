import pytest

from cdc_core.errors import ChangefeedError
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.matcher import LogType, Matcher, OpType

Row = cdcpb_pb2.Event.Row


def test_committed_passes_through_with_old_value():
    m = Matcher(1)
    ch = m.committed(Row(start_ts=1, commit_ts=2, type=LogType.COMMITTED, op_type=OpType.PUT, key=b"k",
                         value=b"v", old_value=b"o"))
    assert (ch.op, ch.commit_ts, ch.value, ch.old_value) == ("put", 2, b"v", b"o")


def test_prewrite_commit_match_and_delete_has_no_value():
    m = Matcher(1)
    m.prewrite(Row(start_ts=5, type=LogType.PREWRITE, op_type=OpType.DELETE, key=b"k", old_value=b"o"))
    ch = m.commit(Row(start_ts=5, commit_ts=6, type=LogType.COMMIT, key=b"k"), initialized=True)
    assert ch is not None and (ch.op, ch.value, ch.old_value, ch.commit_ts) == ("delete", None, b"o", 6)


def test_commit_before_initialized_is_held_until_then():
    m = Matcher(1)
    assert m.commit(Row(start_ts=5, commit_ts=6, type=LogType.COMMIT, key=b"k"), initialized=False) is None
    m.prewrite(Row(start_ts=5, type=LogType.PREWRITE, op_type=OpType.PUT, key=b"k", value=b"v"))
    [ch] = m.initialized()
    assert ch.value == b"v" and ch.commit_ts == 6


def test_rollback_drops_prewrite_and_unmatched_commit_fails_loudly():
    m = Matcher(7)
    m.prewrite(Row(start_ts=5, type=LogType.PREWRITE, op_type=OpType.PUT, key=b"k", value=b"v"))
    m.rollback(Row(start_ts=5, type=LogType.ROLLBACK, key=b"k"))
    with pytest.raises(ChangefeedError, match=r"region 7: COMMIT .* has no prewrite"):
        m.commit(Row(start_ts=5, commit_ts=6, type=LogType.COMMIT, key=b"k"), initialized=True)


def test_unknown_op_is_a_corrupt_event():
    m = Matcher(1)
    with pytest.raises(ChangefeedError, match="corrupt event"):
        m.committed(Row(start_ts=1, commit_ts=2, type=LogType.COMMITTED, op_type=0, key=b"k"))


# --- TiCDC's rules (logservice/logpuller/txn_matcher.go, region_event_handler.go) -------------------------------


def _pw(start_ts: int, value: bytes = b"v", *, op: int = OpType.PUT, old: bytes = b"", gen: int = 0) -> Row:
    return Row(start_ts=start_ts, type=LogType.PREWRITE, op_type=op, key=b"k", value=value, old_value=old,
               generation=gen)


def _commit(start_ts: int, commit_ts: int) -> Row:
    return Row(start_ts=start_ts, commit_ts=commit_ts, type=LogType.COMMIT, key=b"k")


@pytest.mark.parametrize("old_value", [b"", b"o"])
def test_fake_prewrite_of_a_heartbeat_does_not_wipe_the_value(old_value: bytes) -> None:
    m = Matcher(1)
    m.prewrite(_pw(5, b"v", old=old_value))
    m.prewrite(_pw(5, b"", old=old_value))  # the lock rewritten by a TTL heartbeat: empty value
    m.prewrite(_pw(5, b"", old=old_value))
    assert m.fake_prewrites == 2
    ch = m.commit(_commit(5, 6), initialized=True)
    assert ch is not None and (ch.value, ch.old_value) == (b"v", old_value or None)
    assert m.pending == 0


def test_commit_before_initialized_waits_when_only_a_fake_prewrite_was_seen() -> None:
    # Out of order before INITIALIZED: the heartbeat's empty prewrite came first; the scan's lock comes later.
    m = Matcher(1)
    m.prewrite(_pw(5, b""))
    assert m.commit(_commit(5, 6), initialized=False) is None
    m.prewrite(_pw(5, b"v"))  # the real value replaces the empty one
    [ch] = m.initialized()
    assert (ch.value, ch.commit_ts) == (b"v", 6)


def test_pipelined_dml_keeps_the_highest_generation_and_matches_only_after_initialized() -> None:
    m = Matcher(1)
    m.prewrite(_pw(5, b"g2", gen=2))
    m.prewrite(_pw(5, b"g1", gen=1))  # an older flush arriving late
    assert m.commit(_commit(5, 6), initialized=False) is None  # generation > 0: not before INITIALIZED
    m.prewrite(_pw(5, b"g3", gen=3))
    [ch] = m.initialized()
    assert ch.value == b"g3"


def test_commit_cached_before_initialized_without_a_prewrite_is_dropped() -> None:
    # Its prewrite came before this request started: the scan delivered the change as COMMITTED already.
    m = Matcher(1)
    assert m.commit(_commit(5, 6), initialized=False) is None
    assert m.initialized() == []
    assert m.pending == 0


def test_rollback_before_initialized_is_applied_at_initialized() -> None:
    m = Matcher(1)
    m.rollback(Row(start_ts=5, type=LogType.ROLLBACK, key=b"k"), initialized=False)
    m.prewrite(_pw(5))  # the scan's lock arrives after the rollback
    assert m.pending == 1
    assert m.initialized() == []
    assert m.pending == 0  # the cached rollback removed it
    with pytest.raises(ChangefeedError, match="has no prewrite"):
        m.commit(_commit(5, 6), initialized=True)


def test_delete_prewrite_has_an_empty_value_and_still_matches() -> None:
    m = Matcher(1)
    m.prewrite(_pw(5, b"", op=OpType.DELETE, old=b"o"))
    assert m.commit(_commit(5, 6), initialized=False) is None  # empty value: waits for INITIALIZED
    [ch] = m.initialized()
    assert (ch.op, ch.value, ch.old_value) == ("delete", None, b"o")
