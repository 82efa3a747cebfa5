"""Operators of the cdcflow provider.

:class:`ResolvedTsSensor` is the DAG's ``wait`` task: between ``plan`` and ``pull`` it waits, deferred, until
the upstream's resolved ts passes the window end, so no worker slot is held while the window is still open
(e.g. a UI trigger whose ``target_ts`` is ahead of now). It returns at once when the plan skips the window or
a pull already saw the resolved ts past it.

A window end that is at most ``inline_wait`` ahead is waited for in the task instead (the same asynchronous
wait, bounded): deferring costs more than that -- the task's process ends, the triggerer picks the trigger
up, the scheduler queues the task again and a new process parses the DAG, ~8 s on 2 cores -- and a trigger
that fires at once races Airflow 3.3's scheduler, which may then fail the resumed task on the deferred try's
stale "success" event (apache/airflow#72716, "state mismatch"). Only a window still open after that defers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException

from cdcflow_airflow.triggers import ResolvedTsTrigger

if TYPE_CHECKING:
    from airflow.sdk.definitions.xcom_arg import XComArg

    from cdc_core.puller.resolved_wait import WaitResult

# How long a window may stay open (its end ahead of the resolved ts) before the wait fails.
WAIT_TIMEOUT = timedelta(hours=1)
# Window ends closer than this are waited for in the task, not deferred (see the module docstring).
INLINE_WAIT = timedelta(seconds=10)


class ResolvedTsSensor(BaseSensorOperator):
    """Waits until the upstream's resolved ts passes the planned window's end (see the module docstring).

    ``plan``: the plan task's result (its XCom, ``WindowPlan.to_xcom()``, rendered when the task runs and read back
    into a ``WindowPlan`` by :meth:`poke` and :meth:`execute`); ``poll_s``: how often the wait looks
    (also the sensor's ``poke_interval``); ``inline_wait``: how far ahead a window end is waited for in the task
    rather than deferred; ``timeout``: how long a window may stay open before the wait fails (``WAIT_TIMEOUT``).
    :meth:`poke` is one look without waiting; :meth:`execute` returns at once, waits inline or defers to
    :class:`~cdcflow_airflow.triggers.ResolvedTsTrigger`.
    """

    template_fields = ("plan",)
    ui_color = "#e8f4fa"

    def __init__(self, *, plan: XComArg | Mapping[str, Any], poll_s: float = 1.0, inline_wait: timedelta = INLINE_WAIT,
                 timeout: timedelta = WAIT_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(poke_interval=poll_s, timeout=timeout, mode="poke", **kwargs)
        self.plan = plan
        self.poll_s = poll_s
        self.inline_wait = inline_wait

    def poke(self, context: Mapping[str, Any]) -> bool:
        """One look, without waiting: whether the window needs no wait (it is skipped, or a pull already saw the
        resolved ts past its end) or PD's min resolved ts has passed its end (a PD without that API: not yet)."""
        from cdcflow_airflow.window_tasks import read_plan, skip_reason

        plan = read_plan(self._rendered_plan())
        if skip_reason(plan, context.get("params")) is not None:
            return True
        from cdc_core.changefeed import tasks

        spec = tasks.wait_spec(plan)
        return bool(spec["already_resolved"]) or asyncio.run(_pd_passed(spec["pd_addr"], spec["target_ts"]))

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from cdcflow_airflow.window_tasks import read_plan, skip_reason

        plan = read_plan(self._rendered_plan())
        reason = skip_reason(plan, context.get("params"))
        if reason is not None:
            self.log.info("wait: %s; nothing to wait for", reason)
            return {"skipped": True, "reason": reason}
        from cdc_core.changefeed import tasks

        spec = tasks.wait_spec(plan)
        if spec["already_resolved"]:
            self.log.info("wait: the resolved ts already passed the window end %d", spec["target_ts"])
            return {"skipped": False, "deferred": False, "target_ts": spec["target_ts"]}
        res = asyncio.run(self._wait_inline(spec))
        if res is not None:
            self.log.info("wait: resolved ts %d passed the window end %d (%s) after %.1fs, without deferring",
                          res.resolved_ts, spec["target_ts"], res.how, res.seconds)
            return {"skipped": False, "deferred": False, "target_ts": spec["target_ts"],
                    "resolved_ts": res.resolved_ts, "how": res.how, "seconds": round(res.seconds, 3)}
        self.log.info("wait: deferring until the resolved ts of %d spans passes %d", len(spec["spans"]),
                      spec["target_ts"])
        self.defer(
            trigger=ResolvedTsTrigger(spec["pd_addr"], spec["spans"], spec["target_ts"], poll_s=self.poll_s,
                                      timeout_s=self.timeout),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def _rendered_plan(self) -> Mapping[str, Any]:
        """``plan`` once Airflow rendered it: the plan task's XCom."""
        if not isinstance(self.plan, Mapping):
            raise TypeError(f"wait: the plan was not rendered (got {type(self.plan).__name__})")
        return self.plan

    async def _wait_inline(self, spec: dict[str, Any]) -> WaitResult | None:
        """The wait's result when the window end passes within ``inline_wait``; None when it does not (or is
        further ahead than that, by the upstream's clock: then there is no point in trying)."""
        from cdc_core.codec import tso
        from cdc_core.puller.pd_client import PDClient
        from cdc_core.puller.resolved_wait import wait_resolved

        limit_s = self.inline_wait.total_seconds()
        if limit_s <= 0:
            return None
        pd = PDClient(spec["pd_addr"])
        try:
            now = await pd.get_ts()
        finally:
            await pd.close()
        if tso.physical_ms(spec["target_ts"]) - tso.physical_ms(now) > limit_s * 1000:
            return None
        spans = [(bytes.fromhex(s), bytes.fromhex(e)) for s, e in spec["spans"]]
        try:
            return await wait_resolved(spec["pd_addr"], spans, spec["target_ts"], poll_s=min(self.poll_s, 0.2),
                                       timeout_s=limit_s)
        except TimeoutError:
            return None

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "passed":
            raise AirflowException(f"waiting for the resolved ts failed: {event.get('message') or event}")
        self.log.info("wait: resolved ts %s passed the window end %s (%s) after %ss", event.get("resolved_ts"),
                      event.get("target_ts"), event.get("how"), event.get("seconds"))
        return {"skipped": False, "deferred": True, **event}


async def _pd_passed(pd_addr: str, target_ts: int) -> bool:
    """Whether PD's min resolved ts is at or past ``target_ts`` (one request per member until one answers)."""
    import httpx

    from cdc_core import tls
    from cdc_core.puller.resolved_wait import pd_min_resolved_ts, split_addrs

    async with httpx.AsyncClient(timeout=5.0, verify=tls.httpx_verify()) as http:
        ts = await pd_min_resolved_ts(http, split_addrs(pd_addr))
    return ts is not None and ts >= target_ts
