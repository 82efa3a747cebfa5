"""A cluster on a background thread with its own event loop (tests and in-process use).

``EmbeddedCluster(config).start()`` returns once every server serves; ``call(fn)`` runs a plain
function on the cluster's loop (to inspect or poke its state safely); ``faults`` is the cluster's
``FaultInjector`` with every method run that way (``ec.faults.transfer_leader(rid, 2)``);
``stop()`` shuts it down.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from cdc_core.upstream.cluster import Cluster, ClusterConfig
from cdc_core.upstream.faults import FaultInjector

T = TypeVar("T")


class EmbeddedCluster:
    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config or ClusterConfig()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cdcflow-upstream", daemon=True)
        self.cluster: Cluster | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def start(self, timeout: float = 30.0) -> EmbeddedCluster:
        self._thread.start()

        async def boot() -> Cluster:
            c = Cluster(self.config)
            await c.start()
            return c

        self.cluster = self.run(boot(), timeout)
        return self

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run a coroutine on the cluster's loop and wait for its result."""
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run ``fn`` on the cluster's loop (one step: atomic with respect to the cluster)."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper(), timeout)

    @property
    def pd_addr(self) -> str:
        assert self.cluster is not None, "cluster not started"
        return self.cluster.pd_addr

    @property
    def control_addr(self) -> str:
        """The control service's address ("" unless the config asked for one)."""
        assert self.cluster is not None, "cluster not started"
        return self.cluster.control_addr

    @property
    def mysql_addr(self) -> str:
        """The SQL front's MySQL-protocol address ("" when not served)."""
        assert self.cluster is not None, "cluster not started"
        return self.cluster.mysql_addr

    @property
    def store_addr(self) -> str:
        """The first store's address."""
        assert self.cluster is not None, "cluster not started"
        return self.cluster.store_addrs[0]

    @property
    def store_addrs(self) -> list[str]:
        assert self.cluster is not None, "cluster not started"
        return list(self.cluster.store_addrs)

    @property
    def faults(self) -> FaultInjector:
        """The fault injector, each method call run on the cluster's loop."""
        assert self.cluster is not None, "cluster not started"
        return _OnLoop(self, self.cluster.faults)  # type: ignore[return-value]

    def stop(self, timeout: float = 30.0) -> None:
        if self.cluster is not None:
            self.run(self.cluster.stop(), timeout)
            self.cluster = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _OnLoop:
    """Proxy: calling a method of the wrapped object runs it on the cluster's loop."""

    def __init__(self, ec: EmbeddedCluster, target: object) -> None:
        self._ec = ec
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr
        return lambda *a, **kw: self._ec.call(lambda: attr(*a, **kw))
