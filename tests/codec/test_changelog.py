import itertools

import pyarrow as pa
import pytest

from cdc_core.codec import changelog


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "region_id": [1] * n, "table_id": [100] * n, "key": [b"k%d" % i for i in range(n)],
            "op": ["put"] * n, "start_ts": list(range(n)), "commit_ts": [i + 1 for i in range(n)],
            "value": [b"{}"] * n, "old_value": [None] * n,
        },
        schema=changelog.SCHEMA,
    )


def test_write_read_list(tmp_path):
    sink = f"file://{tmp_path}"
    changelog.write_window(sink, "cf", 20, _rows(3))
    changelog.write_window(sink, "cf", 10, _rows(1))
    assert changelog.list_windows(sink, "cf") == [10, 20]
    assert changelog.read_window(sink, "cf", 20).num_rows == 3
    assert (tmp_path / "_cdcflow/changelog/changefeed=cf/window=00000000000000000020").is_dir()


def test_rewrite_replaces_whole_window_and_leaves_no_temp(tmp_path):
    sink = str(tmp_path)
    changelog.write_window(sink, "cf", 10, _rows(5))
    changelog.write_window(sink, "cf", 10, _rows(2))
    assert changelog.read_window(sink, "cf", 10).num_rows == 2
    assert not [p for p in (tmp_path / "_cdcflow/changelog/changefeed=cf").iterdir() if p.name.startswith(".tmp")]


def test_a_missing_window_is_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        changelog.read_window(str(tmp_path), "cf", 1)


def test_a_window_written_as_it_arrives_holds_a_part_at_a_time(tmp_path):
    sink = str(tmp_path)
    root = tmp_path / "_cdcflow/changelog/changefeed=cf"
    with changelog.WindowWriter(sink, "cf", 30, after_ts=10, part_rows=4) as w:
        for i in range(5):
            w.write(_rows(3).slice(i % 3, 1 + i % 2))  # 1 or 2 events at a time
            assert w._pending_rows < 4  # a full part goes to disk at once
        assert not changelog.list_windows(sink, "cf")  # invisible until committed
        w.commit()
    got = changelog.read_window(sink, "cf", 30)
    assert got.num_rows == w.rows == 7 and w.parts == 2
    assert changelog.window_after_ts(sink, "cf", 30) == 10
    assert changelog.window_table_ids(sink, "cf", 30, 0, 2) == {100}  # commit ts 1..3: some at or below 2
    assert changelog.window_table_ids(sink, "cf", 30, 3, 30) == set()
    assert changelog.window_table_ids_at(sink, "cf", 30, {1, 3, 9}) == {1: {100}, 3: {100}}
    assert changelog.window_table_ids_at(sink, "cf", 30, set()) == {}
    # A writer left without commit (the pull failed) leaves nothing, and an empty window still reads.
    with pytest.raises(RuntimeError), changelog.WindowWriter(sink, "cf", 40) as w:
        w.write(_rows(2))
        raise RuntimeError("pull failed")
    assert changelog.list_windows(sink, "cf") == [30] and not [p for p in root.iterdir() if p.name.startswith(".")]
    with changelog.WindowWriter(sink, "cf", 50) as w:
        w.commit()
    assert changelog.read_window(sink, "cf", 50).num_rows == 0


def test_parts_split_at_given_cuts_each_hold_one_sub_window_and_the_cuts_are_recorded(tmp_path):
    import pyarrow.parquet as pq

    sink = str(tmp_path)
    rows = _rows(1000).set_column(5, "commit_ts", pa.array([(i * 7919) % 1000 + 1 for i in range(1000)], pa.int64()))
    with changelog.WindowWriter(sink, "cf", 1000, after_ts=0, part_rows=300) as w:
        for lo in range(0, 1000, 90):
            w.write(rows.slice(lo, 90))
        w.split_parts([250, 600], part_rows=100)
        w.commit(cuts=[250, 600])
    assert changelog.window_meta(sink, "cf", 1000) == {"after_ts": 0, "end_ts": 1000, "cuts": [250, 600]}
    parts = sorted(changelog.window_dir(sink, "cf", 1000).glob("part-*.parquet"))
    ranges = []
    for part in parts:
        ts = pq.read_table(part).column("commit_ts").to_numpy()
        ranges.append(next(i for i, (lo, hi) in enumerate(itertools.pairwise([0, 250, 600, 1000]))
                           if lo < ts.min() and ts.max() <= hi))
    assert ranges == sorted(ranges) and set(ranges) == {0, 1, 2} and len(parts) > 3
    back = changelog.read_window(sink, "cf", 1000)
    assert sorted(back.column("key").to_pylist()) == sorted(rows.column("key").to_pylist())
    # A window written whole records no cuts; one written before _window.json existed has no record.
    changelog.write_window(sink, "cf", 2000, _rows(3), after_ts=1000)
    assert changelog.window_meta(sink, "cf", 2000) == {"after_ts": 1000, "end_ts": 2000, "cuts": []}
    changelog.write_window(sink, "cf", 3000, _rows(3))
    assert changelog.window_meta(sink, "cf", 3000) is None
