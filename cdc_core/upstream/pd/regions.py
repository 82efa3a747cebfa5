"""The region map (PD's view of TiKV regions): contiguous key ranges covering the whole key space.

Owns region ids, key ranges, epochs (``version`` bumps on split/merge, ``conf_ver`` on peer
changes), peers and leaders, and the region operations: split (also batch split of one region
into many), merge of two adjacent regions and leader transfer. Regions are kept in a
``SortedDict`` by start key, so locating a key, splitting, merging and scanning a batch are
O(log n) (plus the batch) even with hundreds of thousands of regions; the first region starts at
``b""`` and the last ends at ``b""`` (the end of the key space), with no gap or overlap.

Every region has a peer on every store (all stores share one MVCC store in-process, like
replicas); a new region's leader is the store leading the fewest regions (ties: round-robin), which
spreads leaders evenly as PD's balance-leader scheduler would. A region does not store its
peers: they are derived from the store list shared by all regions (a peer's id is
``region id * PEER_ID_STRIDE + store id``), which keeps a region at a few hundred bytes.

Observers (the CDC services, the split checker) are told synchronously of every change as a
``RegionChange`` (kind, the regions before, the regions after), so that subscriptions on a changed
region get the error TiKV would send (epoch_not_match, region_not_found, not_leader).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from sortedcontainers import SortedDict

from cdc_core.codec import key as keycodec
from cdc_core.codec.memcomparable import encode_key
from cdc_core.errors import EmbeddedUpstreamError
from cdc_core.proto import metapb_pb2

_I64_MIN = -(1 << 63)
# Peer ids are derived, not allocated: region id * stride + store id (store ids stay below it).
PEER_ID_STRIDE = 1024


class RegionError(EmbeddedUpstreamError):
    """A region operation cannot be done (unknown region, not adjacent, no such store...)."""


@dataclass(frozen=True, slots=True)
class Peer:
    id: int
    store_id: int


@dataclass(frozen=True, slots=True)
class Region:
    id: int
    start_key: bytes
    end_key: bytes  # b"" = the end of the key space
    version: int = 1
    conf_ver: int = 1
    store_ids: tuple[int, ...] = (1,)  # the stores holding a peer (one tuple shared by all regions)
    leader_store_id: int = 1

    @property
    def peers(self) -> tuple[Peer, ...]:
        return tuple(Peer(self.id * PEER_ID_STRIDE + s, s) for s in self.store_ids)

    @property
    def leader(self) -> Peer:
        return Peer(self.id * PEER_ID_STRIDE + self.leader_store_id, self.leader_store_id)

    def contains(self, key: bytes) -> bool:
        return self.start_key <= key and (not self.end_key or key < self.end_key)

    def overlaps(self, start: bytes, end: bytes) -> bool:
        """Whether ``[start, end)`` (``end == b""``: unbounded) intersects the region."""
        return (not end or self.start_key < end) and (not self.end_key or start < self.end_key)

    def to_pb(self) -> metapb_pb2.Region:
        msg = metapb_pb2.Region()
        self.fill_pb(msg)
        return msg

    def fill_pb(self, msg: metapb_pb2.Region) -> None:
        """Write the region into ``msg`` in place (twice as fast as building it from keyword arguments,
        which matters when ScanRegions serves 1024 regions a call). Its boundaries go memcomparable-encoded,
        as PD and TiKV keep them (the region manager itself works on raw keys)."""
        msg.id = self.id
        msg.start_key = encode_key(self.start_key)
        msg.end_key = encode_key(self.end_key)
        ep = msg.region_epoch
        ep.conf_ver = self.conf_ver
        ep.version = self.version
        add = msg.peers.add
        base = self.id * PEER_ID_STRIDE
        for s in self.store_ids:
            peer = add()
            peer.id = base + s
            peer.store_id = s

    def leader_pb(self) -> metapb_pb2.Peer:
        return metapb_pb2.Peer(id=self.id * PEER_ID_STRIDE + self.leader_store_id, store_id=self.leader_store_id)

    def fill_leader_pb(self, msg: metapb_pb2.Peer) -> None:
        msg.id = self.id * PEER_ID_STRIDE + self.leader_store_id
        msg.store_id = self.leader_store_id


class ChangeKind(enum.Enum):
    SPLIT = "split"  # before: [old]; after: [left (same id), right parts...]
    MERGE = "merge"  # before: [source, target]; after: [target grown] (the source id is gone)
    LEADER = "leader"  # before: [old]; after: [same region, new leader] (epoch unchanged)


@dataclass(frozen=True)
class RegionChange:
    kind: ChangeKind
    before: tuple[Region, ...]
    after: tuple[Region, ...]


RegionObserver = Callable[[RegionChange], None]
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


def split_values(lo: int, hi: int, regions: int) -> list[int]:
    """``SPLIT TABLE t BETWEEN (lo) AND (hi) REGIONS n``: the values ``lo + i * (hi - lo) / n``, i < n."""
    if regions < 1:
        raise ValueError(f"REGIONS must be >= 1, got {regions}")
    if hi <= lo:
        raise ValueError(f"the upper bound {hi} must be greater than the lower bound {lo}")
    step = (hi - lo) / regions
    return sorted({lo + int(i * step) for i in range(regions)})


def handle_split_keys(table_id: int, lo: int, hi: int, regions: int) -> list[bytes]:
    """The row keys of :func:`split_values` as integer handles."""
    return [keycodec.row_key(table_id, h) for h in split_values(lo, hi, regions)]


class RegionManager:
    def __init__(self, store_ids: Iterable[int], id_alloc: Callable[[], int] | None = None) -> None:
        self._store_ids = tuple(store_ids)
        if not self._store_ids:
            raise ValueError("a cluster needs at least one store")
        if max(self._store_ids) >= PEER_ID_STRIDE:
            raise ValueError(f"store ids must be below {PEER_ID_STRIDE}")
        counter = itertools.count(1)
        self._alloc = id_alloc or (lambda: next(counter))
        self._leader_rr = itertools.cycle(range(len(self._store_ids)))
        self._leaders = dict.fromkeys(self._store_ids, 0)  # store id -> regions it leads
        self._by_start: SortedDict = SortedDict()  # start_key -> Region
        self._by_id: dict[int, Region] = {}
        self._observers: list[RegionObserver] = []
        self._split_adapters: dict[SplitObserver, RegionObserver] = {}
        self._put(self._new_region(b"", b""))

    @property
    def store_ids(self) -> tuple[int, ...]:
        return self._store_ids

    def _pick_leader(self) -> int:
        n = len(self._store_ids)
        rot = next(self._leader_rr)
        order = [self._store_ids[(rot + i) % n] for i in range(n)]
        return min(order, key=self._leaders.__getitem__)

    def _new_region(self, start: bytes, end: bytes, version: int = 1, conf_ver: int = 1) -> Region:
        return Region(self._alloc(), start, end, version, conf_ver, self._store_ids, self._pick_leader())

    def _put(self, r: Region) -> None:
        old = self._by_id.get(r.id)
        if old is not None:
            self._leaders[old.leader_store_id] -= 1
        self._leaders[r.leader_store_id] += 1
        self._by_start[r.start_key] = r
        self._by_id[r.id] = r

    def _notify(self, change: RegionChange) -> None:
        for obs in list(self._observers):
            obs(change)

    # --- observers ----------------------------------------------------------------------------
    def add_observer(self, obs: RegionObserver) -> None:
        self._observers.append(obs)

    def remove_observer(self, obs: RegionObserver) -> None:
        self._observers.remove(obs)

    def add_split_observer(self, obs: SplitObserver) -> None:
        """Only splits, as ``obs(old, parts)``."""

        def adapter(ch: RegionChange) -> None:
            if ch.kind is ChangeKind.SPLIT:
                obs(ch.before[0], list(ch.after))

        self._split_adapters[obs] = adapter
        self.add_observer(adapter)

    def remove_split_observer(self, obs: SplitObserver) -> None:
        self.remove_observer(self._split_adapters.pop(obs))

    # --- queries ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, region_id: int) -> Region | None:
        return self._by_id.get(region_id)

    def locate(self, key: bytes) -> Region:
        """The region containing ``key``."""
        idx = self._by_start.bisect_right(key) - 1
        return self._by_start.peekitem(idx)[1]  # type: ignore[no-any-return]

    def scan(self, start: bytes, end: bytes = b"", limit: int = 0) -> list[Region]:
        """Regions overlapping ``[start, end)`` in key order (at most ``limit`` when > 0)."""
        out: list[Region] = []
        first = max(self._by_start.bisect_right(start) - 1, 0)
        by_start = self._by_start
        # islice walks the sorted keys from ``first`` without copying the rest of the map.
        for k in by_start.islice(first):
            r: Region = by_start[k]
            if end and r.start_key >= end:
                break
            if r.overlaps(start, end):
                out.append(r)
                if limit and len(out) >= limit:
                    break
        return out

    def all(self) -> list[Region]:
        return list(self._by_start.values())

    def neighbours(self, region: Region) -> tuple[Region | None, Region | None]:
        """The regions left and right of ``region`` (None at the ends of the key space)."""
        idx = self._by_start.index(region.start_key)
        left = self._by_start.peekitem(idx - 1)[1] if idx > 0 else None
        right = self._by_start.peekitem(idx + 1)[1] if region.end_key else None
        return left, right

    def leader_counts(self) -> dict[int, int]:
        """Store id -> how many regions it leads."""
        return dict(self._leaders)

    # --- changes ------------------------------------------------------------------------------
    def split(self, split_keys: Iterable[bytes]) -> list[Region]:
        """Split at each key (keys that already start a region are skipped).

        Keys falling in the same region split it in one batch (TiKV's batch split): the left part
        keeps the region id, every part gets the old epoch version + 1, and observers see one
        change per region split. Returns the regions now covering ``[min(keys), max(keys))``.
        """
        keys = sorted(set(split_keys))
        i = 0
        while i < len(keys):
            old = self.locate(keys[i])
            j = i
            cuts: list[bytes] = []
            while j < len(keys) and old.contains(keys[j]):
                if keys[j] != old.start_key:
                    cuts.append(keys[j])
                j += 1
            i = j
            if cuts:
                self._split_region(old, cuts)
        return self.scan(keys[0], keys[-1]) if keys else []

    def _split_region(self, old: Region, cuts: list[bytes]) -> None:
        version = old.version + 1
        bounds = [old.start_key, *cuts, old.end_key]
        left = replace(old, end_key=cuts[0], version=version)
        self._put(left)
        if len(cuts) < 64:
            parts = [left]
            for a, b in itertools.pairwise(bounds[1:]):
                r = self._new_region(a, b, version=version, conf_ver=old.conf_ver)
                self._put(r)
                parts.append(r)
        else:
            parts = [left, *self._bulk_new(bounds[1:], version, old.conf_ver)]
        self._notify(RegionChange(ChangeKind.SPLIT, (old,), tuple(parts)))

    def _bulk_new(self, bounds: list[bytes], version: int, conf_ver: int) -> list[Region]:
        """New regions between consecutive ``bounds``, inserted in one go (a batch split into many).

        Leaders go round-robin starting at the store leading the fewest regions, which keeps the
        leader counts within one of each other when they were; the sorted map takes the batch in
        one ``update`` (one sort instead of one insertion per region).
        """
        stores = sorted(self._store_ids, key=self._leaders.__getitem__)
        n = len(stores)
        sids = self._store_ids
        alloc = self._alloc
        new = [Region(alloc(), a, b, version, conf_ver, sids, stores[i % n])
               for i, (a, b) in enumerate(itertools.pairwise(bounds))]
        for r in new:
            self._leaders[r.leader_store_id] += 1
        self._by_start.update((r.start_key, r) for r in new)
        self._by_id.update((r.id, r) for r in new)
        return new

    def merge(self, source_id: int, target_id: int | None = None) -> Region:
        """Merge region ``source_id`` into an adjacent ``target_id`` (default: its right neighbour).

        Like TiKV, the target grows over the source's range and its version becomes
        ``max(source, target) + 1``; the source region id is gone. Returns the grown target.
        """
        source = self._by_id.get(source_id)
        if source is None:
            raise RegionError(f"region {source_id} does not exist")
        left, right = self.neighbours(source)
        if target_id is None:
            if right is None:
                raise RegionError(f"region {source_id} is the last region: it has no right neighbour to merge into")
            target = right
        else:
            t = self._by_id.get(target_id)
            if t is None:
                raise RegionError(f"region {target_id} does not exist")
            if t not in (left, right):
                raise RegionError(f"regions {source_id} and {target_id} are not adjacent")
            target = t
        version = max(source.version, target.version) + 1
        if target.start_key == source.end_key:  # target on the right: it now starts where the source did
            grown = replace(target, start_key=source.start_key, version=version)
            del self._by_start[target.start_key]
        else:
            grown = replace(target, end_key=source.end_key, version=version)
            del self._by_start[source.start_key]
        del self._by_id[source.id]
        self._leaders[source.leader_store_id] -= 1
        self._put(grown)
        self._notify(RegionChange(ChangeKind.MERGE, (source, target), (grown,)))
        return grown

    def transfer_leader(self, region_id: int, store_id: int) -> Region:
        old = self._by_id.get(region_id)
        if old is None:
            raise RegionError(f"region {region_id} does not exist")
        if store_id not in self._store_ids:
            raise RegionError(f"store {store_id} does not exist (stores: {list(self._store_ids)})")
        if old.leader_store_id == store_id:
            return old
        new = replace(old, leader_store_id=store_id)
        self._put(new)
        self._notify(RegionChange(ChangeKind.LEADER, (old,), (new,)))
        return new
