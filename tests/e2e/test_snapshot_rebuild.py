"""End to end: snapshot and rebuild windows. After each window every replicated Delta table equals the upstream
snapshot at the checkpoint, row by row.

1. ``initial-snapshot = true``: rows written before start-ts arrive (loaded in parallel chunks by region, a table
   clustered by an integer PK and one by a common handle alike), then windows continue incrementally.
2. ``--mode snapshot --tables``: a Delta table damaged by hand is reloaded from the upstream.
3. ``rebuild``: tables rebuilt from the bronze changelog (DDL and PK-moving updates included) into new
   directories, the old ones in the trash; once per backfill tag; a crash mid-replay resumes.
4. all three on tables with deletion vectors (``[sink] deletion-vectors``), the window checks in checksum mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core import failpoint
from cdc_core.changefeed import retention, runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import changelog
from spark_jobs import snapshot_load
from testkit.e2e import cli as _cli
from testkit.e2e import delta_rows, failpoint_armed, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.spark]


def _create(home: Path, cid: str, db: str, start_ts: int, *, initial: bool = False, dq_mode: str = "count",
            deletion_vectors: bool = False) -> Path:
    """A changefeed of every table of ``db``; DQ "count" by default: the tests compare every row themselves."""
    sink = home / f"lake-{cid}"
    cfg = home / f"{cid}.toml"
    cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start_ts}\n'
                   f"initial-snapshot = {str(initial).lower()}\n"
                   f'[filter]\nrules = ["{db}.*"]\n[data-quality]\nmode = "{dq_mode}"\n'
                   f"[sink]\ndeletion-vectors = {str(deletion_vectors).lower()}\n")
    _cli("changefeed", "create", "--config", str(cfg))
    return sink


def _same(c: UpstreamClient, sink: Path, db: str, tables: dict[str, str], ts: int) -> None:
    for table, key in tables.items():
        assert delta_rows(sink, db, table, key) == upstream_rows(c, db, table, key, ts), f"{db}.{table} at {ts}"


def _versions(sink: Path, db: str, tables: dict[str, str]) -> dict[str, int]:
    return {t: DeltaTable(str(sink / db / t)).version() for t in tables}


def test_initial_snapshot_loads_rows_from_before_start_in_chunks(
    cdc_home: Path, upstream_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, tables = "e2e_snap", {"big": "id", "nokey": "a", "multi": "v", "named": "v"}
    # Tables of more rows than this are read by Spark tasks, chunk by chunk (big, multi); the others on the driver.
    monkeypatch.setenv(snapshot_load.ENV_DRIVER_ROWS, "300")
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"""
            CREATE DATABASE {db}; USE {db};
            CREATE TABLE big (id BIGINT PRIMARY KEY, v VARCHAR(16), amt DECIMAL(10,2), at DATETIME);
            CREATE TABLE nokey (a INT, b VARCHAR(8));
            INSERT INTO nokey VALUES (1, 'x'), (2, NULL), (3, 'z');
            CREATE TABLE multi (tenant INT, k VARCHAR(8), v INT NOT NULL, PRIMARY KEY (tenant, k), UNIQUE KEY (v));
        """)
        multi = ", ".join(f"({i // 10}, 'k{i % 10}', {i})" for i in range(600))  # a common handle (tenant, k)
        c.execute(f"USE {db}; INSERT INTO multi VALUES {multi}; SPLIT TABLE multi BETWEEN (0) AND (60) REGIONS 3")
        # A common handle led by a string (a VARCHAR key, clustered by default): chunked at its leading bytes.
        c.execute(f"USE {db}; CREATE TABLE named (name VARCHAR(16) PRIMARY KEY, v INT NOT NULL); "
                  "INSERT INTO named VALUES " + ", ".join(f"('user-{i:04d}', {i})" for i in range(300)) + "; "
                  "SPLIT TABLE named BY ('user-0100'), ('user-0200')")
        rows = ", ".join(f"({i}, 'v{i}', {i}.25, '2024-01-0{1 + i % 9} 10:00:00')" for i in range(600))
        c.execute(f"USE {db}; INSERT INTO big VALUES {rows}; SPLIT TABLE big BETWEEN (0) AND (600) REGIONS 3")
        start = c.get_ts()
        c.execute(f"""
            USE {db};
            UPDATE big SET v = 'after' WHERE id = 5;
            DELETE FROM big WHERE id = 7;
            INSERT INTO big VALUES (1000, 'new', 1, NULL);
            UPDATE nokey SET b = 'y' WHERE a = 2;
            UPDATE multi SET k = 'moved' WHERE v = 11;
            DELETE FROM multi WHERE v = 12;
        """)
        sink = _create(cdc_home, "snap", db, start, initial=True)

        t1 = c.get_ts()
        (r,) = runner.run_until("snap", t1)
        assert r["plan"]["mode"] == "snapshot" and r["plan"]["snapshot"]["initial"]
        fetched = r["pull"]["snapshot"]["tables"]
        assert fetched[f"{db}.big"]["rows"] == 600 and fetched[f"{db}.big"]["chunks"] == 4, fetched  # 4 regions
        assert fetched[f"{db}.nokey"]["rows"] == 3
        assert fetched[f"{db}.multi"]["rows"] == 600 and fetched[f"{db}.multi"]["chunks"] == 4, fetched
        assert fetched[f"{db}.named"]["rows"] == 300 and fetched[f"{db}.named"]["chunks"] == 3, fetched
        assert r["check"]["passed"] and load_state("snap").checkpoint_ts == t1
        _same(c, sink, db, tables, t1)
        st = load_state("snap")
        assert st.initial_snapshot_done and st.snapshot is not None and st.snapshot["done"]
        # The load is one commit at the checkpoint it read (start-ts): time travel to start sees the snapshot.
        loads = [h for h in DeltaTable(str(sink / db / "big")).history() if h.get("cdcflow.load_id")]
        assert [int(h["cdcflow.ts"]) for h in loads] == [start]
        def parts(table: str) -> int:
            return len(changelog.snapshot_part_files(changelog.snapshot_table_dir(f"file://{sink}", "snap", start,
                                                                                   db, table)))

        assert parts("big") >= 3 and parts("multi") >= 3  # written by parallel Spark tasks
        assert parts("named") == 1  # 3 chunks of 300 rows, streamed one after the other on the driver

        c.execute(f"USE {db}; UPDATE big SET amt = 0 WHERE id < 10; INSERT INTO nokey VALUES (4, 'w'); "
                  "UPDATE multi SET tenant = 99 WHERE v < 5")
        t2 = c.get_ts()
        (r,) = runner.run_until("snap", t2)
        assert r["plan"]["mode"] == "incremental"
        _same(c, sink, db, tables, t2)


def test_snapshot_mode_repairs_a_damaged_table(
    cdc_home: Path, upstream_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, tables = "e2e_resnap", {"t": "id", "u": "id"}
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; USE {db}; CREATE TABLE t (id INT PRIMARY KEY, v INT);"
                  "CREATE TABLE u (id INT PRIMARY KEY, v INT)")
        sink = _create(cdc_home, "resnap", db, c.get_ts())
        c.execute(f"USE {db}; INSERT INTO t VALUES (1, 1), (2, 2), (3, 3); INSERT INTO u VALUES (1, 1)")
        t1 = c.get_ts()
        runner.run_until("resnap", t1)
        _same(c, sink, db, tables, t1)

        path = str(sink / db / "t")
        DeltaTable(path).delete("id = 1")
        DeltaTable(path).update({"v": "99"}, predicate="id = 2")
        assert delta_rows(sink, db, "t", "id") != upstream_rows(c, db, "t", "id", t1)
        u_version = DeltaTable(str(sink / db / "u")).version()

        c.execute(f"USE {db}; INSERT INTO t VALUES (4, 4)")
        # A crash right after the table's load commit; the CLI re-run resumes the same snapshot (nothing twice).
        with failpoint_armed(monkeypatch, "snapshot.table_loaded=1"), pytest.raises(failpoint.Crash):
            runner.run_until("resnap", c.get_ts(), mode="snapshot", tables=[f"{db}.t"])
        crashed = load_state("resnap").snapshot
        assert crashed is not None and not crashed["done"] and list(crashed["loaded"]) == [f"{db}.t"]
        loaded_version = DeltaTable(path).version()
        out = _cli("changefeed", "run", "resnap", "--mode", "snapshot", "--tables", f"{db}.t")
        assert "snapshot window" in out and f"snapshot base of {db}.t: 3 rows" in out, out
        st = load_state("resnap")
        assert st.snapshot is not None and st.snapshot["tables"] == [f"{db}.t"] and st.snapshot["done"]
        assert st.snapshot["id"] == crashed["id"]
        loads = [h for h in DeltaTable(path).history() if h.get("cdcflow.load_id")]
        assert len(loads) == 1 and int(loads[0]["version"]) <= loaded_version  # loaded once
        _same(c, sink, db, tables, st.checkpoint_ts)
        assert DeltaTable(str(sink / db / "u")).version() == u_version  # not selected, nothing to apply


def test_rebuild_from_the_changelog_once_per_tag_and_after_a_crash(
    cdc_home: Path, upstream_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, tables = "e2e_rebuild", {"r": "id", "nc": "a"}
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; USE {db}; CREATE TABLE r (id INT PRIMARY KEY, v INT);"
                  "CREATE TABLE nc (a INT NOT NULL, b INT, PRIMARY KEY (a) NONCLUSTERED)")
        start = c.get_ts()
        sink = _create(cdc_home, "reb", db, start)
        c.execute(f"USE {db}; INSERT INTO r VALUES (1, 1), (2, 2), (3, 3); INSERT INTO nc VALUES (1, 1), (2, 2);"
                  "UPDATE r SET id = 10 WHERE id = 1")
        t1 = c.get_ts()
        runner.run_until("reb", t1)
        c.execute(f"""
            USE {db};
            UPDATE r SET v = 20 WHERE id = 2;
            ALTER TABLE r ADD COLUMN c VARCHAR(8) DEFAULT 'dflt';
            INSERT INTO r (id, v, c) VALUES (4, 4, 'four');
            UPDATE nc SET a = 5 WHERE a = 1;
            DELETE FROM r WHERE id = 3;
        """)
        t2 = c.get_ts()
        runner.run_until("reb", t2)
        _same(c, sink, db, tables, t2)

        # A backfill's first run rebuilds every table at the checkpoint (its interval is older: no window) and
        # crashes after replaying the first of the two windows; the backfill's retry resumes the rebuild.
        trash_root = sink / "_cdcflow" / "trash"
        with failpoint_armed(monkeypatch, "rebuild.window_replayed=1"), pytest.raises(failpoint.Crash):
            runner.run_until("reb", t1, mode="rebuild", run_tag="backfill-1")
        st = load_state("reb")
        assert st.state == "normal" and st.checkpoint_ts == t2
        assert st.rebuild is not None and not st.rebuild["done"] and st.rebuild["replayed_to"] == t1
        assert st.rebuild["moved"] == [f"{db}.nc", f"{db}.r"]
        (trash,) = list(trash_root.iterdir())
        assert sorted(p.name for p in (trash / db).iterdir()) == ["nc", "r"]
        assert DeltaTable(str(trash / db / "r")).version() > 0  # the old table, intact
        assert delta_rows(sink, db, "r", "id") == upstream_rows(c, db, "r", "id", t1)  # half rebuilt: at t1

        (r,) = runner.run_until("reb", t1, mode="rebuild", run_tag="backfill-1")
        assert r["plan"]["mode"] == "rebuild" and r["plan"]["rebuild"]["resume"] and not r["plan"]["has_window"]
        rebuilt = r["apply"]["rebuild"]["tables"][f"{db}.r"]
        assert rebuilt["start_ts"] == start and rebuilt["base"] is None and rebuilt["windows"] == 2  # no base
        assert r["check"]["passed"] and load_state("reb").rebuild["done"]
        assert list(trash_root.iterdir()) == [trash]  # nothing moved twice
        assert [e.name for e in retention.list_trash(f"file://{sink}")] == [trash.name]
        _same(c, sink, db, tables, t2)

        # The backfill's next run: already rebuilt by this tag, a no-op that touches no Delta table.
        versions = _versions(sink, db, tables)
        (r,) = runner.run_until("reb", t1, mode="rebuild", run_tag="backfill-1")
        assert r["skipped"] and "already rebuilt by this backfill (tag backfill-1)" in r["plan"]["reason"]
        assert _versions(sink, db, tables) == versions and list(trash_root.iterdir()) == [trash]

        # Windows continue from the rebuilt tables.
        c.execute(f"USE {db}; UPDATE r SET c = NULL WHERE id = 4; INSERT INTO nc VALUES (7, 7)")
        t3 = c.get_ts()
        runner.run_until("reb", t3)
        _same(c, sink, db, tables, t3)


def test_snapshot_windows_and_rebuild_with_deletion_vectors(cdc_home: Path, upstream_cluster: Any) -> None:
    """The initial snapshot loads tables that the first window turns to deletion vectors; windows of updates,
    PK moves and deletes are merged as vectors and checked row by row (checksum mode); a snapshot window reloads a
    table that has them, and a rebuild replays the changelog into new tables the same way."""
    db, tables = "e2e_dv", {"a": "id", "b": "k"}
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; USE {db}; CREATE TABLE a (id INT PRIMARY KEY, v INT);"
                  "CREATE TABLE b (k VARCHAR(16) PRIMARY KEY, n INT)")
        c.execute(f"USE {db}; INSERT INTO a VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 2001)) + ";"
                  "INSERT INTO b VALUES " + ", ".join(f"('k{i:04d}', {i})" for i in range(300)))
        sink = _create(cdc_home, "dv", db, c.get_ts(), initial=True, dq_mode="checksum", deletion_vectors=True)
        t = c.get_ts()
        runner.run_until("dv", t)
        _same(c, sink, db, tables, t)
        for w in range(3):
            c.execute(f"USE {db}; UPDATE a SET v = v + 1 WHERE id % 7 = {w}; DELETE FROM a WHERE id % 97 = {w};"
                      f"UPDATE a SET id = id + 10000 WHERE id % 101 = {w}; UPDATE b SET n = -n WHERE n % 5 = {w};"
                      f"DELETE FROM b WHERE n % 37 = {w + 1}; INSERT INTO b VALUES ('new{w}', {w})")
            t = c.get_ts()
            (r,) = runner.run_until("dv", t)
            assert r["check"]["passed"], r["check"]
            _same(c, sink, db, tables, t)
        marked = {n: DeltaTable(str(sink / db / n)).deletion_vectors().read_all().num_rows for n in tables}
        assert all(marked.values()), marked

        c.execute(f"USE {db}; UPDATE a SET v = 0 WHERE id < 50")
        (r,) = runner.run_until("dv", c.get_ts(), mode="snapshot", tables=[f"{db}.a"])
        assert r["check"]["passed"]
        _same(c, sink, db, tables, load_state("dv").checkpoint_ts)

        c.execute(f"USE {db}; DELETE FROM a WHERE id < 20; UPDATE b SET n = 7 WHERE k = 'new0'")
        t = c.get_ts()
        runner.run_until("dv", t)
        (r,) = runner.run_until("dv", t, mode="rebuild", run_tag="dv-1")
        assert r["plan"]["mode"] == "rebuild" and r["check"]["passed"]
        _same(c, sink, db, tables, t)
