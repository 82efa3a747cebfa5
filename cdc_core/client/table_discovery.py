"""Table discovery: the tables of a schema from TiDB's ``information_schema.TABLES``, with bounded memory.

The client side of seed 001 (Pulsar's proxy case), on TiDB's interface: a schema may hold a million tables, and
listing it must not hold the whole answer at once. The listing query (``upstream.listing_sql``) is read off the
MySQL connection packet by packet, in batches, under the ``table-discovery``
:class:`~cdc_core.memory.AsyncDualMemoryLimiter` (``[table-discovery]`` of the changefeed TOML):

1. **Heap, before the request.** An initial heap permit is acquired before asking; it is the peak heap the same
   listing needed last time (statistics, as the seed suggests), else :data:`INITIAL_HEAP`, capped at the limit.
   So concurrent listings of a large schema wait *before* their rows are in flight.
2. **Direct, for the bytes received.** Before a batch is read, a direct permit for :data:`BATCH_BYTES` (at most
   the pool's limit) is acquired; the batch is the row packets read until that many bytes arrived, and the
   permit is then set to their exact size (the seed's ``cmdSize``). It is released once the batch is decoded.
3. **Heap, for the rows being assembled.** Before a batch is decoded, the heap permit grows by the decoded rows'
   estimate (:data:`DECODED_ROW_HEAP` each plus their bytes); after ``keep`` has looked at them it is set to
   what the kept :class:`DiscoveredTable` entries cost (:data:`RESULT_ENTRY_HEAP` + name length each), never below
   the initial permit.
4. **Release** when ``list_tables`` / ``matching_tables`` return (the caller owns the returned list then).

New tables are learned from the DDL stream, as TiCDC learns them (a changefeed's DDL puller), not by listing again.

When permits cannot be had the call fails with :class:`~cdc_core.memory.MemoryLimitExceeded`, whose message names
the pool, its limit and the ``[table-discovery]`` key to raise; when the server refuses (TiDB's memory quota,
8175, which the embedded upstream's ``upstream-catalog`` limiter answers) or fails, with
:class:`TableDiscoveryError` carrying its MySQL code and message. Neither is retried here: the caller (a
changefeed's creation or window) is retried as a whole.

:class:`TableDiscovery` is asyncio: the blocking reads of PyMySQL run in worker threads (``asyncio.to_thread``),
one connection per listing. :class:`SyncTableDiscovery` wraps it for synchronous callers on one private event
loop, so one limiter spans all its calls.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, NamedTuple

import pymysql
import pymysql.cursors
from prometheus_client import CollectorRegistry
from pymysql.connections import Connection, MysqlPacket, MySQLResult

from cdc_core.client.tidb_sql import TidbAddress, connect, connection_literal
from cdc_core.client.upstream import listing_sql
from cdc_core.errors import UpstreamError
from cdc_core.filter.table_filter import TableFilter
from cdc_core.memory import (
    AsyncDualMemoryLimiter,
    LimitType,
    MemoryGuard,
    MemoryLimitConfig,
    Permit,
    toml_setting,
)

__all__ = [
    "BATCH_BYTES",
    "DECODED_ROW_HEAP",
    "INITIAL_HEAP",
    "LIMITER_NAME",
    "RESULT_ENTRY_HEAP",
    "DiscoveredTable",
    "SyncTableDiscovery",
    "TableDiscovery",
    "TableDiscoveryError",
    "discover_tables",
]

LIMITER_NAME: Final = "table-discovery"
TOML_SECTION: Final = "table-discovery"
INITIAL_HEAP: Final = 64 * 1024
BATCH_BYTES: Final = 256 * 1024
# One decoded row before ``keep`` looks at it: the 3-tuple (64), the id int (32), two str headers (2 x 49), the
# list slot (8), rounded up; the strings' bytes are counted from the packets.
DECODED_ROW_HEAP: Final = 208
# One kept DiscoveredTable: the tuple (64), its id int (32), its name str header (49), the list slot (8), rounded
# up; plus the name's length. Schema names are shared between entries.
RESULT_ENTRY_HEAP: Final = 160
PACKET_HEADER: Final = 4
# The largest listing row packet: the header, the id (20 digits) and two identifiers of at most 64 characters (TiDB's
# limit) of up to 4 bytes each, each with its length byte(s).
MAX_ROW_BYTES: Final = PACKET_HEADER + 1 + 20 + 2 * (3 + 64 * 4)

Keep = Callable[[str, str], bool]
"""``(schema, table name) -> keep it?``"""


class TableDiscoveryError(UpstreamError):
    """The server refused or failed a listing; ``code`` is its MySQL error code (8175: its memory quota)."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.code = code


class DiscoveredTable(NamedTuple):
    table_id: int
    schema: str
    name: str


def _open(addresses: list[TidbAddress], build: Callable[..., str], timeout: float
          ) -> tuple[Connection[Any], pymysql.cursors.SSCursor, MySQLResult, str]:
    """Connect and send the listing query (``build(literal=...)`` given the connection's string literals); the columns
    are read, no row yet (unbuffered). The cursor is returned to be kept: closing it (as its garbage collection does)
    would read the rest of the result."""
    conn, addr = connect(addresses, timeout)
    try:
        cur = conn.cursor(pymysql.cursors.SSCursor)
        cur.execute(build(literal=connection_literal(conn)))
    except BaseException:
        conn.close()
        raise
    result = cur._result
    assert result is not None
    return conn, cur, result, addr


def _read_packets(conn: Connection[Any], result: MySQLResult, budget: int) -> tuple[list[MysqlPacket], int, bool]:
    """Row packets read while one more cannot take them past ``budget`` bytes (at least one), or until the result
    ends; their wire size; whether the result ended. Reads as PyMySQL's ``_read_rowdata_packet_unbuffered`` does,
    without decoding."""
    packets: list[MysqlPacket] = []
    size = 0
    while not packets or size + MAX_ROW_BYTES <= budget:  # the next packet, of any size, stays within budget
        packet = conn._read_packet()  # an error packet raises here
        if result._check_packet_is_eof(packet):
            result.unbuffered_active = False
            return packets, size, True
        packets.append(packet)
        size += PACKET_HEADER + len(packet.get_all_data())
    return packets, size, False


def _decode(result: MySQLResult, packets: list[MysqlPacket]) -> list[tuple[Any, ...]]:
    return [result._read_row_from_packet(p) for p in packets]


class TableDiscovery:
    """Async table listing with a client-side memory limiter (see the module docstring).

    :param addresses: TiDB's SQL servers (``UpstreamClient.sql_addresses()``), tried in order.
    :param config: the ``[table-discovery]`` limits (default: the seed's defaults).
    :param registry: where the limiter's metrics (``limiter="table-discovery"``) go.
    :param timeout: seconds for connecting and for each read.
    """

    def __init__(self, addresses: Sequence[TidbAddress], config: MemoryLimitConfig | None = None, *,
                 registry: CollectorRegistry | None = None, timeout: float = 120.0) -> None:
        self.addresses = list(addresses)
        self.timeout = timeout
        self.limiter = AsyncDualMemoryLimiter(config, name=LIMITER_NAME, registry=registry)
        self.guard = MemoryGuard(self.limiter, toml_setting(TOML_SECTION))
        self._last_heap: dict[tuple[str, str], int] = {}  # heap the same listing needed last time

    def _initial_heap(self, key: tuple[str, str]) -> int:
        size = max(INITIAL_HEAP, self._last_heap.get(key, 0))
        limit = self.limiter.heap.limit
        return min(size, limit) if limit else size

    def _batch_budget(self) -> int:
        """Bytes read per batch: :data:`BATCH_BYTES`, within the direct pool, and small enough that decoding a batch
        (a row of ~30-60 bytes becomes ~250-300 bytes of objects: ~8x) takes at most about the heap pool."""
        budget = BATCH_BYTES
        if self.limiter.direct.limit:
            budget = min(budget, self.limiter.direct.limit)
        if self.limiter.heap.limit:
            budget = min(budget, self.limiter.heap.limit // 8)
        return max(budget, 1)

    async def list_tables(self, schema: str = "", like: str = "%", keep: Keep | None = None
                          ) -> list[DiscoveredTable]:
        """The base tables of ``schema`` ("" = every schema) whose names are ``LIKE like``, and that ``keep`` keeps;
        permits are released on return."""
        what = f"listing of {f'schema {schema!r}' if schema else 'every schema'}"
        if like != "%":
            what += f" (names LIKE {like!r})"
        key = (schema.lower(), like)
        heap = await self.guard.acquire(self._initial_heap(key), LimitType.HEAP, what)
        direct: Permit | None = None
        conn: Connection[Any] | None = None
        result: MySQLResult | None = None
        addr = ""
        out: list[DiscoveredTable] = []
        kept_heap = 0
        initial = peak = heap.permits
        schemas: dict[str, str] = {}  # one str object per schema name
        try:
            build = functools.partial(listing_sql, schema, like)
            conn, _cursor, result, addr = await asyncio.to_thread(_open, self.addresses, build, self.timeout)
            done = False
            while not done:
                direct = await self.guard.acquire(self._batch_budget(), LimitType.DIRECT, what)
                packets, size, done = await asyncio.to_thread(_read_packets, conn, result, direct.permits)
                if not packets:
                    break
                direct = await self.guard.update(direct, size, what)
                heap = await self.guard.update(
                    heap, max(heap.permits, kept_heap + DECODED_ROW_HEAP * len(packets) + size), what)
                peak = max(peak, heap.permits)
                rows = await asyncio.to_thread(_decode, result, packets)
                del packets
                self.guard.release(direct)
                direct = None
                for table_id, table_schema, name in rows:
                    table_schema = schemas.setdefault(table_schema, table_schema)
                    if keep is None or keep(table_schema, name):
                        out.append(DiscoveredTable(int(table_id), table_schema, name))
                        kept_heap += RESULT_ENTRY_HEAP + len(name)
                del rows
                # Down to the kept entries, not below the initial permit: a permit that shrank would have to grow
                # again for the next batch while others may have taken what it gave back.
                heap = await self.guard.update(heap, max(kept_heap, initial), what)
            # Next time start with this listing's peak: it then never grows while it runs (unless the schema did), so
            # concurrent listings do not each hold part of the pool while waiting for more of it.
            self._last_heap[key] = peak
            return out
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            message = exc.args[1] if len(exc.args) > 1 else str(exc)
            raise TableDiscoveryError(f"TiDB {addr or '?'}: {what} failed ({code}): {message}", code) from exc
        finally:
            if direct is not None:
                self.guard.release(direct)
            self.guard.release(heap)
            if result is not None:
                result.unbuffered_active = False  # whatever is left goes with the connection, unread
            if conn is not None:
                await asyncio.to_thread(conn.close)

    async def matching_tables(self, table_filter: TableFilter, schemas: Iterable[str] = ("",)
                              ) -> list[DiscoveredTable]:
        """The tables ``table_filter`` replicates, listing each of ``schemas`` ("" = every schema)."""
        out: list[DiscoveredTable] = []
        for schema in schemas:
            out += await self.list_tables(schema, keep=table_filter.match)
        return out


class SyncTableDiscovery:
    """:class:`TableDiscovery` for synchronous callers, on one private event loop (not thread-safe)::

        with SyncTableDiscovery(client.sql_addresses(), cfg.discovery_memory) as discovery:
            tables = discovery.matching_tables(cfg.table_filter)
    """

    def __init__(self, addresses: Sequence[TidbAddress], config: MemoryLimitConfig | None = None, *,
                 registry: CollectorRegistry | None = None, timeout: float = 120.0) -> None:
        self._runner = asyncio.Runner()
        self.discovery = TableDiscovery(addresses, config, registry=registry, timeout=timeout)

    def list_tables(self, schema: str = "", like: str = "%", keep: Keep | None = None) -> list[DiscoveredTable]:
        result: list[DiscoveredTable] = self._runner.run(self.discovery.list_tables(schema, like, keep))
        return result

    def matching_tables(self, table_filter: TableFilter, schemas: Iterable[str] = ("",)) -> list[DiscoveredTable]:
        result: list[DiscoveredTable] = self._runner.run(self.discovery.matching_tables(table_filter, schemas))
        return result

    def close(self) -> None:
        self._runner.close()

    def __enter__(self) -> SyncTableDiscovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def discover_tables(addresses: Sequence[TidbAddress], table_filter: TableFilter,
                    config: MemoryLimitConfig | None = None, schemas: Iterable[str] = ("",)) -> list[DiscoveredTable]:
    """One-shot: the tables ``table_filter`` replicates (what a changefeed's creation reports)."""
    with SyncTableDiscovery(addresses, config) as discovery:
        return discovery.matching_tables(table_filter, schemas)
