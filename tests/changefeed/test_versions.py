"""The versions table (one row per checkpoint and table, idempotent per step, looked up at or below a ts) and time
travel by the cdcflow ts of commits (``version_as_of``)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from cdc_core.changefeed import versions
from cdc_core.changefeed.versions import TableVersion, commit_ts, version_as_of, versions_as_of
from cdc_core.errors import ChangefeedError


def _tv(name: str, version: int, uuid: str | None = None, first: int | None = None) -> TableVersion:
    db, table = name.split(".")
    return TableVersion(name, versions.relative_path(db, table), version, uuid or f"uuid-{name}", first)


def test_version_as_of_reads_the_history_newest_first_and_answers_as_a_whole_read(tmp_path):
    """Past a page of history (16, then 64 commits): the newest stamped commit at or before ts; versions before the
    first stamped commit count as ts 0; an unstamped commit after it (an edit outside cdcflow) never answers. The
    one-read form (``versions_as_of``, what a rebuild re-records with) gives the same answers."""
    path = str(tmp_path / "t")
    stamps = [0, 0] + [10 * v for v in range(2, 90)]
    stamps[40] = 0  # an edit made outside cdcflow
    for v, ts in enumerate(stamps):
        props = CommitProperties(custom_metadata={"cdcflow.ts": str(ts)}) if ts else None
        write_deltalake(path, pa.table({"v": [v]}), mode="append", commit_properties=props)

    def whole(ts: int) -> int | None:  # the definition, over the whole history oldest first
        best, stamped = None, False
        for info in sorted(DeltaTable(path).history(), key=lambda h: int(h["version"])):
            at = commit_ts(info)
            if at == 0 and stamped:
                continue
            stamped = stamped or at > 0
            if at <= ts:
                best = int(info["version"])
        return best

    probes = [0, 5, 19, 20, 21, 395, 400, 405, 410, 650, 880, 885, 890, 10**6]
    for ts in probes:
        assert version_as_of(path, ts) == whole(ts), ts
    assert version_as_of(path, 5) == 1 and version_as_of(path, 400) == 39 and version_as_of(path, 410) == 41
    assert version_as_of(path, -1) is None and whole(-1) is None
    assert versions_as_of(DeltaTable(path), [-1, *probes]) == {ts: whole(ts) for ts in [-1, *probes]}


def test_a_rerun_of_a_step_records_nothing_twice_and_changefeeds_keep_their_own_rows(tmp_path):
    sink = f"file://{tmp_path}"
    rows = [_tv("db.a", 3, first=105), _tv("db.b", 7)]
    assert versions.record(sink, "cf", 110, "window", rows, after_ts=100)
    assert not versions.record(sink, "cf", 110, "window", [_tv("db.a", 4), _tv("db.b", 8)], after_ts=100)
    assert versions.record(sink, "other", 110, "window", [_tv("db.a", 9)], after_ts=100)  # another changefeed
    assert not versions.record(sink, "cf", 120, "window", [], after_ts=110)  # no Delta table yet: no commit
    got = versions.read(sink, "cf").to_pylist()
    assert [(r["checkpoint_ts"], r["table"], r["version"], r["after_ts"], r["first_change_ts"], r["path"])
            for r in got] == [(110, "db.a", 3, 100, 105, "db/a"), (110, "db.b", 7, 100, None, "db/b")]
    assert DeltaTable(versions.versions_path(sink)).version() == 1  # two commits: the re-run made none
    assert versions.recorded(sink, "cf", 110, "window") and not versions.recorded(sink, "cf", 110, "ddl")
    assert versions.checkpoints(sink, "other") == [110]
    # several checkpoints of one source in one commit, leaving out those it holds
    assert versions.record_many(sink, "cf", "rebuild r1", {100: (100, [_tv("db.a", 1)]), 110: (110, [_tv("db.a", 2)])})
    assert not versions.record_many(sink, "cf", "rebuild r1", {110: (110, [_tv("db.a", 5)])})
    assert versions.checkpoints(sink, "cf") == [100, 110]


def test_at_names_the_latest_row_at_the_greatest_checkpoint_at_or_below_and_says_whether_it_is_exact(tmp_path):
    """Checkpoints 100 (a snapshot), 200 (a window: a's first change at 150, b untouched) and 300 (a DDL barrier
    renaming b to c and creating d at 300; a's first change at 250): every table's version at each ts, exact where
    (C, ts] held no change of any table."""
    sink = f"file://{tmp_path}"
    versions.record(sink, "cf", 100, "snapshot s1", [_tv("db.a", 1), _tv("db.b", 1)], after_ts=100)
    versions.record(sink, "cf", 200, "window", [_tv("db.a", 2, first=150), _tv("db.b", 1)], after_ts=100)
    versions.record(sink, "cf", 300, "ddl", [_tv("db.a", 3, first=250),
                                             _tv("db.c", 2, uuid="uuid-db.b", first=300),
                                             _tv("db.d", 0, first=300)], after_ts=200)
    with pytest.raises(ChangefeedError, match="before the oldest recorded checkpoint 100"):
        versions.at(sink, "cf", 99)
    with pytest.raises(ChangefeedError, match="no versions recorded"):
        versions.at(sink, "nobody", 100)

    def cut(ts: int) -> tuple[int, bool, dict[str, tuple[int, bool]]]:
        got = versions.at(sink, "cf", ts)
        return got.checkpoint_ts, got.exact, {n: (t.version, t.exact) for n, t in got.tables.items()}

    assert cut(100) == (100, True, {"db.a": (1, True), "db.b": (1, True)})
    assert cut(149) == (100, True, {"db.a": (1, True), "db.b": (1, True)})  # a's first change is at 150
    assert cut(150) == (100, False, {"db.a": (1, False), "db.b": (1, True)})
    assert cut(200) == (200, True, {"db.a": (2, True), "db.b": (1, True)})
    # b is renamed to c at 300 (matched by its Delta table's uuid), d is created at 300: both after 299
    assert cut(249) == (200, True, {"db.a": (2, True), "db.b": (1, True)})
    assert cut(250) == (200, False, {"db.a": (2, False), "db.b": (1, True)})
    assert cut(300) == (300, True, {"db.a": (3, True), "db.c": (2, True), "db.d": (0, True)})
    assert cut(301) == (300, False, {"db.a": (3, False), "db.c": (2, False), "db.d": (0, False)})  # after the last
    at = versions.at(sink, "cf", 250)
    assert at.next_checkpoint_ts == 300 and at.tables["db.a"].first_change_ts == 250
    assert at.to_json()["tables"]["db.b"]["path"] == "db/b"


def test_a_later_row_of_a_checkpoint_holds_and_a_table_created_after_it_makes_a_ts_inexact(tmp_path):
    """A rebuild's rows at a checkpoint a window recorded win (recorded last); a step that does not start at or
    below the checkpoint below cannot vouch for the ts between; a table first recorded
    at the next checkpoint, created before ts, makes ts inexact."""
    sink = f"file://{tmp_path}"
    versions.record(sink, "cf", 100, "window", [_tv("db.a", 5)], after_ts=50)
    versions.record(sink, "cf", 100, "rebuild r", [_tv("db.a", 9, uuid="new")], after_ts=100)
    versions.record(sink, "cf", 200, "window", [_tv("db.a", 10, uuid="new"), _tv("db.n", 0, first=120)],
                    after_ts=100)
    versions.record(sink, "cf", 300, "window", [_tv("db.a", 11, uuid="new"), _tv("db.n", 0)], after_ts=250)
    got = versions.at(sink, "cf", 120)
    assert got.tables["db.a"].version == 9 and got.tables["db.a"].source == "rebuild r"
    assert got.tables["db.a"].exact and not got.exact  # a did not change, but db.n was created at 120
    assert versions.at(sink, "cf", 119).exact
    # a step (250, 300] (a checkpoint between went unrecorded) does not vouch for (200, 240]
    assert not versions.at(sink, "cf", 240).tables["db.a"].exact
