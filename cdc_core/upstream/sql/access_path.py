"""Which row keys a statement's WHERE can reach: point gets and handle ranges instead of a whole-table scan.

TiDB's planner does this with its ranger (``pkg/util/ranger``): a WHERE that fixes the handle becomes a PointGet
or BatchPointGet (``pk = 1``, ``pk IN (1, 2)``, ``(a, b) IN ((1, 'x'), ...)`` on a common handle), one that bounds
it a TableRangeScan over ``[t{id}_r{lo}, t{id}_r{hi})``. Without it every ``UPDATE ... WHERE id = ?``, every
snapshot chunk and every batched point read of the data-quality checks decoded the whole table here.

Only conjunctions are analysed (``AND`` of ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN`` between the
handle and constants); anything else reads the table. The WHERE is still evaluated on every row read: an access
path only narrows what is read, it never decides a match, so a path that reads too much is slower, never wrong.
The one exception is :attr:`Access.exact`: a WHERE that is nothing but ``handle = n`` / ``handle IN (n, ...)`` of
integer literals the integer handle holds as they are matches every row read at those handles, as TiDB's
BatchPointGet has no filter above it (``tryWhereIn2BatchPointGet`` in ``pkg/planner/core/point_get_plan.go`` takes a
WHERE that is one ``IN`` and nothing else): the window checks' point reads then read rows, not evaluate a 1,000-item
``IN`` once more per row.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from sqlglot import exp

from cdc_core.codec import key as keycodec
from cdc_core.codec.datum_key import encode_key, index_entry_key
from cdc_core.codec.row import decode_row
from cdc_core.schema.model import ROWID_COLUMN, Column, TableInfo
from cdc_core.upstream.sql.expr import column_name, literal_value
from cdc_core.upstream.sql.txn import Transaction

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_ROWID = Column(0, ROWID_COLUMN, "bigint")
_MAX_POINTS = 100_000  # a bigger cross product of per-column values reads the table instead


@dataclass(frozen=True)
class Access:
    """What to read: ``points`` (handles, exact) or the integer handle range ``[lo, hi]`` (inclusive; None:
    unbounded) or, with neither, every row."""

    points: tuple[int | bytes, ...] | None = None
    lo: int | None = None
    hi: int | None = None
    # A unique index's entries instead of the handle (TiDB's BatchPointGet on a unique index): its name and the
    # column values of each entry looked up (converted, in index column order).
    index: str | None = None
    index_values: tuple[tuple[Any, ...], ...] = ()
    exact: bool = False  # every row read at ``points`` matches the WHERE (see the module docstring)

    @property
    def full(self) -> bool:
        return self.points is None and self.lo is None and self.hi is None and self.index is None


FULL = Access()


def _conjuncts(node: exp.Expression) -> Iterator[exp.Expression]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        yield from _conjuncts(cast(exp.Expression, node.left))
        yield from _conjuncts(cast(exp.Expression, node.right))
    else:
        yield node


def _constant(node: exp.Expression) -> tuple[bool, Any]:
    if isinstance(node, exp.Literal) or (isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal)):
        pass  # no column in it to look for (most of a 1,000-key IN list's items)
    elif node.find(exp.Column) is not None:
        return False, None
    try:
        return True, literal_value(node)
    except Exception:  # not evaluable here: the statement reports it when the row filter runs
        return False, None


def _handle_columns(info: TableInfo) -> list[str]:
    """The lower-case names whose values make the handle, in handle order."""
    if info.is_common_handle:
        return [info.column(c).name.lower() for c in info.primary_key]
    if info.handle_column is not None:
        return [info.column(info.handle_column).name.lower()]
    return [ROWID_COLUMN]


def _int_handle(info: TableInfo, value: Any) -> int | None:
    """``value`` as the integer handle a row equal to it has, or None when that is not plain (a value the column
    cannot hold compares as MySQL converts it: the row filter decides those, over a scan)."""
    try:
        v = info.column(info.handle_column).convert(value) if info.handle_column is not None else \
            _ROWID.convert(value)
    except Exception:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not _INT64_MIN <= v <= _INT64_MAX:
        return None
    return v


def _common_handle(info: TableInfo, values: list[Any]) -> bytes | None:
    cols = [info.column(c) for c in info.primary_key]
    try:
        return encode_key([(c.field_type(), c.to_stored(c.convert(v))) for c, v in zip(cols, values, strict=True)])
    except Exception:  # as _int_handle: no plain handle, the scan and the row filter decide
        return None


def plan(info: TableInfo, where: exp.Expression | None) -> Access:
    """The access path of ``WHERE where`` on ``info`` (``where``: the condition, not the ``exp.Where``)."""
    if where is None:
        return FULL
    handle = _handle_columns(info)
    points: set[int | bytes] | None = None
    lo: int | None = None
    hi: int | None = None
    common = info.is_common_handle
    per_column: dict[str, list[Any]] = {}  # a common handle's columns fixed one by one (a = 'x' AND b = 1)
    terms = list(_conjuncts(where))
    for term in terms:
        found = _points_of(info, handle, term)
        if found is not None:
            if len(terms) == 1 and found[1]:
                return Access(points=tuple(sorted(found[0], key=_point_order)), exact=True)
            points = found[0] if points is None else points & found[0]
            continue
        if common:
            fixed = _column_values(handle, term)
            if fixed is not None and fixed[0] not in per_column:
                per_column[fixed[0]] = fixed[1]
            continue
        bound = _bound_of(info, handle[0], term)
        if bound is not None:
            b_lo, b_hi = bound
            lo = b_lo if lo is None else max(lo, b_lo) if b_lo is not None else lo
            hi = b_hi if hi is None else min(hi, b_hi) if b_hi is not None else hi
    if common and len(per_column) == len(handle) and math.prod(len(v) for v in per_column.values()) <= _MAX_POINTS:
        combined: set[int | bytes] | None = set()
        for combo in itertools.product(*(per_column[n] for n in handle)):
            if None in combo:
                continue  # NULL = x is never true
            h = _common_handle(info, list(combo))
            if h is None or combined is None:  # not a plain handle: read the table
                combined = None
                break
            combined.add(h)
        if combined is not None:
            points = combined if points is None else points & combined
    if points is None and lo is None and hi is None:
        by_index = _index_points(info, where)
        if by_index is not None:
            return by_index
    if points is not None:
        kept = [p for p in points if isinstance(p, bytes) or ((lo is None or p >= lo) and (hi is None or p <= hi))]
        return Access(points=tuple(sorted(kept, key=_point_order)))
    return Access(lo=lo, hi=hi)


def _point_order(p: int | bytes) -> bytes:
    return p if isinstance(p, bytes) else keycodec.encode_int(p)


def _unparen(node: exp.Expression) -> exp.Expression:
    # MySQL's one-element row constructor is its element: ``(id) IN ((1), (2))`` is ``id IN (1, 2)``.
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _eq_or_in(term: exp.Expression) -> tuple[exp.Expression, list[exp.Expression]] | None:
    """``(left, values)`` of ``left = value`` (either way round) or ``left IN (values...)``, else None."""
    if isinstance(term, exp.EQ):
        left, right = _unparen(term.this), _unparen(term.expression)
        if isinstance(right, exp.Column | exp.Tuple) and not isinstance(left, exp.Column | exp.Tuple):
            left, right = right, left
        return left, [right]
    if isinstance(term, exp.In) and not term.args.get("query") and not term.args.get("unnest"):
        return _unparen(term.this), [_unparen(v) for v in term.expressions]
    return None


def _points_of(info: TableInfo, handle: list[str], term: exp.Expression) -> tuple[set[int | bytes], bool] | None:
    """The handles ``term`` allows, when it fixes every handle column (``=`` / ``IN``), and whether every row at them
    matches ``term`` (an integer handle given integers it holds as they are); else None."""
    found = _eq_or_in(term)
    if found is None:
        return None
    left, values = found
    cols = left.expressions if isinstance(left, exp.Tuple) else [left]
    if not all(isinstance(c, exp.Column) for c in cols):
        return None
    names = [column_name(c).lower() for c in cols]
    if sorted(names) != sorted(handle) or len(set(names)) != len(names):
        return None
    out: set[int | bytes] = set()
    exact = not info.is_common_handle
    for v in values:
        items = v.expressions if isinstance(v, exp.Tuple) else [v]
        if len(items) != len(names):
            return None
        consts = [_constant(i) for i in items]
        if not all(ok for ok, _ in consts):
            return None
        by_name = dict(zip(names, (c for _, c in consts), strict=True))
        if any(by_name[n] is None for n in handle):
            continue  # NULL = x is never true
        if info.is_common_handle:
            h: int | bytes | None = _common_handle(info, [by_name[n] for n in handle])
        else:
            given = by_name[handle[0]]
            h = _int_handle(info, given)
            # A row at h holds h: it matches ``handle = given`` when given is that integer (TRUE too; not '1' or 1.0)
            exact = exact and type(given) is int and given == h
        if h is None:
            return None
        out.add(h)
    return out, exact


def _index_points(info: TableInfo, where: exp.Expression) -> Access | None:
    """Entries of the first unique index (not the clustered PK, whose entries are the row keys) whose every column
    ``where`` fixes, as ``= / IN`` of the columns one by one or of the tuple."""
    terms = list(_conjuncts(where))
    for ix in info.indexes:
        if not (ix.unique or ix.primary) or (ix.primary and info.clustered):
            continue
        cols = [info.column(c) for c in ix.columns]
        names = [c.name.lower() for c in cols]
        candidates: list[tuple[Any, ...]] | None = None
        per_column: dict[str, list[Any]] = {}
        for term in terms:
            tuples = _tuple_values(names, term)
            if tuples is not None:
                candidates = tuples if candidates is None else [t for t in candidates if t in set(tuples)]
                continue
            fixed = _column_values(names, term)
            if fixed is not None and fixed[0] not in per_column:
                per_column[fixed[0]] = fixed[1]
        if candidates is None and len(per_column) == len(names) and \
                math.prod(len(v) for v in per_column.values()) <= _MAX_POINTS:
            candidates = list(itertools.product(*(per_column[n] for n in names)))
        if candidates is None:
            continue
        try:
            converted = {tuple(c.convert(v) for c, v in zip(cols, t, strict=True)) for t in candidates
                         if None not in t}  # NULL = x is never true, and NULLs have no entry
        except Exception:  # values the columns cannot hold compare as MySQL converts them: scan and filter
            continue
        return Access(index=ix.name, index_values=tuple(sorted(converted, key=repr)))
    return None


def _tuple_values(names: list[str], term: exp.Expression) -> list[tuple[Any, ...]] | None:
    """The value tuples of ``(c1, c2, ...) = / IN`` on exactly ``names`` (in ``names`` order), else None."""
    found = _eq_or_in(term)
    if found is None:
        return None
    left, values = found
    if not isinstance(left, exp.Tuple) or not all(isinstance(c, exp.Column) for c in left.expressions):
        return None
    cols = [column_name(c).lower() for c in left.expressions]
    if sorted(cols) != sorted(names) or len(set(cols)) != len(cols):
        return None
    out = []
    for v in values:
        items = v.expressions if isinstance(v, exp.Tuple) else [v]
        consts = [_constant(i) for i in items]
        if len(items) != len(cols) or not all(ok for ok, _ in consts):
            return None
        by_name = dict(zip(cols, (c for _, c in consts), strict=True))
        out.append(tuple(by_name[n] for n in names))
    return out


def _column_values(handle: list[str], term: exp.Expression) -> tuple[str, list[Any]] | None:
    """``(column, values)`` when ``term`` is ``column = c`` or ``column IN (c, ...)`` on one handle column."""
    found = _eq_or_in(term)
    if found is None:
        return None
    left, values = found
    if not isinstance(left, exp.Column) or column_name(left).lower() not in handle:
        return None
    consts = [_constant(v) for v in values]
    if not all(ok for ok, _ in consts):
        return None
    return column_name(left).lower(), [v for _, v in consts]


def _bound_of(info: TableInfo, column: str, term: exp.Expression) -> tuple[int | None, int | None] | None:
    """``[lo, hi]`` (inclusive) of an integer handle that ``term`` bounds, else None."""
    if isinstance(term, exp.Between):
        if not (isinstance(term.this, exp.Column) and column_name(term.this).lower() == column):
            return None
        (ok_lo, v_lo), (ok_hi, v_hi) = _constant(term.args["low"]), _constant(term.args["high"])
        if not (ok_lo and ok_hi):
            return None
        a, b = _ceil(v_lo), _floor(v_hi)
        return (a, b) if a is not None and b is not None else None
    ops: dict[type, str] = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
    op = ops.get(type(term))
    if op is None:
        return None
    left, right = term.this, term.expression
    if not isinstance(left, exp.Column) and isinstance(right, exp.Column):
        left, right = right, left
        op = {">": "<", ">=": "<=", "<": ">", "<=": ">="}[op]
    if not (isinstance(left, exp.Column) and column_name(left).lower() == column):
        return None
    ok, v = _constant(right)
    if not ok or v is None or isinstance(v, bool | str | bytes):
        return None  # a string bound compares as MySQL converts it: leave it to the row filter
    if op in (">", ">="):
        b = _ceil(v) if op == ">=" else _floor(v)
        return None if b is None else (b if op == ">=" else b + 1, None)
    b = _floor(v) if op == "<=" else _ceil(v)
    return None if b is None else (None, b if op == "<=" else b - 1)


def _floor(v: Any) -> int | None:
    try:
        return math.floor(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _ceil(v: Any) -> int | None:
    try:
        return math.ceil(v)
    except (TypeError, ValueError, OverflowError):
        return None


def read(txn: Transaction, info: TableInfo, access: Access) -> Iterator[tuple[int | bytes, int, bytes]]:
    """``(handle, physical id, value)`` of the rows ``access`` reaches, in handle order per partition."""
    ix = next((i for i in info.indexes if i.name == access.index), None) if access.index is not None else None
    for pid in info.physical_ids:
        if ix is not None:
            for values in access.index_values:
                entry = index_entry_key(info, ix, dict(zip(ix.columns, values, strict=True)), pid)
                target = txn.get(entry) if entry is not None else None
                if target is None:
                    continue
                h: int | bytes = target if info.is_common_handle else keycodec.decode_int(target)
                v = txn.get(keycodec.record_key(pid, h))
                if v is not None:
                    yield h, pid, v
            continue
        if access.points is not None:
            for h in access.points:
                v = txn.get(keycodec.record_key(pid, h))
                if v is not None:
                    yield h, pid, v
            continue
        lo = _INT64_MIN if access.lo is None else max(access.lo, _INT64_MIN)
        hi = _INT64_MAX if access.hi is None else min(access.hi, _INT64_MAX)
        if lo > hi:
            continue
        start, end = keycodec.table_span(pid)
        if lo > _INT64_MIN:
            start = keycodec.row_key(pid, lo)
        if hi < _INT64_MAX:
            end = keycodec.row_key(pid, hi + 1)
        for k, v in txn.iter_scan(start, end):
            yield keycodec.record_handle(k, info.is_common_handle), pid, v


def decoded(info: TableInfo, value: bytes) -> dict[str, Any]:
    return info.decode_values(decode_row(info, value))
