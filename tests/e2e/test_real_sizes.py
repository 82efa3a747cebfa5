"""End to end, issue 18: a table past 200,000 rows and 20 MB through every path with the default checks.

Its rows are loaded before the changefeed starts (IMPORT INTO, TiDB's bulk load); the first window loads them as an
initial snapshot (chunked upstream reads) and reconciles the table whole; a window of 30,000 changes is applied and
checked by its changed keys only; a rebuild replays the snapshot base and the changelog into a new table, reconciled
whole again; and `cdcflow verify` compares the final Delta table with the upstream by chunked checksums both sides
compute; the changelog is folded into a snapshot taken from the lake, pruned, and a rebuild replays from the fold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core import failpoint
from cdc_core.changefeed import retention, runner
from cdc_core.changefeed.state import load_state
from cdc_core.changefeed.sub_windows import window_cuts
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import changelog
from testkit.e2e import cli, delta_rows, failpoint_armed, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

ROWS = 220_000
BATCH = 10_000


def _values(i: int) -> tuple[int, int, str, str]:
    """Row ``i``'s (id, k, c, pad)."""
    return i, i % 1000, f"c-{i:012d}-{'x' * 40}", f"pad-{i % 977:05d}-{'y' * 16}"


def _row(i: int) -> str:
    """Row ``i`` as the values of an INSERT."""
    v = _values(i)
    return f"({v[0]}, {v[1]}, '{v[2]}', '{v[3]}')"


def _import_files(directory: Path, rows: int) -> str:
    """Rows ``0..rows-1`` as :func:`_row` gives them, in Parquet files of ``BATCH`` rows for ``IMPORT INTO`` (the bulk
    load TiDB users take for a table this size: an INSERT per batch would parse 220,000 rows of SQL); their glob."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    for f, start in enumerate(range(0, rows, BATCH)):
        ids, ks, cs, pads = zip(*(_values(i) for i in range(start, min(start + BATCH, rows))), strict=True)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array(ks, pa.int32()), "c": cs, "pad": pads}),
                       directory / f"t.{f:05d}.parquet")
    return str(directory / "t.*.parquet")


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_a_table_past_200000_rows_and_20_mb_snapshots_replicates_checks_and_rebuilds(
        cdc_home: Path, upstream_cluster: Any, monkeypatch: pytest.MonkeyPatch, deletion_vectors: bool) -> None:
    """...with the silver table merged copy-on-write, and with deletion vectors (``[sink] deletion-vectors``: the
    30,000-change window marks rows in the snapshot's files, the fold reads through the vectors)."""
    from spark_jobs.load.silver_read import read_table

    cid = "sizes-dv" if deletion_vectors else "sizes"
    db, sink = f"e2e_{cid.replace('-', '_')}", cdc_home / f"lake-{cid}"
    assert ROWS * (len(_row(ROWS)) - 4) > 20_000_000  # the values' bytes, each row ~100
    with UpstreamClient(upstream_cluster.pd_addr, timeout=120) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, k INT NOT NULL, "
                  "c VARCHAR(64), pad VARCHAR(32))")
        c.execute(f"IMPORT INTO {db}.t FROM '{_import_files(cdc_home / 'import', ROWS)}' FORMAT 'parquet'")
        start = c.get_ts()
        cfg = cdc_home / f"{cid}.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{db}.*"]\n'
                       f'[sink]\ndeletion-vectors = {str(deletion_vectors).lower()}\n')
        cli("changefeed", "create", "--config", str(cfg))

        # 1. The initial snapshot, reconciled whole (what a snapshot replaced is new as a whole).
        (first,) = runner.run_until(cid, c.get_ts())
        assert first["plan"]["mode"] == "snapshot"
        assert first["pull"]["snapshot"]["tables"][f"{db}.t"]["rows"] == ROWS
        rep = first["check"]["tables"][f"{db}.t"]
        assert rep["passed"] and rep["row_count"] == ROWS and "changed keys" not in rep["mode"]
        assert {r["expectation"] for r in rep["results"]} >= {"row_count_equals", "checksum_equals"}

        # 2. 30,000 changes: checked by their keys, the count from the Delta log.
        c.execute(f"UPDATE {db}.t SET k = -k, c = 'changed' WHERE id >= 1000 AND id < 21000; "
                  f"DELETE FROM {db}.t WHERE id >= 100000 AND id < 105000; "
                  f"INSERT INTO {db}.t VALUES " + ", ".join(_row(i) for i in range(ROWS, ROWS + 5000)))
        t2 = c.get_ts()
        (second,) = runner.run_until(cid, t2)
        assert second["pull"]["events"] == 30_000
        rep = second["check"]["tables"][f"{db}.t"]
        assert rep["passed"] and "changed keys" in rep["mode"] and rep["row_count"] == ROWS
        assert {r["expectation"] for r in rep["results"]} == {
            "row_count_equals", "rows_equal", "schema_equals", "delta_key_unique", "not_null:id", "not_null:k"}
        if deletion_vectors:  # the window marked rows in the snapshot's files, not rewrote them
            assert DeltaTable(str(sink / db / "t")).deletion_vectors().read_all().num_rows > 0

        # 3. A rebuild from the snapshot base and the changelog, reconciled whole.
        (third,) = runner.run_until(cid, t2, mode="rebuild", run_tag=f"{cid}-1")
        rebuilt = third["apply"]["rebuild"]["tables"][f"{db}.t"]
        assert rebuilt["base"] is not None and rebuilt["windows"] >= 1
        rep = third["check"]["tables"][f"{db}.t"]
        assert rep["passed"] and rep["row_count"] == ROWS and "changed keys" not in rep["mode"]
        assert load_state(cid).checkpoint_ts == t2
        assert read_table(DeltaTable(str(sink / db / "t")), ["id"]).num_rows == ROWS

        # 4. Every row against the upstream (the chunked checksums both sides compute, no row read).
        (out,) = [json.loads(line) for line in cli("verify", cid).splitlines() if line.startswith("{")]
        assert out["passed"] and out["row_count"] == ROWS
        (checksum,) = [r for r in out["results"] if r["expectation"] == "checksum_equals"]
        assert checksum["observed"] == checksum["expected"] and "chunks equal" in checksum["observed"]

        # 5. Bronze retention: the changelog is folded into a snapshot written from the lake at the checkpoint,
        #    the windows before it go, a window pulled and not yet applied stays, and a rebuild replays from the fold.
        sink_uri = f"file://{sink}"
        folded = retention.fold_changelog(cid, keep_after_ts=t2)
        assert folded["folded"] and folded["ts"] == t2 and folded["tables"] == {f"{db}.t": ROWS}
        assert not retention.fold_changelog(cid, keep_after_ts=t2)["folded"]  # nothing newer to fold
        c.execute(f"UPDATE {db}.t SET pad = 'after-fold' WHERE id < 500")
        t3 = c.get_ts()
        with failpoint_armed(monkeypatch, "pull.bronze_written=1"), pytest.raises(failpoint.Crash):
            runner.run_until(cid, t3)
        pruned = retention.prune_changelog(sink_uri, cid, keep_after_ts=t3)
        assert pruned["protected_from_ts"] == t2 and t2 in pruned["windows"]
        assert changelog.list_windows(sink_uri, cid) == [t3]  # pulled, not applied: kept
        assert changelog.complete_snapshots(sink_uri, cid) == [t2]
        runner.run_until(cid, t3)
        (fourth,) = runner.run_until(cid, t3, mode="rebuild", run_tag=f"{cid}-2")
        rebuilt = fourth["apply"]["rebuild"]["tables"][f"{db}.t"]
        rep = fourth["check"]["tables"][f"{db}.t"]  # reconciled whole: a rebuilt table is new as a whole
        assert rebuilt["start_ts"] == t2 and rebuilt["windows"] == 1 and rep["passed"] and rep["row_count"] == ROWS
        assert "changed keys" not in rep["mode"]


def test_a_backlog_over_the_window_bound_catches_up_in_sub_windows(
        cdc_home: Path, upstream_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """While no window runs (the puller is down), 20,000 row changes and a DDL pile up; the next window, ten times
    the configured bound, is cut into sub-windows at commit ts points: each applied, checked and checkpointed on its
    own, the DDL still at its barrier, and the tables end equal to the upstream, a crash half way through
    notwithstanding."""
    db, sink = "e2e_backlog", cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr, timeout=120) as c:
        c.execute(f"CREATE DATABASE {db}; USE {db}; CREATE TABLE a (id INT PRIMARY KEY, v INT, s VARCHAR(20)); "
                  "CREATE TABLE b (id INT PRIMARY KEY, v INT)")
        start = c.get_ts()
        cfg = cdc_home / "backlog.toml"
        cfg.write_text(f'changefeed-id = "backlog"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{db}.*"]\n[window]\nmax-events = 2000\n')
        cli("changefeed", "create", "--config", str(cfg))
        for lo in range(0, 8000, 1000):  # transactions of 1,000 events at most: a transaction is never cut
            c.execute(f"INSERT INTO {db}.a VALUES " + ", ".join(f"({i}, {i}, 's{i}')" for i in range(lo, lo + 1000)))
            c.execute(f"INSERT INTO {db}.b VALUES " + ", ".join(f"({i}, {i})" for i in range(lo, lo + 500)))
        for lo in range(0, 4000, 1000):
            c.execute(f"UPDATE {db}.a SET v = -v WHERE id >= {lo} AND id < {lo + 1000}")
        c.execute(f"ALTER TABLE {db}.a ADD COLUMN w INT DEFAULT 7")
        for lo in range(4000, 6000, 1000):
            c.execute(f"UPDATE {db}.a SET w = id WHERE id >= {lo} AND id < {lo + 1000}")
            c.execute(f"DELETE FROM {db}.b WHERE id >= {lo - 4000} AND id < {lo - 3000}")
        t = c.get_ts()
        # The first try dies after its third sub-window: the checkpoint stays at that cut, and the re-run applies
        # the window already pulled from there (nothing is pulled twice, the changelog keeps the whole window).
        with failpoint_armed(monkeypatch, "apply.sub_window_done=3"), pytest.raises(failpoint.Crash):
            runner.run_until("backlog", t)
        cut = load_state("backlog").checkpoint_ts
        assert start < cut < t and cut == window_cuts(f"file://{sink}", "backlog", t)[2]
        (r,) = runner.run_until("backlog", t)
        assert r["pull"]["reused"] and r["pull"]["events"] < 20_000
        assert changelog.window_after_ts(f"file://{sink}", "backlog", t) < cut
        assert r["pull"]["sub_windows"] >= 7
        assert r["apply"]["sub_windows"] == r["pull"]["sub_windows"] and r["apply"]["barriers"]
        assert load_state("backlog").checkpoint_ts == t
        for table in ("a", "b"):
            assert delta_rows(sink, db, table, "id") == upstream_rows(c, db, table, "id", t), table
        results = DeltaTable(str(sink / "_cdcflow" / "dq_results")).to_pyarrow_table().to_pylist()
        ends = {x["ts"] for x in results if x["where"].startswith("sub-window end")}
        # Every sub-window end whose step changed a table was checked there (one holding only the DDL job's own
        # rows changes none, and checks nothing).
        assert ends <= set(window_cuts(f"file://{sink}", "backlog", t)) and len(ends) >= 8
        assert all(x["success"] for x in results)
