"""The catalog service: ``ListTables`` and ``WatchTableList`` over the catalog.

The equivalents of Pulsar's GetTopicsOfNamespace / WatchTopicList (seed 001): a listing is
filtered by schema and a table-filter style name pattern (``*``, ``?``, ``[...]``,
case-insensitive) and carries a hash of the sorted list; a watch sends the initial list, then
the tables added and removed by every CREATE / DROP / TRUNCATE / RENAME.

Memory: every listing passes through ``ListingLimiter.reserve(nbytes)`` before it is sent - a
no-op today; seed 001's AsyncDualMemoryLimiter (``cdc_core/memory``) plugs in here to bound the
bytes of listings in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
from collections.abc import AsyncIterator
from typing import Protocol

import grpc

from cdc_core.proto import catalogpb_pb2, catalogpb_pb2_grpc
from cdc_core.schema.model import TableInfo
from cdc_core.upstream.catalog import Catalog


class ListingLimiter(Protocol):
    def reserve(self, nbytes: int) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold ``nbytes`` of listing memory for the duration of the context."""
        ...


class NoLimit:
    @contextlib.asynccontextmanager
    async def reserve(self, nbytes: int) -> AsyncIterator[None]:
        yield


def _entry(t: TableInfo) -> catalogpb_pb2.TableEntry:
    return catalogpb_pb2.TableEntry(table_id=t.id, schema=t.db_name, name=t.name)


def tables_hash(tables: list[TableInfo]) -> str:
    h = hashlib.sha256()
    for t in sorted(tables, key=lambda t: (t.db_name.lower(), t.name.lower(), t.id)):
        h.update(f"{t.db_name.lower()}.{t.name.lower()}#{t.id}\n".encode())
    return h.hexdigest()[:16]


def matches(t: TableInfo, schema: str, pattern: str) -> bool:
    if schema and t.db_name.lower() != schema.lower():
        return False
    return fnmatch.fnmatchcase(t.name.lower(), (pattern or "*").lower())


class CatalogService(catalogpb_pb2_grpc.CatalogServicer):
    def __init__(self, catalog: Catalog, limiter: ListingLimiter | None = None) -> None:
        self.catalog = catalog
        self.limiter: ListingLimiter = limiter or NoLimit()

    def _list(self, schema: str, pattern: str) -> list[TableInfo]:
        return [t for t in self.catalog.tables() if matches(t, schema, pattern)]

    async def ListTables(self, request: catalogpb_pb2.ListTablesRequest, context: grpc.aio.ServicerContext
                         ) -> catalogpb_pb2.ListTablesResponse:
        tables = self._list(request.schema, request.pattern)
        resp = catalogpb_pb2.ListTablesResponse(tables=[_entry(t) for t in tables], tables_hash=tables_hash(tables))
        async with self.limiter.reserve(resp.ByteSize()):
            return resp

    async def WatchTableList(self, request: catalogpb_pb2.WatchTableListRequest,
                             context: grpc.aio.ServicerContext) -> AsyncIterator[catalogpb_pb2.WatchTableListEvent]:
        queue: asyncio.Queue[tuple[list[TableInfo], list[TableInfo]]] = asyncio.Queue()

        def listener(added: list[TableInfo], removed: list[TableInfo]) -> None:
            queue.put_nowait((added, removed))

        # Register before listing, in the same step: no change falls between the two.
        self.catalog.add_listener(listener)
        try:
            known = {t.id: t for t in self._list(request.schema, request.pattern)}
            initial = catalogpb_pb2.WatchTableListEvent(
                kind=catalogpb_pb2.WatchTableListEvent.INITIAL, added=[_entry(t) for t in known.values()],
                tables_hash=tables_hash(list(known.values())))
            async with self.limiter.reserve(initial.ByteSize()):
                yield initial
            while True:
                added, removed = await queue.get()
                gone = [t for t in removed if t.id in known and known[t.id].name == t.name
                        and known[t.id].db_name == t.db_name]
                for t in gone:
                    known.pop(t.id)
                new = [t for t in added if matches(t, request.schema, request.pattern)]
                for t in new:
                    known[t.id] = t
                if not gone and not new:
                    continue
                ev = catalogpb_pb2.WatchTableListEvent(
                    kind=catalogpb_pb2.WatchTableListEvent.UPDATE, added=[_entry(t) for t in new],
                    removed=[_entry(t) for t in gone], tables_hash=tables_hash(list(known.values())))
                async with self.limiter.reserve(ev.ByteSize()):
                    yield ev
        finally:
            self.catalog.remove_listener(listener)
