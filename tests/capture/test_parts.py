"""The capture's parts: contiguous, atomic, read by interval and table, pruned below a ts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_core.capture import parts
from cdc_core.codec import changelog
from cdc_core.errors import ChangefeedError

CID = "cf"


def events(*rows: tuple[int, int]) -> pa.RecordBatch:
    """(table_id, commit_ts) rows as bronze events."""
    n = len(rows)
    return pa.RecordBatch.from_pydict({
        "region_id": [1] * n, "table_id": [t for t, _ in rows], "key": [f"k{t}-{ts}".encode() for t, ts in rows],
        "op": ["put"] * n, "start_ts": [ts - 1 for _, ts in rows], "commit_ts": [ts for _, ts in rows],
        "value": [b"v"] * n, "old_value": [None] * n,
    }, schema=changelog.SCHEMA)


def sink(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'lake'}"


def test_parts_are_contiguous_and_the_last_end_is_the_resolved_ts(tmp_path: Path) -> None:
    s = sink(tmp_path)
    assert parts.resolved_ts(s, CID) is None
    parts.write_part(s, CID, 100, 110, [events((1, 105), (2, 110))])
    parts.write_part(s, CID, 110, 120, [events((1, 111))])
    assert [(p.from_ts, p.to_ts) for p in parts.list_parts(s, CID)] == [(100, 110), (110, 120)]
    assert parts.resolved_ts(s, CID) == 120
    with pytest.raises(ChangefeedError, match="contiguous"):
        parts.write_part(s, CID, 125, 130, [])
    with pytest.raises(ChangefeedError, match="commit ts"):
        parts.write_part(s, CID, 120, 130, [events((1, 131))])
    assert parts.resolved_ts(s, CID) == 120  # a refused part leaves nothing behind
    names = sorted(p.name for p in parts.capture_root(s, CID).iterdir())
    assert names == [parts.part_name(100, 110), parts.part_name(110, 120)]  # no temporary file either


def test_empty_parts_widen_the_previous_empty_part(tmp_path: Path) -> None:
    s = sink(tmp_path)
    parts.write_part(s, CID, 100, 110, [events((1, 105))])
    parts.write_part(s, CID, 110, 120, [])
    parts.write_part(s, CID, 120, 130, [])
    parts.write_part(s, CID, 130, 140, [])
    assert [(p.from_ts, p.to_ts) for p in parts.list_parts(s, CID)] == [(100, 110), (110, 140)]
    parts.write_part(s, CID, 140, 150, [events((1, 141))])
    assert [(p.from_ts, p.to_ts) for p in parts.list_parts(s, CID)] == [(100, 110), (110, 140), (140, 150)]


def test_a_crash_between_widening_steps_lists_the_wider_part(tmp_path: Path) -> None:
    s = sink(tmp_path)
    parts.write_part(s, CID, 100, 110, [])
    root = parts.capture_root(s, CID)
    (root / parts.part_name(100, 120)).hardlink_to(root / parts.part_name(100, 110))  # both names, as mid-widening
    assert [(p.from_ts, p.to_ts) for p in parts.list_parts(s, CID)] == [(100, 120)]
    assert parts.resolved_ts(s, CID) == 120


def test_read_events_by_interval_and_table(tmp_path: Path) -> None:
    s = sink(tmp_path)
    parts.write_part(s, CID, 100, 110, [events((1, 101), (2, 105), (1, 110))])
    parts.write_part(s, CID, 110, 120, [])
    parts.write_part(s, CID, 120, 130, [events((2, 121), (1, 125), (1, 130))])

    def read(after: int, upto: int, ids: set[int] | None = None) -> list[tuple[int, int]]:
        out = []
        for b in parts.read_events(s, CID, after, upto, ids):
            assert b.schema.equals(changelog.SCHEMA)
            out += list(zip(b.column("table_id").to_pylist(), b.column("commit_ts").to_pylist(), strict=True))
        return out

    assert read(100, 130) == [(1, 101), (2, 105), (1, 110), (2, 121), (1, 125), (1, 130)]
    assert read(105, 125, {1}) == [(1, 110), (1, 125)]
    assert read(110, 121) == [(2, 121)]
    assert read(130, 130) == []
    with pytest.raises(ChangefeedError, match="do not cover"):
        read(100, 131)
    with pytest.raises(ChangefeedError, match="do not cover"):
        read(99, 110)  # below the first part
    assert parts.covered_upto(s, CID, 105) == 130
    assert parts.covered_upto(s, CID, 130) == 130
    assert parts.covered_upto(s, CID, 99) is None


def test_read_events_streams_a_backlog_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = sink(tmp_path)
    monkeypatch.setattr(parts, "READ_BATCH_ROWS", 100)
    parts.write_part(s, CID, 0, 1000, [events(*((1, ts) for ts in range(1, 1001)))])
    sizes = [b.num_rows for b in parts.read_events(s, CID, 0, 1000)]
    assert sum(sizes) == 1000 and max(sizes) <= 100


def test_remove_upto_keeps_the_last_part(tmp_path: Path) -> None:
    s = sink(tmp_path)
    parts.write_part(s, CID, 100, 110, [events((1, 105))])
    parts.write_part(s, CID, 110, 120, [events((1, 115))])
    parts.write_part(s, CID, 120, 130, [events((1, 125))])
    gone = parts.remove_upto(s, CID, 125)
    assert [(p.from_ts, p.to_ts) for p in gone] == [(100, 110), (110, 120)]
    assert [(p.from_ts, p.to_ts) for p in parts.list_parts(s, CID)] == [(120, 130)]
    assert parts.remove_upto(s, CID, 200) == []  # the last part carries the resolved ts
    assert parts.resolved_ts(s, CID) == 130


def test_dedupe_drops_exact_duplicates_from_any_region_and_keeps_the_order() -> None:
    a = events((1, 105), (1, 106), (2, 107))
    redelivered = a.set_column(0, "region_id", pa.array([9, 9, 9], pa.int64()))  # a split re-sends from a new region
    other_value = events((1, 105)).set_column(6, "value", pa.array([b"w"], pa.binary()))
    got = pa.Table.from_batches(parts.dedupe([a, redelivered, other_value]), schema=changelog.SCHEMA)
    assert got["commit_ts"].to_pylist() == [105, 106, 107, 105]  # the first of each, in order
    assert got["region_id"].to_pylist() == [1, 1, 1, 1] and got["value"].to_pylist()[-1] == b"w"
    assert parts.dedupe([]) == [] and pa.Table.from_batches(parts.dedupe([a])).num_rows == 3


def test_a_fence_that_refuses_publishes_nothing_and_leaves_no_temporary(tmp_path: Path) -> None:
    s = sink(tmp_path)
    parts.write_part(s, CID, 100, 110, [events((1, 105))])

    @contextlib.contextmanager
    def refused() -> Iterator[None]:
        raise ChangefeedError("lost the lease")
        yield

    entered: list[int] = []

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        entered.append(len(os.listdir(parts.capture_root(s, CID))))  # the temporary is written before the fence
        yield

    with pytest.raises(ChangefeedError, match="lost the lease"):
        parts.write_part(s, CID, 110, 120, [events((1, 111))], fence=refused)
    assert [(p.from_ts, p.to_ts) for p in parts.list_parts(s, CID)] == [(100, 110)]
    assert os.listdir(parts.capture_root(s, CID)) == [parts.part_name(100, 110)]
    parts.write_part(s, CID, 110, 120, [events((1, 111))], fence=held)
    assert entered == [2] and parts.resolved_ts(s, CID) == 120
    (parts.capture_root(s, CID) / ".tmp-part-x-killed").write_bytes(b"half a part")  # a writer killed mid-write
    assert parts.remove_temporaries(s, CID) == 1 and len(os.listdir(parts.capture_root(s, CID))) == 2
