"""The unlocked part of a subscribed span: key ranges not held by any region, each with the ts it is resolved to.

After TiCDC's ``rangeTsMap`` (``logservice/logpuller/regionlock/range_ts_map.go``). The map tiles the span
``[start, end)`` with *entries* keyed by their start key (an entry ends where the next one starts, the last one
at the span end). An entry is either **set** — an unlocked range (a "hole") resolved up to its ts — or **unset**
— covered by locked ranges, whose ts the :class:`~cdc_core.puller.range_lock.RangeLock` tracks. Adjacent unset
entries are merged; adjacent set entries are kept apart because their ts differ.

Unlike TiCDC, where ``getMinTs`` is a full B-tree traversal (the hot spot of seed 000), the set entries are also
kept in a sorted list by ``(ts, start)``, so the minimum over all holes is O(1).

Keys are ``bytes``; an empty *end* key means "unbounded" (+∞), as on the wire. An empty *start* key is simply
the smallest key.

Complexity (n = entries, k = entries a call covers; sortedcontainers' operations are O(log n) amortised):

========================== ================= =========================================================
operation                  cost              note
========================== ================= =========================================================
``set(start, end, ts)``    O((k+1) log n)    the range must be fully unset (locked); raises otherwise
``unset(start, end)``      O((k+1) log n)    the range must be fully set; returns its min ts
``min_ts_in_range``        O(log n + k)
``min_ts()``               O(1)              smallest ts over all holes (``None`` when there is none)
``oldest_hole()``          O(log n)          ``(start, end, ts)`` of the hole with the smallest ts
``holes`` / ``len(self)``  O(1)              number of set entries
``iter_holes()``           O(n)
========================== ================= =========================================================
"""

from __future__ import annotations

from collections.abc import Iterator

from sortedcontainers import SortedDict, SortedList

__all__ = ["RangeTsMap", "RangeTsMapError", "end_after"]


class RangeTsMapError(RuntimeError):
    """A set/unset that would break the map's invariant (double set, double unset, out of span)."""


def end_after(a: bytes, b: bytes) -> bool:
    """Whether end key ``a`` lies strictly after key ``b`` (an empty ``a`` is +∞)."""
    return not a or a > b




class RangeTsMap:
    """Key ranges of one span mapped to a ts (set) or to "locked" (unset); see the module docstring."""

    __slots__ = ("_by_ts", "_entries", "end", "start")

    def __init__(self, start: bytes, end: bytes, ts: int) -> None:
        if end and end <= start:
            raise ValueError(f"empty span [{start.hex()}, {end.hex()})")
        self.start = start
        self.end = end
        # start key -> ts of the hole starting there, or None for an unset (locked) stretch.
        self._entries: SortedDict = SortedDict({start: ts})
        # (ts, start) of every set entry: the minimum is its first element.
        self._by_ts: SortedList = SortedList([(ts, start)])

    # --- queries ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._by_ts)

    @property
    def holes(self) -> int:
        """Number of set entries (unlocked ranges)."""
        return len(self._by_ts)

    def min_ts(self) -> int | None:
        """The smallest ts over all unlocked ranges, ``None`` when the whole span is locked. O(1)."""
        return self._by_ts[0][0] if self._by_ts else None

    def oldest_hole(self) -> tuple[bytes, bytes, int] | None:
        """The unlocked range with the smallest ts, as ``(start, end, ts)``."""
        if not self._by_ts:
            return None
        ts, start = self._by_ts[0]
        return start, self._next_key(start), ts

    def iter_holes(self) -> Iterator[tuple[bytes, bytes, int]]:
        """Every unlocked range ``(start, end, ts)`` in key order."""
        entries = self._entries
        keys = list(entries.keys())
        ends = [*keys[1:], self.end]
        for start, end in zip(keys, ends, strict=True):
            ts = entries[start]
            if ts is not None:
                yield start, end, ts

    def min_ts_in_range(self, start: bytes, end: bytes) -> int:
        """The smallest ts over ``[start, end)``, which must be entirely unlocked."""
        self._check_bounds(start, end)
        entries = self._entries
        first, inner = self._overlapping(start, end)
        values = [entries[first], *(entries[k] for k in inner)]
        set_values = [v for v in values if v is not None]
        if len(set_values) != len(values):
            raise RangeTsMapError(f"range [{start.hex()}, {end.hex()}) is partly locked")
        return min(set_values)

    # --- updates ---------------------------------------------------------------------------------
    def set(self, start: bytes, end: bytes, ts: int) -> None:
        """Mark ``[start, end)`` unlocked at ``ts``; it must be entirely locked (unset) now."""
        self._check_bounds(start, end)
        entries = self._entries
        first, inner = self._overlapping(start, end)
        if entries[first] is not None or any(entries[k] is not None for k in inner):
            raise RangeTsMapError(f"double set of [{start.hex()}, {end.hex()})")
        # The stretch after `end` keeps being locked: give it its own entry.
        if end != self.end and end not in entries:
            entries[end] = None
        if first == start:
            del entries[start]
        for key in inner:
            del entries[key]
        entries[start] = ts
        self._by_ts.add((ts, start))

    def unset(self, start: bytes, end: bytes) -> int:
        """Mark ``[start, end)`` locked; it must be entirely unlocked now. Returns its min ts (the lock's start)."""
        self._check_bounds(start, end)
        entries = self._entries
        by_ts = self._by_ts
        first, inner = self._overlapping(start, end)
        values = [entries[first], *(entries[k] for k in inner)]
        set_values = [v for v in values if v is not None]
        if len(set_values) != len(values):
            raise RangeTsMapError(f"double unset of [{start.hex()}, {end.hex()})")
        min_ts = min(set_values)
        if end != self.end:
            nxt = entries.get(end, _MISSING)
            if nxt is _MISSING:
                # `end` falls inside the last overlapping hole: its tail [end, ...) stays a hole with its ts.
                tail_ts = set_values[-1]
                entries[end] = tail_ts
                by_ts.add((tail_ts, end))
            elif nxt is None:
                del entries[end]  # merge with the locked stretch that follows
        if first == start:
            prev = next(entries.irange(maximum=start, inclusive=(True, False), reverse=True), None)
            merge_prev = prev is not None and entries[prev] is None
            by_ts.remove((entries.pop(start), start))
        else:
            merge_prev = False  # the hole containing `start` keeps its head [first, start)
        for key in inner:
            by_ts.remove((entries.pop(key), key))
        if not merge_prev:
            entries[start] = None
        return min_ts

    # --- internals -------------------------------------------------------------------------------
    def _check_bounds(self, start: bytes, end: bytes) -> None:
        if start < self.start or (self.end and end_after(end, self.end)):
            raise RangeTsMapError(
                f"range [{start.hex()}, {end.hex()}) is outside span [{self.start.hex()}, {self.end.hex()})"
            )
        if end and end <= start:
            raise RangeTsMapError(f"empty range [{start.hex()}, {end.hex()})")

    def _floor_key(self, key: bytes) -> bytes:
        """Start key of the entry containing ``key`` (``irange`` walks the sorted lists without the positional
        index that ``peekitem`` builds, which made locking several times slower)."""
        k: bytes = next(self._entries.irange(maximum=key, reverse=True))
        return k

    def _next_key(self, key: bytes) -> bytes:
        """Start of the entry after the one starting at ``key`` (or the span end)."""
        k: bytes = next(self._entries.irange(minimum=key, inclusive=(False, True)), self.end)
        return k

    def _overlapping(self, start: bytes, end: bytes) -> tuple[bytes, list[bytes]]:
        """The start of the entry containing ``start``, and the entry starts inside ``(start, end)``.

        The common case — ``start`` is an entry's start — costs a dict lookup instead of a search.
        """
        first = start if start in self._entries else self._floor_key(start)
        inner = list(self._entries.irange(start, end or None, inclusive=(False, False)))
        return first, inner


_MISSING = object()
