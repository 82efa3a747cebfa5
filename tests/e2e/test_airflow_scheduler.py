"""End to end through a real Airflow: the scheduler runs a changefeed's windows, and a person triggers one with
parameters through the REST API (the form's backend); invalid parameters are refused before a run exists;
`airflow backfill create` runs past intervals in order, no-ops on a second pass and rebuilds once with
``{"mode": "rebuild"}``. After each run, every Delta table as of the window end equals the upstream
snapshot. The tasks' Spark is the harness's Spark Connect server, as under ``make airflow``.

One story over one changefeed (``schedule = "10s"`` so that intervals pass quickly), in file order. The
DAG starts paused; the scheduled-run test unpauses it and it stays so: the schedule keeps running windows
while the other tests trigger and backfill, as it would in production. Assertions therefore use Delta as
of a ts (time travel by ``cdcflow.ts``), which a window in flight does not change.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc_core.changefeed import lease
from cdc_core.codec import tso
from testkit.airflow_feed import AirflowFeed, interval_end_ts, next_boundary, sleep_past, wait_for
from testkit.e2e import artifacts_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

CF = "afsched"
DAG_ID = f"cdcflow__{CF}"
DB = "afs"
EVERY_S = 10
TABLES = AirflowFeed.TABLES
ROOT = Path(__file__).resolve().parents[2]


class Feed(AirflowFeed):
    def __init__(self, server: Any, pd_addr: str) -> None:
        super().__init__(server, pd_addr, server.cdc_home, CF, DB)
        self.batched = 0  # a ts after the fixture's first batch committed
        self.backfilled: tuple[datetime, datetime, list[int]] | None = None  # set by the backfill test


@pytest.fixture(scope="module")
def feed(airflow_server: Any, upstream_cluster: Any) -> Iterator[Feed]:
    """The module's changefeed, its capture started by its DAG's first run (``[capture] auto-start``) and stopped
    after the module."""
    f = Feed(airflow_server, upstream_cluster.pd_addr)
    f.create(EVERY_S, '\n[data-quality]\nmode = "checksum"\n', auto_start=True)
    _transcript_path().unlink(missing_ok=True)  # this session's commands only
    f.batch()
    f.batched = f.now_ts()
    airflow_server.wait_dag(DAG_ID)
    try:
        yield f
    finally:
        f.cdcflow("capture", "stop", CF)


def test_dag_is_parsed_with_its_timetable_and_form(feed: Feed) -> None:
    server = feed.server
    errors = server.api("GET", "/api/v2/importErrors").json()
    assert errors["total_entries"] == 0, errors
    details = server.api("GET", f"/api/v2/dags/{DAG_ID}/details").json()
    assert details["is_paused"] is True and details["max_active_runs"] == 1
    summary = details["timetable_summary"]
    assert "DeltaDataIntervalTimetable" in summary or str(timedelta(seconds=EVERY_S)) in summary, summary
    assert details["owners"] == ["cdcflow"] and {"cdcflow", "cdc"} <= {t["name"] for t in details["tags"]}
    params = details["params"]
    assert set(params) == {"target_ts", "mode", "tables", "full_check", "dry_run"}
    assert params["mode"]["schema"]["enum"] == ["incremental", "snapshot", "rebuild"]
    assert all(p["schema"].get("title") and p.get("description") for p in params.values())


def test_a_scheduled_run_replicates_its_interval(feed: Feed) -> None:
    server = feed.server
    server.set_paused(DAG_ID, False)  # from here on, for the rest of the module
    # The first run(s) may cover an interval that ended before the changefeed's start-ts (a no-op) or before
    # the first batch committed (an empty window): the run that matters is the first whose interval ends after
    # the batch, and so pulls it.
    batched = feed.batched
    first = wait_for(lambda: sorted((r for r in server.runs(DAG_ID) if r["run_type"] == "scheduled"
                                      and interval_end_ts(r) > batched), key=interval_end_ts),
                      120, "a scheduled run whose interval ends after the first batch")[0]
    run = server.wait_run(DAG_ID, first["dag_run_id"], timeout_s=600)
    feed.assert_ok(run)
    plan = server.xcom(DAG_ID, run["dag_run_id"], "plan")
    # The window ends at the data interval end, as a TSO.
    assert plan["target_ts"] == interval_end_ts(run) and plan["skip"] is False
    pulled = server.xcom(DAG_ID, run["dag_run_id"], "pull")
    assert pulled["events"] > 0
    # the DAG started the changefeed's capture, and the window was read from its parts (no subscription)
    capture = json.loads(feed.cdcflow("capture", "status", CF, "--json"))
    assert capture["state"] == "up" and capture["pid"], capture
    assert pulled["source"] == "capture", pulled
    assert int(feed.state()["checkpoint_ts"]) >= plan["target_ts"]
    feed.assert_equal_at(plan["target_ts"])
    # What a window costs through Airflow, kept for people to read (the figure docs/benchmarks.md quotes).
    timings = server.run_timings(DAG_ID, run)
    tasks = ("plan", "wait", "pull", "apply_check", "publish")
    assert set(tasks) <= timings.keys() and timings["run"] + 1 >= sum(timings[t] for t in tasks), timings
    lines = [f"{name:<12} {timings[name]:7.1f} s" for name in (*tasks, "run")]
    (artifacts_dir("airflow") / "window-timings.txt").write_text(
        f"scheduled run {run['dag_run_id']} of {DAG_ID}: {pulled['events']} events\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize(("conf", "names"), [
    ({"mode": "fast"}, ["mode", "fast"]),
    ({"target_ts": "yesterday"}, ["target_ts", "yesterday"]),
    ({"tables": "afs.orders"}, ["tables"]),
    ({"dry_run": "maybe"}, ["dry_run"]),
])
def test_invalid_params_are_rejected_before_a_run_exists(feed: Feed, conf: dict[str, Any], names: list[str]) -> None:
    server = feed.server

    def manual() -> set[str]:
        return {r["dag_run_id"] for r in server.runs(DAG_ID) if r["run_type"] == "manual"}

    before = manual()
    r = server.trigger(DAG_ID, conf)
    assert r.status_code == 400, r.text
    for name in names:
        assert name in r.text
    assert manual() == before


def test_a_triggered_dry_run_plans_the_asked_window_only(feed: Feed) -> None:
    """The trigger's params reach the tasks: ``target_ts`` ends the window and ``dry_run`` stops after plan.
    (A real triggered run, from the trigger form, is the browser test's: here the 10 s schedule runs windows
    of its own meanwhile, which would make the checkpoint a race.)"""
    server = feed.server
    feed.batch()
    target = feed.now_ts()
    r = server.trigger(DAG_ID, {"target_ts": str(target), "mode": "incremental", "dry_run": True})
    assert r.status_code == 200, r.text
    assert r.json()["conf"] == {"target_ts": str(target), "mode": "incremental", "dry_run": True}
    run = server.wait_run(DAG_ID, r.json()["dag_run_id"], timeout_s=600)
    feed.assert_ok(run)
    plan = server.xcom(DAG_ID, run["dag_run_id"], "plan")
    assert plan["target_ts"] == target, plan
    for task in ("pull", "apply_check", "publish"):
        out = server.xcom(DAG_ID, run["dag_run_id"], task)
        assert out["skipped"] is True, (task, out)
        # A scheduled run that went first may already have covered the target; otherwise the dry run stopped it.
        assert plan["skip"] or "dry run" in out["reason"], (task, out)
    feed.assert_equal_at_checkpoint()


def _backfills(server: Any) -> list[dict[str, Any]]:
    r = server.api("GET", "/api/v2/backfills", params={"dag_id": DAG_ID})
    r.raise_for_status()
    return list(r.json()["backfills"])


def _transcript_path() -> Path:
    """``.artifacts/backfill/transcript.txt`` (``CDCFLOW_ARTIFACTS`` overrides the folder): docs/operations.md's
    backfill output comes from there."""
    return artifacts_dir("backfill") / "transcript.txt"


def _transcript(server: Any, *args: str) -> str:
    """Run ``airflow *args`` and append the command and its output to the transcript of this session."""
    proc = server.cli(*args)
    assert proc.returncode == 0, f"airflow {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    with _transcript_path().open("a") as f:
        f.write(f"$ airflow {' '.join(args)}\n{proc.stdout}\n")
    return str(proc.stdout)


def _create_backfill(server: Any, frm: datetime, to: datetime, *extra: str, dry_run: bool = False,
                     ) -> list[dict[str, Any]]:
    """``airflow backfill create`` beside the running scheduler (after its ``--dry-run`` if asked): the backfill's
    runs. New intervals get new runs; with ``--reprocess-behavior``, an interval's existing run is cleared and
    queued again (same run id, a new ``queued_at``). (Each ``airflow`` command costs ~8 s of CPU here, so the
    dry run and ``list-runs`` are shown once, for the first backfill.)"""
    args = ["backfill", "create", "--dag-id", DAG_ID, "--from-date", frm.isoformat(), "--to-date", to.isoformat(),
            *extra]
    if dry_run:
        assert "Runs to be attempted" in _transcript(server, *args, "--dry-run")
    before = {r["dag_run_id"] for r in server.runs(DAG_ID)}
    created = datetime.now(UTC)
    _transcript(server, *args)

    def ours(r: dict[str, Any]) -> bool:
        requeued = r["queued_at"] is not None and datetime.fromisoformat(r["queued_at"]) >= created
        return r["run_type"] == "backfill" and (r["dag_run_id"] not in before or requeued)

    runs: list[dict[str, Any]] = wait_for(lambda: [r for r in server.runs(DAG_ID) if ours(r)], 60,
                                           "the backfill's runs")
    return runs


def _finish(server: Any, runs: list[dict[str, Any]], *, list_runs: bool = False) -> list[dict[str, Any]]:
    """Wait for a backfill's ``runs`` and for the backfill to complete; the runs, by interval (and ``airflow dags
    list-runs`` of them in the transcript, if asked)."""
    done = [server.wait_run(DAG_ID, r["dag_run_id"], timeout_s=600) for r in runs]
    wait_for(lambda: all(b.get("completed_at") for b in _backfills(server)), 60, "the backfill to complete")
    for run in done:
        assert run["state"] == "success", server.failure_report(DAG_ID, run["dag_run_id"])
    done.sort(key=lambda r: r["data_interval_end"])
    if list_runs:
        first, last = (r["logical_date"] or r["data_interval_start"] for r in (done[0], done[-1]))
        _transcript(server, "dags", "list-runs", DAG_ID, "--start-date", first, "--end-date", last, "-o", "table")
    return done


def test_a_backfill_runs_each_interval_in_window_order(feed: Feed, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill of two past intervals while the checkpoint is behind them: each run applies (at least) its own
    interval, in window order, between the scheduled runs (the window lease)."""
    server = feed.server
    monkeypatch.setenv("CDCFLOW_HOME", str(feed.home))
    server.set_paused(DAG_ID, False)  # as the scheduled-run test leaves it (this one may run alone)
    # The test stands for a long window in flight: while it holds the lease, no run plans, so the checkpoint
    # stays behind the intervals written next (target 0: ahead of every run already waiting).
    holder = "test:holder"
    lease.wait_acquire(CF, holder, timeout_s=600, target_ts=0)
    try:
        b1 = next_boundary(datetime.now(UTC), EVERY_S)
        sleep_past(b1)
        feed.batch()
        b2 = b1 + timedelta(seconds=EVERY_S)
        sleep_past(b2)
        feed.batch()
        b3 = b2 + timedelta(seconds=EVERY_S)
        sleep_past(b3)
        feed.batch()  # after the backfill's last interval
        assert int(feed.state()["checkpoint_ts"]) < tso.from_datetime(b1)
        new = _create_backfill(server, b1, b2, "--max-active-runs", "2", dry_run=True)
        assert len(new) == 2
        owners = {f"airflow:{DAG_ID}:{r['dag_run_id']}" for r in new}
        wait_for(lambda: owners <= set(lease.waiters(CF)), 300, "both backfill runs queued on the lease")
    finally:
        lease.release(CF, holder)
    runs = _finish(server, new, list_runs=True)

    ends = [interval_end_ts(r) for r in runs]
    assert ends == [tso.from_datetime(b2, end_of_ms=True), tso.from_datetime(b3, end_of_ms=True)]
    # An interval [b, b'] is the TSO window (tso(b) end of ms, tso(b') end of ms].
    starts = [tso.from_datetime(b1, end_of_ms=True), ends[0]]
    for run, start, end in zip(runs, starts, ends, strict=True):
        plan = server.xcom(DAG_ID, run["dag_run_id"], "plan")
        # Its window ends at its interval end and covers all of the interval (a scheduled run served
        # before it by the lease may have applied the part before the interval).
        assert plan["target_ts"] == end and plan["skip"] is False and plan["checkpoint_ts"] <= start, plan
        assert server.xcom(DAG_ID, run["dag_run_id"], "pull")["events"] > 0
        feed.assert_equal_at(end)
    assert int(feed.state()["checkpoint_ts"]) >= ends[-1]
    feed.assert_equal_at_checkpoint()
    feed.backfilled = (b1, b2, ends)


def test_a_backfill_of_applied_intervals_is_a_no_op(feed: Feed) -> None:
    server = feed.server
    assert feed.backfilled is not None, "needs the intervals of test_a_backfill_runs_each_interval_in_window_order"
    b1, b2, _ = feed.backfilled
    checkpoint = int(feed.state()["checkpoint_ts"])
    again = _finish(server, _create_backfill(server, b1, b2, "--reprocess-behavior", "completed"))
    assert len(again) == 2
    for run in again:
        plan = server.xcom(DAG_ID, run["dag_run_id"], "plan")
        assert plan["skip"] is True and "already covered" in plan["reason"], plan
        assert server.xcom(DAG_ID, run["dag_run_id"], "apply_check")["skipped"] is True
    assert int(feed.state()["checkpoint_ts"]) >= checkpoint
    feed.assert_equal_at_checkpoint()


def test_a_rebuild_backfill_rebuilds_once(feed: Feed) -> None:
    """``{"mode": "rebuild"}``: the tables are rebuilt from the bronze changelog once for the whole backfill,
    not once per run, and keep their history (time travel to each backfilled window end)."""
    server = feed.server
    assert feed.backfilled is not None, "needs the intervals of test_a_backfill_runs_each_interval_in_window_order"
    b1, b2, ends = feed.backfilled
    before = {t: (feed.sink / DB / t).stat().st_ino for t in TABLES}
    rebuilt = _finish(server, _create_backfill(server, b1, b2, "--reprocess-behavior", "completed",
                                               "--dag-run-conf", json.dumps({"mode": "rebuild"})))
    assert len(rebuilt) == 2
    st = feed.state()
    assert st["state"] == "normal"
    rebuild = st.get("rebuild") or {}
    assert rebuild.get("done") is True and str(rebuild.get("tag", "")).startswith("backfill-"), rebuild
    assert {t: (feed.sink / DB / t).stat().st_ino for t in TABLES} != before  # new directories
    trash = list((feed.sink / "_cdcflow" / "trash").glob("rebuild-*"))
    assert len(trash) == 1, trash  # moved aside once
    feed.assert_equal_at_checkpoint()
    for end in ends:
        feed.assert_equal_at(end)


def test_a_broken_config_is_an_import_error_of_its_own_and_the_other_changefeed_keeps_running(feed: Feed) -> None:
    """A config that does not load (here an unknown schedule) shows in the UI's import errors as its own DAG file,
    with the message ``cdcflow changefeed create`` refuses it with; the running changefeed's DAG is neither stale
    nor marked with the error and keeps running its windows; fixed (here: removed), the error goes."""
    server = feed.server
    broken = feed.home / "changefeeds" / "broken.toml"
    text = 'changefeed-id = "broken"\nsink-uri = "file:///nowhere"\n\n[airflow]\nschedule = "every five minutes"\n'
    outside = feed.home / "broken-draft.toml"
    outside.write_text(text)
    refused = subprocess.run([str(ROOT / ".venv" / "bin" / "cdcflow"), "changefeed", "create", "--config",
                              str(outside)], env={**server.env, "CDCFLOW_HOME": str(feed.home), "COLUMNS": "400"},
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and not broken.exists(), refused.stderr
    said = refused.stderr.strip().removeprefix("error: ").replace(str(outside), "")
    assert "neither a duration" in said, refused.stderr

    def errors() -> list[dict[str, Any]]:
        r = server.api("GET", "/api/v2/importErrors")
        r.raise_for_status()
        return list(r.json()["import_errors"])

    broken.write_text(text)  # as a person editing the config directory would
    try:
        ours = wait_for(lambda: [e for e in errors() if e["filename"].endswith("cdcflow_changefeed__broken.py")],
                        120, "the broken config's import error")
        assert len(errors()) == 1 and said in ours[0]["stack_trace"].replace(str(broken), ""), ours
        details = server.api("GET", f"/api/v2/dags/{DAG_ID}").json()
        assert details["has_import_errors"] is False and details["is_stale"] is False, details
        since = datetime.now(UTC)
        feed.batch()
        written = feed.now_ts()
        run = wait_for(lambda: [r for r in server.runs(DAG_ID) if r["run_type"] == "scheduled" and
                                datetime.fromisoformat(r["run_after"]) > since and interval_end_ts(r) > written],
                       180, "a scheduled run after the broken config appeared")[-1]
        feed.assert_ok(server.wait_run(DAG_ID, run["dag_run_id"], timeout_s=600))
        feed.assert_equal_at(interval_end_ts(run))
    finally:
        broken.unlink(missing_ok=True)
    wait_for(lambda: not errors(), 120, "the import error to go with the config")


def _prometheus(server: Any, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Debian's Prometheus scraping the API server's metrics endpoint every 3 s, with cdcflow's alert rules (a
    scrape reads every changefeed's state and asks PD for its GC safe point: under a loaded machine's CPU that can
    take more than the 1 s a 1 s interval would allow it)."""
    import shutil

    from testkit.airflow_server import free_port

    exe = shutil.which("prometheus")
    assert exe, "Debian's prometheus is missing (make test's preflight installs it)"
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(f"""\
global: {{scrape_interval: 3s, scrape_timeout: 3s, evaluation_interval: 3s}}
rule_files: ["{ROOT / 'deploy' / 'prometheus' / 'cdcflow-alerts.yml'}"]
scrape_configs:
  - job_name: cdcflow
    metrics_path: /cdcflow-metrics/metrics
    authorization: {{type: Bearer, credentials: "{server.metrics_token}"}}
    static_configs: [{{targets: ["127.0.0.1:{server.port}"]}}]
""")
    log = open(workdir / "prometheus.log", "wb")
    proc = subprocess.Popen([exe, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def test_prometheus_scrapes_the_lag_rising_and_falling(feed: Feed, tmp_path: Path) -> None:
    """A real Prometheus scrapes the deployment: the checkpoint lag rises while the DAG is paused (no window runs)
    and falls once a window runs again; the shipped alert rules load."""
    import httpx

    server = feed.server
    proc, url = _prometheus(server, tmp_path)
    try:
        def lag() -> float | None:
            try:
                r = httpx.get(f"{url}/api/v1/query", timeout=10,
                              params={"query": f'cdcflow_changefeed_checkpoint_lag_seconds{{changefeed="{CF}"}}'})
            except httpx.TransportError:  # not listening yet
                return None
            result = r.json()["data"]["result"] if r.status_code == 200 else []
            return float(result[0]["value"][1]) if result else None

        def scraped() -> bool:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            return lag() is not None

        wait_for(scraped, 120, "Prometheus to scrape the lag", poll_s=1.0)
        rules = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        # Prometheus loaded every rule the shipped file names (the file's own unit tests pin the set).
        shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "cdcflow-alerts.yml").read_text())
        assert sorted(r["name"] for g in rules for r in g["rules"]) == sorted(
            r["alert"] for g in shipped["groups"] for r in g["rules"])
        assert "CdcflowCheckpointLagging" in {r["name"] for g in rules for r in g["rules"]}
        server.pause_and_settle(DAG_ID)
        paused_at = lag()
        assert paused_at is not None
        # No window runs: the lag grows with the wall clock, scrape after scrape.
        risen = wait_for(lambda: (v := lag()) is not None and v >= paused_at + 10 and v, 60, "the lag to rise",
                         poll_s=1.0)
        seen = [risen]
        server.set_paused(DAG_ID, False)
        since = datetime.now(UTC)

        def ran() -> list[dict[str, Any]]:
            seen.append(lag() or 0.0)  # still rising until the run publishes its window
            return [r for r in server.runs(DAG_ID) if r["run_type"] == "scheduled" and r["state"] == "success"
                    and datetime.fromisoformat(r["run_after"]) > since]

        wait_for(ran, 600, "a scheduled run to replicate after the pause", poll_s=1.0)
        peak = max(seen)
        # The window published: the checkpoint jumped by the paused time, and the lag with it.
        fallen = wait_for(lambda: (v := lag()) is not None and v < peak - 5 and v, 60, "the lag to fall",
                          poll_s=1.0)
        assert fallen < peak
    finally:
        proc.terminate()
        proc.wait(timeout=30)
