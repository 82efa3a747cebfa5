"""What the subscription client keeps of one subscribed span (TiCDC's ``subscribedSpan``,
``logservice/logpuller/subscription_client.go``): its range and start ts, its range lock, resolved-ts advancer and
event-stream path, its request ids, its live region requests and its tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field

from cdc_core.puller.range_lock import RangeLock
from cdc_core.puller.region_state import RegionState
from cdc_core.puller.ts_advancer import ResolvedTsAdvancer


@dataclass(eq=False)
class SubscribedSpan:
    """One span's state; its consumer (one per span) is the only task that reads and changes ``regions`` while
    events are handled."""

    id: int
    start: bytes
    end: bytes
    start_ts: int
    path: Hashable
    lock: RangeLock
    adv: ResolvedTsAdvancer
    request_id: int  # the span's request id; a region whose request the client ended moves to a fresh one
    region_request_ids: dict[int, int] = field(default_factory=dict)  # region id -> its fresh request id
    regions: dict[int, RegionState] = field(default_factory=dict)  # region id -> its live request
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    consumer: asyncio.Task[None] | None = None
    stopped: bool = False
