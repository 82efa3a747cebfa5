"""The soak's chaos: ``kill -9`` of a random process of the distributed topology at random moments (each restarted
after a few seconds, as a restart policy would), and a region fault on the upstream every second.

Victims, as the issue names them: a running task (its task runner or supervisor, or the ``spark-submit`` driver it
started), the Airflow scheduler, a Spark worker (with its executors, as a container dies), a Celery worker (with
the tasks it runs), a store, and, when the soak runs against a capture (``capture=``), the changefeed's capture
(``kill -9`` of its lease's pid; restarted as its restart policy would, unless the DAG's ``[capture] auto-start``
brought one back first: the lease admits one).

The embedded upstream runs its stores inside one process, whose ``kill -9`` would lose the cluster's data rather
than one store's; a store is killed through the control port instead
(``StopStore`` without moving its leaders: its streams drop and its port refuses, as a killed TiKV's does) and
started again after the same delay.

Region faults: a split at a random handle, a merge of a table's regions, a leader transfer to a random store, the
streams of a store dropped.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from cdc_core.capture import lease as capture_lease
from cdc_core.client.admin import AdminClient
from cdc_core.client.upstream import UpstreamClient

# What identifies a task's processes in a Celery worker's tree (Airflow 3 sets their titles; spark-submit's JVM and
# the Python driver it runs carry these in their command lines).
TASK_MARKERS = ("airflow task runner", "airflow task supervisor", "org.apache.spark.deploy.SparkSubmit",
                "spark_jobs")
VICTIMS = {"task": 4, "scheduler": 2, "spark-worker": 2, "celery-worker": 1, "store": 2}


@dataclass
class Kill:
    at: float
    victim: str
    detail: str


@dataclass
class ChaosLog:
    kills: list[Kill] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)  # "<op> ok" / "<op> error"

    def kills_by_victim(self) -> dict[str, int]:
        return dict(Counter(k.victim for k in self.kills))


class Chaos:
    """Runs the kill and fault threads against ``cluster`` (a ``topology.DistributedAirflow`` started with its
    control port) until :meth:`stop`; everything killed is running again when :meth:`stop` returns."""

    def __init__(self, cluster: Any, tables: list[str], id_range: int, *, seed: int, kill_every_s: float,
                 restart_after_s: tuple[float, float] = (2.0, 10.0), fault_every_s: float = 1.0,
                 capture: tuple[str, Callable[[], object]] | None = None) -> None:
        """``capture``: (changefeed id, a start of its capture) makes the capture a victim too; the start is called
        (in ``CDCFLOW_HOME``'s changefeed) after a kill and at :meth:`stop` when none runs."""
        self.cluster, self.tables, self.id_range = cluster, tables, id_range
        self.capture = capture
        self.victims = {**VICTIMS, "capture": 3} if capture else dict(VICTIMS)
        self.rnd = random.Random(seed)
        self.kill_every_s, self.restart_after_s, self.fault_every_s = kill_every_s, restart_after_s, fault_every_s
        self.log = ChaosLog()
        self._stop = threading.Event()
        self._admin = AdminClient(cluster.control_addr, timeout=10.0)
        with UpstreamClient(cluster.upstream_pd) as c:
            self._stores = [s.id for s in c.all_stores()]
        self._pending: list[threading.Timer] = []
        self._down_stores: set[int] = set()
        self._lock = threading.Lock()
        self._capture_lock = threading.Lock()
        self._threads = [threading.Thread(target=self._kill_loop, name="soak-kill", daemon=True),
                         threading.Thread(target=self._fault_loop, name="soak-faults", daemon=True)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        for timer in list(self._pending):
            timer.cancel()
        for p in self.cluster.procs:  # what a pending restart did not bring back yet
            self._restart(p)
        for store in list(self._down_stores):
            self._start_store(store)
        if self.capture is not None:
            self._start_capture()
        self._admin.close()

    # --- kills ----------------------------------------------------------------------------------------------

    def _kill_loop(self) -> None:
        while not self._stop.wait(self.rnd.expovariate(1.0 / self.kill_every_s)):
            victim = self.rnd.choices(list(self.victims), list(self.victims.values()))[0]
            detail = getattr(self, f"_kill_{victim.replace('-', '_')}")()
            if detail:
                with self._lock:
                    self.log.kills.append(Kill(time.time(), victim, detail))

    def _later(self, action: Any) -> None:
        timer = threading.Timer(self.rnd.uniform(*self.restart_after_s), action)
        timer.daemon = True
        self._pending.append(timer)
        timer.start()

    def _proc(self, prefix: str) -> Any:
        live = [p for p in self.cluster.procs if p.name.startswith(prefix) and p.alive()]
        return self.rnd.choice(live) if live else None

    def _kill_service(self, prefix: str) -> str:
        from testkit.topology import SERVICES

        assert SERVICES[prefix].restarts, f"{prefix} has no restart policy: killing it is not a fault it survives"
        p = self._proc(prefix)
        if p is None:
            return ""
        p.kill()
        self._later(lambda: self._restart(p))
        return p.name

    def _restart(self, p: Any) -> None:
        with self._lock:  # a pending restart and stop() must not start a service twice
            if not p.alive():
                p.restart()

    def _kill_scheduler(self) -> str:
        return self._kill_service("airflow-scheduler")

    def _kill_spark_worker(self) -> str:
        return self._kill_service("spark-worker")

    def _kill_celery_worker(self) -> str:
        return self._kill_service("airflow-worker")

    def _kill_task(self) -> str:
        """``kill -9`` of one process of a running task (waits up to 30 s for a task to be running)."""
        deadline = time.monotonic() + 30
        while not self._stop.is_set() and time.monotonic() < deadline:
            found = []
            for worker in (p for p in self.cluster.procs if p.name.startswith("airflow-worker") and p.alive()):
                try:
                    tree = psutil.Process(worker.popen.pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                for proc in tree:
                    try:
                        line = " ".join(proc.cmdline())
                    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                        continue
                    if any(m in line for m in TASK_MARKERS):
                        found.append((proc, line))
            if found:
                proc, line = self.rnd.choice(found)
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    continue
                return line[:120]
            self._stop.wait(1.0)
        return ""

    def _kill_capture(self) -> str:
        """``kill -9`` of the changefeed's running capture (none running: no kill this time)."""
        assert self.capture is not None
        cid = self.capture[0]
        held = capture_lease.live_holder(cid)
        if held is None:
            return ""
        try:
            psutil.Process(held.pid).kill()
        except psutil.NoSuchProcess:
            return ""
        self._later(self._start_capture)
        return f"capture of {cid} (pid {held.pid})"

    def _start_capture(self) -> None:
        """Start the capture when none runs (the DAG's auto-start may have started one already)."""
        assert self.capture is not None
        with self._capture_lock:  # a pending restart and stop() must not start two
            if capture_lease.live_holder(self.capture[0]) is None:
                try:
                    self.capture[1]()
                except Exception:  # lost a race to the DAG's start: one runs
                    pass

    def _kill_store(self) -> str:
        with self._lock:
            up = [s for s in self._stores if s not in self._down_stores]
            if len(up) < 2:  # one store down at a time: the other keeps the regions' leaders
                return ""
            store = self.rnd.choice(up)
            self._down_stores.add(store)
        try:
            self._admin.stop_store(store, move_leaders=False)
        except Exception:  # refused (the upstream is busy): no kill this time
            with self._lock:
                self._down_stores.discard(store)
            return ""
        self._later(lambda: self._start_store(store))
        return f"store {store}"

    def _start_store(self, store: int) -> None:
        for _ in range(10):
            try:
                self._admin.start_store(store)
                break
            except Exception:
                time.sleep(1.0)
        with self._lock:
            self._down_stores.discard(store)

    # --- region faults --------------------------------------------------------------------------------------

    def _fault_loop(self) -> None:
        while not self._stop.wait(self.fault_every_s):
            op = self.rnd.choices(["split", "merge", "transfer-leader", "drop-streams"], [4, 2, 3, 2])[0]
            table = self.rnd.choice(self.tables)
            try:
                if op == "split":
                    self._admin.split_table(table, handles=[self.rnd.randint(-self.id_range, self.id_range)])
                elif op == "merge":
                    self._admin.merge_table(table)
                elif op == "transfer-leader":
                    self._admin.transfer_leader(self.rnd.choice(self._stores), table=table)
                else:
                    self._admin.drop_streams(self.rnd.choice([0, *self._stores]))
                self.log.faults[f"{op} ok"] += 1
            except Exception:
                # Refused faults (a store is down, a split key outside every region) are part of the chaos.
                self.log.faults[f"{op} error"] += 1
