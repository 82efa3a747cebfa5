"""End to end: consistent cross-table reads. A changefeed over two tables (an initial snapshot, windows with a DDL
barrier inside, a window touching one table, an idle window) records every table's Delta version at every
checkpoint in ``<sink>/_cdcflow/versions``; ``cdcflow snapshot --at-ts`` names them for ts at and between the
checkpoints, and each table read at its named version -- with delta-rs and with delta-spark's ``VERSION AS OF`` --
equals the upstream's rows as of the checkpoint, and as of the ts itself where the answer says ``exact``. The same
changefeed (deletion vectors, ``change-data-feed``, a ``history`` table of acct) also reads acct's change feed per
window (delta-rs ``load_cdf``, delta-spark ``readChangeFeed``) against the window's net changes upstream, and its
history table against the versions the upstream committed, before and after a rebuild of acct (issue 56)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core import failpoint
from cdc_core.changefeed import runner, versions
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import tso
from cdc_core.codec.value_text import json_value
from cdc_core.errors import ChangefeedError
from spark_jobs.load.silver_read import read_table
from testkit.e2e import cli, failpoint_armed, mark_index, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

DB = "e2e_cut"
KEYS = {"acct": "id", "ledger": "k"}


def _norm(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return sorted(({k: json_value(v) for k, v in r.items() if k != "_tidb_rowid"} for r in rows),
                  key=lambda r: r[key])


def _snapshot_at(ts: str) -> dict[str, Any]:
    return json.loads(cli("snapshot", "cut", "--at-ts", ts, "--json"))  # type: ignore[no-any-return]


def _snapshot(ts: int) -> dict[str, Any]:
    return _snapshot_at(str(ts))


def _read_both(spark: Any, path: str, version: int, key: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The table at ``version`` read by delta-rs (``DeltaTable(path, version=...)``) and by delta-spark (``VERSION AS
    OF``), each as sorted plain rows."""
    by_rs = _norm(read_table(DeltaTable(path, version=version)).to_pylist(), key)
    by_spark = _norm([r.asDict() for r in spark.sql(f"SELECT * FROM delta.`{path}` VERSION AS OF {version}")
                      .collect()], key)
    return by_rs, by_spark


def _versions(states: list[dict[Any, tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """``(key, *values, start, end)`` per version from the upstream's rows at the marks (``states[i]``: key -> the
    row's other values at mark ``i``): a version is a run of one row value of a key, from the index of the mark
    whose interval wrote it to that of the one that replaced or deleted it (None: still current). Each interval
    ``(marks[i - 1], marks[i]]`` holds one commit of the table."""
    out: list[tuple[Any, ...]] = []
    for key in sorted({k for s in states for k in s}):
        start: int | None = None
        for i, s in enumerate(states):
            if i and s.get(key) == states[i - 1].get(key):
                continue
            if start is not None:
                out.append((key, *states[start][key], start, i))
            start = i if s.get(key) is not None else None
        if start is not None:
            out.append((key, *states[start][key], start, None))
    return sorted(out, key=lambda r: (r[0], r[-2]))


def _history_rows(rows: list[dict[str, Any]], marks: list[int]) -> list[tuple[Any, ...]]:
    """A history table's rows as ``(id, owner, bal, start, end)``, each commit ts mapped to the index of the mark
    whose interval ``(marks[i - 1], marks[i]]`` holds it (the snapshot's ts is ``marks[0]``)."""

    def at(ts: int | None) -> int | None:
        return mark_index(marks, ts)

    return sorted(((r["id"], r["owner"], r["bal"], at(r["__START_AT"]), at(r["__END_AT"])) for r in rows),
                  key=lambda r: (r[0], r[-2]))


def _net_changes(rows: list[dict[str, Any]], key: str) -> dict[Any, tuple[Any, Any]]:
    """A change feed's rows folded per key, in commit order, into (row before the first commit, row after the last;
    None: absent) -- the net change of the versions read -- keys whose net change is none left out."""
    net: dict[Any, list[Any]] = {}
    gone = ("delete", "update_preimage")
    for r in sorted(rows, key=lambda r: (r["_commit_version"], r["_change_type"] not in gone)):
        image = {k: json_value(v) for k, v in r.items() if not k.startswith("_")}
        k = image[key]
        if k not in net:
            net[k] = [image if r["_change_type"] in gone else None, None]
        net[k][1] = None if r["_change_type"] in gone else image
    return {k: (b, a) for k, (b, a) in net.items() if b != a}


def _upstream_net(before: list[dict[str, Any]], after: list[dict[str, Any]], key: str) -> dict[Any, tuple[Any, Any]]:
    b = {r[key]: r for r in _norm(before, key)}
    a = {r[key]: r for r in _norm(after, key)}
    return {k: (b.get(k), a.get(k)) for k in {*b, *a} if b.get(k) != a.get(k)}


# One variant (each costs minutes of the suite): deletion vectors, whose rebuild leaves files a vector empties whole
# (the checks' driver read once lost the rows after such a file: silver_read.spark_frame).
def test_every_table_read_at_its_named_version_is_the_upstream_as_of_the_ts(cdc_home, upstream_cluster, monkeypatch):
    from spark_jobs.session import get_spark

    sink = cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"""
            CREATE DATABASE {DB};
            CREATE TABLE {DB}.acct (id INT PRIMARY KEY, owner VARCHAR(16) NOT NULL, bal INT);
            CREATE TABLE {DB}.ledger (k INT PRIMARY KEY, v VARCHAR(16));
            INSERT INTO {DB}.acct VALUES (1, 'ada', 10), (2, 'bob', 20);
            INSERT INTO {DB}.ledger VALUES (1, 'open');
        """)
        start = c.get_ts()
        (cdc_home / "cut.toml").write_text(
            f'changefeed-id = "cut"\nsink-uri = "file://{sink}"\nstart-ts = {start}\ninitial-snapshot = true\n'
            f'[filter]\nrules = ["{DB}.*"]\n[sink]\ndeletion-vectors = true\n'
            f'change-data-feed = true\nhistory = ["{DB}.acct"]\n')
        cli("changefeed", "create", "--config", str(cdc_home / "cut.toml"))
        # probes: (ts, whether a change committed between the checkpoint below it and it)
        probes: list[tuple[int, bool]] = [(start, False)]

        # window 1 (start, t1]: the initial snapshot at start, then both tables change
        probes.append((c.get_ts(), False))  # nothing committed since start
        c.execute(f"INSERT INTO {DB}.acct VALUES (3, 'cyd', 30)")
        probes.append((c.get_ts(), True))
        acct_marks = [start, probes[-1][0]]  # one commit of acct in each (acct_marks[i - 1], acct_marks[i]]
        c.execute(f"UPDATE {DB}.ledger SET v = 'one' WHERE k = 1; INSERT INTO {DB}.ledger VALUES (2, 'two')")
        t1 = c.get_ts()
        probes.append((t1, False))
        # window 2 (t1, t2] with a DDL barrier b inside: rows before it, the column added, rows after it
        c.execute(f"UPDATE {DB}.acct SET bal = bal + 5 WHERE id = 1; DELETE FROM {DB}.ledger WHERE k = 1")
        probes.append((c.get_ts(), True))
        acct_marks.append(probes[-1][0])
        c.execute(f"ALTER TABLE {DB}.ledger ADD COLUMN note VARCHAR(8) DEFAULT 'n'")
        probes.append((c.get_ts(), False))  # the barrier b is the checkpoint below it
        c.execute(f"INSERT INTO {DB}.ledger (k, v, note) VALUES (3, 'three', 'x'); DELETE FROM {DB}.acct WHERE id = 2")
        t2 = c.get_ts()
        probes.append((t2, False))
        acct_marks.append(t2)
        runner.run_until("cut", t1)
        runner.run_until("cut", t2)
        # window 3 (t2, t3]: only acct changes; its publish is cut before the checkpoint moves and re-run
        probes.append((c.get_ts(), False))
        c.execute(f"UPDATE {DB}.acct SET owner = 'ada l.' WHERE id = 1")
        probes.append((c.get_ts(), True))
        acct_marks.append(probes[-1][0])
        t3 = c.get_ts()
        probes.append((t3, False))
        with failpoint_armed(monkeypatch, "publish.before_checkpoint=1"), pytest.raises(failpoint.Crash):
            runner.run_until("cut", t3)
        assert load_state("cut").checkpoint_ts == t2 and versions.recorded(f"file://{sink}", "cut", t3, "window")
        before = versions.read(f"file://{sink}", "cut").num_rows
        runner.run_until("cut", t3)  # the re-run publish records nothing twice
        assert load_state("cut").checkpoint_ts == t3 and versions.read(f"file://{sink}", "cut").num_rows == before
        # window 4 (t3, t4]: idle
        probes.append((c.get_ts(), False))
        t4 = c.get_ts()
        runner.run_until("cut", t4)
        probes.append((t4, False))

        rows = versions.read(f"file://{sink}", "cut").to_pylist()
        marks = sorted({r["checkpoint_ts"] for r in rows})
        ddl = [r["checkpoint_ts"] for r in rows if r["source"] == "ddl"]
        assert len(set(ddl)) == 1 and t1 < ddl[0] < t2
        assert marks == [start, t1, ddl[0], t2, t3, t4]
        by_mark = {m: sorted(r["table"] for r in rows if r["checkpoint_ts"] == m) for m in marks}
        assert all(names == [f"{DB}.acct", f"{DB}.ledger"] for names in by_mark.values()), by_mark  # untouched too
        assert all(r["source"].startswith("snapshot ") for r in rows if r["checkpoint_ts"] == start)

        spark = get_spark("cdcflow")

        def read_cuts() -> tuple[int, int]:
            """Every probe's cut read at its versions by both readers, against the upstream; (exact, inexact)."""
            seen_exact = seen_inexact = 0
            for ts, changed_since in probes:
                cut = _snapshot(ts)
                ckpt = cut["checkpoint_ts"]
                assert ckpt == max(m for m in marks if m <= ts), (ts, cut)
                assert cut["exact"] == (not changed_since), (ts, cut)
                seen_exact += cut["exact"]
                seen_inexact += not cut["exact"]
                assert set(cut["tables"]) == {f"{DB}.acct", f"{DB}.ledger"}
                for name, t in cut["tables"].items():
                    table = name.split(".")[1]
                    key = KEYS[table]
                    by_rs, by_spark = _read_both(spark, t["path"], t["version"], key)
                    at_ckpt = upstream_rows(c, DB, table, key, ckpt)
                    assert by_rs == at_ckpt, (ts, name, t)
                    assert by_spark == at_ckpt, (ts, name, t)
                    if cut["exact"]:
                        assert by_rs == upstream_rows(c, DB, table, key, ts), (ts, name)
            return seen_exact, seen_inexact

        assert read_cuts() == (len(probes) - 3, 3)

        # acct's history table: one row per version of a key, from the commit ts that wrote it to the one that
        # replaced it, read by delta-rs and delta-spark, against the upstream's rows at the marks
        history = str(sink / DB / "acct__history")
        states = [{r["id"]: (r["owner"], r["bal"]) for r in upstream_rows(c, DB, "acct", "id", m)} for m in acct_marks]
        want_history = _versions(states)
        assert [r for r in want_history if r[0] == 1] == [(1, "ada", 10, 0, 2), (1, "ada", 15, 2, 4),
                                                         (1, "ada l.", 15, 4, None)]

        def check_history() -> None:
            assert _history_rows(read_table(DeltaTable(history)).to_pylist(), acct_marks) == want_history
            by_spark = [r.asDict() for r in spark.read.format("delta").load(history).collect()]
            assert _history_rows(by_spark, acct_marks) == want_history

        check_history()
        # acct's change feed: the versions of each window (between two checkpoints' recorded versions), read by
        # delta-rs's load_cdf and delta-spark's readChangeFeed, hold the window's net changes upstream. Only the
        # windows' versions: deltalake 1.6.6's load_cdf misreads an overwrite on a deletion-vector table (the
        # snapshot's base load; docs/delta-writers.md).
        acct_path = str(sink / DB / "acct")
        acct_at = {r["checkpoint_ts"]: r["version"] for r in sorted(
            versions.read(f"file://{sink}", "cut").to_pylist(), key=lambda r: r["recorded_at"])
            if r["table"] == f"{DB}.acct"}  # the row recorded last holds
        windows_read = 0
        for a, b in itertools.pairwise(marks):
            if acct_at[a] == acct_at[b]:
                assert _upstream_net(upstream_rows(c, DB, "acct", "id", a), upstream_rows(c, DB, "acct", "id", b),
                                     "id") == {}, (a, b)
                continue
            want = _upstream_net(upstream_rows(c, DB, "acct", "id", a), upstream_rows(c, DB, "acct", "id", b), "id")
            by_rs = pa.table(DeltaTable(acct_path).load_cdf(starting_version=acct_at[a] + 1, ending_version=acct_at[b]))
            assert _net_changes(by_rs.to_pylist(), "id") == want, (a, b)
            by_spark = (spark.read.format("delta").option("readChangeFeed", "true")
                        .option("startingVersion", acct_at[a] + 1).option("endingVersion", acct_at[b])
                        .load(acct_path).collect())
            assert _net_changes([r.asDict() for r in by_spark], "id") == want, (a, b)
            windows_read += 1
        assert windows_read == 4  # (start, t1], (t1, b] and (b, t2] on both sides of the barrier, (t2, t3]

        # A rebuild of acct at t4 (from the initial snapshot's base) makes it a new Delta table: the rebuild records
        # its versions at every checkpoint it replayed, and every cut still reads as the upstream had it.
        old_uuid = DeltaTable(str(sink / DB / "acct")).metadata().id
        c.execute(f"INSERT INTO {DB}.ledger (k, v) VALUES (4, 'four')")
        t5 = c.get_ts()
        runner.run_until("cut", t5, mode="rebuild", tables=[f"{DB}.acct"])
        assert load_state("cut").checkpoint_ts == t5
        new_uuid = DeltaTable(str(sink / DB / "acct")).metadata().id
        assert new_uuid != old_uuid
        marks.append(t5)
        acct = [r for r in versions.read(f"file://{sink}", "cut").to_pylist() if r["table"] == f"{DB}.acct"]
        served = 0
        for m in marks:
            last = max((r for r in acct if r["checkpoint_ts"] == m), key=lambda r: r["recorded_at"])
            assert m == t5 or last["source"].startswith("rebuild "), (m, last)
            # the new table where it has a version holding exactly the changes <= m; else the old one, in the trash
            assert (last["table_uuid"], last["path"].startswith("_cdcflow/trash/")) in {
                (new_uuid, False), (old_uuid, True)}, (m, last)
            served += last["table_uuid"] == new_uuid
        assert served >= 4  # start (the base), t1, t2, t3 and t4 at least; the DDL barrier of ledger may not be
        probes.append((t5, False))
        assert read_cuts() == (len(probes) - 3, 3)
        check_history()  # the rebuild rebuilt the history table from the base and the windows
        # a ts as a datetime: its millisecond's last TSO (TSOs of one millisecond share it: PD hands out a physical
        # time with logical counters), here at or after the last checkpoint
        when = _snapshot_at(tso.to_datetime(t4).isoformat())
        assert when["at_ts"] == tso.compose(tso.physical_ms(t4), tso.MAX_LOGICAL) and when["checkpoint_ts"] == t4
        with pytest.raises(ChangefeedError, match=f"oldest recorded checkpoint {start}"):
            versions.at(f"file://{sink}", "cut", start - 1)
        text = cli("snapshot", "cut", "--at-ts", str(t2))
        assert f"checkpoint {t2}" in text and "exact" in text and f"{DB}.acct  version" in text
