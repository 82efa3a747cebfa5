"""The bodies of a changefeed DAG's tasks (``cdcflow_airflow.dag_factory`` builds the DAG around them): what
``plan``, ``pull``, ``apply_check`` and ``publish`` do with their Airflow context, as plain functions that tests
call with a fake context. Each calls the step of the same name in ``cdc_core.changefeed.tasks`` (imported when
the task runs, never when a DAG file is parsed); around it: the run's window end and rebuild tag, its turn on the
window lease, what a dry run or a skipped window returns, and the asset events ``publish`` emits.

The plan crosses between the tasks as XCom (``WindowPlan.to_xcom()``, which ``run_plan`` returns); each task after
``plan`` reads it back into a ``WindowPlan`` (``WindowPlan.from_xcom``) before anything else.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias

from cdcflow_airflow.names import dag_id_for

if TYPE_CHECKING:
    from cdc_core.changefeed.window_plan import WindowPlan

log = logging.getLogger("cdcflow.airflow")

# Runs of one changefeed (scheduled, manual, up to 10 of a backfill at once) take turns through the window
# lease (cdc_core.changefeed.lease); plan waits this long for the run ahead of it.
LEASE_PREFIX = "airflow:"
LEASE_WAIT = timedelta(hours=2) - timedelta(minutes=1)


def parse_target_ts(value: Any) -> int | None:
    """``params.target_ts`` as a TSO, or None when not given."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    from cdc_core.codec import tso

    return tso.parse_ts_or_datetime(str(value))


def window_end_ts(context: Mapping[str, Any]) -> int | None:
    """The run's window end as a TSO: the data interval end, else (a run triggered without a
    logical date has no data interval in Airflow 3) the time the run was triggered for."""
    from cdc_core.codec import tso

    end = context.get("data_interval_end")
    if end is None:
        end = getattr(context.get("dag_run"), "run_after", None)
    if end is None:
        return None
    return tso.from_datetime(end, end_of_ms=True)


def run_tag_for(context: Mapping[str, Any]) -> str | None:
    """The tag a rebuild is remembered by, so that the runs of one backfill rebuild once; None for other runs
    (each of them rebuilds).

    ``backfill-<id>`` when the run carries its backfill id. Airflow 3.3's task context does not (its DagRun
    has no ``backfill_id``), so a backfill run is tagged ``backfill-<hash of its conf>``: the runs of one
    backfill share one conf. Two backfills with the same conf are still told apart: a tag's rebuild makes a
    later one a no-op only at the checkpoint it was made at (``rebuild.already_rebuilt``)."""
    dag_run = context.get("dag_run")
    backfill_id = getattr(dag_run, "backfill_id", None)
    if backfill_id is not None:
        return f"backfill-{backfill_id}"
    run_type = getattr(dag_run, "run_type", None)
    if getattr(run_type, "value", run_type) != "backfill":
        return None
    conf = json.dumps(getattr(dag_run, "conf", None) or {}, sort_keys=True, default=str)
    return "backfill-" + hashlib.sha256(conf.encode()).hexdigest()[:12]


def lease_owner_for(context: Mapping[str, Any]) -> str:
    """The window lease's owner name for a DAG run: ``airflow:<dag_id>:<run_id>``."""
    dag_run = context.get("dag_run")
    dag_id = getattr(dag_run, "dag_id", None) or getattr(context.get("dag"), "dag_id", "?")
    run_id = getattr(dag_run, "run_id", None) or context.get("run_id") or "?"
    return f"{LEASE_PREFIX}{dag_id}:{run_id}"


def airflow_run_finished(held: Any) -> bool:
    """Whether the DAG run holding a lease is over (so its lease can be taken over): asked of the API server."""
    kind, _, rest = held.owner.partition(":")
    dag_id, _, run_id = rest.partition(":")
    if kind != "airflow" or not run_id:
        return False
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        state = RuntimeTaskInstance.get_dagrun_state(dag_id=dag_id, run_id=run_id)
    except Exception as exc:  # no supervisor (a plain function call) or the API is unreachable: keep waiting
        log.info("cannot ask Airflow for the state of run %s of %s (%s); not taking its lease over", run_id, dag_id,
                 exc)
        return False
    finished = str(state).rsplit(".", 1)[-1].lower() in ("success", "failed")
    if finished:
        log.warning("taking over the window lease of %s: that DAG run is %s without having published", held.owner,
                    state)
    return finished


def ensure_capture(changefeed_id: str) -> dict[str, Any] | None:
    """Start the changefeed's capture when it does not run and its config says ``[capture] auto-start`` (the
    default): the run's window then reads the capture's parts instead of subscribing every region. A capture that
    will not start is logged, not raised: the window pulls itself, as without a capture. Its state, or None when
    auto-start is off."""
    from cdc_core.capture import control
    from cdc_core.changefeed.config import load_config
    from cdc_core.errors import CdcflowError

    if not load_config(changefeed_id).capture_auto_start:
        return None
    try:
        st = control.ensure_running(changefeed_id)
    except CdcflowError as exc:
        log.warning("the capture of %s did not start (%s): this window pulls itself", changefeed_id, exc)
        return None
    log.info("capture of %s %s (pid %s, resolved ts %s)", changefeed_id, "started" if st["started"] else "runs",
             st.get("pid"), st.get("resolved_ts"))
    return st


def run_plan(changefeed_id: str, context: Mapping[str, Any]) -> dict[str, Any]:
    """The plan task: the run's window planned under the window lease; returns the plan's XCom."""
    params = context.get("params") or {}
    target_ts = parse_target_ts(params.get("target_ts"))
    # A person who triggers a run with an explicit target_ts asks for exactly that window end; the
    # run's data interval (which for a manual trigger is just "the last scheduled interval") only
    # bounds scheduled runs. The changefeed's own target-ts still caps both.
    interval_end_ts = None if target_ts is not None else window_end_ts(context)
    mode = params.get("mode") or "incremental"
    tables = list(params.get("tables") or []) or None
    from cdc_core.changefeed import lease, tasks

    ensure_capture(changefeed_id)
    owner = lease_owner_for(context)
    # Queue position: the window end this run asks for (the changefeed's target-ts may lower it, equally for all).
    queue_ts = target_ts if target_ts is not None else interval_end_ts
    lease.wait_acquire(
        changefeed_id, owner, timeout_s=LEASE_WAIT.total_seconds(), take_over=airflow_run_finished, target_ts=queue_ts,
        on_wait=lambda held: log.info("waiting for the window of %s to finish before planning", held.describe()),
    )
    try:
        plan = tasks.plan(changefeed_id, interval_end_ts=interval_end_ts, target_ts=target_ts, mode=mode, tables=tables,
                          run_tag=run_tag_for(context), full_check=bool(params.get("full_check")))
    except BaseException:
        lease.release(changefeed_id, owner)
        raise
    plan = plan.held_by(owner)
    log.info(
        "planned changefeed %s: mode %s, checkpoint-ts %s, target-ts %s (interval end ts %s, params.target_ts %s)%s",
        changefeed_id,
        mode,
        plan.checkpoint_ts,
        plan.target_ts,
        interval_end_ts,
        target_ts,
        f"; skip: {plan.reason}" if plan.skip else "",
    )
    if skip_reason(plan, params) is not None:  # nothing will run after plan: the window is not held
        lease.release(changefeed_id, owner)
    return plan.to_xcom()


def read_plan(xcom: Mapping[str, Any]) -> WindowPlan:
    """The plan task's XCom as a ``WindowPlan`` (a malformed one is refused, naming the field)."""
    from cdc_core.changefeed.window_plan import WindowPlan

    return WindowPlan.from_xcom(xcom)


def _ensure_lease(plan: WindowPlan) -> None:
    """A task after plan runs only while its run still holds the window lease."""
    owner = plan.lease_owner
    if not owner:
        return
    from cdc_core.changefeed import lease
    from cdc_core.errors import ChangefeedError

    held = lease.holder(plan.changefeed_id)
    if held is None or held.owner != owner:
        raise ChangefeedError(
            f"this run no longer holds the window lease of changefeed {plan.changefeed_id!r} "
            f"({'held by ' + held.describe() if held else 'expired'}); re-run the DAG run from plan"
        )


def skip_reason(plan: WindowPlan, params: Mapping[str, Any] | None) -> str | None:
    """Why a task after plan has nothing to do, or None when it must run."""
    if plan.skip:
        return plan.reason or f"window already covered by checkpoint {plan.checkpoint_ts} >= target {plan.target_ts}"
    if params and params.get("dry_run"):
        return f"dry run: window ({plan.checkpoint_ts}, {plan.target_ts}] was planned only"
    return None


def _skipped(task_id: str, plan: WindowPlan, context: Mapping[str, Any]) -> dict | None:
    reason = skip_reason(plan, context.get("params"))
    if reason is None:
        _ensure_lease(plan)
        return None
    log.info("%s: %s; nothing to do", task_id, reason)
    return {"skipped": True, "reason": reason}


def run_pull(xcom: Mapping[str, Any], context: Mapping[str, Any]) -> dict:
    plan = read_plan(xcom)
    if (done := _skipped("pull", plan, context)) is not None:
        return done
    from cdc_core.changefeed import tasks

    return tasks.pull(plan)


def run_apply_check(xcom: Mapping[str, Any], context: Mapping[str, Any]) -> dict:
    """``apply`` then ``check`` of the window, in one task: one process and one Spark session (under
    spark-submit, one application) for both (a task of its own for the checks cost a process start, a DAG parse
    and a Spark session per window, ~8 s here).
    Its XCom: ``{"skipped": False, "apply": ..., "check": ...}``."""
    plan = read_plan(xcom)
    if (done := _skipped("apply_check", plan, context)) is not None:
        return done
    from cdc_core.changefeed import spark_engine, tasks

    with spark_engine.one_application():  # under spark-submit: one application for the DDL, apply and checks
        applied = tasks.apply(plan)
        checked = tasks.check(plan)
    return {"skipped": False, "apply": applied, "check": checked}


def asset_alias_for(changefeed_id: str) -> AssetAlias:
    """The alias the publish task emits its per-table asset events under (tables are only known at run time)."""
    return AssetAlias(name=dag_id_for(changefeed_id))


def table_asset(sink_uri: str, qualified_name: str) -> Asset:
    """The Airflow asset of a silver Delta table: its location, named ``<sink>/<db>/<table>``."""
    db, _, table = qualified_name.partition(".")
    uri = f"{sink_uri.rstrip('/')}/{db}/{table}"
    return Asset(name=uri, uri=uri, group="delta")


def emit_asset_events(plan: WindowPlan, published: Mapping[str, Any], context: Mapping[str, Any]) -> list:
    """One asset event per Delta table the window changed, with the checkpoint ts and row counts in ``extra``."""
    events = context.get("outlet_events")
    if events is None or published.get("skipped"):
        return []
    alias = events[asset_alias_for(plan.changefeed_id)]
    emitted = []
    for name, st in sorted((published.get("tables") or {}).items()):
        if st.get("skipped"):  # nothing was written to it in this window
            continue
        asset = table_asset(plan.sink_uri, name)
        extra = {"changefeed_id": plan.changefeed_id, "table": name, "checkpoint_ts": published["checkpoint_ts"],
                 "window_start_ts": plan.checkpoint_ts, "rows_upserted": int(st.get("rows_upserted") or 0),
                 "rows_deleted": int(st.get("rows_deleted") or 0), "delta_version": st.get("delta_version")}
        alias.add(asset, extra=extra)
        emitted.append(asset.uri)
    log.info("publish: asset events for %s", emitted or "no changed table")
    return emitted


def run_publish(xcom: Mapping[str, Any], applied_checked: dict, context: Mapping[str, Any]) -> dict:
    plan = read_plan(xcom)
    if (done := _skipped("publish", plan, context)) is not None:
        return done
    from cdc_core.changefeed import tasks

    published = tasks.publish(plan, applied_checked["apply"], applied_checked["check"])
    from cdc_core.changefeed import lease

    if plan.lease_owner:
        lease.release(plan.changefeed_id, plan.lease_owner)
    return {**published, "asset_events": emit_asset_events(plan, published, context)}


# --- DAG construction -----------------------------------------------------------------------------
