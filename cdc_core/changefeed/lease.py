"""The window lease: at most one window of a changefeed runs at a time.

A window is ``plan → pull → apply → check → publish`` over ``(checkpoint, T]``. Two windows of one
changefeed running at once would both plan from the same checkpoint and race on the schema log and the
state, and Airflow does not prevent it: ``max_active_runs`` does not count backfill runs (a backfill runs
up to 10 of its own at once, next to the scheduled ones), and a CLI ``changefeed run`` knows nothing of
Airflow. So whoever runs a window first takes this lease (``plan`` time) and gives it back when the
window is published or skipped.

Waiting runs take their turn in window order: a waiter with a smaller window end goes first, so the runs of
a backfill (all queued at once) and a scheduled run apply their windows in ts order and each handles its own
interval. A waiter that stops asking (its process died) drops out of the queue after ``WAITER_STALE_S``.

The lease is a small JSON file beside the state, ``$CDCFLOW_HOME/state/leases/<id>.json``, changed only
under ``flock``: ``{"lease": {"owner", "acquired_at", "expires_at", "target_ts"} | null, "waiters": {owner:
{"target_ts", "since", "seen"}}}``. An owner that dies keeps it
until it expires (``ttl_s``, longer than a window may take) or until a caller that knows the owner is
gone takes it over (``take_over=``: the Airflow plan does so for a DAG run that is no longer running; the
CLI for a process of this host that no longer exists).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cdc_core import durable
from cdc_core.changefeed import file_lock
from cdc_core.errors import ChangefeedError
from cdc_core.home import state_dir

# The longest a window may hold the lease without publishing: the sum of the DAG tasks' timeouts.
DEFAULT_TTL_S = 5 * 3600.0
# A waiter polls every couple of seconds; one not seen for this long has gone away.
WAITER_STALE_S = 15.0
_LAST = 2**63  # the queue position of a waiter without a window end: after every other


@dataclass(frozen=True)
class Lease:
    owner: str
    acquired_at: float
    expires_at: float
    target_ts: int | None = None

    def expired(self, now: float | None = None) -> bool:
        return (now if now is not None else time.time()) >= self.expires_at

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.acquired_at))
        return f"{self.owner} (since {since}" + (f", window to {self.target_ts})" if self.target_ts else ")")


class LeaseBusy(ChangefeedError):
    """Another window of the changefeed holds the lease; try again when it is done."""

    def __init__(self, changefeed_id: str, holder: Lease) -> None:
        super().__init__(f"changefeed {changefeed_id!r} is busy: a window is being run by {holder.describe()}")
        self.holder = holder


def _dir() -> Path:
    return state_dir() / "leases"


@contextlib.contextmanager
def _locked(changefeed_id: str) -> Iterator[Path]:
    d = _dir()
    with file_lock.exclusive(d / f"{changefeed_id}.lock"):
        yield d / f"{changefeed_id}.json"


def _read(path: Path) -> tuple[Lease | None, dict[str, dict[str, Any]]]:
    try:
        data = json.loads(path.read_text())
        lease = Lease(**data["lease"]) if data.get("lease") else None
        return lease, dict(data.get("waiters") or {})
    except FileNotFoundError:
        return None, {}
    except (ValueError, TypeError, KeyError) as exc:
        raise ChangefeedError(f"lease file {path} is corrupt ({exc}); remove it if no window is running") from exc


def _write(path: Path, lease: Lease | None, waiters: dict[str, dict[str, Any]]) -> None:
    durable.write_file(path, json.dumps({"lease": asdict(lease) if lease else None, "waiters": waiters}))


def holder(changefeed_id: str) -> Lease | None:
    """The current, unexpired lease of a changefeed, if any."""
    with _locked(changefeed_id) as path:
        lease, _ = _read(path)
    return None if lease is None or lease.expired() else lease


def waiters(changefeed_id: str) -> dict[str, int | None]:
    """The live queue of a changefeed: waiting owner -> the window end it waits to plan (None: unknown)."""
    now = time.time()
    with _locked(changefeed_id) as path:
        _, queued = _read(path)
    return {o: (int(w["target_ts"]) if int(w["target_ts"]) < _LAST else None)
            for o, w in sorted(queued.items(), key=lambda kv: (kv[1]["target_ts"], kv[1]["since"], kv[0]))
            if now - float(w.get("seen", 0)) < WAITER_STALE_S}


def acquire(
    changefeed_id: str,
    owner: str,
    *,
    target_ts: int | None = None,
    ttl_s: float = DEFAULT_TTL_S,
    take_over: Callable[[Lease], bool] | None = None,
) -> Lease:
    """Take the lease for ``owner`` (re-entrant: the owner may take it again, e.g. a retried plan).

    Raises ``LeaseBusy`` when another owner holds an unexpired lease that ``take_over`` (asked with the
    holder) does not release, or when a live waiter with an earlier window end is queued before ``owner``
    (``owner`` is then queued too, by ``target_ts``).
    """
    now = time.time()
    with _locked(changefeed_id) as path:
        current, waiters = _read(path)
        waiters = {o: w for o, w in waiters.items() if now - float(w.get("seen", 0)) < WAITER_STALE_S}
        mine = waiters.get(owner, {"since": now})
        waiters[owner] = {"target_ts": int(target_ts if target_ts is not None else _LAST), "since": mine["since"],
                          "seen": now}
        busy: Lease | None = None
        if current is not None and current.owner != owner and not current.expired(now):
            if take_over is None or not take_over(current):
                busy = current
        if busy is None:
            first = min(waiters, key=lambda o: (waiters[o]["target_ts"], waiters[o]["since"], o))
            if first != owner:
                w = waiters[first]
                busy = Lease(owner=first, acquired_at=w["since"], expires_at=w["seen"] + WAITER_STALE_S,
                             target_ts=int(w["target_ts"]) if w["target_ts"] < _LAST else None)
        if busy is not None:
            _write(path, current, waiters)
            raise LeaseBusy(changefeed_id, busy)
        del waiters[owner]
        lease = Lease(owner=owner, acquired_at=now, expires_at=now + ttl_s, target_ts=target_ts)
        _write(path, lease, waiters)
    return lease


def release(changefeed_id: str, owner: str) -> bool:
    """Give the lease back (and leave the queue); False when ``owner`` does not hold it."""
    with _locked(changefeed_id) as path:
        current, waiters = _read(path)
        waiters.pop(owner, None)
        held = current is not None and current.owner == owner
        _write(path, None if held else current, waiters)
    return held


def wait_acquire(
    changefeed_id: str,
    owner: str,
    *,
    timeout_s: float,
    poll_s: float = 2.0,
    target_ts: int | None = None,
    ttl_s: float = DEFAULT_TTL_S,
    take_over: Callable[[Lease], bool] | None = None,
    on_wait: Callable[[Lease], None] | None = None,
    notify_every_s: float = 30.0,
) -> Lease:
    """``acquire``, waiting up to ``timeout_s`` for the holder and earlier windows.

    ``on_wait(holder)`` is told when the wait starts, when the holder changes and every ``notify_every_s``
    otherwise: callers log it, and a line per ``poll_s`` would bury their logs."""
    deadline = time.monotonic() + timeout_s
    told: tuple[str, float] | None = None  # (holder, when) last told to on_wait
    while True:
        try:
            return acquire(changefeed_id, owner, target_ts=target_ts, ttl_s=ttl_s, take_over=take_over)
        except LeaseBusy as busy:
            now = time.monotonic()
            if now >= deadline:
                release(changefeed_id, owner)  # leave the queue
                raise
            if on_wait is not None and (told is None or told[0] != busy.holder.owner
                                        or now - told[1] >= notify_every_s):
                told = (busy.holder.owner, now)
                on_wait(busy.holder)
            time.sleep(poll_s)


def process_owner() -> str:
    """The owner name of this process (a CLI run): ``cli:<host>:<pid>``."""
    return f"cli:{socket.gethostname()}:{os.getpid()}"


def dead_local_process(lease: Lease) -> bool:
    """True when the lease is held by a CLI process of this host that no longer exists."""
    kind, _, rest = lease.owner.partition(":")
    host, _, pid = rest.rpartition(":")
    if kind != "cli" or host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
