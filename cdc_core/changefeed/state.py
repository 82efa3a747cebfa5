"""Persisted changefeed state: lifecycle, checkpoint-ts, resolved-ts, last error and last results, and the
progress of snapshot and rebuild windows (fields added later default, so older state files still load).

One JSON file per changefeed in ``$CDCFLOW_HOME/state``, replaced atomically and updated under an
exclusive file lock so that the CLI, DAG tasks and the UI never see a torn state. The checkpoint
only moves forward, and never while the changefeed is in error.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cdc_core import durable
from cdc_core.changefeed import file_lock
from cdc_core.errors import ChangefeedError
from cdc_core.home import state_dir

STATES = ("normal", "paused", "error", "finished", "removed")


@dataclass
class ChangefeedState:
    changefeed_id: str
    state: str = "normal"
    checkpoint_ts: int = 0
    resolved_ts: int = 0
    error: dict[str, Any] | None = None
    last_window: dict[str, Any] | None = None
    last_checks: dict[str, Any] = field(default_factory=dict)
    updated_at: float = 0.0
    # `initial-snapshot = true`: whether the first window's snapshot has loaded every table.
    initial_snapshot_done: bool = False
    # The latest snapshot window (cdc_core.changefeed.snapshot): {"id", "ts", "tables", "initial", "loaded":
    # {"db.table": {"rows", "delta_version"}}, "done", "started_at", "finished_at"}.
    snapshot: dict[str, Any] | None = None
    # The latest rebuild (cdc_core.changefeed.rebuild): {"id", "ts", "tag", "tables", "trash", "moved", "done",
    # "replayed_to", "started_at", "finished_at"}; an unfinished one is resumed by the next window.
    rebuild: dict[str, Any] | None = None
    # The latest full reconciliation (cdc_core.changefeed.reconcile): {"ts", "at", "passed", "failed": [names]}.
    last_reconciliation: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


def _path(changefeed_id: str) -> Path:
    return state_dir() / f"{changefeed_id}.json"


def load_state(changefeed_id: str) -> ChangefeedState:
    p = _path(changefeed_id)
    if not p.exists():
        raise ChangefeedError(f"changefeed {changefeed_id!r} has no state (was it created?)")
    try:
        data = json.loads(p.read_text())
        return ChangefeedState(**data)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ChangefeedError(f"state file {p} is corrupt: {exc}") from exc


def save_state(st: ChangefeedState) -> None:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    st.updated_at = time.time()
    p = _path(st.changefeed_id)
    durable.write_file(p, st.to_json())


@contextlib.contextmanager
def locked_state(changefeed_id: str) -> Iterator[ChangefeedState]:
    """Load, yield for modification, and save the state under an exclusive lock."""
    with file_lock.exclusive(state_dir() / f"{changefeed_id}.lock"):
        st = load_state(changefeed_id)
        yield st
        save_state(st)


def create_state(changefeed_id: str, start_ts: int) -> ChangefeedState:
    st = ChangefeedState(changefeed_id=changefeed_id, checkpoint_ts=start_ts, resolved_ts=start_ts)
    save_state(st)
    return st


def advance_checkpoint(changefeed_id: str, ts: int) -> ChangefeedState:
    with locked_state(changefeed_id) as st:
        if st.state == "error":
            raise ChangefeedError(f"changefeed {changefeed_id!r} is in error; its checkpoint does not move")
        if ts > st.checkpoint_ts:
            st.checkpoint_ts = ts
        st.resolved_ts = max(st.resolved_ts, ts)
    return st


def set_error(changefeed_id: str, message: str, **details: Any) -> None:
    with locked_state(changefeed_id) as st:
        st.state = "error"
        st.error = {"message": message, "at": time.time(), **details}


def list_states() -> list[ChangefeedState]:
    d = state_dir()
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.json")):
        with contextlib.suppress(ChangefeedError):
            out.append(load_state(p.stem))
    return out
