"""The capture lease: at most one capture per changefeed, alive while it renews the lease.

A JSON file beside the window lease (:mod:`cdc_core.changefeed.lease`), ``$CDCFLOW_HOME/state/leases/
<id>.capture.json`` = ``{"owner", "host", "pid", "acquired_at", "renewed_at", "expires_at"}``, changed only under
``flock``. The capture renews it every :data:`RENEW_S`; it is *live* while unexpired and, on this host, while its
pid exists — a capture killed with ``kill -9`` is down at once for a reader on its host, after :data:`TTL_S`
elsewhere. Its status (:func:`write_status`) is a second file, ``<id>.capture.status.json``, rewritten every flush.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cdc_core import durable
from cdc_core.changefeed import file_lock
from cdc_core.codec import tso
from cdc_core.errors import ChangefeedError
from cdc_core.home import state_dir
from cdc_core.upstream_record import pid_alive

TTL_S = 15.0
RENEW_S = 3.0


@dataclass(frozen=True)
class CaptureLease:
    owner: str
    host: str
    pid: int
    acquired_at: float
    renewed_at: float
    expires_at: float

    def live(self, now: float | None = None) -> bool:
        """Unexpired, and (on this host) its process exists."""
        if (now if now is not None else time.time()) >= self.expires_at:
            return False
        return self.host != socket.gethostname() or pid_alive(self.pid)


class CaptureRunning(ChangefeedError):
    """Another capture of the changefeed holds its lease."""


def _dir() -> Path:
    d = state_dir() / "leases"
    d.mkdir(parents=True, exist_ok=True)
    return d


def lease_path(changefeed_id: str) -> Path:
    return _dir() / f"{changefeed_id}.capture.json"


def status_path(changefeed_id: str) -> Path:
    return _dir() / f"{changefeed_id}.capture.status.json"


@contextlib.contextmanager
def _locked(changefeed_id: str) -> Iterator[Path]:
    with file_lock.exclusive(_dir() / f"{changefeed_id}.capture.lock"):
        yield lease_path(changefeed_id)


def _read(path: Path) -> CaptureLease | None:
    try:
        return CaptureLease(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise ChangefeedError(f"capture lease {path} is corrupt ({exc}); remove it if no capture runs") from exc


def holder(changefeed_id: str) -> CaptureLease | None:
    """The recorded lease, live or not (None when there is none)."""
    with _locked(changefeed_id) as path:
        return _read(path)


def live_holder(changefeed_id: str) -> CaptureLease | None:
    """The live lease of a changefeed's capture, if one runs."""
    lease = holder(changefeed_id)
    return lease if lease is not None and lease.live() else None


def owner_name() -> str:
    return f"capture:{socket.gethostname()}:{os.getpid()}"


def acquire(changefeed_id: str, *, ttl_s: float = TTL_S) -> CaptureLease:
    """Take the lease for this process; ``CaptureRunning`` when a live capture holds it."""
    now = time.time()
    owner = owner_name()
    with _locked(changefeed_id) as path:
        current = _read(path)
        if current is not None and current.owner != owner and current.live(now):
            raise CaptureRunning(f"a capture of changefeed {changefeed_id!r} already runs: pid {current.pid} on "
                                 f"{current.host} (lease renewed {now - current.renewed_at:.1f}s ago)")
        lease = CaptureLease(owner, socket.gethostname(), os.getpid(), now, now, now + ttl_s)
        durable.write_file(path, json.dumps(asdict(lease)))
    return lease


def renew(changefeed_id: str, lease: CaptureLease, *, ttl_s: float = TTL_S) -> CaptureLease:
    """Extend the lease; ``CaptureRunning`` when another capture took it meanwhile (this one must stop)."""
    now = time.time()
    with _locked(changefeed_id) as path:
        current = _read(path)
        if current is not None and current.owner != lease.owner:
            raise CaptureRunning(f"the capture lease of {changefeed_id!r} was taken over by pid {current.pid}")
        renewed = CaptureLease(lease.owner, lease.host, lease.pid, lease.acquired_at, now, now + ttl_s)
        durable.write_file(path, json.dumps(asdict(renewed)))
    return renewed


@contextlib.contextmanager
def fenced(changefeed_id: str, lease: CaptureLease) -> Iterator[None]:
    """Hold the lease's lock while ``lease`` is still the recorded one: what the capture publishes a part under.

    The fence that keeps a stalled capture (stopped by a debugger, swapped out, a VM paused past :data:`TTL_S`)
    from writing a part after a new capture took its expired lease over: the new one's :func:`acquire` and this
    check serialize on one ``flock``, so either the part is renamed in before the new capture reads where to resume,
    or the old capture learns here that it lost the lease (``CaptureRunning``) and writes nothing. As a TiCDC
    processor whose etcd session expired stops writing before a new owner schedules its tables elsewhere."""
    with _locked(changefeed_id) as path:
        current = _read(path)
        if current is None or current.owner != lease.owner:
            by = f"pid {current.pid} on {current.host}" if current is not None else "nobody (it was removed)"
            raise CaptureRunning(f"the capture lease of {changefeed_id!r} is held by {by}, no longer by this "
                                 f"capture (pid {lease.pid}): it must stop")
        yield


def release(changefeed_id: str, lease: CaptureLease) -> bool:
    """Give the lease back; False when this capture no longer held it."""
    with _locked(changefeed_id) as path:
        current = _read(path)
        if current is None or current.owner != lease.owner:
            return False
        path.unlink(missing_ok=True)
    return True


def write_status(changefeed_id: str, status: dict[str, Any]) -> None:
    durable.write_file(status_path(changefeed_id), json.dumps(status))


def read_status(changefeed_id: str) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(status_path(changefeed_id).read_text())
        return data
    except (FileNotFoundError, ValueError):
        return None


def state(changefeed_id: str) -> dict[str, Any]:
    """What ``capture status`` shows: ``{"changefeed_id", "state": "up"|"down", "pid", ...last status}``."""
    lease = holder(changefeed_id)
    up = lease is not None and lease.live()
    out: dict[str, Any] = {"changefeed_id": changefeed_id, "state": "up" if up else "down",
                           "pid": lease.pid if lease else None,
                           "lease_renewed_at": lease.renewed_at if lease else None}
    out.update({k: v for k, v in (read_status(changefeed_id) or {}).items() if k not in out})
    if out.get("resolved_ts"):  # as of now, not of the last status: a dead capture's lag keeps growing
        out["resolved_lag_s"] = max(0.0, (tso.now_physical_ms() - tso.physical_ms(int(out["resolved_ts"]))) / 1000)
    return out
