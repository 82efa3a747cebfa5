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
