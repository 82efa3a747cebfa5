"""ChangeBuffer: scan rows and matched changes become the same bronze columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdc_core.codec import changelog
from cdc_core.codec import key as keycodec
from cdc_core.errors import ChangefeedError
from cdc_core.proto import cdcpb_pb2
from cdc_core.puller.change_batch import ChangeBuffer, from_changes
from cdc_core.puller.matcher import Matcher

Row = cdcpb_pb2.Event.Row
COMMITTED = cdcpb_pb2.Event.COMMITTED


def _rows() -> list[Row]:
    return [
        Row(start_ts=1, commit_ts=2, type=COMMITTED, op_type=Row.PUT, key=keycodec.row_key(42, 1), value=b"v1"),
        Row(start_ts=3, commit_ts=4, type=COMMITTED, op_type=Row.PUT, key=keycodec.row_key(42, 1), value=b"v2",
            old_value=b"v1"),
        Row(start_ts=5, commit_ts=6, type=COMMITTED, op_type=Row.DELETE, key=keycodec.row_key(-7, 2),
            value=b"ignored", old_value=b"v2"),
        Row(start_ts=7, commit_ts=8, type=COMMITTED, op_type=Row.PUT, key=keycodec.row_key(42, 3), value=b""),
    ]


def test_committed_rows_and_matched_changes_give_the_same_columns() -> None:
    rows = _rows()
    buf = ChangeBuffer()
    buf.add_committed(9, rows, [r.commit_ts for r in rows])
    assert len(buf) == 4
    columnar = buf.take()
    assert len(buf) == 0 and columnar.schema == changelog.SCHEMA
    m = Matcher(9)
    per_row = from_changes([m.committed(r) for r in rows])
    assert columnar.equals(per_row)
    assert columnar.to_pydict() == {
        "region_id": [9, 9, 9, 9],
        "table_id": [42, 42, -7, 42],
        "key": [r.key for r in rows],
        "op": ["put", "put", "delete", "put"],
        "start_ts": [1, 3, 5, 7],
        "commit_ts": [2, 4, 6, 8],
        "value": [b"v1", b"v2", None, b""],  # a delete has no value; an empty put value stays
        "old_value": [None, b"v1", b"v2", None],
    }


def test_a_mixed_buffer_keeps_the_order_of_arrival() -> None:
    rows = _rows()
    m = Matcher(3)
    buf = ChangeBuffer()
    buf.add_changes([m.committed(rows[0])])
    buf.add_committed(4, rows[1:3], [4, 6])
    buf.add_changes([])
    out = buf.take()
    assert out.column("region_id").to_pylist() == [3, 4, 4]
    assert out.column("commit_ts").to_pylist() == [2, 4, 6]
    assert pa.Table.from_batches([out]).num_rows == 3


def test_an_unknown_op_type_is_a_corrupt_event_naming_region_and_key() -> None:
    row = Row(start_ts=1, commit_ts=2, type=COMMITTED, op_type=0, key=b"t\x80\x00\x00\x00\x00\x00\x00\x01_r1")
    buf = ChangeBuffer()
    buf.add_committed(5, [row], [2])
    with pytest.raises(ChangefeedError, match=r"region 5: corrupt event: unknown op type 0 \(key 74800000"):
        buf.take()


def test_a_key_that_is_no_row_key_is_named() -> None:
    row = Row(start_ts=1, commit_ts=2, type=COMMITTED, op_type=Row.PUT, key=b"zz", value=b"v")
    buf = ChangeBuffer()
    buf.add_committed(5, [row], [2])
    with pytest.raises(ValueError, match="7a7a"):
        buf.take()
