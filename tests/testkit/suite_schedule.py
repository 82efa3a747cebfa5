"""How ``make test`` spreads the suite over its two worker processes, and where the suite's minutes went.

``make test`` runs pytest-xdist with ``-n 2 --dist loadfile --no-loadscope-reorder``: xdist hands a worker one
work unit at a time, in collection order, whenever it is nearly out of work. This plugin makes those units and
that order:

- a unit is a test module, so that module- and session-scoped fixtures (a loaded 220,000-row table, a Spark
  session, the session's upstream) are set up once per worker, not once per test; the modules that share the
  session Airflow (``airflow_server``) are one unit, so that one worker starts one Airflow (xdist's own
  ``xdist_group`` marks cannot do this under pytest 9.2: xdist 3.8 renames ``item._nodeid``, which pytest no
  longer reads, so the scheduler here groups node ids itself);
- the end-to-end units go first, then Spark's, then the rest: the longest jobs first, and the many short modules
  at the end fill the gap between the two workers (longest-processing-time-first list scheduling);
- the units that start a forest of processes (``FOREST_UNITS``) run one at a time: a worker asking for work while
  the other runs one takes the next unit of another kind, or waits when none is left.

Run without ``-n``, the tests keep the collection's order. The terminal summary lists the modules that took longest
and each worker's busy time (the per-file times ``console_output_style = "times"`` gives without xdist).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

SHARED_AIRFLOW_FIXTURE = "airflow_server"
# the modules whose tests use SHARED_AIRFLOW_FIXTURE (checked at collection: a new one must be named here)
SHARED_AIRFLOW_MODULES = ("tests/e2e/test_airflow_scheduler.py", "tests/e2e/test_airflow_browser.py")
SHARED_AIRFLOW_UNIT = "session-airflow"
# Units that start a forest of processes (an Airflow standalone, the distributed topology, `make demo`): two of them
# at once on two cores slow each other down more than the second worker gains, so they run one at a time, beside
# the other units (side by side, in c51891e's CI-like run, they took 813 s and 1009 s against 491 s and 425 s alone).
FOREST_UNITS = (SHARED_AIRFLOW_UNIT, "tests/e2e/test_distributed_topology.py", "tests/scripts/test_fresh_checkout.py")
TOP_MODULES = 15


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its module, or the one unit of the modules that share the session Airflow."""
    module = module_of(nodeid)
    return SHARED_AIRFLOW_UNIT if module in SHARED_AIRFLOW_MODULES else module


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("e2e"):
        return 0
    if item.get_closest_marker("spark") or item.get_closest_marker("load"):
        return 1
    return 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    strays = sorted({module_of(item.nodeid) for item in items
                     if SHARED_AIRFLOW_FIXTURE in getattr(item, "fixturenames", ())} - set(SHARED_AIRFLOW_MODULES))
    if strays:
        raise pytest.UsageError(f"{', '.join(strays)} use the session Airflow ({SHARED_AIRFLOW_FIXTURE}): add them to "
                                f"SHARED_AIRFLOW_MODULES in {__file__}, so that one worker runs all of its tests")
    if not hasattr(config, "workerinput"):  # one process (TEST_WORKERS=0, a developer's run): the collection's order
        return
    first_at: dict[str, int] = {}
    rank: dict[str, int] = {}
    for i, item in enumerate(items):
        unit = unit_of(item.nodeid)
        first_at.setdefault(unit, i)
        rank[unit] = min(rank.get(unit, 2), _rank(item))
    # stable: a unit's tests keep their order, and units of one rank keep the collection's
    items.sort(key=lambda item: (rank[unit_of(item.nodeid)], first_at[unit_of(item.nodeid)]))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own answer for --dist loadfile
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class UnitScheduling(LoadFileScheduling):  # type: ignore[misc]
        """xdist's file units, with :func:`unit_of`'s grouping and at most one of ``FOREST_UNITS`` at a time."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            others_run_a_forest = any(
                unit in FOREST_UNITS and not all(done.values())
                for other, units in self.assigned_work.items() if other is not node for unit, done in units.items())
            unit = next((u for u in self.workqueue if u not in FOREST_UNITS or not others_run_a_forest), None)
            if unit is None:
                return  # only forests left, one runs elsewhere: this worker waits (see mark_test_complete)
            self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            for other, units in list(self.assigned_work.items()):  # a worker left waiting may take a unit now
                if other is not node and not self._pending_of(units):
                    self._reschedule(other)

    return UnitScheduling(config, log)


class _Minutes:
    """Seconds per module and per worker, from the reports the controller (or the single process) receives."""

    def __init__(self) -> None:
        self.by_module: dict[str, float] = defaultdict(float)
        self.worker_of: dict[str, str] = {}
        self.by_worker: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = module_of(report.nodeid)
        node = getattr(report, "node", None)
        worker = str(getattr(getattr(node, "gateway", None), "id", "main"))
        self.by_module[module] += report.duration
        self.worker_of[module] = worker
        self.by_worker[worker] += report.duration

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.by_module:
            return
        terminalreporter.section("where the suite's minutes went")
        busy = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(self.by_worker.items()))
        terminalreporter.write_line(f"busy time per worker (setup, call and teardown of its tests): {busy}")
        top = sorted(self.by_module.items(), key=lambda kv: -kv[1])[:TOP_MODULES]
        for module, seconds in top:
            terminalreporter.write_line(f"{seconds:8.1f} s  {self.worker_of[module]:>5}  {module}")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # in the controller (or a run without xdist), not in a worker
        config.pluginmanager.register(_Minutes(), "cdcflow-suite-minutes")
