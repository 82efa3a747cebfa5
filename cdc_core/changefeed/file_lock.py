"""An exclusive advisory lock on a file, shared by the state, lease and metrics files of a changefeed.

Readers and writers of one ``<name>.json`` under ``$CDCFLOW_HOME/state`` serialize on ``<name>.lock``
(``flock``: released when the holder exits, even if it crashed).
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created with its folder when missing)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
