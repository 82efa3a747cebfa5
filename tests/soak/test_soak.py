"""``make soak`` (issue 20): the distributed topology (``tests/testkit/topology.py``, what docker-compose.yml runs)
replicates a sysbench-like workload with primary- and unique-key moves and DDL for ``CDCFLOW_SOAK_WINDOWS``
windows (50) while ``chaos.Chaos`` kills a random process every ``CDCFLOW_SOAK_KILL_EVERY_S`` seconds on average
and faults a region every second.

At every checkpoint it sees, the Delta tables as of the checkpoint are compared with the upstream at that ts, row
by row: rows lost (an upstream row missing or different in Delta) and rows duplicated or stale (a Delta row that
is not upstream; a key twice). A changefeed in error is what needs a person: the soak counts it and resumes it, as
the operator would. Its figures (also in ``soak-figures.json`` beside the deployment's logs) are the issue's: rows
lost or duplicated (goal 0), windows that needed a person (goal 0), wall time; it fails when a goal is missed or
the checkpoint stands still for ``CDCFLOW_SOAK_STALL_S``.

``CDCFLOW_SOAK_CAPTURE=1`` runs it against the continuous capture (``cdcflow capture start --detach`` before the
first window, ``[capture] auto-start`` on, so the windows read its parts) with the capture among the chaos's victims
(``kill -9``, restarted a few seconds later or by the next DAG run's auto-start); by default the capture is off
(``auto-start = false``) and every window pulls itself. Its figures say which (``settings.capture``).

Not in ``make test``: at its defaults it runs for about an hour.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cdcflow_airflow.dag_factory import DEFAULT_RETRIES

from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import UpstreamError
from cdc_core.upstream.workload import Workload, WorkloadConfig
from testkit.airflow_feed import AirflowFeed
from testkit.chaos import Chaos
from testkit.e2e import delta_rows_at, upstream_rows

CF, DB = "soak", "soak"
DAG_ID = f"cdcflow__{CF}"


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"CDCFLOW_SOAK_{name}", default))


WINDOWS = int(_env("WINDOWS", 50))
EVERY_S = int(_env("EVERY_S", 30))
KILL_EVERY_S = _env("KILL_EVERY_S", 120)
DDL_EVERY_S = _env("DDL_EVERY_S", 60)
RATE = _env("ROWS_PER_S", 20)  # the workload's pace
STALL_S = _env("STALL_S", 900)
SEED = int(_env("SEED", 1))
MAX_S = _env("MAX_S", 0)  # a wall-time budget (0: none): the chaos ends there, fewer windows are reported as such
CAPTURE = bool(int(_env("CAPTURE", 0)))  # against the continuous capture, the capture a chaos victim


def _key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def _upstream_rows(c: UpstreamClient, table: str, ts: int) -> list[dict[str, Any]]:
    try:
        return upstream_rows(c, DB, table, "id", ts)
    except UpstreamError as exc:
        if "MySQL error 1146" in str(exc):  # not created yet at ts
            return []
        raise


def _delta_rows(sink: Path, table: str, ts: int) -> list[dict[str, Any]]:
    from spark_jobs.checks.data_quality import version_as_of

    if not (sink / DB / table / "_delta_log").is_dir() or version_as_of(str(sink / DB / table), ts) is None:
        return []  # no window wrote it by ts
    return delta_rows_at(sink, DB, table, "id", ts)


def compare(pd: str, sink: Path, tables: list[str], ts: int) -> dict[str, int]:
    """Delta as of ``ts`` against the upstream at ``ts``: rows compared, lost, extra (duplicated or stale), keys
    that Delta holds twice."""
    out = Counter[str]()
    with UpstreamClient(pd) as c:
        for table in tables:
            up = Counter(_key(r) for r in _upstream_rows(c, table, ts))
            lake_rows = _delta_rows(sink, table, ts)
            lake = Counter(_key(r) for r in lake_rows)
            out["rows"] += sum(up.values())
            out["lost"] += sum((up - lake).values())
            out["extra"] += sum((lake - up).values())
            out["duplicated_keys"] += sum(n - 1 for n in Counter(r["id"] for r in lake_rows).values() if n > 1)
    return dict(out)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from testkit.topology import running

    # The deployment's task retries (the end-to-end harness turns them off to fail fast): a killed task is retried.
    with running(tmp_path_factory.mktemp("soak"), control=True,
                 airflow_env={"CDCFLOW_TASK_RETRIES": str(DEFAULT_RETRIES)}) as t:
        yield t


def test_soak(cluster: Any, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    started = time.monotonic()
    monkeypatch.setenv("CDCFLOW_HOME", str(cluster.cdc_home))
    pd = cluster.upstream_pd
    cfg = WorkloadConfig(db=DB, tables=2, id_range=5_000, initial_rows=2_000, duration_s=24 * 3600, threads=2,
                         seed=SEED, rows_per_s=RATE, ddl_per_s=1 / DDL_EVERY_S)
    tables = [f"sbtest{i + 1}" for i in range(cfg.tables)]
    feed = AirflowFeed(cluster, pd, cluster.cdc_home, CF, DB)
    config = cluster.cdc_home / f"{CF}.toml"
    config.write_text(f'changefeed-id = "{CF}"\nsink-uri = "file://{feed.sink}"\n[filter]\nrules = ["{DB}.*"]\n'
                      f'[airflow]\nschedule = "{EVERY_S}s"\ncatchup = false\n'
                      f'[capture]\nauto-start = {str(CAPTURE).lower()}\n')
    feed.cdcflow("changefeed", "create", "--config", str(config))  # from now: the tables and their rows replicate
    client = UpstreamClient(pd)
    workload = Workload(cfg, lambda sql: [(r.affected_rows, r.commit_ts) for r in client.execute(sql)])
    workload.prepare()
    cluster.wait_dag(DAG_ID)
    if CAPTURE:  # up before the first window, so that every window reads its parts; stopped however the soak ends
        feed.cdcflow("capture", "start", CF, "--detach")
        request.addfinalizer(lambda: feed.cdcflow("capture", "stop", CF))

    stop_workload = threading.Event()
    summary: dict[str, Any] = {}
    writer = threading.Thread(target=lambda: summary.update(workload.run(stop_workload).to_dict()), daemon=True)
    chaos = Chaos(cluster, [f"{DB}.{t}" for t in tables], cfg.id_range, seed=SEED, kill_every_s=KILL_EVERY_S,
                  capture=(CF, lambda: feed.cdcflow("capture", "start", CF, "--detach")) if CAPTURE else None)
    figures: dict[str, Any] = {"windows": 0, "compared": Counter[str](), "needed_a_person": [],
                               "settings": {"windows": WINDOWS, "every_s": EVERY_S, "kill_every_s": KILL_EVERY_S,
                                            "ddl_every_s": DDL_EVERY_S, "rows_per_s": RATE, "seed": SEED,
                                            "max_s": MAX_S, "capture": CAPTURE}}
    out = cluster.workdir / "soak-figures.json"
    start_ts = load_state(CF).checkpoint_ts
    cluster.set_paused(DAG_ID, False)
    writer.start()
    chaos.start()

    def save() -> None:
        """The figures so far, with the chaos's, in ``out`` (kept as the run goes: a run stopped early keeps them)."""
        figures.update({"wall_s": round(time.monotonic() - started), "kills": chaos.log.kills_by_victim(),
                        "kill_log": [vars(k) for k in chaos.log.kills], "faults": dict(chaos.log.faults),
                        "workload": summary})
        out.write_text(json.dumps(figures, indent=2, default=str))

    def observe(last: int) -> int:
        """One look at the changefeed: an error is resumed (and counted), a new checkpoint compared."""
        st = load_state(CF)
        if st.state == "error":
            figures["needed_a_person"].append({"at_checkpoint": st.checkpoint_ts, "error": st.error})
            feed.cdcflow("changefeed", "resume", CF)
        if st.checkpoint_ts > last:
            figures["windows"] += 1
            if figures["windows"] == WINDOWS:  # the goal's wall time (the closing window comes after)
                figures["windows_goal_s"] = round(time.monotonic() - started)
            got = compare(pd, feed.sink, tables, st.checkpoint_ts)
            figures["compared"].update(got)
            if got["lost"] or got["extra"]:
                figures.setdefault("differences", []).append({"ts": st.checkpoint_ts, **got})
            save()
        return max(last, st.checkpoint_ts)

    last, moved_at = start_ts, time.monotonic()
    try:
        while figures["windows"] < WINDOWS:
            now = observe(last)
            if now > last:
                last, moved_at = now, time.monotonic()
            if time.monotonic() - moved_at > STALL_S:
                figures["stalled_at"] = last
                break
            if MAX_S and time.monotonic() - started > MAX_S:
                figures["budget_reached"] = True
                break
            time.sleep(2.0)
    finally:
        chaos.stop()
        stop_workload.set()
        writer.join(timeout=120)
        client.close()

    if "stalled_at" not in figures:  # a last window over everything written, with the chaos over
        end, deadline = feed.now_ts(), time.monotonic() + STALL_S
        while last < end and time.monotonic() < deadline:
            last = observe(last)
            time.sleep(2.0)
        if last < end:
            figures["stalled_at"] = last
        figures["final"] = compare(pd, feed.sink, tables, last)

    runs = cluster.runs(DAG_ID)
    figures.update({
        "start_ts": start_ts, "checkpoint_ts": load_state(CF).checkpoint_ts,
        "dag_runs": dict(Counter(r["state"] for r in runs)),
        "task_retries": sum(max(0, int(ti.get("try_number") or 1) - 1) for r in runs
                            for ti in cluster.task_instances(DAG_ID, r["dag_run_id"]).values()),
        "compared": dict(figures["compared"]),
    })
    save()
    print(f"\nsoak figures ({out}):\n" + json.dumps({k: v for k, v in figures.items() if k != "kill_log"},
                                                    indent=2, default=str))
    assert "stalled_at" not in figures, f"the checkpoint stood still for {STALL_S:g}s at {figures['stalled_at']}"
    assert figures["compared"].get("lost", 0) == 0 and figures["compared"].get("extra", 0) == 0, figures
    assert figures["final"]["lost"] == 0 and figures["final"]["extra"] == 0, figures["final"]
    assert not figures["needed_a_person"], figures["needed_a_person"]
