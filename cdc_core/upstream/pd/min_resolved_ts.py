"""The cluster's min resolved ts as PD keeps it: the last report of each store, and what PD answers for the cluster.

TiKV computes, every ``raftstore.report-min-resolved-ts-interval`` (1 s), the minimum resolved ts of the regions
its store leads and sends it to PD (``pdpb.ReportMinResolvedTS``: store id, ts); PD keeps the minimum over the
stores and answers it on its HTTP API, ``GET /pd/api/v1/min-resolved-ts`` (tikv/pd
``server/api/min_resolved_ts.go``: ``{"is_real_time", "min_resolved_ts", "persist_interval"}``), which TiDB's
stale reads use. A region's resolved ts here is the stand-in's rule for the change feed too
(``cdc_service.CdcService.resolved_batches``): the TSO, or the start ts of the oldest lock in the region when
that is lower. A store that has not reported yet, or whose report went stale, holds the cluster's value at 0
(nothing is known to be resolved), as PD does until every store has reported. The stores' side, what they compute
and report, is ``store.resolved_ts_reporter``.
"""

from __future__ import annotations


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
