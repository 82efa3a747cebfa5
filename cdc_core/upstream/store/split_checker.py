"""Automatic region split (TiKV's split checker): split a region that passes a key-count or size limit.

An MVCC observer counts the keys and bytes committed into each region; once a region has taken
more writes than a limit since it was last checked, a check is scheduled on the event loop (not
inside the commit, whose observers are still being called): it counts the region's live keys and
their bytes and, when either passes its limit, splits the region at its middle key. Off when both
limits are 0 (the default in tests).
"""

from __future__ import annotations

import asyncio

from cdc_core.log import get_logger
from cdc_core.upstream.pd.regions import RegionChange, RegionManager
from cdc_core.upstream.store.mvcc import Lock, MvccStore, VersionRecord

log = get_logger("cdcflow.upstream.split")


class SplitChecker:
    def __init__(self, store: MvccStore, regions: RegionManager, *, max_keys: int = 0, max_bytes: int = 0) -> None:
        self.store = store
        self.regions = regions
        self.max_keys = max_keys
        self.max_bytes = max_bytes
        self._written: dict[int, list[int]] = {}  # region id -> [keys, bytes] written since last check
        self._scheduled: set[int] = set()
        self.splits = 0
        if self.enabled:
            store.add_observer(self)
            regions.add_observer(self._on_region_change)

    @property
    def enabled(self) -> bool:
        return self.max_keys > 0 or self.max_bytes > 0

    # --- MVCC observer ------------------------------------------------------------------------
    def on_prewrite(self, lock: Lock) -> None:
        pass

    def on_rollback(self, lock: Lock) -> None:
        pass

    def on_commit(self, rec: VersionRecord) -> None:
        region = self.regions.locate(rec.key)
        w = self._written.setdefault(region.id, [0, 0])
        w[0] += 1
        w[1] += len(rec.key) + len(rec.value or b"")
        over = (self.max_keys and w[0] >= self.max_keys) or (self.max_bytes and w[1] >= self.max_bytes)
        if over and region.id not in self._scheduled:
            self._scheduled.add(region.id)
            asyncio.get_running_loop().call_soon(self.check, region.id)

    def _on_region_change(self, ch: RegionChange) -> None:
        for r in ch.before:
            self._written.pop(r.id, None)

    # --- the check ----------------------------------------------------------------------------
    def check(self, region_id: int) -> bool:
        """Split the region at its middle key if it is over a limit; whether it was split."""
        self._scheduled.discard(region_id)
        self._written.pop(region_id, None)
        region = self.regions.get(region_id)
        if region is None:
            return False
        keys, size, middle = self.store.range_stats(region.start_key, region.end_key)
        over = (self.max_keys and keys > self.max_keys) or (self.max_bytes and size > self.max_bytes)
        if not over or middle is None or middle == region.start_key:
            return False
        self.regions.split([middle])
        self.splits += 1
        log.info("region split by size", region_id=region_id, keys=keys, bytes=size)
        return True
