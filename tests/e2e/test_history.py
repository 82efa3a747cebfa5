"""SCD type 2 history tables end to end (issue 56 item 2): a changefeed with ``[sink] history`` on one of two tables,
windows of several transactions each (updates of one key in two of them, a key-changing update, deletes, a
statement changing several keys in one transaction), the ``__history`` table compared with the upstream's history of
changes -- each key's sequence of committed versions, read from the upstream at a ts after every transaction -- and
the window checks passing; a rebuild rebuilds it; a history table with a row deleted fails the checks, naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import DataQualityError
from testkit.e2e import cli as _cli
from testkit.e2e import mark_index

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

DB = "e2e_hist"
CF = "hist"


def _window(c: UpstreamClient) -> int:
    t = c.get_ts()
    runner.run_until(CF, t)
    st = load_state(CF)
    assert (st.checkpoint_ts, st.state) == (t, "normal"), st.error
    return t


def _expected(states: list[dict[int, str]]) -> list[tuple[int, str, int, int | None]]:
    """``(id, v, start, end)`` per version from the upstream's rows at the ts after each transaction (``states[i]``,
    id -> v): a version is a run of one value of a key, from the index of the transaction that wrote it to the index
    of the one that replaced or deleted it (None: still current). Every transaction writes a value the key had not."""
    out: list[tuple[int, str, int, int | None]] = []
    for key in sorted({k for s in states for k in s}):
        start: int | None = None
        for i, s in enumerate(states):
            v, before = s.get(key), states[i - 1].get(key) if i else None
            if i and v == before:
                continue
            if start is not None:
                out.append((key, states[start][key], start, i))
            start = i if v is not None else None
        if start is not None:
            out.append((key, states[start][key], start, None))
    return sorted(out, key=lambda r: (r[0], r[2]))


def _history(sink: Path, marks: list[int]) -> list[tuple[int, str, int, int | None]]:
    """The history table's rows as ``(id, v, start, end)``, the commit ts mapped to the index of the transaction
    whose interval ``(marks[i - 1], marks[i]]`` holds it (the snapshot's ts is ``marks[0]``)."""
    rows = DeltaTable(str(sink / DB / "h__history")).to_pyarrow_table().to_pylist()

    def at(ts: int | None) -> int | None:
        return mark_index(marks, ts)

    return sorted(((r["id"], r["v"], at(r["__START_AT"]), at(r["__END_AT"])) for r in rows),
                  key=lambda r: (r[0], r[2]))  # type: ignore[arg-type, return-value]


def _checked_history() -> bool:
    """Whether the last checks of the history's table compared its history table (and passed)."""
    report = load_state(CF).last_checks["tables"][f"{DB}.h"]
    return report["passed"] and "history_open_rows_equal" in [r["expectation"] for r in report["results"]]


def test_a_history_table_holds_every_committed_version(cdc_home: Path, upstream_cluster: Any) -> None:
    sink = cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {DB}; USE {DB}; CREATE TABLE h (id INT PRIMARY KEY, v VARCHAR(16)); "
                  "CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(16)); "
                  "INSERT INTO h VALUES (1, 'a1'), (2, 'b1'), (3, 'c1'), (4, 'd1'); INSERT INTO p VALUES (1, 'x')")
        start = c.get_ts()
        cfg = cdc_home / "hist.toml"
        cfg.write_text(f'changefeed-id = "{CF}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{DB}.*"]\n[data-quality]\nmode = "checksum"\n'
                       f'[sink]\nhistory = ["{DB}.h"]\n')
        _cli("changefeed", "create", "--config", str(cfg))
        marks = [start]

        def state(ts: int) -> dict[int, str]:
            return {int(r["id"]): str(r["v"]) for r in c.query(f"SELECT id, v FROM {DB}.h", at_ts=ts)}

        states = [state(start)]

        def txn(sql: str) -> None:  # one transaction, and the ts after its commit
            c.execute(f"USE {DB}; {sql}")
            marks.append(c.get_ts())
            states.append(state(marks[-1]))

        _window(c)  # the snapshot: one open row per key at the snapshot's ts
        assert _history(sink, marks) == _expected(states)
        assert _checked_history()  # the snapshot window's whole reconciliation checks it too
        windows = [
            # two updates of key 1 in two transactions of one window; a statement changing two keys in one
            ["UPDATE h SET v = 'a2' WHERE id = 1", "UPDATE h SET v = CONCAT(v, '+') WHERE id IN (2, 3)",
             "UPDATE h SET v = 'a3' WHERE id = 1", "INSERT INTO p VALUES (2, 'y')"],
            # a key-changing update (3 becomes 30), a delete, an insert and an update of it in one window
            ["UPDATE h SET id = 30 WHERE id = 3", "DELETE FROM h WHERE id = 4", "INSERT INTO h VALUES (5, 'e1')",
             "UPDATE h SET v = 'e2' WHERE id = 5"],
            # a deleted key comes back; the key that moved moves back
            ["INSERT INTO h VALUES (4, 'd2')", "UPDATE h SET id = 3 WHERE id = 30", "UPDATE p SET v = 'z'",
             "DELETE FROM h WHERE id = 2"],
        ]
        for w in windows:
            for sql in w:
                txn(sql)
            _window(c)
            assert _history(sink, marks) == _expected(states)
        got = _history(sink, marks)
        assert [r for r in got if r[0] == 1] == [(1, "a1", 0, 1), (1, "a2", 1, 3), (1, "a3", 3, None)]
        assert not (sink / DB / "p__history").exists()  # only the table the rules name
        last = load_state(CF).last_checks
        assert "history_open_rows_equal" in [r["expectation"] for r in last["tables"][f"{DB}.h"]["results"]]
        assert "history_open_rows_equal" not in [r["expectation"] for r in last["tables"][f"{DB}.p"]["results"]]
        # A rebuild from the changelog (the snapshot's base, then every window) rebuilds the history table.
        end = marks[-1]
        runner.run_until(CF, end, mode="rebuild", run_tag="hist-1")
        assert load_state(CF).state == "normal" and _checked_history()
        assert _history(sink, marks) == _expected(states)

        # A history table that lost a row fails the next window's checks, which name it.
        DeltaTable(str(sink / DB / "h__history")).delete("id = 5 AND __END_AT IS NULL")
        txn("UPDATE h SET v = 'a4' WHERE id = 1")
        with pytest.raises(DataQualityError, match=rf"(?s){DB}\.h.*history_open_rows_equal"):
            runner.run_until(CF, c.get_ts())
        st = load_state(CF)
        assert st.state == "error" and "history table" in st.error["message"]
