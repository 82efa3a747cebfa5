"""The region map (PD's view of TiKV regions): contiguous key ranges covering the whole key space.

Owns region ids, key ranges, epochs (``version`` bumps on split/merge, ``conf_ver`` on peer
changes), peers and leaders, and splitting. Regions are kept sorted by start key; the first
starts at ``b""`` and the last ends at ``b""`` (the end of the key space), with no gap or overlap.

Split observers (the CDC service) are told synchronously which region was replaced by which, so
that subscriptions on a split region get an ``epoch_not_match`` error and re-subscribe.
A later issue adds merges, leader transfers and multiple stores through the same observer hook.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from sortedcontainers import SortedDict

from cdc_core.codec import key as keycodec
from cdc_core.proto import metapb_pb2

_I64_MIN = -(1 << 63)


@dataclass(frozen=True)
class Peer:
    id: int
    store_id: int


@dataclass(frozen=True)
class Region:
    id: int
    start_key: bytes
    end_key: bytes  # b"" = the end of the key space
    version: int = 1
    conf_ver: int = 1
    peers: tuple[Peer, ...] = field(default_factory=tuple)
    leader: Peer | None = None

    def contains(self, key: bytes) -> bool:
        return self.start_key <= key and (not self.end_key or key < self.end_key)

    def overlaps(self, start: bytes, end: bytes) -> bool:
        """Whether ``[start, end)`` (``end == b""``: unbounded) intersects the region."""
        return (not end or self.start_key < end) and (not self.end_key or start < self.end_key)

    def to_pb(self) -> metapb_pb2.Region:
        return metapb_pb2.Region(
            id=self.id,
            start_key=self.start_key,
            end_key=self.end_key,
            region_epoch=metapb_pb2.RegionEpoch(conf_ver=self.conf_ver, version=self.version),
            peers=[metapb_pb2.Peer(id=p.id, store_id=p.store_id) for p in self.peers],
        )

    def leader_pb(self) -> metapb_pb2.Peer:
        if self.leader is None:
            return metapb_pb2.Peer()
        return metapb_pb2.Peer(id=self.leader.id, store_id=self.leader.store_id)


SplitObserver = Callable[[Region, list[Region]], None]


def table_split_keys(table_id: int, regions_per_table: int) -> list[bytes]:
    """Split keys giving the row span ``[t{id}_r, t{id}_s)`` ``regions_per_table`` regions.

    The handle space is cut evenly: with 2 regions at handle 0, with 4 at -2^62, 0, 2^62.
    """
    if regions_per_table < 1:
        raise ValueError(f"regions per table must be >= 1, got {regions_per_table}")
    start, end = keycodec.table_span(table_id)
    step = (1 << 64) // regions_per_table
    inner = [keycodec.row_key(table_id, _I64_MIN + i * step) for i in range(1, regions_per_table)]
    return [start, *inner, end]


class RegionManager:
    def __init__(self, store_ids: Iterable[int], id_alloc: Callable[[], int] | None = None) -> None:
        self._store_ids = list(store_ids)
        if not self._store_ids:
            raise ValueError("a cluster needs at least one store")
        counter = itertools.count(1)
        self._alloc = id_alloc or (lambda: next(counter))
        self._by_start: SortedDict = SortedDict()  # start_key -> Region
        self._by_id: dict[int, Region] = {}
        self._observers: list[SplitObserver] = []
        self._put(self._new_region(b"", b""))

    def _new_region(self, start: bytes, end: bytes, version: int = 1, conf_ver: int = 1) -> Region:
        rid = self._alloc()
        peers = tuple(Peer(self._alloc(), sid) for sid in self._store_ids)
        return Region(rid, start, end, version, conf_ver, peers, peers[0])

    def _put(self, r: Region) -> None:
        self._by_start[r.start_key] = r
        self._by_id[r.id] = r

    def add_split_observer(self, obs: SplitObserver) -> None:
        self._observers.append(obs)

    def remove_split_observer(self, obs: SplitObserver) -> None:
        self._observers.remove(obs)

    # --- queries ------------------------------------------------------------------------------
    def get(self, region_id: int) -> Region | None:
        return self._by_id.get(region_id)

    def locate(self, key: bytes) -> Region:
        """The region containing ``key``."""
        idx = self._by_start.bisect_right(key) - 1
        return self._by_start.values()[idx]  # type: ignore[no-any-return]

    def scan(self, start: bytes, end: bytes = b"", limit: int = 0) -> list[Region]:
        """Regions overlapping ``[start, end)`` in key order (at most ``limit`` when > 0)."""
        out: list[Region] = []
        first = self._by_start.bisect_right(start) - 1
        for r in self._by_start.values()[max(first, 0):]:
            if end and r.start_key >= end:
                break
            if r.overlaps(start, end):
                out.append(r)
                if limit and len(out) >= limit:
                    break
        return out

    def all(self) -> list[Region]:
        return list(self._by_start.values())

    # --- changes ------------------------------------------------------------------------------
    def split(self, split_keys: Iterable[bytes]) -> list[Region]:
        """Split at each key (keys that already start a region are skipped).

        The left part keeps the region id; both parts get the epoch version of the old region + 1.
        Returns the regions now covering ``[min(keys), max(keys))``.
        """
        keys = sorted(set(split_keys))
        for k in keys:
            old = self.locate(k)
            if old.start_key == k:
                continue
            left = replace(old, end_key=k, version=old.version + 1)
            right = self._new_region(k, old.end_key, version=old.version + 1, conf_ver=old.conf_ver)
            self._put(left)
            self._put(right)
            for obs in list(self._observers):
                obs(old, [left, right])
        return self.scan(keys[0], keys[-1]) if keys else []
