"""A background task of the embedded upstream: one coroutine on the cluster's event loop, started once and
cancelled on stop (the periodic GC worker, the stores' min resolved ts reports)."""

from __future__ import annotations

import asyncio
import contextlib


class LoopTask:
    """Subclasses set ``interval`` (seconds; 0: never started) and write :meth:`_loop`."""

    interval: float = 0.0
    task_name = "upstream-task"
    _task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        if self.interval > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
