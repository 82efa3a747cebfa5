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
    # A writer left without commit (the pull failed) leaves nothing, and an empty window still reads.
    with pytest.raises(RuntimeError), changelog.WindowWriter(sink, "cf", 40) as w:
        w.write(_rows(2))
        raise RuntimeError("pull failed")
    assert changelog.list_windows(sink, "cf") == [30] and not [p for p in root.iterdir() if p.name.startswith(".")]
    with changelog.WindowWriter(sink, "cf", 50) as w:
        w.commit()
    assert changelog.read_window(sink, "cf", 50).num_rows == 0
