"""Table discovery: list and watch a schema's tables from the upstream catalog, with bounded memory.

The client side of seed 001 (Pulsar's proxy case): a listing of a large schema arrives as one big
message that must be held and decoded. The ``table-discovery``
:class:`~cdc_core.memory.AsyncDualMemoryLimiter` (``[table-discovery]`` of the changefeed TOML) bounds it:

1. **Heap, before the request.** An initial heap permit is acquired before asking; it is the heap the
   same listing needed last time (statistics, as the seed suggests), else :data:`INITIAL_HEAP`, capped
   at the limit. So concurrent listings of a large schema wait *before* their responses are in flight.
2. **Direct, for the received message.** The response is received as raw bytes (no deserializer), and a
   direct permit for exactly their size is acquired before decoding (the seed's ``cmdSize``).
3. **Heap, for the decoded list.** The heap permit is updated to the decoded message's estimate
   (:data:`DECODED_ENTRY_HEAP` per entry) and grows, :data:`MATERIALIZE_CHUNK` entries at a time and
   *before* they are built, as the entries the caller keeps are turned into :class:`DiscoveredTable`
   objects (:data:`RESULT_ENTRY_HEAP` + name length each).
4. **Release** when the caller is done: at the end of ``async with discovery.listing(...)``, when
   ``list_tables`` / ``matching_tables`` return (the caller owns the returned list then), or when a
   watch's consumer asks for the next event.

When permits cannot be had the call fails with :class:`~cdc_core.memory.MemoryLimitExceeded`, whose
message names the pool, its limit and the ``[table-discovery]`` key to raise; when the upstream refuses
(its own ``upstream-catalog`` limiter: RESOURCE_EXHAUSTED) with :class:`TableDiscoveryError` carrying the
upstream's message. Neither is retried here: the caller (a changefeed window) is retried as a whole.

:class:`TableDiscovery` is asyncio (grpc.aio); :class:`SyncTableDiscovery` wraps it for synchronous
callers (the changefeed runner) on one private event loop, so one limiter spans all its calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, NamedTuple

import grpc
from prometheus_client import CollectorRegistry

from cdc_core.client import pd_protocol
from cdc_core.errors import UpstreamError
from cdc_core.filter.table_filter import TableFilter
from cdc_core.memory import (
    AsyncDualMemoryLimiter,
    LimitType,
    MemoryGuard,
    MemoryLimitConfig,
    Permit,
    PermitSet,
    toml_setting,
)
from cdc_core.proto import catalogpb_pb2

__all__ = [
    "DECODED_BASE_HEAP",
    "DECODED_ENTRY_HEAP",
    "INITIAL_HEAP",
    "LIMITER_NAME",
    "MATERIALIZE_CHUNK",
    "RESULT_ENTRY_HEAP",
    "DiscoveredTable",
    "Listing",
    "SyncTableDiscovery",
    "TableDiscovery",
    "TableDiscoveryError",
    "WatchEvent",
    "discover_tables",
]

LIMITER_NAME: Final = "table-discovery"
TOML_SECTION: Final = "table-discovery"
INITIAL_HEAP: Final = 64 * 1024
# Heap of one decoded (upb) TableEntry: measured ~13 bytes per entry beyond the raw message; 2x margin.
DECODED_ENTRY_HEAP: Final = 32
DECODED_BASE_HEAP: Final = 1024  # the message object itself
# One materialized DiscoveredTable: the tuple (64), its id int (32), its name str header (49), the
# list slot (8), rounded up; plus the name's length. Schema names are shared between entries.
RESULT_ENTRY_HEAP: Final = 160
MATERIALIZE_CHUNK: Final = 10_000

_LIST_METHOD: Final = "/catalogpb.Catalog/ListTables"
_WATCH_METHOD: Final = "/catalogpb.Catalog/WatchTableList"

Keep = Callable[[str, str], bool]
"""``(schema, table name) -> keep it?``"""


class TableDiscoveryError(UpstreamError):
    """The upstream refused or failed a listing; ``code`` is the gRPC status (RESOURCE_EXHAUSTED: its limiter)."""

    def __init__(self, message: str, code: grpc.StatusCode | None) -> None:
        super().__init__(message)
        self.code = code


class DiscoveredTable(NamedTuple):
    table_id: int
    schema: str
    name: str


class _Decoded:
    """A decoded message and the permits that cover it; materializes entries under a growing heap permit."""

    def __init__(self, guard: MemoryGuard, permits: PermitSet, heap: Permit, what: str) -> None:
        self._guard = guard
        self._permits = permits
        self._heap = heap
        self._what = what

    @property
    def heap_bytes(self) -> int:
        return self._heap.permits

    async def _grow(self, extra: int) -> None:
        new = await self._guard.update(self._heap, self._heap.permits + extra, self._what)
        self._heap = self._permits.replace(self._heap, new)

    async def materialize(self, entries: Sequence[Any], keep: Keep | None) -> list[DiscoveredTable]:
        """The kept entries as :class:`DiscoveredTable`; the heap permit grows before each chunk is built.

        Only the names of one chunk (:data:`MATERIALIZE_CHUNK` entries) exist outside the permit, while
        ``keep`` looks at them.
        """
        out: list[DiscoveredTable] = []
        schemas: dict[str, str] = {}  # one str object per schema name
        for lo in range(0, len(entries), MATERIALIZE_CHUNK):
            chunk = entries[lo:lo + MATERIALIZE_CHUNK]
            kept = []
            for e in chunk:
                schema = schemas.setdefault(e.schema, e.schema)
                name = e.name
                if keep is None or keep(schema, name):
                    kept.append((e.table_id, schema, name))
            if kept:
                await self._grow(sum(RESULT_ENTRY_HEAP + len(name) for _, _, name in kept))
                out += [DiscoveredTable(*k) for k in kept]
        return out


class Listing(_Decoded):
    """A received ``ListTables`` response, valid inside ``async with TableDiscovery.listing(...)``."""

    def __init__(self, guard: MemoryGuard, permits: PermitSet, heap: Permit, what: str,
                 message: catalogpb_pb2.ListTablesResponse, wire_size: int) -> None:
        super().__init__(guard, permits, heap, what)
        self.message = message
        self.wire_size = wire_size

    @property
    def count(self) -> int:
        """Tables in the listing. O(1)."""
        return len(self.message.tables)

    @property
    def tables_hash(self) -> str:
        return str(self.message.tables_hash)

    async def tables(self, keep: Keep | None = None) -> list[DiscoveredTable]:
        return await self.materialize(self.message.tables, keep)

    def _discard(self) -> None:
        """Drop the decoded message when its permits go, even if the caller kept this object."""
        self.message = catalogpb_pb2.ListTablesResponse(tables_hash=self.message.tables_hash)


class WatchEvent(_Decoded):
    """One ``WatchTableList`` event, valid until the consumer asks the watch for the next one."""

    def __init__(self, guard: MemoryGuard, permits: PermitSet, heap: Permit, what: str,
                 message: catalogpb_pb2.WatchTableListEvent) -> None:
        super().__init__(guard, permits, heap, what)
        self.message = message

    @property
    def initial(self) -> bool:
        return bool(self.message.kind == catalogpb_pb2.WatchTableListEvent.INITIAL)

    @property
    def tables_hash(self) -> str:
        return str(self.message.tables_hash)

    async def added(self, keep: Keep | None = None) -> list[DiscoveredTable]:
        return await self.materialize(self.message.added, keep)

    async def removed(self, keep: Keep | None = None) -> list[DiscoveredTable]:
        return await self.materialize(self.message.removed, keep)

    def _discard(self) -> None:
        """Drop the decoded message when its permits go, even if the consumer still holds this event."""
        self.message = catalogpb_pb2.WatchTableListEvent(kind=self.message.kind, tables_hash=self.message.tables_hash)


def _rpc_error(pd_addr: str, what: str, exc: grpc.RpcError) -> TableDiscoveryError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return TableDiscoveryError(f"upstream {pd_addr}: {what} failed ({code.name if code else 'error'}): {details}",
                               code)


class TableDiscovery:
    """Async catalog client with a client-side memory limiter (see the module docstring).

    :param config: the ``[table-discovery]`` limits (default: the seed's defaults).
    :param registry: where the limiter's metrics (``limiter="table-discovery"``) go.
    :param timeout: seconds per ``ListTables`` call.
    """

    def __init__(self, pd_addr: str, config: MemoryLimitConfig | None = None, *,
                 registry: CollectorRegistry | None = None, timeout: float = 120.0) -> None:
        self.pd_addr = pd_addr
        self.timeout = timeout
        self.limiter = AsyncDualMemoryLimiter(config, name=LIMITER_NAME, registry=registry)
        self.guard = MemoryGuard(self.limiter, toml_setting(TOML_SECTION))
        self._channel: grpc.aio.Channel | None = None
        self._last_heap: dict[tuple[str, str], int] = {}  # heap the same listing needed last time

    def _chan(self) -> grpc.aio.Channel:
        if self._channel is None:  # created in the loop that uses it
            # No receive bound from gRPC (4 MiB by default): the direct-memory limiter is the bound.
            # The catalog is cdcflow's own service, which every embedded PD member serves: the first address given.
            addr = pd_protocol.split_addrs(self.pd_addr)[0]
            self._channel = grpc.aio.insecure_channel(addr, options=[("grpc.max_receive_message_length", -1)])
        return self._channel

    def _initial_heap(self, key: tuple[str, str]) -> int:
        size = max(INITIAL_HEAP, self._last_heap.get(key, 0))
        limit = self.limiter.heap.limit
        return min(size, limit) if limit else size

    @asynccontextmanager
    async def listing(self, schema: str = "", pattern: str = "") -> AsyncIterator[Listing]:
        """``ListTables(schema, pattern)``; the decoded listing and its permits live for the block."""
        what = f"ListTables(schema={schema!r}, pattern={pattern!r})"
        key = (schema.lower(), pattern.lower())
        permits = PermitSet(self.guard)
        listing: Listing | None = None
        try:
            heap = permits.add(await self.guard.acquire(self._initial_heap(key), LimitType.HEAP, what))
            call = self._chan().unary_unary(
                _LIST_METHOD, request_serializer=catalogpb_pb2.ListTablesRequest.SerializeToString)
            try:
                raw: bytes = await call(catalogpb_pb2.ListTablesRequest(schema=schema, pattern=pattern),
                                        timeout=self.timeout)
            except grpc.RpcError as exc:
                raise _rpc_error(self.pd_addr, what, exc) from exc
            wire_size = len(raw)
            permits.add(await self.guard.acquire(wire_size, LimitType.DIRECT, what))
            message = catalogpb_pb2.ListTablesResponse.FromString(raw)
            del raw  # the decoded message may still share its buffer: the direct permit stays held
            heap = permits.replace(heap, await self.guard.update(
                heap, DECODED_BASE_HEAP + DECODED_ENTRY_HEAP * len(message.tables), what))
            listing = Listing(self.guard, permits, heap, what, message, wire_size)
            yield listing
        finally:
            if listing is not None:
                self._last_heap[key] = listing.heap_bytes
                listing._discard()
            permits.release_all()

    async def list_tables(self, schema: str = "", pattern: str = "", keep: Keep | None = None
                          ) -> list[DiscoveredTable]:
        """The tables of ``schema`` matching ``pattern`` (and ``keep``); permits are released on return."""
        async with self.listing(schema, pattern) as listing:
            return await listing.tables(keep)

    async def matching_tables(self, table_filter: TableFilter, schemas: Iterable[str] = ("",)
                              ) -> list[DiscoveredTable]:
        """The tables ``table_filter`` replicates, listing each of ``schemas`` ("" = every schema)."""
        out: list[DiscoveredTable] = []
        for schema in schemas:
            out += await self.list_tables(schema, keep=table_filter.match)
        return out

    async def watch(self, schema: str = "", pattern: str = "") -> AsyncIterator[WatchEvent]:
        """``WatchTableList``: the initial event, then updates. Each event's permits are held until the
        consumer asks for the next one (or leaves the loop)."""
        what = f"WatchTableList(schema={schema!r}, pattern={pattern!r})"
        stream = self._chan().unary_stream(
            _WATCH_METHOD, request_serializer=catalogpb_pb2.WatchTableListRequest.SerializeToString)
        call = stream(catalogpb_pb2.WatchTableListRequest(schema=schema, pattern=pattern))
        permits = PermitSet(self.guard)
        event: WatchEvent | None = None
        try:
            while True:
                if event is not None:  # the consumer is done with the previous event
                    event._discard()
                permits.release_all()
                try:
                    raw = await call.read()
                except grpc.RpcError as exc:
                    raise _rpc_error(self.pd_addr, what, exc) from exc
                if raw is grpc.aio.EOF:
                    return
                assert isinstance(raw, bytes)
                permits.add(await self.guard.acquire(len(raw), LimitType.DIRECT, what))
                message = catalogpb_pb2.WatchTableListEvent.FromString(raw)
                del raw
                n = len(message.added) + len(message.removed)
                heap = permits.add(
                    await self.guard.acquire(DECODED_BASE_HEAP + DECODED_ENTRY_HEAP * n, LimitType.HEAP, what))
                event = WatchEvent(self.guard, permits, heap, what, message)
                del message
                yield event
        finally:
            if event is not None:
                event._discard()
            permits.release_all()
            call.cancel()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


class SyncTableDiscovery:
    """:class:`TableDiscovery` for synchronous callers, on one private event loop (not thread-safe)::

        with SyncTableDiscovery(pd_addr, cfg.discovery_memory) as discovery:
            tables = discovery.matching_tables(cfg.table_filter)
    """

    def __init__(self, pd_addr: str, config: MemoryLimitConfig | None = None, *,
                 registry: CollectorRegistry | None = None, timeout: float = 120.0) -> None:
        self._runner = asyncio.Runner()
        self.discovery = TableDiscovery(pd_addr, config, registry=registry, timeout=timeout)

    def _run(self, coro: Any) -> Any:
        return self._runner.run(coro)

    def list_tables(self, schema: str = "", pattern: str = "", keep: Keep | None = None) -> list[DiscoveredTable]:
        result: list[DiscoveredTable] = self._run(self.discovery.list_tables(schema, pattern, keep))
        return result

    def matching_tables(self, table_filter: TableFilter, schemas: Iterable[str] = ("",)) -> list[DiscoveredTable]:
        result: list[DiscoveredTable] = self._run(self.discovery.matching_tables(table_filter, schemas))
        return result

    def close(self) -> None:
        try:
            self._run(self.discovery.close())
        finally:
            self._runner.close()

    def __enter__(self) -> SyncTableDiscovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def discover_tables(pd_addr: str, table_filter: TableFilter, config: MemoryLimitConfig | None = None,
                    schemas: Iterable[str] = ("",)) -> list[DiscoveredTable]:
    """One-shot: the tables ``table_filter`` replicates (what a changefeed window's planning needs)."""
    with SyncTableDiscovery(pd_addr, config) as discovery:
        return discovery.matching_tables(table_filter, schemas)
