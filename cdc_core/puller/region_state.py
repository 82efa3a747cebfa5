"""The state of one subscribed region: its range, epoch, resolved ts, initialization and matcher."""

from __future__ import annotations

from dataclasses import dataclass, field

from cdc_core.puller.matcher import Matcher


@dataclass(slots=True)
class RegionState:
    request_id: int
    span_id: int
    region_id: int
    start_key: bytes
    end_key: bytes
    store_addr: str
    resolved_ts: int  # starts at the checkpoint the region was requested from
    initialized: bool = False
    matcher: Matcher = field(init=False)

    def __post_init__(self) -> None:
        self.matcher = Matcher(self.region_id)
