"""Runs a changefeed's windows until its checkpoint reaches a target: what `changefeed run` does.

It calls the same task functions as the Airflow DAG, in the same order, one window at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdc_core.changefeed import tasks
from cdc_core.changefeed.state import load_state

Progress = Callable[[str, dict[str, Any]], None]


def run_window(changefeed_id: str, target_ts: int | None, progress: Progress | None = None) -> dict[str, Any]:
    """Plan, pull, apply, check and publish one window ending at ``target_ts`` (None = now)."""
    say = progress or (lambda step, info: None)
    p = tasks.plan(changefeed_id, interval_end_ts=None, target_ts=target_ts)
    say("plan", p)
    if p["skip"]:
        return {"plan": p, "skipped": True}
    pulled = tasks.pull(p)
    say("pull", pulled)
    applied = tasks.apply(p)
    say("apply", applied)
    checked = tasks.check(p)
    say("check", checked)
    published = tasks.publish(p, applied, checked)
    say("publish", published)
    return {"plan": p, "pull": pulled, "apply": applied, "check": checked, "publish": published, "skipped": False}


def run_until(changefeed_id: str, until_ts: int | None, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Run windows until the checkpoint is at or past ``until_ts`` (None = the upstream's now)."""
    results = []
    while True:
        r = run_window(changefeed_id, until_ts, progress)
        results.append(r)
        st = load_state(changefeed_id)
        if r["skipped"] or until_ts is None or st.checkpoint_ts >= until_ts:
            return results
