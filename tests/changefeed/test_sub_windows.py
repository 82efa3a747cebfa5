"""Where a window is cut into sub-windows (``cdc_core/changefeed/sub_windows.py``)."""

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cdc_core.changefeed import sub_windows
from cdc_core.codec import changelog


def _rows(ts: np.ndarray) -> pa.Table:
    n = len(ts)
    return pa.table(
        {
            "region_id": [1] * n, "table_id": [100] * n, "key": [b"k%d" % i for i in range(n)],
            "op": ["put"] * n, "start_ts": (ts - 1).tolist(), "commit_ts": ts.tolist(),
            "value": [b"{}"] * n, "old_value": [None] * n,
        },
        schema=changelog.SCHEMA,
    )


def test_cut_points_never_split_a_bucket() -> None:
    assert sub_windows.cut_points([3, 0, 4, 9, 1, 1], [10, 20, 30, 40, 50, 60, 70], 5) == [29, 39, 49]  # 9 alone
    assert sub_windows.cut_points([2, 2, 1], [10, 20, 30, 40], 5) == []
    assert sub_windows.cut_points([], [10], 5) == []


def test_a_window_over_the_bound_is_cut_into_sub_windows_each_in_its_own_parts(tmp_path) -> None:
    sink = str(tmp_path)
    rng = np.random.default_rng(3)
    n = 10_000
    ts = rng.integers(101, 5001, n)  # commit ts in (100, 5000], arriving out of order
    rows = _rows(ts)
    with changelog.WindowWriter(sink, "cf", 5000, after_ts=100, part_rows=3000) as w:
        for lo in range(0, n, 700):
            w.write(rows.slice(lo, 700))
        w.commit(cuts=sub_windows.cut_window(w, 2500))
    cuts = sub_windows.window_cuts(sink, "cf", 5000)
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


def test_a_window_within_the_bound_stays_whole_and_one_commit_ts_is_never_cut(tmp_path) -> None:
    sink = str(tmp_path)
    with changelog.WindowWriter(sink, "cf", 6000, after_ts=5000) as w:
        w.write(_rows(np.arange(5001, 5011)))
        assert sub_windows.cut_window(w, 10) == []
        w.commit()
    assert sub_windows.window_cuts(sink, "cf", 6000) == []
    # One transaction of 50 events at one commit ts, past the bound of 10: one bucket, which no cut splits.
    with changelog.WindowWriter(sink, "cf", 7000, after_ts=6000) as w:
        w.write(_rows(np.full(50, 6500)))
        w.write(_rows(np.array([6800])))
        w.commit(cuts=sub_windows.cut_window(w, 10))
    bounds = [6000, *sub_windows.window_cuts(sink, "cf", 7000), 7000]
    assert len(bounds) > 2
    assert [lo < 6500 <= hi for lo, hi in itertools.pairwise(bounds)].count(True) == 1
    assert changelog.read_window(sink, "cf", 7000).num_rows == 51
    # No record at all (a window written before _window.json existed): applied whole.
    assert sub_windows.window_cuts(sink, "cf", 8000) == []
