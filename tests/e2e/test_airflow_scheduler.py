"""End to end through a real Airflow: the scheduler runs a changefeed's windows, and a person triggers one with
parameters through the REST API (the form's backend); invalid parameters are refused before a run exists.
After each run, every Delta table as of the window end equals the upstream snapshot at that ts.

One story over one changefeed (``schedule = "20s"`` so that intervals pass quickly), in file order. The
DAG starts paused; each test unpauses it while it needs the scheduler and pauses it again.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from e2elib import delta_rows, delta_rows_at, upstream_rows

from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import tso

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

CF = "afsched"
DAG_ID = f"cdcflow__{CF}"
DB = "afs"
EVERY_S = 20
TABLES = {"orders": "id", "notes": "id"}
ROOT = Path(__file__).resolve().parents[2]


class Feed:
    def __init__(self, server: Any, pd_addr: str) -> None:
        self.server = server
        self.pd_addr = pd_addr
        self.home: Path = server.cdc_home
        self.sink = self.home / "lake" / CF
        self.next_id = 1
        self.started = 0

    def cdcflow(self, *args: str) -> str:
        env = {**self.server.env, "CDCFLOW_HOME": str(self.home), "CDCFLOW_UPSTREAM": self.pd_addr}
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "cdcflow"), *args], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, f"cdcflow {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def sql(self, script: str) -> None:
        with UpstreamClient(self.pd_addr) as c:
            c.execute(script)

    def batch(self, n: int = 3) -> None:
        """Inserts, an update that moves a primary key, an update of a unique key, a delete."""
        i = self.next_id
        self.next_id += n + 1
        values = ", ".join(f"({i + k}, 'sku-{i + k}', {k + 1})" for k in range(n))
        self.sql(f"""
            INSERT INTO {DB}.orders VALUES {values};
            INSERT INTO {DB}.notes VALUES ({i}, 'note {i}'), ({i + 1}, 'note {i + 1}');
            BEGIN;
            UPDATE {DB}.orders SET id = {i + n} WHERE id = {i};
            UPDATE {DB}.orders SET sku = 'sku-moved-{i}', qty = qty + 10 WHERE id = {i + 1};
            COMMIT;
            DELETE FROM {DB}.notes WHERE id = {i + 1};
        """)

    def now_ts(self) -> int:
        with UpstreamClient(self.pd_addr) as c:
            return c.get_ts()

    def state(self) -> dict[str, Any]:
        return dict(json.loads(self.cdcflow("changefeed", "query", CF)))

    def assert_equal_at(self, ts: int) -> None:
        with UpstreamClient(self.pd_addr) as c:
            for table, key in TABLES.items():
                want = upstream_rows(c, DB, table, key, ts)
                assert delta_rows_at(self.sink, DB, table, key, ts) == want, f"{DB}.{table} differs at ts {ts}"

    def assert_equal_now(self) -> None:
        """Delta (current) equals the upstream at the checkpoint: only while no run is in the middle of a window."""
        ts = int(self.state()["checkpoint_ts"])
        with UpstreamClient(self.pd_addr) as c:
            for table, key in TABLES.items():
                assert delta_rows(self.sink, DB, table, key) == upstream_rows(c, DB, table, key, ts), table


@pytest.fixture(scope="module")
def feed(airflow_server: Any, upstream_cluster: Any) -> Feed:
    f = Feed(airflow_server, upstream_cluster.pd_addr)
    f.sql(f"""
        CREATE DATABASE {DB};
        CREATE TABLE {DB}.orders (id INT PRIMARY KEY, sku VARCHAR(32) NOT NULL, qty INT, UNIQUE KEY uk_sku (sku));
        CREATE TABLE {DB}.notes (id BIGINT PRIMARY KEY NONCLUSTERED, body VARCHAR(64));
    """)
    config = f.home / f"{CF}.toml"
    config.write_text(f"""\
changefeed-id = "{CF}"
sink-uri = "file://{f.sink}"

[filter]
rules = ["{DB}.*"]

[airflow]
schedule = "{EVERY_S}s"
catchup = false

[data-quality]
mode = "checksum"
""")
    f.cdcflow("changefeed", "create", "--config", str(config))
    f.started = int(f.state()["checkpoint_ts"])
    f.batch()
    airflow_server.wait_dag(DAG_ID)
    return f


def _ok(server: Any, run: dict[str, Any]) -> None:
    assert run["state"] == "success", server.failure_report(DAG_ID, run["dag_run_id"])


def _interval_end_ts(run: dict[str, Any]) -> int:
    return tso.from_datetime(datetime.fromisoformat(run["data_interval_end"]), end_of_ms=True)


def _wait_for(cond: Any, timeout_s: float, what: str, poll_s: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)


def test_dag_is_parsed_with_its_timetable_and_form(feed: Feed) -> None:
    server = feed.server
    errors = server.api("GET", "/api/v2/importErrors").json()
    assert errors["total_entries"] == 0, errors
    details = server.api("GET", f"/api/v2/dags/{DAG_ID}/details").json()
    assert details["is_paused"] is True and details["max_active_runs"] == 1
    assert "DeltaDataIntervalTimetable" in details["timetable_summary"] or "0:00:20" in details["timetable_summary"]
    assert details["owners"] == ["cdcflow"] and {"cdcflow", "cdc"} <= {t["name"] for t in details["tags"]}
    params = details["params"]
    assert set(params) == {"target_ts", "mode", "tables", "dry_run"}
    assert params["mode"]["schema"]["enum"] == ["incremental", "snapshot", "rebuild"]
    assert all(p["schema"].get("title") and p.get("description") for p in params.values())


def test_a_scheduled_run_replicates_its_interval(feed: Feed) -> None:
    server = feed.server
    server.set_paused(DAG_ID, False)
    try:
        # The first run(s) may cover an interval that ended before the changefeed's start-ts (a no-op): the run
        # that matters is the first whose interval ends after it.
        start_ts = feed.started
        first = _wait_for(lambda: [r for r in server.runs(DAG_ID) if r["run_type"] == "scheduled"
                                   and _interval_end_ts(r) > start_ts], 120, "a scheduled run after start-ts")[0]
        run = server.wait_run(DAG_ID, first["dag_run_id"], timeout_s=600)
    finally:
        server.set_paused(DAG_ID, True)
    _ok(server, run)
    plan = server.xcom(DAG_ID, run["dag_run_id"], "plan")
    # The window ends at the data interval end, as a TSO.
    assert plan["target_ts"] == _interval_end_ts(run) and plan["skip"] is False
    pulled = server.xcom(DAG_ID, run["dag_run_id"], "pull")
    assert pulled["events"] > 0
    assert int(feed.state()["checkpoint_ts"]) >= plan["target_ts"]
    feed.assert_equal_at(plan["target_ts"])


@pytest.mark.parametrize(("conf", "names"), [
    ({"mode": "fast"}, ["mode", "fast"]),
    ({"target_ts": "yesterday"}, ["target_ts", "yesterday"]),
    ({"tables": "afs.orders"}, ["tables"]),
    ({"dry_run": "maybe"}, ["dry_run"]),
])
def test_invalid_params_are_rejected_before_a_run_exists(feed: Feed, conf: dict[str, Any], names: list[str]) -> None:
    server = feed.server
    before = len(server.runs(DAG_ID))
    r = server.trigger(DAG_ID, conf)
    assert r.status_code == 400, r.text
    for name in names:
        assert name in r.text
    assert len(server.runs(DAG_ID)) == before


def test_a_triggered_run_with_params(feed: Feed) -> None:
    server = feed.server
    feed.batch()
    target = feed.now_ts()
    feed.batch()  # after the target: must not be applied by this run
    server.set_paused(DAG_ID, False)
    try:
        r = server.trigger(DAG_ID, {"target_ts": str(target), "mode": "incremental", "dry_run": False})
        assert r.status_code == 200, r.text
        run = server.wait_run(DAG_ID, r.json()["dag_run_id"], timeout_s=600)
    finally:
        server.set_paused(DAG_ID, True)
    _ok(server, run)
    plan = server.xcom(DAG_ID, run["dag_run_id"], "plan")
    assert plan["target_ts"] == target
    feed.assert_equal_at(target)
    published = server.xcom(DAG_ID, run["dag_run_id"], "publish")
    assert published["checkpoint_ts"] == target
    assert {Path(u).name for u in published["asset_events"]} <= set(TABLES)
