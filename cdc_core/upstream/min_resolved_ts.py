"""The cluster's min resolved ts: what each store reports to PD and what PD answers for the cluster.

TiKV computes, every ``raftstore.report-min-resolved-ts-interval`` (1 s), the minimum resolved ts of the regions
its store leads and sends it to PD (``pdpb.ReportMinResolvedTS``: store id, ts); PD keeps the minimum over the
stores and answers it on its HTTP API, ``GET /pd/api/v1/min-resolved-ts`` (tikv/pd
``server/api/min_resolved_ts.go``: ``{"is_real_time", "min_resolved_ts", "persist_interval"}``), which TiDB's
stale reads use. A region's resolved ts here is the stand-in's rule for the change feed too
(``cdc_service.CdcService.resolved_batches``): the TSO, or the start ts of the oldest lock in the region when
that is lower. A store that has not reported yet, or whose report went stale, holds the cluster's value at 0
(nothing is known to be resolved), as PD does until every store has reported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cdc_core.log import get_logger
from cdc_core.upstream.loop_task import LoopTask
from cdc_core.upstream.mvcc import MvccStore
from cdc_core.upstream.regions import RegionManager
from cdc_core.upstream.tso import TsoAllocator

log = get_logger("cdcflow.upstream.min_resolved_ts")

REPORT_INTERVAL_S = 1.0  # TiKV's raftstore.report-min-resolved-ts-interval


class MinResolvedTs:
    """PD's view: the last min resolved ts each store reported."""

    def __init__(self) -> None:
        self._by_store: dict[int, int] = {}

    def report(self, store_id: int, ts: int) -> None:
        # A store's value never goes back (a report delayed behind a newer one does not lower it).
        self._by_store[store_id] = max(ts, self._by_store.get(store_id, 0))

    def forget(self, store_id: int) -> None:
        self._by_store.pop(store_id, None)

    def cluster(self, store_ids: list[int]) -> int:
        """The minimum over ``store_ids`` (the stores that are up); 0 when one of them has not reported."""
        if not store_ids or any(s not in self._by_store for s in store_ids):
            return 0
        return min(self._by_store[s] for s in store_ids)


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

