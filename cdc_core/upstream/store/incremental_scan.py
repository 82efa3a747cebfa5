"""What an incremental scan costs a store, charged as TiKV's CDC endpoint charges it, and counted as TiKV counts it.

The embedded MVCC store answers "every version after the checkpoint in this range" from an index by commit ts, in
time proportional to what it returns. A TiKV store does not: every region registration is an incremental scan
(``components/cdc/src/initializer.rs``) that

- waits for one of ``cdc.incremental-scan-concurrency`` permits (6 per store; ``Initializer::initialize`` takes the
  permit before its snapshot), so registrations past them queue -- and past
  ``cdc.incremental-scan-concurrency-limit`` pending ones (10,000) get ``server_is_busy`` (``cdc_service``);
- reads the region from disk through RocksDB: the whole write CF of the range, unless the "ts filter" helps
  (``ts_filter_is_helpful``: when the versions newer than the checkpoint are at most
  ``cdc.incremental-scan-ts-filter-ratio`` (0.2) of the range's, only the SST files holding them are read);
- pays for every byte it read through ``cdc.incremental-scan-speed-limit`` (128 MiB/s per store; ``scan_batch``:
  ``scan_speed_limiter.consume(disk_read)``).

:class:`ScanGate` is that per store: the permits, the speed limiter and the counters TiKV exports
(``components/cdc/src/metrics.rs``): ``tikv_cdc_scan_tasks{type="total"|"ongoing"|"finish"|"abort"}`` (``total``
counts every scan task spawned, ``endpoint.rs`` ``on_register``) and ``tikv_cdc_scan_disk_read_bytes_total``. What a
region "reads" is estimated from a sample of its keys (TiKV estimates from SST properties,
``approximate_size_and_keys``): :meth:`cdc_core.upstream.store.mvcc.MvccStore.approximate_range_size`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

# TiKV's CdcConfig defaults (src/config/mod.rs)
INCREMENTAL_SCAN_CONCURRENCY = 6
INCREMENTAL_SCAN_SPEED_LIMIT = 128 * 1024 * 1024  # bytes/s
INCREMENTAL_SCAN_TS_FILTER_RATIO = 0.2
# A limiter's debt below this is not slept off at once (the next consume carries it): a sleep per 512-key step of
# a small region would cost more loop turns than the limit is meant to model.
_MIN_DELAY_S = 0.005


@dataclass(frozen=True)
class ScanCosts:
    """A store's incremental-scan settings (``cdcflow upstream start --incremental-scan-*``)."""

    concurrency: int = INCREMENTAL_SCAN_CONCURRENCY
    speed_limit_bytes: int = INCREMENTAL_SCAN_SPEED_LIMIT  # per second; 0: unlimited
    ts_filter_ratio: float = INCREMENTAL_SCAN_TS_FILTER_RATIO  # 0: the ts filter is never used

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"incremental-scan-concurrency must be >= 1, got {self.concurrency}")
        if self.speed_limit_bytes < 0:
            raise ValueError(f"incremental-scan-speed-limit must be >= 0 (0: unlimited), got {self.speed_limit_bytes}")
        if not 0.0 <= self.ts_filter_ratio <= 1.0:
            raise ValueError(f"incremental-scan-ts-filter-ratio must be in [0, 1], got {self.ts_filter_ratio}")


class SpeedLimiter:
    """Bytes per second, as TiKV's ``tikv_util::time::Limiter`` (the ``async-speed-limit`` crate): ``consume(n)``
    takes ``n`` bytes at once and then waits until the limiter's clock has paid them off, so a caller never runs
    ahead of ``rate`` by more than one call's bytes. Shared by a store's scans: they queue behind one clock."""

    def __init__(self, rate: int) -> None:
        self.rate = rate  # 0: unlimited
        self._free_at = 0.0  # monotonic time at which every byte consumed so far is paid for

    def delay_for(self, n: int, now: float) -> float:
        """Charge ``n`` bytes at ``now``; the seconds the caller must wait. O(1)."""
        if self.rate <= 0 or n <= 0:
            return 0.0
        self._free_at = max(self._free_at, now) + n / self.rate
        return self._free_at - now

    async def consume(self, n: int) -> None:
        delay = self.delay_for(n, time.monotonic())
        if delay >= _MIN_DELAY_S:
            await asyncio.sleep(delay)


class ScanGate:
    """One store's incremental scans: ``spawned()`` when a registration's scan task is created, ``async with
    permit()`` around the scan itself (at most ``costs.concurrency`` at once, the others wait in FIFO order), and
    ``charge(bytes)`` for what each step read. Counters and gauges go to ``registry`` under TiKV's metric names."""

    def __init__(self, costs: ScanCosts, registry: CollectorRegistry | None = None) -> None:
        self.costs = costs
        self.limiter = SpeedLimiter(costs.speed_limit_bytes)
        self._permits = asyncio.Semaphore(costs.concurrency)
        self.registry = registry or CollectorRegistry()
        self._tasks = Gauge("tikv_cdc_scan_tasks", "Total number of CDC incremental scan tasks", ["type"],
                            registry=self.registry)
        self._disk_read = Counter("tikv_cdc_scan_disk_read_bytes", "Total disk read bytes of CDC incremental scan",
                                  registry=self.registry)
        self.started = 0  # scan tasks spawned since the store started (TiKV's type="total")
        self.ongoing = 0
        self.bytes_read = 0

    def spawned(self) -> None:
        self.started += 1
        self._tasks.labels("total").inc()

    def ended(self, *, ok: bool) -> None:
        self._tasks.labels("finish" if ok else "abort").inc()

    @asynccontextmanager
    async def permit(self) -> AsyncIterator[None]:
        async with self._permits:
            self.ongoing += 1
            self._tasks.labels("ongoing").inc()
            try:
                yield
            finally:
                self.ongoing -= 1
                self._tasks.labels("ongoing").dec()

    async def charge(self, n: int) -> None:
        """``n`` bytes read from "disk": counted, then paid for through the speed limit."""
        if n <= 0:
            return
        self.bytes_read += n
        self._disk_read.inc(n)
        await self.limiter.consume(n)

    def disk_read(self, region_bytes: int, newer_bytes: int) -> int:
        """What a scan of a range holding ``region_bytes``, ``newer_bytes`` of them newer than the checkpoint, reads:
        only the newer versions when the ts filter helps (they are at most ``ts_filter_ratio`` of the range), else
        the whole range (``initializer.rs`` ``ts_filter_is_helpful``)."""
        if self.costs.ts_filter_ratio > 0 and newer_bytes <= region_bytes * self.costs.ts_filter_ratio:
            return newer_bytes
        return max(region_bytes, newer_bytes)
