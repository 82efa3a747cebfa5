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
    # A writer left without commit (the pull failed) leaves nothing, and an empty window still reads.
    with pytest.raises(RuntimeError), changelog.WindowWriter(sink, "cf", 40) as w:
        w.write(_rows(2))
        raise RuntimeError("pull failed")
    assert changelog.list_windows(sink, "cf") == [30] and not [p for p in root.iterdir() if p.name.startswith(".")]
    with changelog.WindowWriter(sink, "cf", 50) as w:
        w.commit()
    assert changelog.read_window(sink, "cf", 50).num_rows == 0


def test_a_window_over_the_bound_is_cut_into_sub_windows_each_in_its_own_parts(tmp_path):
    import numpy as np
    import pyarrow.parquet as pq

    assert changelog.cut_points([3, 0, 4, 9, 1, 1], [10, 20, 30, 40, 50, 60, 70], 5) == [29, 39, 49]  # 9 alone
    sink = str(tmp_path)
    rng = np.random.default_rng(3)
    n = 10_000
    ts = rng.integers(101, 5001, n)  # commit ts in (100, 5000], arriving out of order
    rows = _rows(n).set_column(5, "commit_ts", pa.array(ts, pa.int64()))
    with changelog.WindowWriter(sink, "cf", 5000, after_ts=100, part_rows=3000) as w:
        for lo in range(0, n, 700):
            w.write(rows.slice(lo, 700))
        w.commit(max_events=2500)
    cuts = changelog.window_cuts(sink, "cf", 5000)
    assert len(cuts) >= 3 and cuts == sorted(cuts) and 100 < cuts[0] and cuts[-1] < 5000
    bounds = [100, *cuts, 5000]
    per = [int(((ts > lo) & (ts <= hi)).sum()) for lo, hi in itertools.pairwise(bounds)]
    assert sum(per) == n and max(per) <= 2500
    d = changelog.window_dir(sink, "cf", 5000)
    for part in sorted(d.glob("part-*.parquet")):  # each part inside one sub-window: a reader skips the others
        got = pq.read_table(part).column("commit_ts").to_numpy()
        lo = max(b for b in bounds if b < got.min())
        assert got.max() <= min(b for b in bounds if b >= got.min()) and got.min() > lo
    back = changelog.read_window(sink, "cf", 5000)
    assert sorted(back.column("key").to_pylist()) == sorted(rows.column("key").to_pylist())
    # Under the bound: one window, no cuts.
    with changelog.WindowWriter(sink, "cf", 6000, after_ts=5000) as w:
        w.write(_rows(10))
        w.commit(max_events=10)
    assert changelog.window_cuts(sink, "cf", 6000) == []
