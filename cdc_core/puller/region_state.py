"""The state of one region request: which region, range and epoch it asks for, where it went, and its matcher.

A ``RegionState`` lives from the moment the subscription client locks the region's range in the span's
:class:`~cdc_core.puller.range_lock.RangeLock` until the request ends (region error, broken stream, resync,
unsubscribe). Its resolved ts and initialization are the lock's (``locked``); a re-request is a new state with
a new request id, so late events of the old request can be told apart and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdc_core.proto import metapb_pb2
from cdc_core.puller.matcher import Matcher
from cdc_core.puller.range_lock import LockedRange


@dataclass(frozen=True, slots=True)
class RegionTarget:
    """What a region request needs: the region, its epoch, its leader, and the part of the span it serves."""

    region_id: int
    version: int
    conf_ver: int
    leader_store_id: int
    start_key: bytes
    end_key: bytes  # b"" = unbounded

    def epoch(self) -> metapb_pb2.RegionEpoch:
        return metapb_pb2.RegionEpoch(conf_ver=self.conf_ver, version=self.version)


@dataclass(eq=False, slots=True)
class RegionState:
    request_id: int
    span_id: int
    target: RegionTarget
    locked: LockedRange  # the lock's entry: the region's resolved ts while the request lives
    attempt: int = 0  # consecutive failed requests of this range (backoff); reset once initialized
    store_addr: str = ""
    worker: Any = None  # the StoreWorker the request went to
    initialized: bool = False
    stale: bool = False  # the request ended; its late events are ignored
    matcher: Matcher = field(init=False)

    def __post_init__(self) -> None:
        self.matcher = Matcher(self.target.region_id)

    @property
    def region_id(self) -> int:
        return self.target.region_id

    @property
    def start_key(self) -> bytes:
        return self.target.start_key

    @property
    def end_key(self) -> bytes:
        return self.target.end_key
