"""Wait, asynchronously, until the upstream's resolved ts passes a ts for a set of spans (the deferrable wait).

Three phases, all on the event loop and all cheap while nothing can happen yet:

1. **TSO**: poll PD's ``Tso`` every ``poll_s`` until the clock passes ``target_ts`` — no resolved ts can be
   above the current TSO, so there is nothing to subscribe to before that.
2. **PD's min resolved ts**: poll ``GET /pd/api/v1/min-resolved-ts`` (the minimum over every store of the
   resolved ts of the regions it leads, which TiKV reports to PD every second; what TiDB's stale reads use) until
   it is at or above ``target_ts``: every region of the cluster, and so every span, is resolved there, and no
   region was subscribed. It bounds the spans' resolved ts from below, so it can only be late: a lock held
   anywhere in the cluster, or TiKV's own advance interval, keeps it back. After ``pd_grace_s``, or at once when
   PD does not serve it, phase 3 decides.
3. **Resolved ts of the spans**: subscribe every span from ``target_ts - 1`` with a
   :class:`~cdc_core.puller.subscription_client.SubscriptionClient` (row changes are discarded: the scan only
   covers what committed since ``target_ts``) and wait until each span's resolved ts is at or above
   ``target_ts``. A lock held since before ``target_ts`` keeps it below, as it must.

A ``target_ts`` whose physical time is more than ``settled_after_s`` in the past is reported as passed after
phase 1: re-scanning an old window only to learn what the window's own pull learns anyway is not worth it
(the pull still waits for the resolved ts itself). Used by the Airflow trigger in
``plugins/cdcflow_airflow/triggers.py``; it lives here because it is puller logic.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from cdc_core import tls
from cdc_core.client.pd_addrs import split_addrs
from cdc_core.codec import tso
from cdc_core.puller.matcher import RowChange
from cdc_core.puller.pd_client import PDClient
from cdc_core.puller.subscription_client import SubscriptionClient

__all__ = ["WaitResult", "wait_resolved"]


@dataclass(frozen=True)
class WaitResult:
    resolved_ts: int  # the minimum resolved ts over the spans when it passed (the TSO for a settled target)
    how: str  # "pd" (PD's min resolved ts) | "resolved" (the spans subscribed) | "settled"
    seconds: float


MIN_RESOLVED_TS_PATH = "/pd/api/v1/min-resolved-ts"  # tikv/pd server/api/min_resolved_ts.go


async def pd_min_resolved_ts(http: httpx.AsyncClient, pd_addrs: list[str]) -> int | None:
    """PD's cluster min resolved ts, from the first member that answers (PD forwards the API to its leader);
    None when none does, or the PD has no such API (before v6.x) or answers something else."""
    for addr in pd_addrs:
        try:
            r = await http.get(f"{tls.http_scheme()}://{addr}{MIN_RESOLVED_TS_PATH}")
        except httpx.HTTPError:
            continue
        if r.status_code != 200:
            return None
        try:
            return int(r.json()["min_resolved_ts"])
        except (KeyError, TypeError, ValueError):
            return None
    return None


async def wait_resolved(
    pd_addr: str,
    spans: list[tuple[bytes, bytes]],
    target_ts: int,
    *,
    poll_s: float = 1.0,
    timeout_s: float = 3600.0,
    settled_after_s: float = 60.0,
    pd_grace_s: float = 10.0,
) -> WaitResult:
    """Return once every span's resolved ts is ``>= target_ts``; raise ``TimeoutError`` after ``timeout_s``."""
    started = time.monotonic()
    async with asyncio.timeout(timeout_s):
        pd = PDClient(pd_addr)
        try:
            while (now := await pd.get_ts()) < target_ts:
                await asyncio.sleep(poll_s)
        finally:
            await pd.close()
        if tso.physical_ms(now) - tso.physical_ms(target_ts) > settled_after_s * 1000 or not spans:
            return WaitResult(now, "settled", time.monotonic() - started)

        give_up = time.monotonic() + pd_grace_s
        members = split_addrs(pd_addr)
        async with httpx.AsyncClient(timeout=min(poll_s * 2, 5.0), verify=tls.httpx_verify()) as http:
            while (ts := await pd_min_resolved_ts(http, members)) is not None:
                if ts >= target_ts:
                    return WaitResult(ts, "pd", time.monotonic() - started)
                if time.monotonic() >= give_up:
                    break
                await asyncio.sleep(poll_s)

        def discard(span_id: int, changes: list[RowChange]) -> None:
            pass

        client = SubscriptionClient(pd_addr, on_changes=discard, area="resolved-wait")
        try:
            for i, (start, end) in enumerate(spans):
                await client.subscribe(i, start, end, target_ts - 1)
            while True:
                client.check()
                lowest = min(client.span_resolved_ts(i) for i in range(len(spans)))
                if lowest >= target_ts:
                    return WaitResult(lowest, "resolved", time.monotonic() - started)
                client.progress.clear()
                try:
                    await asyncio.wait_for(client.progress.wait(), timeout=poll_s)
                except TimeoutError:
                    pass
        finally:
            await client.close()
