"""Operators of the cdcflow provider.

:class:`ResolvedTsSensor` is the DAG's ``wait`` task: between ``plan`` and ``pull`` it waits, deferred, until
the upstream's resolved ts passes the window end, so no worker slot is held while the window is still open
(e.g. a UI trigger whose ``target_ts`` is ahead of now). It returns at once when the plan skips the window or
a pull already saw the resolved ts past it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from cdcflow_airflow.triggers import ResolvedTsTrigger

# How long a window may stay open (its end ahead of the resolved ts) before the wait fails.
WAIT_TIMEOUT = timedelta(hours=1)


class ResolvedTsSensor(BaseOperator):
    template_fields = ("plan",)
    ui_color = "#e8f4fa"

    def __init__(self, *, plan: Any, poll_s: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.poll_s = poll_s

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from cdcflow_airflow.dag_factory import skip_reason

        plan = self.plan
        reason = skip_reason(plan, context.get("params"))
        if reason is not None:
            self.log.info("wait: %s; nothing to wait for", reason)
            return {"skipped": True, "reason": reason}
        from cdc_core.changefeed import tasks

        spec = tasks.wait_spec(plan)
        if spec["already_resolved"]:
            self.log.info("wait: the resolved ts already passed the window end %d", spec["target_ts"])
            return {"skipped": False, "deferred": False, "target_ts": spec["target_ts"]}
        self.log.info("wait: deferring until the resolved ts of %d spans passes %d", len(spec["spans"]),
                      spec["target_ts"])
        self.defer(
            trigger=ResolvedTsTrigger(spec["pd_addr"], spec["spans"], spec["target_ts"], poll_s=self.poll_s,
                                      timeout_s=WAIT_TIMEOUT.total_seconds()),
            method_name="execute_complete",
            timeout=WAIT_TIMEOUT,
        )

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "passed":
            raise AirflowException(f"waiting for the resolved ts failed: {event.get('message') or event}")
        self.log.info("wait: resolved ts %s passed the window end %s (%s) after %ss", event.get("resolved_ts"),
                      event.get("target_ts"), event.get("how"), event.get("seconds"))
        return {"skipped": False, "deferred": True, **event}
