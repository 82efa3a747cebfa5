"""Aggregate functions (TiDB's ``pkg/executor/aggfuncs``): COUNT, COUNT(DISTINCT), SUM, AVG, MIN, MAX, BIT_XOR,
GROUP_CONCAT, each an accumulator folded one row at a time, holding no row.

As MySQL: NULL arguments are skipped; over no rows COUNT and BIT_XOR are 0, the others NULL. SUM of integers is
exact (a DECIMAL in MySQL), AVG is SUM / COUNT with ``div_precision_increment`` (4) more decimals than its
argument. ``DISTINCT`` keeps the values seen per group, accounted against the statement's
:class:`~cdc_core.upstream.sql.mem_quota.QueryMemory`. GROUP_CONCAT takes ``SEPARATOR`` (default ``,``) and
``DISTINCT``; its inner ``ORDER BY`` is refused by name.

Cost: ``step`` O(1) a row (O(distinct values) of memory for DISTINCT).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, Final

from sqlglot import exp

from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.expr import Evaluator, compare, compile_expr, evaluate, text_of, to_number
from cdc_core.upstream.sql.mem_quota import QueryMemory, value_bytes

AGGREGATE_NODES: Final = (exp.Count, exp.Min, exp.Max, exp.Sum, exp.Avg, exp.BitwiseXorAgg, exp.GroupConcat)
_UINT64: Final = 0xFFFFFFFFFFFFFFFF
_DIV_PRECISION_INCREMENT: Final = 4  # MySQL's div_precision_increment default, TiDB's too


def is_aggregate(node: exp.Expression) -> bool:
    return isinstance(node, AGGREGATE_NODES)


def contains_aggregate(node: exp.Expression | None) -> bool:
    return node is not None and any(isinstance(n, AGGREGATE_NODES) for n in node.walk())


class Aggregate:
    """One aggregate call: ``start()`` a group's state, ``step(state, row)`` per row, ``result(state)``."""

    def __init__(self, node: exp.Expression, memory: QueryMemory | None = None) -> None:
        if not isinstance(node, AGGREGATE_NODES):
            raise SqlError(f"not an aggregate: {node.sql(dialect='mysql')}")
        self.node, self.memory = node, memory
        self.kind = type(node)
        arg = node.this
        self.separator = ","
        if isinstance(node, exp.GroupConcat):
            if isinstance(arg, exp.Order):
                raise SqlError("unsupported in GROUP_CONCAT: ORDER BY clause")
            sep = node.args.get("separator")
            if sep is not None:
                self.separator = text_of(evaluate(sep, None)) or ""
        self.distinct = isinstance(arg, exp.Distinct)
        args = list(arg.expressions) if isinstance(arg, exp.Distinct) else [arg]
        self.star = isinstance(node, exp.Count) and len(args) == 1 and isinstance(args[0], exp.Star)
        if self.star:
            self.args: list[Evaluator] = []
        else:
            if len(args) > 1 and not isinstance(node, exp.Count | exp.GroupConcat):
                raise SqlError(f"Incorrect parameter count in the call to native function '{self.kind.__name__}'")
            self.args = [compile_expr(a) for a in args]
        self.step: Callable[[list[Any], Any], None] = self._fast_step()  # (state, row): fold one row in

    def start(self) -> list[Any]:
        """A group's state: ``[accumulator, count, seen values (DISTINCT)]``."""
        initial: Any = 0 if self.kind in (exp.Count, exp.BitwiseXorAgg) else None
        if self.kind is exp.GroupConcat:
            initial = []
        return [initial, 0, set() if self.distinct else None]

    def _fast_step(self) -> Callable[[list[Any], Any], None]:
        """The step of the common aggregates of a scan (a chunk checksum's COUNT(*) and BIT_XOR, COUNT(x)) without
        the general step's dispatch, else the general one."""
        if self.star:
            def count_rows(state: list[Any], row: Any) -> None:
                state[0] += 1

            return count_rows
        if self.distinct or len(self.args) != 1 or self.kind not in (exp.Count, exp.BitwiseXorAgg, exp.Min, exp.Max):
            return self._step
        arg = self.args[0]
        if self.kind is exp.Min or self.kind is exp.Max:
            sign = 1 if self.kind is exp.Max else -1

            def extreme(state: list[Any], row: Any) -> None:
                v = arg(row)
                if v is None:
                    return
                cur = state[0]
                if cur is None:
                    state[0] = v
                elif type(v) is type(cur) and (type(v) is int or type(v) is str):  # a chunk's MIN/MAX(id)
                    if (v > cur) if sign > 0 else (v < cur):
                        state[0] = v
                elif (compare(v, cur) or 0) * sign > 0:
                    state[0] = v

            return extreme
        if self.kind is exp.Count:
            def count(state: list[Any], row: Any) -> None:
                if arg(row) is not None:
                    state[0] += 1

            return count

        def bit_xor(state: list[Any], row: Any) -> None:
            v = arg(row)
            if v is not None:
                state[0] ^= (v if type(v) is int else int(to_number(v))) & _UINT64

        return bit_xor

    def _step(self, state: list[Any], row: Any) -> None:
        if self.star:
            state[0] += 1
            return
        if len(self.args) == 1:
            v = self.args[0](row)
            if v is None:
                return
        else:
            v = tuple(a(row) for a in self.args)
            if None in v:
                return
        seen = state[2]
        if seen is not None:
            if v in seen:
                return
            seen.add(v)
            if self.memory is not None:
                self.memory.consume(value_bytes(v) + 16)
        kind = self.kind
        if kind is exp.Count:
            state[0] += 1
        elif kind is exp.GroupConcat:
            state[0].append("".join(text_of(x) or "" for x in v) if isinstance(v, tuple) else text_of(v))
            if self.memory is not None:
                self.memory.consume(value_bytes(state[0][-1]))
        elif kind is exp.BitwiseXorAgg:
            state[0] ^= int(to_number(v)) & _UINT64
        elif kind is exp.Sum or kind is exp.Avg:
            n = v if type(v) is int else _summand(v)
            state[0] = n if state[0] is None else state[0] + n
            state[1] += 1
        elif state[0] is None:
            state[0] = v
        elif (compare(v, state[0]) or 0) * (1 if kind is exp.Max else -1) > 0:
            state[0] = v  # a new MIN / MAX

    def result(self, state: list[Any]) -> Any:
        acc = state[0]
        if self.kind is exp.GroupConcat:
            return self.separator.join(acc) if acc else None
        if self.kind is exp.Avg:
            if acc is None:
                return None
            if isinstance(acc, float):
                return acc / state[1]
            exponent = acc.as_tuple().exponent if isinstance(acc, Decimal) else 0
            scale = -exponent if isinstance(exponent, int) else 0
            quantum = Decimal(1).scaleb(-(max(0, scale) + _DIV_PRECISION_INCREMENT))
            return (Decimal(acc) / state[1]).quantize(quantum)
        return acc


def _summand(v: Any) -> int | Decimal | float:
    if isinstance(v, float):
        return v
    if isinstance(v, str):  # MySQL sums a string as a DOUBLE
        try:
            return float(to_number(v))
        except SqlError:
            return 0.0
    return to_number(v)


def fold_aggregates(items: list[tuple[str, exp.Expression]], rows: Iterable[Any],
                    memory: QueryMemory | None = None) -> dict[str, Any]:
    """A SELECT list of aggregates and constants, folded over ``rows`` as they come (none is kept):
    ``{name: value}``."""
    aggs = [(name, Aggregate(e, memory)) for name, e in items if is_aggregate(e)]
    states = [a.start() for _, a in aggs]
    if len(aggs) == 1:  # a chunk checksum's one BIT_XOR, a COUNT: no loop over the aggregates per row
        step, state = aggs[0][1].step, states[0]
        for row in rows:
            step(state, row)
    else:
        pairs = [(a.step, s) for (_, a), s in zip(aggs, states, strict=True)]
        for row in rows:
            for step, s in pairs:
                step(s, row)
    out = {name: a.result(s) for (name, a), s in zip(aggs, states, strict=True)}
    out.update({name: evaluate(e, {}) for name, e in items if not is_aggregate(e)})
    return out
