"""The deferrable wait between plan and pull: the trigger fires only once the upstream's resolved ts passes
the window end (polled asynchronously), the operator defers when the window is still open and resumes with the
trigger's event, and returns at once when there is nothing to wait for."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from cdcflow_airflow.operators import ResolvedTsSensor
from cdcflow_airflow.triggers import ResolvedTsTrigger

from cdc_core.changefeed import tasks
from cdc_core.changefeed.config import parse_config, save_config
from cdc_core.changefeed.ddl_puller import SchemaLog
from cdc_core.changefeed.schema_loader import load_schema_jobs
from cdc_core.changefeed.state import create_state, locked_state
from cdc_core.codec import key as keycodec
from cdc_core.codec import tso


async def _first_event(trigger: ResolvedTsTrigger) -> dict[str, Any]:
    async for ev in trigger.run():
        return dict(ev.payload)
    raise AssertionError("the trigger ended without an event")


def test_trigger_fires_once_the_resolved_ts_passes_a_window_end_ahead(upstream_cluster: Any,
                                                                       upstream_client: Any) -> None:
    db = "wait_trigger"
    upstream_client.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (a INT PRIMARY KEY)")
    span = keycodec.table_span(upstream_cluster.faults.table_id(db, "t"))
    target = tso.compose(tso.physical_ms(upstream_client.get_ts()) + 1500)  # 1.5 s ahead
    trigger = ResolvedTsTrigger(upstream_cluster.pd_addr, [[span[0].hex(), span[1].hex()]], target, poll_s=0.1,
                                timeout_s=30)
    # It survives the triggerer's round trip through serialize().
    path, kwargs = trigger.serialize()
    assert path == "cdcflow_airflow.triggers.ResolvedTsTrigger"
    trigger = ResolvedTsTrigger(**kwargs)

    async def main() -> tuple[dict[str, Any], int]:
        task = asyncio.ensure_future(_first_event(trigger))
        # A commit inside the still-open window must not be missed by the wait's resolved ts.
        await asyncio.sleep(0.3)
        await asyncio.to_thread(upstream_client.execute, f"INSERT INTO {db}.t VALUES (1)")
        assert not task.done(), "fired while the window end was still ahead of the upstream"
        ev = await task
        return ev, upstream_client.get_ts()

    t0 = time.monotonic()
    ev, after = asyncio.run(main())
    assert ev["status"] == "passed" and ev["how"] == "pd", ev  # PD's min resolved ts: no region subscribed
    assert ev["resolved_ts"] >= target and after > target
    assert time.monotonic() - t0 >= 1.0  # it really waited for the clock to pass the window end


def test_trigger_reports_a_timeout_and_an_error(upstream_cluster: Any) -> None:
    far = tso.compose(tso.now_physical_ms() + 3_600_000)  # an hour ahead: the wait cannot end in time
    ev = asyncio.run(_first_event(ResolvedTsTrigger(upstream_cluster.pd_addr, [], far, poll_s=0.05, timeout_s=0.3)))
    assert ev["status"] == "timeout" and ev["target_ts"] == far and "did not pass" in ev["message"]
    # A PD address nobody serves: an error event naming the failure, not a hang.
    ev = asyncio.run(_first_event(ResolvedTsTrigger("127.0.0.1:1", [], far, poll_s=0.05, timeout_s=30)))
    assert ev["status"] == "error" and ev["message"], ev


@pytest.fixture
def feed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream_cluster: Any, upstream_client: Any) -> str:
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CDCFLOW_UPSTREAM", upstream_cluster.pd_addr)
    upstream_client.execute("CREATE DATABASE IF NOT EXISTS wait_op; "
                            "CREATE TABLE IF NOT EXISTS wait_op.t (a INT PRIMARY KEY)")
    start = upstream_client.get_ts()
    cfg = parse_config(f'changefeed-id = "w"\nsink-uri = "file://{tmp_path}/lake"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["wait_op.*"]\n')
    save_config(cfg)
    create_state("w", start)
    SchemaLog("w", load_schema_jobs(upstream_client, start), start).save()
    return "w"


def test_operator_defers_while_the_window_is_open_and_resumes_with_the_event(feed: str, upstream_client: Any) -> None:
    ahead = tso.compose(tso.physical_ms(upstream_client.get_ts()) + 60_000)
    plan = tasks.plan(feed, interval_end_ts=None, target_ts=ahead).to_xcom()
    op = ResolvedTsSensor(task_id="wait", plan=plan, poll_s=0.1)
    with pytest.raises(TaskDeferred) as ei:
        op.execute({"params": {}})
    trig = ei.value.trigger
    assert isinstance(trig, ResolvedTsTrigger) and trig.target_ts == ahead
    assert ei.value.method_name == "execute_complete"
    assert len(trig.spans) == 2  # the DDL history span and wait_op.t
    out = op.execute_complete({}, {"status": "passed", "target_ts": ahead, "resolved_ts": ahead + 5,
                                   "how": "resolved", "seconds": 60.0})
    assert out["deferred"] and out["resolved_ts"] == ahead + 5
    with pytest.raises(AirflowException, match="did not pass"):
        op.execute_complete({}, {"status": "timeout", "target_ts": ahead, "message": "the resolved ts did not pass"})


def test_operator_waits_in_the_task_for_a_window_end_seconds_away(feed: str, upstream_client: Any) -> None:
    """Deferring would cost more than the wait (and races Airflow 3.3's scheduler, apache/airflow#72716)."""
    soon = tso.compose(tso.physical_ms(upstream_client.get_ts()) + 1500)
    plan = tasks.plan(feed, interval_end_ts=None, target_ts=soon).to_xcom()
    t0 = time.monotonic()
    out = ResolvedTsSensor(task_id="wait", plan=plan, poll_s=0.1).execute({"params": {}})
    assert out["deferred"] is False and out["how"] == "pd" and out["resolved_ts"] >= soon, out
    assert time.monotonic() - t0 >= 1.0  # it waited for the window end to pass
    assert upstream_client.get_ts() > soon
    # Without the inline wait, the same kind of window defers.
    later = tso.compose(tso.physical_ms(upstream_client.get_ts()) + 1500)
    plan = tasks.plan(feed, interval_end_ts=None, target_ts=later).to_xcom()
    with pytest.raises(TaskDeferred):
        ResolvedTsSensor(task_id="wait", plan=plan, inline_wait=timedelta(0)).execute({"params": {}})


def test_operator_does_not_defer_without_anything_to_wait_for(feed: str, upstream_client: Any) -> None:
    now = upstream_client.get_ts()
    # The window is already covered by a pull that saw the resolved ts past it.
    with locked_state(feed) as st:
        st.resolved_ts = now + 10
    plan = tasks.plan(feed, interval_end_ts=None, target_ts=now).to_xcom()
    assert ResolvedTsSensor(task_id="wait", plan=plan).execute({"params": {}})["deferred"] is False
    # A skipped window (paused changefeed) does not wait either.
    with locked_state(feed) as st:
        st.state = "paused"
    plan = tasks.plan(feed, interval_end_ts=None, target_ts=now + 10**12).to_xcom()
    assert ResolvedTsSensor(task_id="wait", plan=plan).execute({"params": {}})["skipped"] is True


def test_the_wait_is_a_sensor_whose_poke_looks_once_without_waiting(feed: str, upstream_client: Any) -> None:
    from airflow.sdk import BaseSensorOperator
    from cdcflow_airflow.operators import WAIT_TIMEOUT

    ahead = tso.compose(tso.physical_ms(upstream_client.get_ts()) + 60_000)
    plan = tasks.plan(feed, interval_end_ts=None, target_ts=ahead).to_xcom()
    op = ResolvedTsSensor(task_id="wait", plan=plan, poll_s=0.5)
    assert isinstance(op, BaseSensorOperator) and op.timeout == WAIT_TIMEOUT.total_seconds() and op.poke_interval == 0.5
    t0 = time.monotonic()
    assert op.poke({"params": {}}) is False  # a window a minute ahead: not passed, and no waiting for it
    assert time.monotonic() - t0 < 5
    # A window end in the past: PD's min resolved ts passes it once the stores report past it.
    past = upstream_client.get_ts()
    op = ResolvedTsSensor(task_id="wait", plan=tasks.plan(feed, interval_end_ts=None, target_ts=past).to_xcom())
    deadline = time.monotonic() + 10
    while not op.poke({"params": {}}):
        assert time.monotonic() < deadline, "PD's min resolved ts never passed a ts in the past"
        time.sleep(0.1)  # the stores report their resolved ts to PD every 50 ms (min-ts-interval); poll, not wait
    # A skipped window (paused changefeed) needs no wait at all.
    with locked_state(feed) as st:
        st.state = "paused"
    plan = tasks.plan(feed, interval_end_ts=None, target_ts=ahead).to_xcom()
    assert ResolvedTsSensor(task_id="wait", plan=plan).poke({"params": {}}) is True
