"""The stores' min resolved ts reports to PD: each up store's minimum resolved ts over the regions it leads.

As TiKV does every ``raftstore.report-min-resolved-ts-interval`` (1 s; ``components/resolved_ts/src/advance.rs``
``report_min_resolved_ts``, sent as ``pdpb.ReportMinResolvedTS``): a region's resolved ts is the stand-in's rule for
the change feed too (``cdc_service.CdcService.resolved_batches``): the TSO, or the start ts of the oldest lock in
the region when that is lower. PD keeps the reports (``pd.min_resolved_ts``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cdc_core.log import get_logger
from cdc_core.upstream.pd.min_resolved_ts import MinResolvedTs
from cdc_core.upstream.pd.regions import RegionManager
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.store.loop_task import LoopTask
from cdc_core.upstream.store.mvcc import MvccStore

log = get_logger("cdcflow.upstream.min_resolved_ts")

REPORT_INTERVAL_S = 1.0  # TiKV's raftstore.report-min-resolved-ts-interval


def stores_min_resolved_ts(store: MvccStore, regions: RegionManager, store_ids: list[int], now: int
                           ) -> dict[int, int]:
    """Each store's minimum resolved ts over the regions it leads at TSO ``now``: ``now``, or the start ts of the
    oldest lock in a region it leads. Walks the locks, not the regions (a cluster may hold many regions and few
    locks): O(locks x log regions)."""
    out = dict.fromkeys(store_ids, now)
    for lk in store.locks_in(b"", b""):
        leader = regions.locate(lk.key).leader_store_id
        if leader in out and lk.start_ts < out[leader]:
            out[leader] = lk.start_ts
    return out


class Reporter(LoopTask):
    """Each up store's report to PD, every ``interval`` seconds, on the cluster's event loop."""

    task_name = "min-resolved-ts-reporter"

    def __init__(self, store: MvccStore, regions: RegionManager, tso: TsoAllocator, state: MinResolvedTs,
                 up_stores: Callable[[], list[int]], interval: float = REPORT_INTERVAL_S) -> None:
        self.store, self.regions, self.tso, self.state = store, regions, tso, state
        self.up_stores = up_stores
        self.interval = interval

    def report_once(self) -> None:
        now = self.tso.next()
        # A resolved ts promised to PD, like the change feed's: no async-commit or 1PC commit may go at or below it
        # (tikv components/resolved_ts/src/advance.rs: ``cm.update_max_ts(min_ts)``).
        self.store.update_max_ts(now)
        for sid, ts in stores_min_resolved_ts(self.store, self.regions, self.up_stores(), now).items():
            self.state.report(sid, ts)

    async def _loop(self) -> None:
        while True:
            try:
                self.report_once()
            except Exception:  # a report that fails is retried at the next tick, as TiKV's is
                log.warning("min resolved ts report failed", exc_info=True)
            await asyncio.sleep(self.interval)

