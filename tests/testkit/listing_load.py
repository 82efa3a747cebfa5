"""The listing load scenario of issue 5, on TiDB's interface: one schema of N tables, concurrent listings of it
through ``information_schema.TABLES`` while tables are created.

Used by ``upstream/test_table_listing.py`` (100,000 tables, every run) and ``bench/test_listing_load_bench.py``
(1,000,000 tables). Server (``upstream-catalog``) and client (``table-discovery``) limiters run with the
seed's defaults. Tracked memory is observed two ways: exactly, by an observer that reads a semaphore's
``used`` every time a permit is granted (the only moment it grows), and by sampling every semaphore's
``used`` on its own loop every 5 ms. Process RSS is sampled from ``/proc/self/status`` every 10 ms.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from cdc_core.client.table_discovery import TableDiscovery, TableDiscoveryError
from cdc_core.client.tidb_sql import TidbAddress
from cdc_core.client.upstream import UpstreamClient
from cdc_core.memory import AsyncSemaphore, MemoryLimitConfig, MemoryLimitExceeded
from cdc_core.schema.model import Column
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster

SCHEMA = "catalog_load"
MIB = 1024 * 1024


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class PeakObserver:
    """Wraps a semaphore's observer; records ``used`` whenever a permit is granted (when it can grow)."""

    def __init__(self, semaphore: AsyncSemaphore) -> None:
        self.semaphore = semaphore
        self.inner = semaphore.observer
        self.peak = semaphore.used
        self.grants = 0
        semaphore.observer = self

    def on_granted(self, waited_s: float) -> None:
        self.peak = max(self.peak, self.semaphore.used)
        self.grants += 1
        if self.inner is not None:
            self.inner.on_granted(waited_s)

    def on_timeout(self) -> None:
        if self.inner is not None:
            self.inner.on_timeout()

    def on_rejected(self, reason: str) -> None:
        if self.inner is not None:
            self.inner.on_rejected(reason)


class Sampler:
    """Samples ``used`` of semaphores on their loop every ``period`` seconds."""

    def __init__(self, semaphores: dict[str, AsyncSemaphore], period: float = 0.005) -> None:
        self.semaphores = semaphores
        self.period = period
        self.peak = dict.fromkeys(semaphores, 0)
        self.samples = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            for name, sem in self.semaphores.items():
                self.peak[name] = max(self.peak[name], sem.used)
            self.samples += 1
            try:
                await asyncio.wait_for(self._stop.wait(), self.period)
            except TimeoutError:
                pass

    def stop(self) -> None:
        self._stop.set()


class RssSampler(threading.Thread):
    def __init__(self, period: float = 0.01) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.period = period
        self.peak = rss_bytes()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.period):
            self.peak = max(self.peak, rss_bytes())

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.peak = max(self.peak, rss_bytes())


@dataclass
class LoadResult:
    tables: int
    create_s: float = 0.0
    run_s: float = 0.0
    baseline_rss: int = 0
    peak_rss: int = 0
    listing_bytes: int = 0  # one listing's row packets on the wire
    server_peak: dict[str, int] = field(default_factory=dict)  # exact, by observer
    server_sampled: dict[str, int] = field(default_factory=dict)
    client_peak: dict[str, int] = field(default_factory=dict)
    client_sampled: dict[str, int] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)
    lists_ok: int = 0
    lists_refused: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # any outcome that is neither success nor the clear error
    added: set[str] = field(default_factory=set)

    def summary(self) -> str:
        return (f"{self.tables} tables: create {self.create_s:.1f}s, run {self.run_s:.1f}s; "
                f"one listing {self.listing_bytes / MIB:.1f} MiB on the wire; "
                f"server peak heap {self.server_peak['heap']} / direct {self.server_peak['direct']} bytes "
                f"(sampled {self.server_sampled['heap']} / {self.server_sampled['direct']}); "
                f"client peak heap {self.client_peak['heap']} / direct {self.client_peak['direct']} bytes; "
                f"RSS baseline {self.baseline_rss / MIB:.0f} MiB, peak {self.peak_rss / MIB:.0f} MiB "
                f"(+{(self.peak_rss - self.baseline_rss) / MIB:.0f} MiB); "
                f"lists ok {self.lists_ok} refused {len(self.lists_refused)}")


def _clear_error(text: str, limiter: str) -> bool:
    return limiter in text and "limit" in text and "bytes" in text


async def _client_load(addresses: list[TidbAddress], n_tables: int, n_lists: int, add_tables: Any,
                       res: LoadResult) -> None:
    discovery = TableDiscovery(addresses, MemoryLimitConfig(), registry=CollectorRegistry())
    lim = discovery.limiter
    observers = {"heap": PeakObserver(lim.heap), "direct": PeakObserver(lim.direct)}
    sampler = Sampler({"heap": lim.heap, "direct": lim.direct})
    sampling = asyncio.create_task(sampler.run())
    # As a changefeed's filter does, keep one table in ten (the rows of all of them are read and decoded).
    expected = {f"table_{i:07d}" for i in range(0, n_tables, 10)}

    def keep(schema: str, name: str) -> bool:
        return name.endswith("0")

    async def one_list() -> None:
        try:
            listed = await discovery.list_tables(SCHEMA, keep=keep)
            names = {t.name for t in listed}
            # Tables are created while the listings run: each listing has the N tables and some of the new ones.
            if len(names) == len(listed) and names - res.added == expected:
                res.lists_ok += 1
            else:
                res.wrong.append(f"listing of {len(listed)} tables ({len(names)} names)")
        except TableDiscoveryError as exc:
            ok = exc.code == 8175 and _clear_error(str(exc), "upstream-catalog")
            (res.lists_refused if ok else res.wrong).append(str(exc))
        except MemoryLimitExceeded as exc:
            (res.lists_refused if _clear_error(str(exc), "table-discovery") else res.wrong).append(str(exc))

    try:
        await asyncio.wait_for(asyncio.gather(*(one_list() for _ in range(n_lists)),
                                              asyncio.to_thread(add_tables)), 900)
    finally:
        sampler.stop()
        await sampling
    res.client_peak = {k: o.peak for k, o in observers.items()}
    res.client_sampled = sampler.peak


def run_listing_load(n_tables: int, n_lists: int = 20) -> LoadResult:
    res = LoadResult(n_tables)
    cfg = ClusterConfig(catalog_memory=MemoryLimitConfig(), metrics_registry=CollectorRegistry())
    ec = EmbeddedCluster(cfg).start()
    try:
        assert ec.cluster is not None
        listing = ec.cluster.table_listing
        with UpstreamClient(ec.pd_addr) as up:
            up.execute(f"CREATE DATABASE {SCHEMA}")
            started = time.monotonic()
            ec.call(lambda: ec.cluster.catalog.bulk_create_tables(  # type: ignore[union-attr]
                SCHEMA, (f"table_{i:07d}" for i in range(n_tables)), (Column(1, "id", "bigint", nullable=False),)),
                timeout=600)
            res.create_s = time.monotonic() - started
            res.listing_bytes = sum(4 + 1 + len(str(t.id)) + 1 + len(SCHEMA) + 1 + len(t.name)
                                    for t in ec.call(lambda: ec.cluster.catalog.tables(SCHEMA)))  # type: ignore[union-attr]
            names = ["added_during_load_10", "added_during_load_20"]

            def add_tables() -> None:
                for name in names:
                    res.added.add(name)
                    up.execute(f"CREATE TABLE {SCHEMA}.{name} (id BIGINT PRIMARY KEY)")

            lim = listing.limiter
            res.limits = {"heap": lim.heap.limit, "direct": lim.direct.limit}
            server_obs = ec.call(lambda: {"heap": PeakObserver(lim.heap), "direct": PeakObserver(lim.direct)})
            server_sampler = Sampler({"heap": lim.heap, "direct": lim.direct})
            sampling = asyncio.run_coroutine_threadsafe(server_sampler.run(), ec.loop)
            gc.collect()
            res.baseline_rss = rss_bytes()
            rss = RssSampler()
            rss.start()
            started = time.monotonic()
            try:
                asyncio.run(_client_load(up.sql_addresses(), n_tables, n_lists, add_tables, res))
            finally:
                res.run_s = time.monotonic() - started
                rss.stop()
                ec.loop.call_soon_threadsafe(server_sampler.stop)
                sampling.result(30)
            res.peak_rss = rss.peak
            res.server_peak = {k: o.peak for k, o in server_obs.items()}
            res.server_sampled = server_sampler.peak
    finally:
        ec.stop()
    return res
