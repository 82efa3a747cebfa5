"""MVCC garbage collection: the cluster's GC safe point and the passes that remove the versions below it.

``GcWorker`` computes the cluster's GC safe point as TiDB's GC worker does (``pkg/store/gcworker``) -
``min(now - gc_life_time, every live service safe point PD holds)`` (``pd.gc_safe_points``), never moving
backwards - and runs a GC pass over the store's MVCC versions, as TiKV's GC worker does at the safe point
(``src/server/gc_worker``): ``run_once()`` in one go (tests, the admin service), or periodically every
``interval`` seconds in chunks that yield the event loop.
"""

from __future__ import annotations

import asyncio

from cdc_core.codec import tso as tso_codec
from cdc_core.log import get_logger
from cdc_core.upstream.pd.gc_safe_points import GcSafePoints
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.store.loop_task import LoopTask
from cdc_core.upstream.store.mvcc import GcStats, MvccStore

log = get_logger("cdcflow.upstream.gc")

GC_KEYS_PER_STEP = 4096


class GcWorker(LoopTask):
    task_name = "upstream-gc"

    def __init__(self, store: MvccStore, tso: TsoAllocator, services: GcSafePoints, *,
                 life_time: float = 600.0, interval: float = 0.0) -> None:
        self.store = store
        self.tso = tso
        self.services = services
        self.life_time = life_time
        self.interval = interval  # seconds between passes; 0: no periodic GC
        self.last: GcStats | None = None

    def compute_safe_point(self) -> int:
        """``min(now - gc_life_time, live service safe points)``, never below the current one."""
        now_ms, _ = tso_codec.parse(self.tso.next())
        by_life = tso_codec.compose(max(now_ms - int(self.life_time * 1000), 0), 0)
        live = self.services.live()
        sp = min([by_life, *live.values()])
        return max(sp, self.store.safe_point)

    def run_once(self) -> GcStats:
        """One full GC pass now, in one event-loop step."""
        stats = self.store.gc(self.compute_safe_point())
        self.last = stats
        log.info("gc pass", safe_point=stats.safe_point, keys=stats.keys_scanned,
                 versions_removed=stats.versions_removed, keys_removed=stats.keys_removed)
        return stats

    async def run_chunked(self) -> GcStats:
        """One full GC pass in chunks of ``GC_KEYS_PER_STEP`` keys, yielding the loop between them."""
        sp = self.store.advance_safe_point(self.compute_safe_point())
        scanned = removed = keys_removed = 0
        cursor: bytes | None = None
        while True:
            stats, cursor = self.store.gc_step(cursor, GC_KEYS_PER_STEP)
            scanned += stats.keys_scanned
            removed += stats.versions_removed
            keys_removed += stats.keys_removed
            if cursor is None:
                break
            await asyncio.sleep(0)
        self.last = GcStats(sp, scanned, removed, keys_removed)
        return self.last

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                stats = await self.run_chunked()
                log.info("gc pass", safe_point=stats.safe_point, versions_removed=stats.versions_removed)
            except Exception:
                log.error("gc pass failed", exc_info=True)
