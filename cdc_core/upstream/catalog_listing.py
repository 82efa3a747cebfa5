"""The catalog service's listing index: every table's wire encoding, kept per schema, and listing selections.

Why: building a ``ListTablesResponse`` of a million ``TableEntry`` messages through protobuf objects
costs seconds of CPU and ~170 bytes of heap per entry on every call. Instead each table's
``TableEntry`` is encoded once, when it is created (length-prefixed, ready to follow a field tag), and a
listing is the concatenation ``tag, entry, tag, entry, ..., hash field`` - a valid protobuf message
(``repeated`` fields are just repeated tag/length/bytes), whose exact size is known *before* it is
serialized, so the direct-memory permit can be acquired first (seed 001's "pre-serialization" step).

Tables hash: the hex of the sum, modulo 2**64, of a 64-bit BLAKE2b digest of each table's entry. The
sum is order-independent, so a schema's hash is maintained in O(1) per change and a watcher updates its
own in O(changed tables); two lists of the same tables (same ids, schemas and names) hash alike.

Memory: the index costs ~100 bytes per table (an encoded entry of ~26 bytes plus object and dict
overhead) for as long as the table exists - catalog memory, like the ``TableInfo`` itself, not
listing memory, so it is not counted by the listing limiter. What a listing allocates is counted:
``Selection.heap_bytes`` (the list of references to join) and ``Selection.wire_size`` (the bytes).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cdc_core.schema.model import TableInfo
from cdc_core.upstream.catalog import Catalog

__all__ = [
    "LIST_ENTRY_TAG",
    "WATCH_ADDED_TAG",
    "WATCH_REMOVED_TAG",
    "ListingIndex",
    "Selection",
    "encode_entry",
    "entry_digest",
    "format_hash",
    "length_delimited",
    "name_pattern",
    "varint",
]

# Field tags (field number << 3 | wire type 2, length-delimited) of catalogpb.proto.
LIST_ENTRY_TAG: Final = b"\x0a"  # ListTablesResponse.tables = 1
LIST_HASH_TAG: Final = b"\x12"  # ListTablesResponse.tables_hash = 2
WATCH_UPDATE_KIND: Final = b"\x08\x01"  # WatchTableListEvent.kind = 1 (UPDATE; INITIAL = 0 is omitted)
WATCH_ADDED_TAG: Final = b"\x12"  # WatchTableListEvent.added = 2
WATCH_REMOVED_TAG: Final = b"\x1a"  # WatchTableListEvent.removed = 3
WATCH_HASH_TAG: Final = b"\x22"  # WatchTableListEvent.tables_hash = 4

_MASK: Final = (1 << 64) - 1
# A Python list: 56 bytes of header, 8 per reference; plus the small objects of one listing.
_LIST_HEADER: Final = 56
_LISTING_OVERHEAD: Final = 1024


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of ``n >= 0``."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(payload: bytes) -> bytes:
    return varint(len(payload)) + payload


def encode_entry(info: TableInfo) -> bytes:
    """The length-prefixed encoding of ``TableEntry{table_id, schema, name}`` (put a field tag before it)."""
    body = (b"\x08" + varint(info.id) + b"\x12" + length_delimited(info.db_name.encode())
            + b"\x1a" + length_delimited(info.name.encode()))
    return length_delimited(body)


def entry_digest(entry: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(entry, digest_size=8).digest(), "big")


def format_hash(digest_sum: int) -> str:
    return f"{digest_sum & _MASK:016x}"


def name_pattern(pattern: str) -> re.Pattern[str] | None:
    """The compiled, case-insensitive table-name glob (``*``, ``?``, ``[...]``); ``None`` for all names."""
    if not pattern or pattern == "*":
        return None
    return re.compile(fnmatch.translate(pattern.lower()))


@dataclass(frozen=True, slots=True)
class Selection:
    """The encoded entries of one listing, not yet joined; ``message`` builds the bytes."""

    parts: list[bytes]  # tag, entry, tag, entry, ...
    count: int
    digest_sum: int
    entries_size: int  # bytes of the parts

    @property
    def tables_hash(self) -> str:
        return format_hash(self.digest_sum)

    @property
    def heap_bytes(self) -> int:
        """Estimated heap of the assembled listing: the list of references and the listing's small objects."""
        return _LIST_HEADER + 8 * len(self.parts) + _LISTING_OVERHEAD

    def wire_size(self, prefix: bytes, hash_tag: bytes) -> int:
        """The exact size of :meth:`message` - known before any byte of it is allocated."""
        return len(prefix) + self.entries_size + len(hash_tag) + 1 + 16

    def message(self, prefix: bytes, hash_tag: bytes) -> bytes:
        """``prefix`` (e.g. the event kind), the entries, then the hash field: one protobuf message."""
        tail = hash_tag + length_delimited(self.tables_hash.encode())
        return b"".join((prefix, *self.parts, tail)) if prefix else b"".join([*self.parts, tail])

    @staticmethod
    def bound_heap_bytes(count: int) -> int:
        """Heap estimate of a listing of at most ``count`` tables (before it is assembled)."""
        return _LIST_HEADER + 16 * count + _LISTING_OVERHEAD


class _Schema:
    __slots__ = ("digest_sum", "entries", "size")

    def __init__(self) -> None:
        self.entries: dict[int, bytes] = {}  # table id -> encoded entry, in insertion order
        self.digest_sum = 0
        self.size = 0  # sum of len(entry) + 1 (the tag) over entries


class ListingIndex:
    """Encoded entries per schema, maintained by a catalog listener; selections for listings.

    Register it before anything else listens (``CatalogService`` does), so that a watcher that lists
    right after a change sees the index already updated.
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._schemas: dict[str, _Schema] = {}
        for db in catalog.databases():
            self.on_change(catalog.tables(db.name), [])
        catalog.add_listener(self.on_change)

    def on_change(self, added: list[TableInfo], removed: list[TableInfo]) -> None:
        """Catalog listener. O(changed tables)."""
        for info in removed:
            schema = self._schemas.get(info.db_name.lower())
            entry = schema.entries.pop(info.id, None) if schema is not None else None
            if schema is not None and entry is not None:
                schema.digest_sum -= entry_digest(entry)
                schema.size -= len(entry) + 1
                if not schema.entries:
                    del self._schemas[info.db_name.lower()]
        for info in added:
            schema = self._schemas.get(info.db_name.lower())
            if schema is None:
                schema = self._schemas[info.db_name.lower()] = _Schema()
            entry = encode_entry(info)
            schema.entries[info.id] = entry
            schema.digest_sum += entry_digest(entry)
            schema.size += len(entry) + 1

    def count(self, schema: str) -> int:
        """Tables a listing of ``schema`` (all schemas when empty) can hold at most. O(schemas)."""
        if schema:
            found = self._schemas.get(schema.lower())
            return len(found.entries) if found is not None else 0
        return sum(len(s.entries) for s in self._schemas.values())

    def select(self, schema: str, pattern: str, tag: bytes) -> Selection:
        """The tables of ``schema`` (all when empty) whose name matches ``pattern``, each preceded by ``tag``.

        O(tables of the schema): the whole schema is a C-level list copy; a pattern also reads each
        table's name from the catalog and digests the matching entries.
        """
        schemas = [self._schemas.get(schema.lower())] if schema else list(self._schemas.values())
        rx = name_pattern(pattern)
        parts: list[bytes] = []
        digest_sum = size = count = 0
        for found in schemas:
            if found is None:
                continue
            if rx is None:
                entries: Iterable[bytes] = found.entries.values()
                digest_sum += found.digest_sum
                size += found.size
                n = len(found.entries)
            else:
                matched = [found.entries[t.id] for t in self._tables_of(found) if rx.match(t.name.lower())]
                entries = matched
                digest_sum += sum(entry_digest(e) for e in matched)
                size += sum(len(e) + 1 for e in matched)
                n = len(matched)
            start = len(parts)
            parts.extend([tag] * (2 * n))
            parts[start + 1::2] = entries  # tags stay at the even positions
            count += n
        return Selection(parts, count, digest_sum & _MASK, size)

    def _tables_of(self, schema: _Schema) -> Iterable[TableInfo]:
        table = self.catalog.table_by_id  # the index and the catalog hold the same ids
        return (t for t in map(table, schema.entries) if t is not None)
