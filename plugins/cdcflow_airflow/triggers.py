"""Triggers of the cdcflow provider (they run in Airflow's triggerer, which imports plugins, not DAG folders).

:class:`ResolvedTsTrigger` fires once the upstream's resolved ts of a window's spans passes the window end
(:func:`cdc_core.puller.resolved_wait.wait_resolved`: PD TSO polled, then PD's min resolved ts, the spans
subscribed only when that lags; all asyncio, nothing blocks the triggerer's loop). Its event payload:
``{"status": "passed" | "timeout" | "error", "target_ts", "resolved_ts", "how", "seconds", "message"}``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class ResolvedTsTrigger(BaseTrigger):
    def __init__(
        self,
        pd_addr: str,
        spans: list[list[str]],
        target_ts: int,
        poll_s: float = 1.0,
        timeout_s: float = 3600.0,
    ) -> None:
        super().__init__()
        self.pd_addr = pd_addr
        self.spans = [[str(s), str(e)] for s, e in spans]
        self.target_ts = int(target_ts)
        self.poll_s = float(poll_s)
        self.timeout_s = float(timeout_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"pd_addr": self.pd_addr, "spans": self.spans, "target_ts": self.target_ts, "poll_s": self.poll_s,
             "timeout_s": self.timeout_s},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from cdc_core.puller.resolved_wait import wait_resolved

        base: dict[str, Any] = {"target_ts": self.target_ts}
        spans = [(bytes.fromhex(s), bytes.fromhex(e)) for s, e in self.spans]
        try:
            res = await wait_resolved(self.pd_addr, spans, self.target_ts, poll_s=self.poll_s,
                                      timeout_s=self.timeout_s)
        except TimeoutError:
            yield TriggerEvent({**base, "status": "timeout",
                                "message": f"the resolved ts did not pass {self.target_ts} in {self.timeout_s:g}s"})
            return
        except Exception as exc:  # reported to the task, which fails with it
            yield TriggerEvent({**base, "status": "error", "message": f"{type(exc).__name__}: {exc}"})
            return
        self.log.info("resolved ts %d passed the window end %d (%s) after %.1fs", res.resolved_ts,
                      self.target_ts, res.how, res.seconds)
        yield TriggerEvent({**base, "status": "passed", "resolved_ts": res.resolved_ts, "how": res.how,
                            "seconds": round(res.seconds, 3)})
