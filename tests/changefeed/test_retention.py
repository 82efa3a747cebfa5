"""Rebuild trash and changelog retention, and the replay ranges a rebuild cuts from the bronze windows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdc_core.changefeed import rebuild, retention
from cdc_core.codec import changelog
from cdc_core.errors import ChangefeedError

DAY = 86400.0


def _window(sink: str, end: int, after: int | None) -> None:
    changelog.write_window(sink, "cf", end, changelog.SCHEMA.empty_table(), after_ts=after)


def _base(sink: str, ts: int, name: str) -> None:
    d = changelog.snapshot_table_dir(sink, "cf", ts, *name.split("."))
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = d.parent / f".tmp-{name}"
    tmp.mkdir()
    changelog.publish_snapshot_table(tmp, d, {"table_id": 1, "ts": ts})


def test_trash_is_listed_and_removed_by_age(tmp_path):
    sink = f"file://{tmp_path}"
    now = 1_800_000_000.0
    old, new = rebuild.trash_name(100, now - 10 * DAY), rebuild.trash_name(200, now - DAY)
    for name in (old, new):
        (rebuild.trash_root(sink) / name / "shop" / "orders" / "_delta_log").mkdir(parents=True)
    (rebuild.trash_root(sink) / "not-a-rebuild").mkdir()
    entries = retention.list_trash(sink)
    assert [(e.name, e.checkpoint_ts, e.tables) for e in entries] == [
        (old, 100, ["shop.orders"]), (new, 200, ["shop.orders"])]
    assert entries[0].created_at == pytest.approx(now - 10 * DAY)
    assert [e.name for e in retention.remove_trash(sink, 7, now=now, dry_run=True)] == [old]
    assert len(retention.list_trash(sink)) == 2
    assert [e.name for e in retention.remove_trash(sink, 7, now=now)] == [old]
    assert [e.name for e in retention.list_trash(sink)] == [new]
    assert (rebuild.trash_root(sink) / "not-a-rebuild").is_dir()


def test_prune_keeps_every_window_since_the_latest_complete_snapshot(tmp_path):
    sink = str(tmp_path)
    changelog.write_schema_snapshot(sink, "cf", 10, [])  # the schema at start-ts
    for after, end in ((10, 20), (20, 30), (30, 40), (40, 50)):
        _window(sink, end, after)
    # No snapshot of every table yet: a rebuild replays from start-ts, so nothing goes.
    _base(sink, 30, "shop.orders")
    out = retention.prune_changelog(sink, "cf", keep_after_ts=45)
    assert out["windows"] == [] and out["protected_from_ts"] is None
    assert changelog.list_windows(sink, "cf") == [20, 30, 40, 50]
    # A complete snapshot at 30: windows ending at or before min(keep_after_ts, 30) go, older snapshots too.
    changelog.mark_snapshot_complete(sink, "cf", 30, ["shop.orders"])
    out = retention.prune_changelog(sink, "cf", keep_after_ts=25)
    assert out["windows"] == [20] and out["snapshots"] == [10]
    out = retention.prune_changelog(sink, "cf", keep_after_ts=45)
    assert out["windows"] == [30] and out["snapshots"] == [] and out["protected_from_ts"] == 30
    assert changelog.list_windows(sink, "cf") == [40, 50]
    assert changelog.list_snapshots(sink, "cf") == [30]
    assert rebuild.window_ranges(sink, "cf", 30, 50) == [(40, 30, 40), (50, 40, 50)]


def test_replay_ranges_cut_overlapping_windows_and_find_gaps(tmp_path):
    sink = str(tmp_path)
    _window(sink, 20, 10)
    _window(sink, 35, 20)  # pulled, then the run crashed after a barrier at 27
    _window(sink, 50, 27)  # the re-run pulled from the barrier
    assert rebuild.window_ranges(sink, "cf", 10, 50) == [(20, 10, 20), (35, 20, 35), (50, 35, 50)]
    assert rebuild.window_ranges(sink, "cf", 10, 30) == [(20, 10, 20), (35, 20, 30)]
    assert rebuild.window_ranges(sink, "cf", 20, 20) == []
    with pytest.raises(ChangefeedError, match="no bronze window covers ts 5"):
        rebuild.window_ranges(sink, "cf", 5, 50)
    # Windows written before `_window.json` existed start where the previous one ended.
    legacy = str(tmp_path / "legacy")
    for end in (20, 30):
        changelog.write_window(legacy, "cf", end, pa.table({n: [] for n in changelog.SCHEMA.names},
                                                           schema=changelog.SCHEMA))
    assert changelog.window_after_ts(legacy, "cf", 20) is None
    assert rebuild.window_ranges(legacy, "cf", 10, 30) == [(20, 10, 20), (30, 20, 30)]


def test_cover_equals_the_quadratic_rule_on_random_overlapping_windows():
    """The O(W log W) sweep picks, at every point, the covering window reaching furthest (the rule it replaced)."""
    import random

    def quadratic(after: dict[int, int], cur: int, upto_ts: int) -> list[tuple[int, int, int]]:
        out = []
        while cur < upto_ts:
            covering = [e for e in after if after[e] <= cur < e]
            if not covering:
                raise ChangefeedError(f"no bronze window covers ts {cur}")
            end = max(covering)
            out.append((end, cur, min(end, upto_ts)))
            cur = min(end, upto_ts)
        return out

    rng = random.Random(5)
    for _ in range(300):
        after: dict[int, int] = {}
        cur = 0
        for _ in range(rng.randrange(1, 40)):
            start = max(0, cur - rng.randrange(0, 30)) if rng.random() < 0.9 else cur + rng.randrange(1, 5)
            end = max(start + 1, cur + rng.randrange(1, 40))
            after[end] = min(after.get(end, start), start)
            cur = end
        lo, hi = rng.randrange(0, cur), rng.randrange(0, cur + 1)
        try:
            want = quadratic(after, lo, hi)
        except ChangefeedError:
            with pytest.raises(ChangefeedError, match="no bronze window covers"):
                rebuild.cover(after, lo, hi)
        else:
            assert rebuild.cover(after, lo, hi) == want
