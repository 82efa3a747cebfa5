"""Equi-joins of a SELECT (TiDB's ``HashJoinExec``, ``pkg/executor/join``): the build side in a hash table on its
join keys, the probe side streamed past it.

Rows are dicts keyed by ``alias.column`` (and by the bare column name where only one table has it). INNER and LEFT
joins build the new table and probe with the rows so far; a RIGHT join is the LEFT join with the sides swapped (the
rows so far are built). ON conditions other than the equalities between the two sides are residual filters on each
matched pair; a LEFT join's probe row that no pair passes comes out once with the other side NULL. A NULL key
matches nothing (``=`` is NULL on NULL). The build side is accounted against the statement's
:class:`~cdc_core.upstream.sql.mem_quota.QueryMemory`.

Key values compare as Python values: integers and integral decimals are the same key, a number and a numeric
string are not (MySQL would compare them as numbers) -- a gap noted in ``docs/tidb.md``.

Cost: O(build rows) memory, O(build + probe + output) time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cdc_core.upstream.sql.expr import Evaluator, truthy
from cdc_core.upstream.sql.mem_quota import QueryMemory, row_bytes

Row = dict[str, Any]


@dataclass(frozen=True)
class JoinKeys:
    """The equi keys of a join: ``probe[i]`` of a probe row equals ``build[i]`` of a build row."""

    probe: Sequence[Evaluator]
    build: Sequence[Evaluator]


def _key_value(v: Any) -> Any:
    if type(v) is Decimal and v == v.to_integral_value():
        return int(v)
    return v


def _key(fns: Sequence[Evaluator], row: Row) -> tuple[Any, ...] | None:
    values = tuple(_key_value(f(row)) for f in fns)
    return None if None in values else values


def build_table(rows: Iterable[Row], keys: Sequence[Evaluator], memory: QueryMemory
                ) -> dict[tuple[Any, ...], list[Row]]:
    """The build side by its key; rows with a NULL key are dropped (they match nothing)."""
    table: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        k = _key(keys, row)
        if k is None:
            continue
        memory.consume(row_bytes(row.values()))
        table.setdefault(k, []).append(row)
    return table


def hash_join(probe: Iterable[Row], build: Iterable[Row], keys: JoinKeys, residual: Evaluator | None, *,
              outer: bool, null_build: Row, memory: QueryMemory, fix: dict[str, str] | None = None) -> Iterator[Row]:
    """Each probe row merged with each build row whose keys equal its own and that passes ``residual``; with
    ``outer``, a probe row with no such partner merged with ``null_build`` (the build side's columns, NULL).
    ``fix`` sets bare names after the merge (``USING``'s columns: the name -> the key whose value it takes)."""
    table = build_table(build, keys.build, memory)
    for p in probe:
        k = _key(keys.probe, p)
        matched = False
        for b in (table.get(k, ()) if k is not None else ()):
            merged = {**p, **b}
            if fix:
                for name, src in fix.items():
                    merged[name] = merged.get(src)
            if residual is None or truthy(residual(merged)):
                matched = True
                yield merged
        if outer and not matched:
            merged = {**p, **null_build}
            if fix:
                for name, src in fix.items():
                    merged[name] = merged.get(src)
            yield merged
