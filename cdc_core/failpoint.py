"""Failpoints: named places where a test can make the process die as ``kill -9`` would (after TiDB's failpoint).

``CDCFLOW_FAILPOINTS="apply.table_committed=2;publish.before_checkpoint=1"`` makes the process exit at once
with status 137 — no ``finally`` blocks, no atexit, no flushing, as a SIGKILL leaves it — the 2nd time it
reaches ``apply.table_committed``, or the 1st time it reaches ``publish.before_checkpoint``. Unset (always, in
production), :func:`hit` costs one dict lookup. With ``CDCFLOW_FAILPOINT_ACTION=raise`` a hit raises
:class:`Crash` (a ``BaseException``: no ``except Exception`` handler swallows it) instead, so that a test can
crash and re-run a window many times in one process; ``exit`` (the default) is the real thing.

The points are the moments at which a crash can leave a window half done; the crash-recovery tests go through
every one of them:

============================== ==================================================================
name                           reached
============================== ==================================================================
``pull.bronze_written``        the window's bronze changelog is in place, the state not updated
``apply.table_committed``      one table's Delta commit of a DML step is done (others may not be)
``apply.dml_step_done``        every table of a DML step is committed, the barrier not checked
``apply.ddl_applied``          a DDL is applied to Delta, the checkpoint not yet at its ts
``check.done``                 the window's checks passed, nothing published
``publish.before_checkpoint``  the checkpoint is about to move to the window end
``snapshot.table_loaded``      a snapshot window replaced one table's Delta contents (others may not be)
``rebuild.tables_moved``       a rebuild moved the tables to the trash, nothing replayed yet
``rebuild.window_replayed``    a rebuild replayed one bronze window into the rebuilt tables
``apply.sub_window_done``      a sub-window is applied, checked and checkpointed, the next not started
============================== ==================================================================

``snapshot.*`` and ``rebuild.*`` are reached only by snapshot and rebuild windows (``MODE_POINTS``), the last one
only by windows cut into sub-windows (``SUB_WINDOW_POINTS``); ``POINTS`` are those of every window.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Final

__all__ = ["ACTION_ENV", "ENV", "KILLED_STATUS", "KNOWN_POINTS", "MODE_POINTS", "POINTS", "SUB_WINDOW_POINTS",
           "Crash", "hit", "reset"]

ENV: Final = "CDCFLOW_FAILPOINTS"
ACTION_ENV: Final = "CDCFLOW_FAILPOINT_ACTION"
KILLED_STATUS: Final = 137  # what a shell reports for a process killed by SIGKILL
POINTS: Final = (
    "pull.bronze_written",
    "apply.table_committed",
    "apply.dml_step_done",
    "apply.ddl_applied",
    "check.done",
    "publish.before_checkpoint",
)
# Reached only by snapshot and rebuild windows (``POINTS`` are those of every window).
MODE_POINTS: Final = (
    "snapshot.table_loaded",
    "rebuild.tables_moved",
    "rebuild.window_replayed",
)
# Reached only by a window cut into sub-windows (more row events than `[window] max-events`).
SUB_WINDOW_POINTS: Final = ("apply.sub_window_done",)
KNOWN_POINTS: Final = POINTS + MODE_POINTS + SUB_WINDOW_POINTS



class Crash(BaseException):
    """A failpoint hit with ``CDCFLOW_FAILPOINT_ACTION=raise``: the process would have died here."""


_counts: dict[str, int] = {}
_COUNTING = threading.Lock()
_parsed: tuple[str, dict[str, int]] | None = None


def _armed() -> dict[str, int]:
    global _parsed
    spec = os.environ.get(ENV, "")
    if _parsed is None or _parsed[0] != spec:
        armed: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in spec.split(";"))):
            name, _, nth = part.partition("=")
            if name not in KNOWN_POINTS:
                raise ValueError(f"{ENV}: unknown failpoint {name!r}; known: {', '.join(KNOWN_POINTS)}")
            try:
                armed[name] = int(nth or "1")
            except ValueError:
                raise ValueError(f"{ENV}: {part!r}: the count after '=' must be an integer") from None
        _parsed = (spec, armed)
        _counts.clear()  # a new arming counts hits afresh
    return _parsed[1]


def hit(name: str) -> None:
    """Reach failpoint ``name``: exit the process as killed if it is armed for this hit."""
    armed = _armed()
    if not armed or name not in armed:
        return
    with _COUNTING:  # several threads reach one point (the tables of a window are merged at once)
        n = _counts[name] = _counts.get(name, 0) + 1
    if n == armed[name]:
        if os.environ.get(ACTION_ENV, "exit") == "raise":
            raise Crash(f"failpoint {name} (hit {n})")
        sys.stderr.write(f"failpoint {name} (hit {n}): exiting as killed\n")
        sys.stderr.flush()
        os._exit(KILLED_STATUS)


def reset() -> None:
    """Forget hit counts and re-read the environment (tests that arm the same spec twice in one process)."""
    global _parsed
    _parsed = None
    _counts.clear()
