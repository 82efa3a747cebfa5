"""Listing queries over ``information_schema.TABLES``, streamed chunk by chunk under the ``upstream-catalog`` limiter.

Seed 001's server side (Pulsar's broker answering GetTopicsOfNamespace) on TiDB's interface: a client lists the
tables of a schema that may hold a million of them with ``SELECT ... FROM information_schema.TABLES WHERE ...``.
Building that result whole would cost the server a copy of the catalog per concurrent listing, so a query that
reads only ``TABLES`` and needs no ordering, grouping or limit is answered as a stream, and the memory it holds
at any moment is bounded by the :class:`~cdc_core.memory.AsyncDualMemoryLimiter`:

1. **Heap, before assembling.** One permit covers what the listing assembles: the list of the tables it walks
   (a reference each) and one chunk of (at most :data:`CHUNK`) result rows being built. It is acquired before anything
   is built and held for the whole listing, so the heap a listing needs is known before it starts, whatever
   the size of the schema.
2. **Direct, before sending.** Rows are sent in groups of :data:`CHUNK`; the exact size of a group's row
   packets is computed from its values before mysql-mimic encodes them, the direct permit for it acquired,
   and released once the group is written to the socket (``drain``: the transport's buffer is below its high
   water mark, so a slow client holds its permit - the bytes are still in flight).
3. **When permits cannot be had** (a request larger than the pool, a full wait queue, the acquire timeout) the
   query fails with TiDB's "query exceeded its memory quota" error, code 8175, and a message that names the pool,
   its limit and the ``cdcflow upstream start`` flag; before the first row when it is the first chunk, else in
   place of the next row (a MySQL server may end a result set with an error packet).

Other ``information_schema`` queries go through mysql-mimic's sqlglot executor (``info_schema``), built whole.
A ``WHERE`` made of ``column = 'literal'``, ``column LIKE 'pattern'`` and ``column IN (...)`` terms joined by
``AND`` is evaluated directly on each row; any other ``WHERE`` runs through the sqlglot executor chunk by chunk.
A ``TABLE_SCHEMA = 'db'`` term walks only that schema's tables.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

from sqlglot import expressions as exp
from sqlglot.executor import Table, execute

from cdc_core.memory import AsyncDualMemoryLimiter, LimitType, MemoryGuard, MemoryLimitConfig, Permit
from cdc_core.schema.model import TableInfo
from cdc_core.upstream.sql.info_schema import SCHEMA, TABLES_COLUMNS, system_tables_rows, tables_row

__all__ = ["CHUNK", "LIMITER_NAME", "ListingPlan", "TableListing", "cli_setting", "plan_listing"]

LIMITER_NAME: Final = "upstream-catalog"
# A multiple of 1000: mysql-mimic writes a streamed result in batches of 1000 rows (``write_text_resultset`` in
# mysql_mimic/connection.py), so at a chunk boundary every row of the chunk is in its stream buffer and ``drain``
# sends them all before the chunk's permit goes.
CHUNK: Final = 10_000
# Heap of one assembled TABLES row: a tuple of 23 references (240 bytes) and the few small objects it owns
# beyond the shared TableInfo strings (the id int, a column-name-sized str or two), rounded up.
ROW_HEAP: Final = 400
REF_HEAP: Final = 8  # one reference in the list of tables walked
LISTING_OVERHEAD: Final = 4096


def cli_setting(pool: LimitType, what: str) -> str:
    """The ``cdcflow upstream start`` flag that sets ``what`` of ``pool`` (named in the refusal)."""
    return {
        "limit": f"--catalog-{pool.value}-limit-bytes",
        "queue": "--catalog-max-queue",
        "timeout": "--catalog-acquire-timeout-ms",
    }[what]


_TABLES = "tables"
_POSITION = {name: i for i, name in enumerate(TABLES_COLUMNS)}
Predicate = Callable[[Sequence[Any]], bool]
Row = tuple[Any, ...]


@dataclass(frozen=True)
class ListingPlan:
    """How a listing query runs: its output columns, and either a direct predicate or the sqlglot query per chunk."""

    columns: tuple[str, ...]
    positions: tuple[int, ...] | None  # output columns' positions in a TABLES row; None: sqlglot per chunk
    predicate: Predicate | None  # the WHERE as a direct test of a row (None: every row, or sqlglot's)
    expression: exp.Select
    schema: str | None  # a TABLE_SCHEMA = '...' term: walk only that schema


def _is_tables(node: exp.Expression | None, current_db: str) -> bool:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        return False
    db = (node.db or current_db).lower()
    return db == "information_schema" and node.name.lower() == _TABLES


def plan_listing(expression: exp.Expression, current_db: str = "") -> ListingPlan | None:
    """The plan of a streamable listing query (a SELECT of ``information_schema.TABLES`` alone, without ORDER BY,
    GROUP BY, DISTINCT, LIMIT, aggregates, window functions or subqueries); None for any other query."""
    if not isinstance(expression, exp.Select):
        return None
    if set(k for k, v in expression.args.items() if v) - {"expressions", "from", "from_", "where"}:
        return None
    from_ = expression.args.get("from_") or expression.args.get("from")  # the key's name varies by sqlglot version
    if from_ is None or not _is_tables(from_.this, current_db):
        return None
    nested = len(list(expression.find_all(exp.Select))) > 1
    if nested or expression.find(exp.AggFunc, exp.Window, exp.Subquery, exp.Join) is not None:
        return None
    where = expression.args.get("where")
    positions = _direct_projection(expression)
    predicate = _term(where.this) if where is not None else None
    direct = positions is not None and (where is None or predicate is not None)
    columns = _output_names(expression) if positions is not None else ()
    return ListingPlan(columns=columns, positions=positions if direct else None,
                       predicate=predicate if direct else None, expression=expression,
                       schema=_schema_term(where.this) if where is not None else None)


def _direct_projection(select: exp.Select) -> tuple[int, ...] | None:
    """Positions of plain TABLES columns (or ``*``); None when the projection computes anything."""
    out: list[int] = []
    for e in select.expressions:
        if isinstance(e, exp.Star):
            out += range(len(TABLES_COLUMNS))
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            out += range(len(TABLES_COLUMNS))
        elif isinstance(e, exp.Column) and e.name.lower() in _POSITION:
            out.append(_POSITION[e.name.lower()])
        else:
            return None  # aliases and expressions: sqlglot names and computes them
    return tuple(out)


def _output_names(select: exp.Select) -> tuple[str, ...]:
    """Column names as MySQL 8 reports ``information_schema``'s: its upper-case names (``*`` is every column)."""
    out: list[str] = []
    for e in select.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            out += (c.upper() for c in TABLES_COLUMNS)
        else:
            out.append(e.name.upper())
    return tuple(out)


def _literal(e: exp.Expression) -> str | int | None:
    if isinstance(e, exp.Literal):
        return e.this if e.is_string else int(e.this) if e.this.lstrip("-").isdigit() else None
    return None


def _like_regex(pattern: str) -> re.Pattern[str]:
    out, escaped = [], False
    for ch in pattern:
        if escaped:
            out.append(re.escape(ch))
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


def _term(e: exp.Expression) -> Predicate | None:
    """One ``column = lit`` / ``column LIKE 'p'`` / ``column IN (lits)`` term as a row test; None otherwise."""
    if isinstance(e, exp.Paren):
        return _term(e.this)
    if isinstance(e, exp.And):
        left, right = _term(e.this), _term(e.expression)
        if left is None or right is None:
            return None
        return lambda row: left(row) and right(row)
    column = e.this if isinstance(e, (exp.EQ, exp.Like, exp.In)) else None
    if not isinstance(column, exp.Column) or column.name.lower() not in _POSITION:
        return None
    pos = _POSITION[column.name.lower()]
    if isinstance(e, exp.EQ):
        value = _literal(e.expression)
        if value is None:
            return None
        return lambda row: row[pos] == value
    if isinstance(e, exp.Like):
        pattern = _literal(e.expression)
        if not isinstance(pattern, str):
            return None
        rx = _like_regex(pattern)
        return lambda row: isinstance(row[pos], str) and rx.fullmatch(row[pos]) is not None
    values = [_literal(v) for v in e.expressions]
    if not values or any(v is None for v in values) or e.args.get("query") is not None:
        return None
    allowed = frozenset(values)
    return lambda row: row[pos] in allowed


def _schema_term(where: exp.Expression) -> str | None:
    """The schema of a top-level ``TABLE_SCHEMA = 'db'`` conjunct, if there is one."""
    for e in where.flatten() if isinstance(where, exp.And) else (where,):
        e = e.unnest()
        if (isinstance(e, exp.EQ) and isinstance(e.this, exp.Column) and e.this.name.lower() == "table_schema"
                and isinstance(_literal(e.expression), str)):
            return str(_literal(e.expression))
    return None


def row_wire_size(row: Sequence[Any]) -> int:
    """Bytes of ``row`` as a text-protocol row packet: the 4-byte header, then each value as a length-encoded string
    (``0xFB`` for NULL), as mysql-mimic's ``write_text_rows`` encodes ``str``/``int`` values."""
    size = 4
    for v in row:
        if v is None:
            size += 1
            continue
        n = len(v.encode()) if isinstance(v, str) else len(str(v))
        size += n + (1 if n < 251 else 3 if n < 1 << 16 else 4 if n < 1 << 24 else 9)
    return size


class TableListing:
    """Runs listing queries for the SQL front, bounded by the ``upstream-catalog`` limiter (one per server)."""

    def __init__(self, config: MemoryLimitConfig | None = None, *, registry: Any = None) -> None:
        self.limiter = AsyncDualMemoryLimiter(config, name=LIMITER_NAME, registry=registry)
        self.guard = MemoryGuard(self.limiter, cli_setting)

    @asynccontextmanager
    async def whole(self, tables: Sequence[TableInfo], what: str) -> AsyncIterator[None]:
        """A heap permit, for the block, for ``information_schema`` built whole over ``tables`` (any query that is
        not a streamable listing): a row per table and per column, each :data:`ROW_HEAP`."""
        size = LISTING_OVERHEAD + ROW_HEAP * (len(tables) + sum(len(t.columns) for t in tables))
        heap = await self.guard.acquire(size, LimitType.HEAP, what)
        try:
            yield
        finally:
            self.guard.release(heap)

    async def run(self, plan: ListingPlan, tables: Callable[[str | None], list[TableInfo]],
                  flush: Callable[[], Awaitable[None]]) -> tuple[AsyncIterator[Row], tuple[str, ...], list[Row]]:
        """The rows (an async iterator the front streams), the column names and the first rows (to type the
        columns by, without reading further) of ``plan``.

        ``tables(schema)`` lists the tables the session sees (of ``schema`` when not None); ``flush()`` returns once
        what the front has buffered is written to the socket. The first chunk's permits are had before this returns,
        so a refusal at the start is an error before any row; :class:`~cdc_core.memory.MemoryLimitExceeded` raises.
        """
        what = f"listing `{plan.expression.sql(dialect='mysql')[:160]}`"
        walked = tables(plan.schema)
        assembled = min(CHUNK, len(walked) + len(system_tables_rows()))
        heap = await self.guard.acquire(LISTING_OVERHEAD + REF_HEAP * len(walked) + ROW_HEAP * assembled,
                                        LimitType.HEAP, what)
        try:
            source = self._rows(plan, walked)
            rows, columns, direct = await self._next_group(source, what)
        except BaseException:
            self.guard.release(heap)
            raise
        if plan.positions is not None:
            columns = plan.columns
        return self._stream(source, rows, direct, heap, flush, what), columns, rows

    async def _next_group(self, source: Iterator[tuple[list[Row], tuple[str, ...]]], what: str
                          ) -> tuple[list[Row], tuple[str, ...], Permit | None]:
        """The next :data:`CHUNK` (or fewer, at the end) result rows, and the direct permit for their bytes."""
        rows: list[Row] = []
        columns: tuple[str, ...] = ()
        for chunk, names in source:
            rows += chunk
            columns = names
            if len(rows) >= CHUNK:
                break
        if not rows:
            return rows, columns, None
        return rows, columns, await self.guard.acquire(sum(map(row_wire_size, rows)), LimitType.DIRECT, what)

    async def _stream(self, source: Iterator[tuple[list[Row], tuple[str, ...]]], rows: list[Row],
                      direct: Permit | None, heap: Permit, flush: Callable[[], Awaitable[None]], what: str
                      ) -> AsyncIterator[Row]:
        try:
            while rows:
                for row in rows:
                    yield row
                await flush()  # the group's packets are on their way: their bytes are the socket's now
                if direct is not None:
                    self.guard.release(direct)
                    direct = None
                rows, _, direct = await self._next_group(source, what)
        finally:
            if direct is not None:
                self.guard.release(direct)
            self.guard.release(heap)

    @staticmethod
    def _rows(plan: ListingPlan, walked: list[TableInfo]) -> Iterator[tuple[list[Row], tuple[str, ...]]]:
        """Chunks of result rows (``(rows, columns)``) over the tables walked, then the system tables."""
        for lo in range(0, len(walked) + 1, CHUNK):
            built = [tables_row(t) for t in walked[lo:lo + CHUNK]]
            if lo + CHUNK > len(walked):
                built += system_tables_rows()
            if plan.positions is not None:
                test = plan.predicate
                pos = plan.positions
                yield [tuple(r[i] for i in pos) for r in built if test is None or test(r)], plan.columns
            else:
                result = execute(plan.expression, schema=SCHEMA,
                                 tables={"information_schema": {_TABLES: Table(TABLES_COLUMNS, built)}})
                yield list(result.rows), tuple(result.columns)
