"""A changefeed's service GC safe point in PD: ``cdcflow-<id>`` held at its checkpoint-ts.

The next window of a changefeed scans the upstream from its checkpoint-ts, so the upstream must keep every
MVCC version a read at the checkpoint sees. Like TiCDC's GC manager, each changefeed registers a *service* GC
safe point with PD (``UpdateServiceGCSafePoint``, service id ``cdcflow-<changefeed id>``) at its checkpoint,
with a TTL: the GC worker never moves the cluster safe point past a live service safe point, and a changefeed
that stops refreshing (removed, or dead) stops holding GC once the TTL has passed.

Who refreshes: ``cdcflow changefeed create`` registers it at start-ts (TiCDC does so at creation, so that a first
window later than ``gc-life-time`` still finds its data), ``tasks.publish`` at every window (the new checkpoint),
the maintenance DAG daily for the changefeeds that do not publish (paused, in error). ``cdcflow changefeed
remove`` removes it (TTL 0).

Before every window the checkpoint is compared with PD's GC safe point (``GetGCSafePoint``), as TiCDC's GC
manager does (``CheckStaleCheckpointTs``): below it, the versions the window must read may be gone, so the
window fails with TiCDC's ``ErrSnapshotLostByGC`` and the checkpoint stays.

PD refuses to let a *new* service start below the current minimum safe point (GC may have passed it); the
update then reports a minimum above the requested point, which :attr:`ServiceSafePoint.in_force` shows.

The RPC is asyncio (grpc.aio, usable from a trigger's loop: :func:`aupdate_service_safe_point`); the other
functions are synchronous wrappers for tasks and the CLI.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from cdc_core.codec import tso
from cdc_core.errors import CdcflowError, ChangefeedError, UpstreamError
from cdc_core.log import get_logger
from cdc_core.puller.pd_client import PDClient

if TYPE_CHECKING:
    from cdc_core.changefeed.config import ChangefeedConfig

log = get_logger("cdcflow.changefeed.gc")

SERVICE_ID_PREFIX = "cdcflow-"
# TiCDC's default gc-ttl: a changefeed that has not refreshed for a day no longer holds GC back.
DEFAULT_TTL_S = 86_400
DEFAULT_TIMEOUT_S = 10.0


def service_id(changefeed_id: str) -> str:
    return f"{SERVICE_ID_PREFIX}{changefeed_id}"


@dataclass(frozen=True)
class ServiceSafePoint:
    """The outcome of one update: what was asked and the minimum service safe point PD reports after it."""

    service_id: str
    safe_point: int
    ttl_s: int
    min_safe_point: int

    @property
    def in_force(self) -> bool:
        """Whether the requested point holds GC back (false after a removal, or when PD refused a new
        service below the current minimum)."""
        return self.ttl_s > 0 and self.min_safe_point <= self.safe_point

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "in_force": self.in_force}


async def aupdate_service_safe_point(
    pd_addr: str, service: str, safe_point: int, ttl_s: int, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> ServiceSafePoint:
    """Set (``ttl_s > 0``) or remove (``ttl_s <= 0``) a service GC safe point; raises ``UpstreamError``."""
    if safe_point < 0:
        raise ValueError(f"safe point must be >= 0, got {safe_point}")
    pd = PDClient(pd_addr)
    try:
        min_sp = await asyncio.wait_for(pd.update_service_safe_point(service, int(ttl_s), safe_point), timeout_s)
    except TimeoutError as exc:
        raise UpstreamError(f"PD {pd_addr}: UpdateServiceGCSafePoint({service}) timed out after {timeout_s:g}s") \
            from exc
    finally:
        await pd.close()
    return ServiceSafePoint(service, safe_point, int(ttl_s), min_sp)


def refresh_service_safe_point(
    pd_addr: str, changefeed_id: str, checkpoint_ts: int, ttl_s: int = DEFAULT_TTL_S, *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ServiceSafePoint:
    """Hold GC at ``checkpoint_ts`` for the changefeed for ``ttl_s`` seconds (from now)."""
    if ttl_s <= 0:
        raise ValueError(f"ttl_s must be > 0 (use remove_service_safe_point to remove), got {ttl_s}")
    sp = asyncio.run(aupdate_service_safe_point(pd_addr, service_id(changefeed_id), checkpoint_ts, ttl_s,
                                                timeout_s=timeout_s))
    if sp.in_force:
        log.info("service gc safe point refreshed", changefeed_id=changefeed_id, **sp.to_dict())
    else:
        log.warning("service gc safe point not in force: PD's minimum is above the checkpoint (GC may have "
                    "passed it)", changefeed_id=changefeed_id, **sp.to_dict())
    return sp


def remove_service_safe_point(pd_addr: str, changefeed_id: str, *,
                              timeout_s: float = DEFAULT_TIMEOUT_S) -> ServiceSafePoint:
    """Stop holding GC for the changefeed (PD drops a service safe point updated with TTL 0)."""
    sp = asyncio.run(aupdate_service_safe_point(pd_addr, service_id(changefeed_id), 0, 0, timeout_s=timeout_s))
    log.info("service gc safe point removed", changefeed_id=changefeed_id, service_id=sp.service_id)
    return sp


async def agc_safe_point(pd_addr: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """PD's GC safe point: reads below it may miss versions GC removed."""
    pd = PDClient(pd_addr)
    try:
        return await asyncio.wait_for(pd.gc_safe_point(), timeout_s)
    except TimeoutError as exc:
        raise UpstreamError(f"PD {pd_addr}: GetGCSafePoint timed out after {timeout_s:g}s") from exc
    finally:
        await pd.close()


def _when(ts: int) -> str:
    return tso.to_datetime(ts).isoformat() if ts > 0 else "never"


def check_not_lost_by_gc(pd_addr: str, changefeed_id: str, ts: int, what: str = "checkpoint-ts") -> int:
    """Raise ``ChangefeedError`` when ``ts`` is below PD's GC safe point (TiCDC's ``ErrSnapshotLostByGC``);
    returns the safe point otherwise. A read at the safe point itself is still whole."""
    safe_point = asyncio.run(agc_safe_point(pd_addr))
    if ts < safe_point:
        raise ChangefeedError(
            f"changefeed {changefeed_id}: snapshot lost by GC: {what} {ts} ({_when(ts)}) is earlier than PD's GC "
            f"safe point {safe_point} ({_when(safe_point)}); the changes since then may be gone upstream: "
            "recreate the changefeed from a ts above the safe point (with initial-snapshot = true)")
    return safe_point


# --- by changefeed id (the PD address from its config), never failing the caller -----------------------


def _pd_addr_of(changefeed_id: str, cfg: ChangefeedConfig | None = None) -> str:
    from cdc_core.changefeed.config import load_config
    from cdc_core.client.upstream import resolve_pd_addr

    return resolve_pd_addr((cfg or load_config(changefeed_id)).upstream)


def refresh_for_changefeed(changefeed_id: str, checkpoint_ts: int | None = None, ttl_s: int = DEFAULT_TTL_S, *,
                           cfg: ChangefeedConfig | None = None) -> ServiceSafePoint | None:
    """Refresh the changefeed's safe point at ``checkpoint_ts`` (default: its state's checkpoint), at the upstream
    of ``cfg`` (default: the changefeed's config, loaded here).

    For callers whose own work is done (publish, maintenance): an unreachable upstream is logged and gives
    None instead of failing them; the TTL leaves a day for the next refresh.
    """
    try:
        if checkpoint_ts is None:
            from cdc_core.changefeed.state import load_state

            checkpoint_ts = load_state(changefeed_id).checkpoint_ts
        return refresh_service_safe_point(_pd_addr_of(changefeed_id, cfg), changefeed_id, checkpoint_ts, ttl_s)
    except CdcflowError as exc:
        log.warning("service gc safe point not refreshed", changefeed_id=changefeed_id, error=str(exc))
        return None


def remove_for_changefeed(changefeed_id: str) -> ServiceSafePoint | None:
    """Remove the changefeed's safe point (call before its config is deleted); failures are logged, not raised:
    a safe point left behind expires with its TTL."""
    try:
        return remove_service_safe_point(_pd_addr_of(changefeed_id), changefeed_id)
    except CdcflowError as exc:
        log.warning("service gc safe point not removed (it expires with its TTL)", changefeed_id=changefeed_id,
                    error=str(exc))
        return None
