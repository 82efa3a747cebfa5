"""The window checks on the driver (window_checks.check_on_driver) report what the Spark checks report, for tables
keyed by an int handle, a string, a DECIMAL and DATETIME pair, ``_tidb_rowid``; a table keyed by a DOUBLE (no exact
SQL literal) and one past the driver's key budget are checked in Spark; a window's job puts each table where it
belongs."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdc_core.changefeed import runner
from cdc_core.changefeed.config import load_config
from cdc_core.changefeed.job_args.window_checks import ReadAheadArgs, WindowChecksArgs
from cdc_core.changefeed.reconcile import tables_at
from cdc_core.client.upstream import UpstreamClient
from spark_jobs import upstream_read
from spark_jobs.checks import check_read_ahead, window_checks
from spark_jobs.normalize.changed_keys import changed_keys_arrow
from testkit.e2e import cli as _cli

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

DB, CID = "e2e_wchecks", "wchecks"
TABLES = {
    "k": "(id BIGINT PRIMARY KEY, v VARCHAR(20) NOT NULL, u INT, UNIQUE KEY uk_u (u))",
    "s": "(code VARCHAR(16) PRIMARY KEY, amt DECIMAL(10,2), at DATETIME(6))",
    "m": "(a DECIMAL(8,2), b DATETIME, c VARCHAR(8), PRIMARY KEY (a, b))",
    "r": "(a INT, b VARCHAR(8))",
    "f": "(x DOUBLE PRIMARY KEY, y INT)",
}


def _rows(i: int) -> dict[str, str]:
    return {
        "k": f"({i}, 'v{i}', {i * 10})",
        "s": f"('code-{i:04d}', {i}.25, '2024-01-{1 + i % 28:02d} 10:00:00.{i:06d}')",
        "m": f"({i}.50, '2024-02-{1 + i % 28:02d} 0{i % 10}:00:00', 'c{i}')",
        "r": f"({i}, 'b{i}')",
        "f": f"({i}.5, {i})",
    }


def test_the_driver_and_spark_report_alike(cdc_home: Path, upstream_cluster: Any, caplog: Any,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    sink = cdc_home / "lake"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {DB}; " + "; ".join(f"CREATE TABLE {DB}.{t} {cols}" for t, cols in TABLES.items()))
        start = c.get_ts()
        for t in TABLES:
            c.execute(f"INSERT INTO {DB}.{t} VALUES " + ", ".join(_rows(i)[t] for i in range(1, 41)))
        cfg = cdc_home / f"{CID}.toml"
        cfg.write_text(f'changefeed-id = "{CID}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{DB}.*"]\n')
        _cli("changefeed", "create", "--config", str(cfg))
        runner.run_until(CID, c.get_ts())
        # The window: updates (one moving a key), deletes, inserts in every table.
        c.execute(f"UPDATE {DB}.k SET v = 'moved', id = 400 WHERE id = 4; UPDATE {DB}.k SET u = NULL WHERE id < 8; "
                  f"DELETE FROM {DB}.k WHERE id = 9; INSERT INTO {DB}.k VALUES " + _rows(50)["k"])
        c.execute(f"UPDATE {DB}.s SET amt = amt + 1 WHERE code < 'code-0010'; DELETE FROM {DB}.s WHERE "
                  f"code = 'code-0011'; INSERT INTO {DB}.s VALUES " + _rows(60)["s"])
        c.execute(f"UPDATE {DB}.m SET c = 'x' WHERE a < 5; DELETE FROM {DB}.m WHERE a = 6.50; "
                  f"INSERT INTO {DB}.m VALUES " + _rows(70)["m"])
        c.execute(f"UPDATE {DB}.r SET b = 'y' WHERE a < 5; DELETE FROM {DB}.r WHERE a = 6")
        c.execute(f"UPDATE {DB}.f SET y = -1 WHERE x < 5; DELETE FROM {DB}.f WHERE x = 6.5")
        caplog.set_level("INFO", logger="spark_jobs.checks.window_checks")
        monkeypatch.setattr(window_checks, "SLOW_TABLE_S", 0.0)  # every table logged as a slow one
        monkeypatch.delenv("CDCFLOW_TIDB", raising=False)
        in_spark: list[str | None] = []
        checks = window_checks.run_checks

        def recorded(*args: Any, **kwargs: Any) -> Any:
            in_spark.append(kwargs["tidb"])
            return checks(*args, **kwargs)

        monkeypatch.setattr(window_checks, "run_checks", recorded)
        result = runner.run_until(CID, c.get_ts())[-1]
        monkeypatch.setattr(window_checks, "run_checks", checks)
        sql_addr = ",".join(a.addr for a in c.sql_addresses())
    # the Spark checks' tasks read the SQL server the driver found in PD, not PD themselves
    assert in_spark == [sql_addr], (in_spark, sql_addr)
    assert result["check"]["passed"] and sorted(result["check"]["tables"]) == [f"{DB}.{t}" for t in sorted(TABLES)]
    assert "4 table(s) checked on the driver, 1 in Spark" in caplog.text
    # the window's checks took the upstream side this process read while the window applied
    assert re.search(rf"window checks of {DB}\.k on the driver: [0-9.]+ s for 10 changed keys \(Delta [0-9.]+ s, "
                     r"upstream read ahead\)", caplog.text), caplog.text
    assert "(upstream side read ahead)" in caplog.text

    plan = result["plan"]
    after, ts = plan["checkpoint_ts"], plan["target_ts"]
    tables = {t.name: t for t in tables_at(load_config(CID), ts)}
    keys = changed_keys_arrow(f"file://{sink}", CID, ts, list(tables.values()), after, ts, limit=1000)
    common = {"after_ts": after, "ts": ts, "mode": "checksum", "pd_addr": upstream_cluster.pd_addr}
    for name in "ksmr":
        assert upstream_read.checkable_on_driver(tables[name])
        driver = window_checks.check_on_driver(f"file://{sink}", tables[name], keys[f"{DB}.{name}"], **common)
        spark = window_checks.run_checks(f"file://{sink}", CID, ts, tables[name], **common)
        assert driver is not None and spark.passed, (name, spark.to_dict())
        assert driver.to_dict() == spark.to_dict(), name
        assert {r.expectation for r in driver.results} >= {"row_count_equals", "rows_equal", "schema_equals",
                                                           "delta_key_unique"}
    assert "unique:uk_u" in {r.expectation for r in
                             window_checks.check_on_driver(f"file://{sink}", tables["k"], keys[f"{DB}.k"],
                                                           **common).results}  # type: ignore[union-attr]
    assert not upstream_read.checkable_on_driver(tables["f"])
    assert keys[f"{DB}.k"].num_rows == 10  # 4 and 400, 1..7, 9, 50: the keys the window changed, no others


def test_a_row_the_driver_finds_differing_is_reported_by_spark(cdc_home: Path, upstream_cluster: Any, caplog: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A difference the driver sees is handed to Spark, whose report names the key; the same when the job's upstream
    side was read ahead (spark_jobs.checks.check_read_ahead), or its read ahead failed."""
    sink = cdc_home / "lake"
    db, cid = "e2e_wchecks_diff", "wchecksdiff"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
        start = c.get_ts()
        c.execute(f"INSERT INTO {db}.t VALUES (1, 1), (2, 2), (3, 3)")
        cfg = cdc_home / f"{cid}.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{db}.*"]\n')
        _cli("changefeed", "create", "--config", str(cfg))
        result = runner.run_until(cid, c.get_ts())[-1]
        c.execute(f"UPDATE {db}.t SET v = 20 WHERE id = 2")  # after the window: the upstream at a later ts differs
        later = c.get_ts()
    plan = result["plan"]
    (table,) = tables_at(load_config(cid), plan["target_ts"])
    args = WindowChecksArgs(sink_uri=f"file://{sink}", changefeed_id=cid, window_end_ts=plan["target_ts"],
                            tables=((table, True),), after_ts=plan["checkpoint_ts"], ts=later, mode="checksum",
                            pd_addr=upstream_cluster.pd_addr)
    earlier = replace(args, ts=later - 1)
    out = window_checks.run_job(args)
    rep = out["tables"][f"{db}.t"]
    failed = [r for r in rep["results"] if not r["success"]]
    assert not rep["passed"] and [r["expectation"] for r in failed] == ["rows_equal"]
    assert failed[0]["sample_keys"] == [{"id": "2", "_problem": "differs"}]

    # Read ahead, the job reports alike, and takes what was read (once); another job's read is not taken.
    check_read_ahead.start(ReadAheadArgs.ahead_of(earlier))
    assert check_read_ahead.start(ReadAheadArgs.ahead_of(args)) == {"reading_ahead": 1}
    assert window_checks.run_job(args) == out and check_read_ahead.take(args) is None
    assert check_read_ahead.take(earlier) is not None
    # A read ahead that fails leaves the job to read for itself.
    monkeypatch.setattr(check_read_ahead, "read", lambda a: (_ for _ in ()).throw(RuntimeError("no upstream")))
    caplog.set_level("WARNING", logger="spark_jobs.checks.check_read_ahead")
    check_read_ahead.start(ReadAheadArgs.ahead_of(args))
    assert window_checks.run_job(args) == out
    assert "the checks' upstream side read ahead failed" in caplog.text and "no upstream" in caplog.text


def test_the_count_check_counts_the_changed_keys_not_the_table(cdc_home: Path, upstream_cluster: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 55: a window's ``row_count_equals`` costs the upstream O(changed keys): the count checked at the
    previous barrier plus the changed keys held now minus those held then, never a ``SELECT COUNT(*)`` -- and it
    still sees a row Delta holds and the upstream does not, on the driver and in Spark."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    sink = cdc_home / "lake"
    db, cid = "e2e_wchecks_count", "wcheckscount"
    counted: list[str] = []
    full_count = upstream_read.upstream_count

    def recorded(pd_addr: str, tidb: str | None, ts: int, table: Any, client: Any = None) -> int:
        counted.append(table.qualified_name)
        return full_count(pd_addr, tidb, ts, table, client)

    monkeypatch.setattr(upstream_read, "upstream_count", recorded)
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
        start = c.get_ts()
        c.execute(f"INSERT INTO {db}.t VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 101)))
        cfg = cdc_home / f"{cid}.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{db}.*"]\n[data-quality]\nmode = "count"\n')
        _cli("changefeed", "create", "--config", str(cfg))
        runner.run_until(cid, c.get_ts())
        counted.clear()
        # net: +2 inserted, -3 deleted, one of them inserted again, a key moved (-1 +1): 100 rows still
        c.execute(f"INSERT INTO {db}.t VALUES (101, 0), (102, 0); DELETE FROM {db}.t WHERE id IN (5, 6, 7); "
                  f"INSERT INTO {db}.t VALUES (7, 70); UPDATE {db}.t SET id = 1000 WHERE id = 50; "
                  f"UPDATE {db}.t SET v = -1 WHERE id < 4")
        result = runner.run_until(cid, c.get_ts())[-1]
        assert result["check"]["passed"], result["check"]
        assert counted == [], "a window's checks counted the upstream's table"
        assert DeltaTable(str(sink / db / "t")).to_pyarrow_table().num_rows == 100

        # A row Delta holds that the upstream does not, at a key no window changed (written outside cdcflow)
        path = str(sink / db / "t")
        extra = pa.table({"id": pa.array([5000], pa.int32()), "v": pa.array([1], pa.int32())})
        write_deltalake(path, extra.cast(pa.schema(DeltaTable(path).schema().to_arrow())), mode="append")
        c.execute(f"UPDATE {db}.t SET v = 2 WHERE id = 1")
        ts = c.get_ts()
    plan = result["plan"]
    (table,) = tables_at(load_config(cid), ts)
    after = plan["target_ts"]
    keys = changed_keys_arrow(f"file://{sink}", cid, after, [table], plan["checkpoint_ts"], after, limit=100)
    common = {"after_ts": plan["checkpoint_ts"], "ts": after, "mode": "count", "pd_addr": upstream_cluster.pd_addr,
              "derive_count": True}
    driver = window_checks.check_on_driver(f"file://{sink}", table, keys[f"{db}.t"], **common)
    spark = window_checks.run_checks(f"file://{sink}", cid, after, table, **common)
    assert driver is None  # a check failed on the driver: the job hands the table to Spark
    failed = [r for r in spark.results if not r.success]
    assert [(r.expectation, r.observed, r.expected) for r in failed] == [("row_count_equals", 101, 100)]
    assert counted == []
