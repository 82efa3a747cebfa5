"""The catalog service: ``ListTables`` and ``WatchTableList``, with their memory bounded (seed 001).

The equivalents of Pulsar's GetTopicsOfNamespace / WatchTopicList: a listing is filtered by schema and a
table-filter style name pattern (``*``, ``?``, ``[...]``, case-insensitive) and carries a hash of the
set of tables (:mod:`cdc_core.upstream.catalog_listing`); a watch sends the initial list, then the
tables added and removed by every CREATE / DROP / TRUNCATE / RENAME (and bulk creation).

Memory (the ``upstream-catalog`` :class:`~cdc_core.memory.AsyncDualMemoryLimiter`, HEAP + DIRECT):

1. **Heap, before assembling.** A listing first acquires an initial heap permit sized for the most
   tables it can hold (the schema's table count, known in O(1)) - so the assembly itself is covered,
   which is better than a fixed initial guess - capped at the heap limit; after assembling it updates
   the permit to the estimate of what it assembled (:attr:`Selection.heap_bytes`; a pattern usually
   shrinks it).
2. **Direct, before serializing.** The exact size of the response message is known before its bytes
   exist (:meth:`Selection.wire_size`, equal to ``ByteSize()``); the direct permit for it is acquired
   and only then are the bytes joined.
3. **Release after the write.** ``ListTables`` is a grpc.aio unary handler, so the response is written
   *after* the handler returns: the permits are released from ``context.add_done_callback``, which
   grpc.aio calls once the RPC is over - the response and status sent, or the RPC failed or was
   cancelled - on every path. ``WatchTableList`` writes each event with ``await context.write(...)``,
   which returns once the message is handed to the transport, and releases right after it.
4. **When permits cannot be had** (the request is larger than a pool, the pool's wait queue is full, or
   the acquire timeout passed) ``ListTables`` and a watch's initial list fail with
   ``RESOURCE_EXHAUSTED`` and a message naming the pool, its limit and what was hit. A watch's
   *updates* are never dropped: a refused update is retried with exponential backoff while newer
   changes coalesce into one pending delta per watcher (an add and a remove of the same table cancel
   out), so a slow watcher holds at most O(tables of its schema), not O(changes). Updates are cut into
   events of at most :data:`UPDATE_CHUNK` tables, so no update is too large for a sane limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

import grpc
from prometheus_client import CollectorRegistry

from cdc_core.log import get_logger
from cdc_core.memory import (
    AsyncDualMemoryLimiter,
    LimitType,
    MemoryGuard,
    MemoryLimitConfig,
    MemoryLimitExceeded,
    PermitSet,
)
from cdc_core.proto import catalogpb_pb2
from cdc_core.schema.model import TableInfo
from cdc_core.upstream.catalog import Catalog
from cdc_core.upstream.catalog_listing import (
    LIST_ENTRY_TAG,
    LIST_HASH_TAG,
    WATCH_ADDED_TAG,
    WATCH_HASH_TAG,
    WATCH_REMOVED_TAG,
    WATCH_UPDATE_KIND,
    ListingIndex,
    Selection,
    encode_entry,
    entry_digest,
    format_hash,
    length_delimited,
    name_pattern,
)

__all__ = ["LIMITER_NAME", "UPDATE_CHUNK", "CatalogService", "cli_setting", "matches"]

log = get_logger("cdcflow.upstream.catalog")

LIMITER_NAME: Final = "upstream-catalog"
UPDATE_CHUNK: Final = 10_000
# Heap of one table in an update event being built: the TableInfo reference in two lists, the encoded
# entry (a bytes object) and its tag reference.
_UPDATE_ENTRY_HEAP: Final = 128
_HASH_FIELD: Final = 1 + 1 + 16

_Key = tuple[int, str, str]


def cli_setting(pool: LimitType, what: str) -> str:
    """The ``cdcflow upstream start`` flag that sets ``what`` of ``pool`` (named in RESOURCE_EXHAUSTED)."""
    return {
        "limit": f"--catalog-{pool.value}-limit-bytes",
        "queue": "--catalog-max-queue",
        "timeout": "--catalog-acquire-timeout-ms",
    }[what]


def matches(t: TableInfo, schema: str, pattern: str) -> bool:
    if schema and t.db_name.lower() != schema.lower():
        return False
    rx = name_pattern(pattern)
    return rx is None or rx.match(t.name.lower()) is not None


def _pass_through(message: bytes | object) -> bytes:
    """Response serializer: the handlers hand over bytes they serialized under a direct permit."""
    if isinstance(message, bytes):
        return message
    return message.SerializeToString()  # type: ignore[attr-defined, no-any-return]


class _Watcher:
    """One watch's pending delta since the last event it sent; coalesces while an update waits."""

    __slots__ = ("added", "digest_sum", "removed", "rx", "schema", "wake")

    def __init__(self, schema: str, pattern: str) -> None:
        self.schema = schema.lower()
        self.rx = name_pattern(pattern)
        self.added: dict[_Key, TableInfo] = {}
        self.removed: dict[_Key, TableInfo] = {}
        self.wake = asyncio.Event()
        self.digest_sum = 0  # of the tables the client has been sent

    def _matches(self, t: TableInfo) -> bool:
        if self.schema and t.db_name.lower() != self.schema:
            return False
        return self.rx is None or self.rx.match(t.name.lower()) is not None

    def on_change(self, added: list[TableInfo], removed: list[TableInfo]) -> None:
        """Catalog listener: fold the change into the pending delta. O(changed tables)."""
        for t in removed:
            if self._matches(t):
                key = (t.id, t.db_name, t.name)
                if self.added.pop(key, None) is None:  # not sent yet: the add and the remove cancel out
                    self.removed[key] = t
        for t in added:
            if self._matches(t):
                key = (t.id, t.db_name, t.name)
                if self.removed.pop(key, None) is None:
                    self.added[key] = t
        if self.added or self.removed:
            self.wake.set()

    def take(self) -> tuple[list[TableInfo], list[TableInfo]]:
        """The pending (removed, added) tables; the delta starts empty again."""
        removed, added = list(self.removed.values()), list(self.added.values())
        self.removed.clear()
        self.added.clear()
        self.wake.clear()
        return removed, added


class CatalogService:
    """``catalogpb.Catalog`` over a :class:`Catalog`, bounded by the ``upstream-catalog`` limiter.

    :param config: the limiter's limits (default: the seed's; ``MemoryLimitConfig.disabled()`` for none).
    :param registry: where the limiter's metrics go (default: the process-wide registry).
    :param retry_backoff: ``(first, max)`` seconds between attempts of a refused watch update.
    """

    def __init__(
        self,
        catalog: Catalog,
        config: MemoryLimitConfig | None = None,
        *,
        registry: CollectorRegistry | None = None,
        retry_backoff: tuple[float, float] = (0.05, 2.0),
    ) -> None:
        self.catalog = catalog
        self.index = ListingIndex(catalog)  # first listener: up to date before any watcher looks
        self.limiter = AsyncDualMemoryLimiter(config, name=LIMITER_NAME, registry=registry)
        self.guard = MemoryGuard(self.limiter, cli_setting)
        self.retry_backoff = retry_backoff
        self.update_retries = 0  # watch updates refused and retried (observable by tests and logs)

    def add_to_server(self, server: grpc.aio.Server) -> None:
        """Register the service; responses are the bytes the handlers serialized under their permits."""
        handlers = {
            "ListTables": grpc.unary_unary_rpc_method_handler(
                self.ListTables,
                request_deserializer=catalogpb_pb2.ListTablesRequest.FromString,
                response_serializer=_pass_through,
            ),
            "WatchTableList": grpc.unary_stream_rpc_method_handler(
                self.WatchTableList,
                request_deserializer=catalogpb_pb2.WatchTableListRequest.FromString,
                response_serializer=_pass_through,
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("catalogpb.Catalog", handlers),))

    # --- ListTables ---------------------------------------------------------------------------------
    async def ListTables(self, request: catalogpb_pb2.ListTablesRequest, context: grpc.aio.ServicerContext) -> bytes:
        what = f"ListTables(schema={request.schema!r}, pattern={request.pattern!r})"
        permits = PermitSet(self.guard)
        loop = asyncio.get_running_loop()
        # Released when the RPC is over (response written, failed or cancelled); the callback may come
        # from a gRPC thread and the semaphores belong to this loop.
        context.add_done_callback(lambda _ctx: loop.call_soon_threadsafe(permits.release_all))
        try:
            selection = await self._assemble(
                permits, what, self.index.count(request.schema),
                lambda: self.index.select(request.schema, request.pattern, LIST_ENTRY_TAG))
            await self._reserve_direct(permits, what, selection.wire_size(b"", LIST_HASH_TAG))
            return selection.message(b"", LIST_HASH_TAG)
        except MemoryLimitExceeded as exc:
            log.warning("catalog listing refused", reason=exc.message)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message)
            raise  # abort raises; this line is never reached

    async def _assemble(
        self, permits: PermitSet, what: str, bound: int, select: Callable[[], Selection]
    ) -> Selection:
        """Heap permit for ``bound`` tables, assemble with ``select()``, update the permit to the result."""
        heap_limit = self.limiter.heap.limit
        initial = Selection.bound_heap_bytes(bound)
        if heap_limit:  # assembling more than the limit is caught by the update below, with its size
            initial = min(initial, heap_limit)
        heap = permits.add(await self.guard.acquire(initial, LimitType.HEAP, what))
        selection = select()
        permits.replace(heap, await self.guard.update(heap, selection.heap_bytes, what))
        return selection

    async def _reserve_direct(self, permits: PermitSet, what: str, size: int) -> None:
        permits.add(await self.guard.acquire(size, LimitType.DIRECT, what))

    # --- WatchTableList -----------------------------------------------------------------------------
    async def WatchTableList(
        self, request: catalogpb_pb2.WatchTableListRequest, context: grpc.aio.ServicerContext
    ) -> None:
        what = f"WatchTableList(schema={request.schema!r}, pattern={request.pattern!r})"
        watcher = _Watcher(request.schema, request.pattern)
        registered = False

        def register_and_select() -> Selection:
            # Register and list in the same step (no await in between): no change falls between the two.
            nonlocal registered
            self.catalog.add_listener(watcher.on_change)
            registered = True
            return self.index.select(request.schema, request.pattern, WATCH_ADDED_TAG)

        try:
            permits = PermitSet(self.guard)
            try:
                selection = await self._assemble(
                    permits, f"{what} initial list", self.index.count(request.schema), register_and_select)
                await self._reserve_direct(permits, f"{what} initial list", selection.wire_size(b"", WATCH_HASH_TAG))
                await context.write(selection.message(b"", WATCH_HASH_TAG))
                watcher.digest_sum = selection.digest_sum
                del selection  # the watch lives on; the initial listing must not
            except MemoryLimitExceeded as exc:
                log.warning("catalog watch refused", reason=exc.message)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message)
            finally:
                permits.release_all()
            while True:
                await watcher.wake.wait()
                removed, added = watcher.take()
                # Chunks of UPDATE_CHUNK tables over "removed, then added" (a small change is one event).
                r = len(removed)
                for lo in range(0, r + len(added), UPDATE_CHUNK):
                    hi = lo + UPDATE_CHUNK
                    await self._send_update(
                        context, watcher, removed[lo:hi], added[max(0, lo - r):max(0, hi - r)], what)
        finally:
            if registered:
                self.catalog.remove_listener(watcher.on_change)

    async def _send_update(
        self, context: grpc.aio.ServicerContext, watcher: _Watcher, removed: list[TableInfo],
        added: list[TableInfo], what: str,
    ) -> None:
        """Send one UPDATE event; retry with backoff while its permits are refused (never drop it)."""
        backoff, max_backoff = self.retry_backoff
        what = f"{what} update of {len(removed) + len(added)} tables"
        heap_size = 2 * Selection.bound_heap_bytes(len(removed) + len(added)) + sum(
            _UPDATE_ENTRY_HEAP + len(t.db_name) + len(t.name) for t in (*removed, *added))
        while True:
            permits = PermitSet(self.guard)
            try:
                permits.add(await self.guard.acquire(heap_size, LimitType.HEAP, what))
                gone = [encode_entry(t) for t in removed]
                new = [encode_entry(t) for t in added]
                digest_sum = watcher.digest_sum + sum(map(entry_digest, new)) - sum(map(entry_digest, gone))
                size = (len(WATCH_UPDATE_KIND) + sum(len(e) + 1 for e in gone) + sum(len(e) + 1 for e in new)
                        + _HASH_FIELD)
                permits.add(await self.guard.acquire(size, LimitType.DIRECT, what))
                parts = [WATCH_UPDATE_KIND]
                for tag, entries in ((WATCH_ADDED_TAG, new), (WATCH_REMOVED_TAG, gone)):
                    for e in entries:
                        parts += (tag, e)
                parts += (WATCH_HASH_TAG, length_delimited(format_hash(digest_sum).encode()))
                await context.write(b"".join(parts))
                watcher.digest_sum = digest_sum
                return
            except MemoryLimitExceeded as exc:
                if not exc.retryable:
                    log.warning("catalog watch update can never be sent", reason=exc.message)
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message)
                self.update_retries += 1
                log.info("catalog watch update delayed", reason=exc.message, retry_in_s=backoff)
            finally:
                permits.release_all()
            await asyncio.sleep(backoff)  # backoff between attempts; newer changes coalesce meanwhile
            backoff = min(backoff * 2, max_backoff)
