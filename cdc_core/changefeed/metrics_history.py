"""Per-changefeed observations kept for the UI: the lag history and the puller's memory use in the last pull.

``$CDCFLOW_HOME/state/<id>/metrics.json`` (beside the schema log, so ``changefeed remove`` deletes it too),
replaced atomically under an exclusive lock, never part of ``ChangefeedState`` (whose loader rejects unknown
keys)::

    {"lag_history": [{"at", "checkpoint_ts", "resolved_ts", "lag_s"}, ...],   # oldest first, bounded
     "pull_memory": {"peak_pending_bytes", "max_pending_bytes", "paused", "samples", "seconds", "at"} | null,
     "task_seconds": {"pull" | "apply" | "check" | "publish": {"seconds", "ok", "at"}}}   # the last of each

* :func:`record_publish` appends one lag point (``lag_s`` = wall clock at publish - the checkpoint's physical
  time) each time a window is published.
* :func:`records_pull_memory` (a decorator for the pull step) samples the puller's event-stream gauges
  (``cdcflow_puller_stream_pending_bytes`` / ``_max_pending_bytes`` / ``_paused``, the same figures Prometheus
  scrapes) every :data:`SAMPLE_INTERVAL_S` on a background thread while the pull runs, and records the peak.
  It is a sampled peak: a burst shorter than the interval can be missed.
* :func:`records_duration` (a decorator for the window's steps) records how long the step's last run took and
  whether it succeeded: the metrics endpoint's "window duration by task".
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from cdc_core import durable
from cdc_core.changefeed import file_lock
from cdc_core.changefeed.window_plan import WindowPlan
from cdc_core.codec import tso
from cdc_core.home import state_dir
from cdc_core.log import get_logger

log = get_logger("cdcflow.changefeed.metrics")

MAX_HISTORY = 2000  # lag points kept per changefeed (about a week of 5-minute windows)
SAMPLE_INTERVAL_S = 0.02

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class LagPoint:
    at: float  # Unix time of the observation
    checkpoint_ts: int
    resolved_ts: int
    lag_s: float  # at - physical time of checkpoint_ts


@dataclass(frozen=True)
class PullMemory:
    peak_pending_bytes: int
    max_pending_bytes: int  # the area's quota ([puller] max-pending-bytes); 0 when no pull was observed
    paused: bool  # the area reached its pause threshold at some sample
    samples: int
    seconds: float
    at: float  # Unix time the pull ended

    @property
    def peak_ratio(self) -> float:
        return self.peak_pending_bytes / self.max_pending_bytes if self.max_pending_bytes else 0.0


def metrics_path(changefeed_id: str) -> Path:
    return state_dir() / changefeed_id / "metrics.json"


def load_metrics(changefeed_id: str) -> dict[str, Any]:
    """The changefeed's recorded metrics; empty ones when nothing was recorded (or the file is unreadable)."""
    try:
        data = json.loads(metrics_path(changefeed_id).read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    history = data.get("lag_history")
    tasks = data.get("task_seconds")
    return {"lag_history": history if isinstance(history, list) else [], "pull_memory": data.get("pull_memory"),
            "task_seconds": tasks if isinstance(tasks, dict) else {}}


def task_seconds(changefeed_id: str) -> dict[str, dict[str, Any]]:
    """The last run of each window step: ``{step: {"seconds", "ok", "at"}}``."""
    return {k: v for k, v in load_metrics(changefeed_id)["task_seconds"].items() if isinstance(v, dict)}


def lag_history(changefeed_id: str) -> list[LagPoint]:
    out = []
    for p in load_metrics(changefeed_id)["lag_history"]:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            out.append(LagPoint(float(p["at"]), int(p["checkpoint_ts"]), int(p["resolved_ts"]), float(p["lag_s"])))
    return out


def last_pull_memory(changefeed_id: str) -> PullMemory | None:
    m = load_metrics(changefeed_id)["pull_memory"]
    try:
        return PullMemory(**m) if isinstance(m, dict) else None
    except TypeError:
        return None


@contextlib.contextmanager
def _updating(changefeed_id: str) -> Iterator[dict[str, Any]]:
    """Load, yield for modification and save the metrics file under an exclusive lock."""
    p = metrics_path(changefeed_id)
    with file_lock.exclusive(p.with_suffix(".lock")):
        data = load_metrics(changefeed_id)
        yield data
        durable.write_file(p, json.dumps(data, sort_keys=True))


def lag_seconds(checkpoint_ts: int, now: float | None = None) -> float:
    """Wall clock minus the checkpoint's physical time, in seconds (0 for an unset checkpoint)."""
    if checkpoint_ts <= 0:
        return 0.0
    now = time.time() if now is None else now
    return round(now - tso.physical_ms(checkpoint_ts) / 1000.0, 3)


def record_publish(changefeed_id: str, *, now: float | None = None) -> LagPoint:
    """Append the changefeed's current checkpoint and resolved ts (from its state) to its lag history."""
    from cdc_core.changefeed.state import load_state

    st = load_state(changefeed_id)
    now = time.time() if now is None else now
    point = LagPoint(round(now, 3), st.checkpoint_ts, st.resolved_ts, lag_seconds(st.checkpoint_ts, now))
    with _updating(changefeed_id) as data:
        data["lag_history"] = [*data["lag_history"], asdict(point)][-MAX_HISTORY:]
    return point


def record_pull_memory(changefeed_id: str, memory: PullMemory) -> None:
    with _updating(changefeed_id) as data:
        data["pull_memory"] = asdict(memory)
    log.info("puller memory of the pull", changefeed_id=changefeed_id, **asdict(memory))


class PullMemorySampler:
    """Samples the puller's event-stream gauges on a daemon thread between ``start()`` and ``stop()``."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S, registry: Any = None) -> None:
        self.interval_s = interval_s
        self._registry = registry
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._peak = self._quota = self._samples = 0
        self._paused = False
        self._started = 0.0

    def _sample(self) -> None:
        from cdc_core.puller.event_stream import StreamMetrics

        m = StreamMetrics.for_registry(self._registry)
        pending = [s.value for fam in m.pending.collect() for s in fam.samples]
        quota = [s.value for fam in m.max_pending.collect() for s in fam.samples]
        paused = [s.value for fam in m.paused.collect() for s in fam.samples]
        self._peak = max(self._peak, int(max(pending, default=0)))
        self._quota = max(self._quota, int(max(quota, default=0)))
        self._paused = self._paused or any(v > 0 for v in paused)
        self._samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> PullMemorySampler:
        self._started = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="cdcflow-pull-memory", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> PullMemory:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        return PullMemory(self._peak, self._quota, self._paused, self._samples,
                          round(time.monotonic() - self._started, 3), round(time.time(), 3))


def records_pull_memory(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a pull step ``fn(plan, ...)``: sample the puller's memory while it runs and record the peak for
    ``plan.changefeed_id`` (also when the pull fails). Recording never fails the pull."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        plan = args[0] if args else kwargs.get("p")
        sampler = PullMemorySampler().start()
        try:
            return fn(*args, **kwargs)
        finally:
            memory = sampler.stop()
            changefeed_id = plan.changefeed_id if isinstance(plan, WindowPlan) else None
            if changefeed_id:
                try:
                    record_pull_memory(str(changefeed_id), memory)
                except OSError as exc:
                    log.warning("puller memory not recorded", changefeed_id=changefeed_id, error=str(exc))

    return wrapper


def records_duration(step: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a window step ``fn(plan, ...)``: record its wall time and outcome for ``plan.changefeed_id``
    (a skipped step too: it took that long). Recording never fails the step."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            plan = args[0] if args else kwargs.get("p")
            started, ok = time.monotonic(), False
            try:
                out = fn(*args, **kwargs)
                ok = True
                return out
            finally:
                changefeed_id = plan.changefeed_id if isinstance(plan, WindowPlan) else None
                if changefeed_id:
                    took = {"seconds": round(time.monotonic() - started, 3), "ok": ok, "at": round(time.time(), 3)}
                    try:
                        with _updating(str(changefeed_id)) as data:
                            data["task_seconds"] = {**data["task_seconds"], step: took}
                    except OSError as exc:
                        log.warning("step duration not recorded", changefeed_id=changefeed_id, error=str(exc))

        return wrapper

    return decorate
