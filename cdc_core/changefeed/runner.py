"""Runs a changefeed's windows until its checkpoint reaches a target: what `changefeed run` does.

It calls the same task functions as the Airflow DAG, in the same order, one window at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdc_core.changefeed import lease, spark_engine, tasks
from cdc_core.changefeed.state import load_state

Progress = Callable[[str, dict[str, Any]], None]


def run_window(
    changefeed_id: str,
    target_ts: int | None,
    progress: Progress | None = None,
    *,
    mode: str = "incremental",
    tables: list[str] | None = None,
    run_tag: str | None = None,
    full_check: bool = False,
) -> dict[str, Any]:
    """Plan, pull, apply, check and publish one window ending at ``target_ts`` (None = now).

    ``mode`` / ``tables`` / ``run_tag`` / ``full_check``: as ``tasks.plan`` takes them (a snapshot or rebuild
    window; a full reconciliation at the window end).
    """
    say = progress or (lambda step, info: None)
    owner = lease.process_owner()
    # One window of a changefeed at a time, whoever runs it (another CLI process, an Airflow run).
    try:
        lease.acquire(changefeed_id, owner, target_ts=target_ts, take_over=lease.dead_local_process)
    except lease.LeaseBusy:
        lease.release(changefeed_id, owner)  # do not stay queued: this process does not wait
        raise
    try:
        return _run_window(changefeed_id, target_ts, say, mode=mode, tables=tables, run_tag=run_tag,
                           full_check=full_check)
    finally:
        lease.release(changefeed_id, owner)


def _run_window(changefeed_id: str, target_ts: int | None, say: Progress, *, mode: str, tables: list[str] | None,
                run_tag: str | None, full_check: bool) -> dict[str, Any]:
    p = tasks.plan(changefeed_id, interval_end_ts=None, target_ts=target_ts, mode=mode, tables=tables,
                   run_tag=run_tag, full_check=full_check)
    planned = p.to_xcom()  # what the CLI shows and the results hold: JSON, as Airflow's XCom
    say("plan", planned)
    if p.skip:
        return {"plan": planned, "skipped": True}
    pulled = tasks.pull(p)
    say("pull", pulled)
    with spark_engine.one_application():  # under spark-submit: one application for the window's jobs
        applied = tasks.apply(p)
        say("apply", applied)
        checked = tasks.check(p)
        say("check", checked)
    published = tasks.publish(p, applied, checked)
    say("publish", published)
    return {"plan": planned, "pull": pulled, "apply": applied, "check": checked, "publish": published,
            "skipped": False}


def run_until(
    changefeed_id: str,
    until_ts: int | None,
    progress: Progress | None = None,
    *,
    mode: str = "incremental",
    tables: list[str] | None = None,
    run_tag: str | None = None,
    full_check: bool = False,
) -> list[dict[str, Any]]:
    """Run windows until the checkpoint is at or past ``until_ts`` (None = the upstream's now).

    The first window runs in ``mode`` (with ``tables`` / ``run_tag``), the ones after it incrementally; each ends
    with a full reconciliation when ``full_check``.
    """
    results: list[dict[str, Any]] = []
    while True:
        first = not results
        r = run_window(changefeed_id, until_ts, progress, mode=mode if first else "incremental",
                       tables=tables if first else None, run_tag=run_tag if first else None, full_check=full_check)
        results.append(r)
        st = load_state(changefeed_id)
        if r["skipped"] or until_ts is None or st.checkpoint_ts >= until_ts:
            return results
