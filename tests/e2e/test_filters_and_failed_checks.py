"""End to end, issue 6: event filters through `changefeed run`, and a data-quality check that fails.

* Event filters drop exactly the row changes they name (ignored deletes, inserts matching a SQL expression,
  a whole transaction by start ts); other tables are untouched and equal the upstream; the checks of a
  filtered table skip count and checksum (it differs from upstream on purpose) and pass.
* A window whose changes never reached a silver table (its Delta log claims the window, as a broken exactly-once
  record would) fails the window's changed-key checks: the changefeed goes into error with a report naming table,
  ts, expectation and sample keys, the checkpoint does not move, the results are kept (Delta table and `changefeed
  query`), the tables go back to their state at the checkpoint (the latest Delta version never holds what failed),
  and runs refuse until the operator resumes it; resumed, the window re-runs and passes.
* A row corrupted in Delta between a window's apply and its checks: the check fails, every table the window wrote
  is restored to its checkpoint version with the app transaction, and `changefeed resume` re-applies the window.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from typer.testing import CliRunner

from cdc_core.changefeed import runner
from cdc_core.changefeed.dq_results import results_path
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import key as keycodec
from cdc_core.codec.sink_uri import app_id_for
from cdc_core.errors import ChangefeedError, DataQualityError
from testkit.e2e import cli as _cli
from testkit.e2e import cli_app, delta_rows, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.spark]


def test_event_filters_through_changefeed_run(cdc_home: Path, upstream_cluster: Any) -> None:
    db, sink = "e2e_efilter", cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"""
            CREATE DATABASE {db};
            CREATE TABLE {db}.orders (id INT PRIMARY KEY, qty INT NOT NULL, note VARCHAR(16));
            CREATE TABLE {db}.plain (id INT PRIMARY KEY, qty INT);
        """)
        start = c.get_ts()
        [skipped] = c.execute(f"INSERT INTO {db}.orders VALUES (50, 1, 'by a batch job')")
        skipped_start_ts = _start_ts_of(upstream_cluster, db, "orders", skipped.commit_ts)
        c.execute(f"""
            INSERT INTO {db}.orders VALUES (1, 5, 'small'), (2, 500, 'bulk'), (3, 7, 'keep');
            INSERT INTO {db}.plain VALUES (1, 5), (2, 500), (3, 7);
            DELETE FROM {db}.orders WHERE id = 3;
            DELETE FROM {db}.plain WHERE id = 3;
            UPDATE {db}.orders SET qty = 900 WHERE id = 1;
            UPDATE {db}.orders SET note = 'old-big' WHERE id = 2;
        """)
        cfg = cdc_home / "ef.toml"
        cfg.write_text(
            f'changefeed-id = "ef"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
            f'[filter]\nrules = ["{db}.*"]\nignore-txn-start-ts = [{skipped_start_ts}]\n'
            f'[[filter.event-filters]]\nmatcher = ["{db}.orders"]\nignore-event = ["delete"]\n'
            f'ignore-insert-value-expr = "qty > 100"\n'
            f'ignore-update-new-value-expr = "qty > 800 AND note = \'small\'"\n'
        )
        _cli("changefeed", "create", "--config", str(cfg))
        t = c.get_ts()
        runner.run_until("ef", t)
        st = load_state("ef")
        assert st.checkpoint_ts == t and st.state == "normal"
        # plain: every change, equal to upstream. orders: the delete of 3 ignored, the insert of 2 (qty 500)
        # ignored — but its later update is not, and an update is an upsert of the whole new row (what TiCDC's
        # safe mode does too) —, the update of 1 to qty 900 ignored, and the transaction whose start ts is
        # listed ignored as a whole (no row 50).
        assert delta_rows(sink, db, "plain", "id") == upstream_rows(c, db, "plain", "id", t)
        assert delta_rows(sink, db, "orders", "id") == [
            {"id": 1, "qty": 5, "note": "small"},
            {"id": 2, "qty": 500, "note": "old-big"},
            {"id": 3, "qty": 7, "note": "keep"},
        ]
        checks = st.last_checks["tables"]
        # Filtered tables are not compared row by row with upstream (they differ on purpose); the rest of the
        # checks ran and passed. ignore-txn-start-ts may drop a transaction of any table, so it covers all.
        for name, not_null in ((f"{db}.orders", {"not_null:qty", "not_null:id"}), (f"{db}.plain", {"not_null:id"})):
            rep = checks[name]
            assert rep["passed"] and "event filters" in rep["mode"], rep
            assert {r["expectation"] for r in rep["results"]} == {"delta_key_unique", "schema_equals", *not_null}


def _start_ts_of(ec: Any, db: str, table: str, commit_ts: int) -> int:
    """The start ts of the transaction that committed at ``commit_ts`` (read from the upstream's MVCC)."""
    start, end = keycodec.table_span(ec.faults.table_id(db, table))

    def read() -> int:
        records, _ = ec.cluster.store.versions_after(start, end, commit_ts - 1)
        return next(r.start_ts for r in records if r.commit_ts == commit_ts)

    return int(ec.call(read))


def _cli_exit(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli_app(), list(args))
    return res.exit_code, res.output


def _replicated_until(c: UpstreamClient, cdc_home: Path, cid: str, db: str, sink: Path, start: int) -> int:
    """Create changefeed ``cid`` of ``db`` from ``start`` and run it to now; now's ts."""
    cfg = cdc_home / f"{cid}.toml"
    cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                   f'[filter]\nrules = ["{db}.*"]\n')
    _cli("changefeed", "create", "--config", str(cfg))
    t1 = c.get_ts()
    runner.run_until(cid, t1)
    return t1


def test_a_failed_check_stops_the_changefeed_with_a_report(cdc_home: Path, upstream_cluster: Any) -> None:
    db, sink = "e2e_dqfail", cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.acct (id INT PRIMARY KEY, bal INT NOT NULL)")
        start = c.get_ts()
        c.execute(f"INSERT INTO {db}.acct VALUES (1, 10), (2, 20), (3, 30)")
        t1 = _replicated_until(c, cdc_home, "dq", db, sink, start)
        assert load_state("dq").checkpoint_ts == t1

        # Someone "fixes" a balance in the lake by hand: row 2 now differs from the upstream; and the table's log
        # claims the next window (t1, t2] while its change of row 1 never reaches it.
        path = str(sink / db / "acct")
        rows = DeltaTable(path).to_pyarrow_table().to_pylist()
        rows = [{**r, "bal": 999} if r["id"] == 2 else r for r in rows]
        c.execute(f"UPDATE {db}.acct SET bal = 11 WHERE id = 1")
        t2 = c.get_ts()
        write_deltalake(path, pa.Table.from_pylist(rows, schema=pa.schema(DeltaTable(path).schema().to_arrow())),
                        mode="overwrite", commit_properties=CommitProperties(
                            app_transactions=[Transaction(app_id=app_id_for("dq"), version=t2)]))
        with pytest.raises(DataQualityError) as ei:
            runner.run_until("dq", t2)
        msg = str(ei.value)
        assert f"{db}.acct at ts {t2}" in msg and "rows_equal failed" in msg and "'id': '1'" in msg, msg
        assert "'id': '2'" not in msg  # the window's checks read the keys it changed, not the table

        st = load_state("dq")
        assert st.state == "error" and st.checkpoint_ts == t1  # the checkpoint did not move
        assert st.error["step"] == "check" and st.error["ts"] == t2 and "rows_equal" in st.error["message"]
        # `changefeed query` shows the error and the last results, naming the failed expectation and keys.
        q = json.loads(_cli("changefeed", "query", "dq"))
        assert q["state"] == "error" and q["checkpoint_ts"] == t1
        failed = [r for r in q["last_checks"]["tables"][f"{db}.acct"]["results"] if not r["success"]]
        assert [r["expectation"] for r in failed] == ["rows_equal"]
        assert failed[0]["sample_keys"] == [{"id": "1", "_problem": "differs"}]
        # The results are kept in the Delta table under _cdcflow/.
        kept = [r for r in DeltaTable(results_path(f"file://{sink}")).to_pyarrow_table().to_pylist()
                if r["changefeed_id"] == "dq" and r["ts"] == t2 and not r["success"]]
        assert [(r["table"], r["expectation"]) for r in kept] == [(f"{db}.acct", "rows_equal")]
        # The table is back at its state at the checkpoint, hand edit and all (it was not the changefeed's), with
        # the app transaction: readers of the latest version see only checked data, verify agrees with upstream.
        assert "rolled back to their state at the checkpoint" in msg and st.error["rolled_back"][f"{db}.acct"][
            "restored"]
        assert DeltaTable(path).transaction_version(app_id_for("dq")) == t1
        assert delta_rows(sink, db, "acct", "id") == upstream_rows(c, db, "acct", "id", t1)
        code, out = _cli_exit("verify", "dq")
        assert code == 0 and '"passed": true' in out, out
        # A changefeed in error does not run (nor move) until the operator resumes it; then the window re-runs.
        with pytest.raises(ChangefeedError, match="error"):
            runner.run_until("dq", c.get_ts())
        assert load_state("dq").checkpoint_ts == t1
        _cli("changefeed", "resume", "dq")
        runner.run_until("dq", t2)
        assert load_state("dq").checkpoint_ts == t2
        assert delta_rows(sink, db, "acct", "id") == upstream_rows(c, db, "acct", "id", t2)


def test_a_row_corrupted_before_the_check_is_rolled_back_with_the_window(cdc_home: Path, upstream_cluster: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    db, sink = "e2e_rollback", cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.acct (id INT PRIMARY KEY, bal INT NOT NULL);"
                  f"CREATE TABLE {db}.log (id INT PRIMARY KEY, note VARCHAR(20))")
        start = c.get_ts()
        c.execute(f"INSERT INTO {db}.acct VALUES (1, 10), (2, 20); INSERT INTO {db}.log VALUES (1, 'open')")
        t1 = _replicated_until(c, cdc_home, "rb", db, sink, start)
        acct, logt = str(sink / db / "acct"), str(sink / db / "log")
        at_t1 = {p: DeltaTable(p).version() for p in (acct, logt)}

        c.execute(f"BEGIN; UPDATE {db}.acct SET bal = 11 WHERE id = 1; INSERT INTO {db}.log VALUES (2, 'paid');"
                  "COMMIT")
        t2 = c.get_ts()
        # Once the window's commits are in and before its checks run, something corrupts row 1 in the lake: at the
        # step's end, in one thread (each table's merge thread passes a table's commit point, and two of them once
        # both overwrote the table there, the second failing on the first's commit).
        from cdc_core import failpoint

        real_hit = failpoint.hit

        def corrupt_once(name: str) -> None:
            if name == "apply.dml_step_done" and DeltaTable(acct).version() > at_t1[acct] and not corrupted:
                dt = DeltaTable(acct)
                rows = [{**r, "bal": 999} if r["id"] == 1 else r for r in dt.to_pyarrow_table().to_pylist()]
                write_deltalake(acct, pa.Table.from_pylist(rows, schema=pa.schema(dt.schema().to_arrow())),
                                mode="overwrite")
                corrupted.append(DeltaTable(acct).version())
            real_hit(name)

        corrupted: list[int] = []
        monkeypatch.setattr(failpoint, "hit", corrupt_once)
        with pytest.raises(DataQualityError, match=r"(?s)rows_equal failed.*'id': '1'.*rolled back"):
            runner.run_until("rb", t2)
        monkeypatch.setattr(failpoint, "hit", real_hit)
        assert corrupted, "the window never committed to the table"
        st = load_state("rb")
        assert st.state == "error" and st.checkpoint_ts == t1 and st.error["ts"] == t2
        # Both tables the window wrote are at their state at t1 again, corrupted row and good rows alike; their
        # history keeps what failed (time travel), and the app transaction says t1.
        for p in (acct, logt):
            dt = DeltaTable(p)
            assert dt.transaction_version(app_id_for("rb")) == t1
            assert dt.history(1)[0]["operation"] == "RESTORE" and dt.version() > at_t1[p]
        assert delta_rows(sink, db, "acct", "id") == upstream_rows(c, db, "acct", "id", t1)
        assert delta_rows(sink, db, "log", "id") == upstream_rows(c, db, "log", "id", t1)
        assert {r["id"]: r["bal"] for r in DeltaTable(acct, version=corrupted[0]).to_pyarrow_table().to_pylist()}[
            1] == 999
        kept = [r for r in DeltaTable(results_path(f"file://{sink}")).to_pyarrow_table().to_pylist()
                if r["changefeed_id"] == "rb" and r["ts"] == t2 and not r["success"]]
        assert [(r["table"], r["expectation"]) for r in kept] == [(f"{db}.acct", "rows_equal")]
        # Resumed, the window re-runs from the checkpoint and its commits pass the checks.
        _cli("changefeed", "resume", "rb")
        runner.run_until("rb", t2)
        assert load_state("rb").checkpoint_ts == t2
        assert delta_rows(sink, db, "acct", "id") == upstream_rows(c, db, "acct", "id", t2)
        assert delta_rows(sink, db, "log", "id") == upstream_rows(c, db, "log", "id", t2)


def test_a_corrupt_row_value_stops_the_changefeed_naming_where(cdc_home: Path, upstream_cluster: Any) -> None:
    db, sink = "e2e_corrupt", cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT, s VARCHAR(8))")
        start = c.get_ts()
        c.execute(f"INSERT INTO {db}.t VALUES (1, 10, 'a'), (2, 20, 'b')")
        cfg = cdc_home / "corrupt.toml"
        cfg.write_text(f'changefeed-id = "corrupt"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{db}.*"]\n')
        _cli("changefeed", "create", "--config", str(cfg))
        t1 = c.get_ts()
        runner.run_until("corrupt", t1)
        path = str(sink / db / "t")
        version = DeltaTable(path).version()

        # Row 2's stored value: a v2 row whose column 2 (INT v) holds 3 bytes, which no integer is.
        c.execute(f"UPDATE {db}.t SET s = 'c' WHERE id = 1")
        bad_ts = upstream_cluster.faults.write_raw_value(db, "t", 2, bytes([128, 0, 1, 0, 0, 0, 2, 3, 0, 1, 2, 3]))
        t2 = c.get_ts()
        with pytest.raises(Exception) as ei:
            runner.run_until("corrupt", t2)
        key = keycodec.row_key(upstream_cluster.faults.table_id(db, "t"), 2).hex()
        for part in (f"table {db}.t", "column 'v' (id 2)", f"key {key} at commit ts {bad_ts}", "3-byte integer"):
            assert part in str(ei.value), (part, str(ei.value))
        st = load_state("corrupt")
        assert st.state == "error" and st.checkpoint_ts == t1  # the checkpoint did not move
        assert f"commit ts {bad_ts}" in st.error["message"]
        # Nothing of the window was written, not even row 1's good update.
        assert DeltaTable(path).version() == version
        assert delta_rows(sink, db, "t", "id") == upstream_rows(c, db, "t", "id", t1)


def test_the_scheduled_reconciliation_finds_what_no_window_changed(cdc_home: Path, upstream_cluster: Any) -> None:
    """The maintenance DAG's reconcile (``upkeep.reconcile_changefeeds``): due once per interval, at the checkpoint,
    recorded; a row edited in the lake that no window touches passes every window's checks and fails the
    reconciliation, which stops the changefeed."""
    from cdc_core.changefeed import upkeep

    db, sink = "e2e_reconcile", cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.acct (id INT PRIMARY KEY, bal INT NOT NULL); "
                  f"CREATE TABLE {db}.note (id INT PRIMARY KEY, txt VARCHAR(16))")
        start = c.get_ts()
        c.execute(f"INSERT INTO {db}.acct VALUES " + ", ".join(f"({i}, {i * 10})" for i in range(1, 51)))
        c.execute(f"INSERT INTO {db}.note VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(1, 31)))
        cfg = cdc_home / "rc.toml"
        cfg.write_text(f'changefeed-id = "rc"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{db}.*"]\n')
        _cli("changefeed", "create", "--config", str(cfg))
        runner.run_until("rc", c.get_ts())
        mine = [cf for cf in upkeep.list_changefeeds() if cf["changefeed_id"] == "rc"]
        out = upkeep.reconcile_changefeeds(mine, 24)
        assert out["changefeeds"]["rc"]["failed"] == [] and out["changefeeds"]["rc"]["tables"] == 2  # one job
        last = load_state("rc").last_reconciliation
        assert last is not None and last["passed"] and last["ts"] == load_state("rc").checkpoint_ts
        assert upkeep.reconcile_changefeeds(mine, 24)["changefeeds"]["rc"] == {
            "skipped": True, "reason": "reconciled less than 24 h ago"}

        path = str(sink / db / "acct")
        rows = [{**r, "bal": -1} if r["id"] == 7 else r for r in DeltaTable(path).to_pyarrow_table().to_pylist()]
        write_deltalake(path, pa.Table.from_pylist(rows, schema=pa.schema(DeltaTable(path).schema().to_arrow())),
                        mode="overwrite")
        c.execute(f"UPDATE {db}.acct SET bal = 0 WHERE id = 8")
        runner.run_until("rc", c.get_ts())  # the window changed row 8 only: its checks pass
        assert load_state("rc").state == "normal"
        with pytest.raises(DataQualityError, match=r"changefeed rc: reconciliation: .*e2e_reconcile.acct at ts \d+: "
                                                   r"checksum_equals failed .*'id': '7'"):
            upkeep.reconcile_changefeeds(mine, 24, force=True)
        st = load_state("rc")
        assert st.state == "error" and st.error["step"] == "reconciliation"
        assert st.last_reconciliation["failed"] == [f"{db}.acct"]
        kept = [r for r in DeltaTable(results_path(f"file://{sink}")).to_pyarrow_table().to_pylist()
                if r["changefeed_id"] == "rc" and r["where"] == "reconciliation" and not r["success"]]
        assert [r["expectation"] for r in kept] == ["checksum_equals"]
        assert upkeep.reconcile_changefeeds(
            [{**mine[0], "state": "error"}], 24, force=True)["changefeeds"]["rc"]["reason"] == "changefeed is error"
