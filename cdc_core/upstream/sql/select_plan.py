"""SELECT, planned and run as stages (TiDB's logical plan and executors, for one table or equi-joins).

    sources (one table's access path, or hash joins)  ->  WHERE  ->  GROUP BY / aggregates  ->  HAVING
      ->  projection  ->  DISTINCT  ->  ORDER BY (+ LIMIT: a bounded heap, top-N)  ->  LIMIT / OFFSET

A plain scan streams (its rows are read a batch at a time as the client takes them); a stage whose state grows with
the data -- DISTINCT's seen rows, the groups, a sort without LIMIT, a join's build side -- accounts what it keeps
against the statement's :class:`~cdc_core.upstream.sql.mem_quota.QueryMemory` (``tidb_mem_quota_query``).

Names are resolved before any row is read, with TiDB's errors (``pkg/planner/core``): an unknown column 1054
(``Unknown column 'x' in 'where clause'``), an ambiguous one 1052, a table alias given twice 1066, and under
``ONLY_FULL_GROUP_BY`` a column neither grouped nor aggregated 1055 (1140 without GROUP BY) -- a column of a table
whose primary key is grouped is functionally dependent on it, as MySQL and TiDB allow. ORDER BY takes an
expression, a select alias or a position; NULLs sort first ascending, last descending (MySQL). Result columns are
named as written (the item's source text, TiDB's ``field.Text()``); a column by its table's name for it.

Not implemented, refused by name: subqueries, UNION, WITH, window functions, GROUP_CONCAT's ORDER BY, joins other
than INNER / CROSS / LEFT / RIGHT.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Final, Protocol, cast

from sqlglot import exp

from cdc_core.codec import key as keycodec
from cdc_core.schema.model import ROWID_COLUMN, Column, TableInfo
from cdc_core.upstream.sql import tidb_functions
from cdc_core.upstream.sql.aggregates import Aggregate, contains_aggregate, fold_aggregates, is_aggregate
from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.expr import Evaluator, compare, compile_expr, literal_value, truthy
from cdc_core.upstream.sql.joins import JoinKeys, hash_join
from cdc_core.upstream.sql.mem_quota import QueryMemory, row_bytes
from cdc_core.upstream.sql.statement_result import STREAM_BATCH_ROWS, StatementResult
from cdc_core.upstream.sql.txn import Transaction

Row = dict[str, Any]
ONLY_FULL_GROUP_BY = "ONLY_FULL_GROUP_BY"
# ORDER BY ... LIMIT n keeps a heap of n rows (TiDB's TopN) up to this many; a larger n sorts every row, accounted
TOP_N_HEAP_ROWS = 10_000


class SelectSession(Protocol):
    """What a SELECT needs of its session (``sql_front.Session``)."""

    stream_rows: bool
    mem_quota_query: int
    conn_id: int

    @property
    def sql_mode(self) -> frozenset[str]: ...

    def table_of(self, ref: exp.Expression | None, what: str) -> TableInfo: ...

    def matching_rows(self, info: TableInfo, txn: Transaction, where: exp.Expression | None) -> Iterator[Row]: ...


@dataclass
class Source:
    """A table of the FROM clause, as rows are keyed by it (``alias.column``)."""

    alias: str  # lower case: what qualifies its columns
    shown: str  # as written, for messages
    info: TableInfo
    columns: dict[str, Column | None] = field(default_factory=dict)  # lower-case name -> column (_tidb_rowid: None)

    @classmethod
    def of(cls, ref: exp.Table, info: TableInfo) -> Source:
        shown = str(ref.alias) if ref.alias else str(ref.name)
        return cls(shown.lower(), shown, info, _columns_of(info))

    @property
    def described(self) -> str:
        return f"{self.info.db_name}.{self.shown}"


# A table's columns by lower-case name, per TableInfo object (a statement after statement on one table builds them
# once); keyed by id() and checked by identity, as TableInfo (a frozen dataclass holding a dict) does not hash.
_COLUMNS: dict[int, tuple[TableInfo, dict[str, Column | None]]] = {}


def _columns_of(info: TableInfo) -> dict[str, Column | None]:
    entry = _COLUMNS.get(id(info))
    if entry is not None and entry[0] is info:
        return entry[1]
    if len(_COLUMNS) >= 4096:
        _COLUMNS.clear()
    cols: dict[str, Column | None] = {c.name.lower(): c for c in info.columns}
    cols.setdefault(ROWID_COLUMN, None)
    _COLUMNS[id(info)] = (info, cols)
    return cols


@dataclass
class Item:
    """One output column: its key in the result rows, the name the client sees, its expression, its type."""

    key: str
    name: str
    expr: exp.Expression
    column: Column | None = None
    aggregate: bool = False  # an aggregate is in ``expr``


def _reject(node: exp.Expression, *args: str) -> None:
    for a in args:
        if node.args.get(a):
            raise SqlError(f"unsupported in SELECT: {a.rstrip('_').upper()} clause")


def _unknown(name: str, clause: str) -> SqlError:
    return SqlError(f"Unknown column '{name}' in '{clause}'")


def _written(col: exp.Column) -> str:
    return f"{col.table}.{col.name}" if col.table else str(col.name)


def run_select(session: SelectSession, node: exp.Select, text: str, item_texts: Sequence[str] | None,
               txn: Transaction) -> StatementResult:
    """``node`` (a SELECT) run in ``txn``: its result, the rows streamed when the session streams them."""
    plain = _plain_read(session, node, text, txn)
    if plain is not None:
        return plain
    return SelectPlan(session, node, text, item_texts, txn).run()


# What a plain read may have besides its columns, its table and its WHERE (``SELECT c FROM t WHERE id = ?``)
_PLAIN_ARGS: Final = frozenset({"expressions", "from", "from_", "where", "hint", "locks", "kind"})


def _plain_read(session: SelectSession, node: exp.Select, text: str, txn: Transaction) -> StatementResult | None:
    """A SELECT of one table's columns (no join, aggregate, DISTINCT, GROUP BY, ORDER BY or LIMIT: sysbench's point
    selects and BETWEEN reads, most of what a client sends), planned without the stages: its names resolved
    against the table, its rows streamed as read. None for any other SELECT (:class:`SelectPlan`'s)."""
    args = node.args
    for key, value in args.items():
        if value and key not in _PLAIN_ARGS:
            return None
    from_ = args.get("from_") or args.get("from")
    if from_ is None or type(from_.this) is not exp.Table:
        return None
    items = node.expressions
    for item in items:
        if type(item) is not exp.Column or type(item.this) is exp.Star:
            return None
    ref = from_.this
    info = session.table_of(ref, "SELECT ... FROM")
    cols = _columns_of(info)
    alias = str(ref.alias or ref.name).lower()
    keys: list[str] = []
    defs: list[Column | None] = []
    for item in items:
        name = str(item.name).lower()
        if name not in cols or (item.table and str(item.table).lower() != alias):
            raise _unknown(_written(item), "field list")
        column = cols[name]
        keys.append(column.name if column is not None else str(item.name))
        defs.append(column)
    if len(set(k.lower() for k in keys)) != len(keys):
        return None  # a column twice: the stages key them apart
    where = args.get("where")
    if where is not None:
        for n in _walk(where.this):
            if type(n) is exp.Column and (str(n.name).lower() not in cols or (
                    n.table and str(n.table).lower() != alias)):
                raise _unknown(_written(n), "where clause")
            if isinstance(n, exp.Subquery | exp.Select):
                return None
    names = [k.lower() for k in keys]
    rows = session.matching_rows(info, txn, where)
    result = ({k: row[n] for k, n in zip(keys, names, strict=True)} for row in rows)
    defs = [None if c is not None and c.name.lower() == ROWID_COLUMN else c for c in defs]
    if session.stream_rows:
        batches = iter(lambda: list(islice(result, STREAM_BATCH_ROWS)), [])
        first = next(batches, [])
        return StatementResult(statement=text, columns=keys, rows=first, column_defs=defs,
                               more=batches if len(first) == STREAM_BATCH_ROWS else None)
    return StatementResult(statement=text, columns=keys, rows=list(result), column_defs=defs)


def _walk(e: exp.Expression) -> Iterator[exp.Expression]:
    """``e`` and every node under it (sqlglot's ``walk`` without its bookkeeping: a point read's WHERE is walked
    once per statement)."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        for v in n.args.values():
            if type(v) is list:
                stack.extend(x for x in v if isinstance(x, exp.Expression))
            elif isinstance(v, exp.Expression):
                stack.append(v)


class SelectPlan:
    def __init__(self, session: SelectSession, node: exp.Select, text: str, item_texts: Sequence[str] | None,
                 txn: Transaction) -> None:
        _reject(node, "laterals", "with", "windows", "qualify", "into", "prewhere", "connect", "match")
        self.session, self.node, self.text, self.txn = session, node, text, txn
        self.item_texts = item_texts
        self.memory = QueryMemory(session.mem_quota_query, session.conn_id)
        self.sources: list[Source] = []
        self.merged: dict[str, str] = {}  # USING's bare names -> the key whose value they take
        self.joins: list[tuple[exp.Join, Source]] = []
        from_ = node.args.get("from_") or node.args.get("from")
        if from_ is not None:
            self._add_source(from_.this)
            for j in node.args.get("joins") or []:
                self.joins.append((j, self._add_source(j.this)))
        elif node.args.get("joins"):
            raise SqlError("unsupported in SELECT: JOIN without FROM")
        for j, _ in self.joins:  # USING's columns are one column of the join: known before any name is resolved
            for u in j.args.get("using") or []:
                self.merged[str(u.name).lower()] = ""
        self.by_alias = {s.alias: s for s in self.sources}
        if len(self.sources) > 1:
            names = [n for s in self.sources for n in s.columns]
            self.unique = {n for n in names if names.count(n) == 1}
        else:
            self.unique = set(self.sources[0].columns) if self.sources else set()
        # A subquery anywhere is refused where it is compiled: the evaluator names it (1235)

    def _add_source(self, ref: exp.Expression) -> Source:
        if isinstance(ref, exp.Subquery):
            raise SqlError("unsupported in SELECT: a derived table (subquery in FROM)")
        info = self.session.table_of(ref, "SELECT ... FROM")
        src = Source.of(cast(exp.Table, ref), info)
        if any(s.alias == src.alias for s in self.sources):
            raise SqlError(f"Not unique table/alias: '{src.shown}'")  # ErrNonuniqTable 1066
        self.sources.append(src)
        return src

    # --- names ----------------------------------------------------------------------------------
    def resolve(self, col: exp.Column, clause: str) -> tuple[Source | None, str]:
        """The source and lower-case name of a column reference; ``(None, name)`` when no table has it (a select
        alias, where one may stand). Raises 1054 for a qualified unknown column, 1052 for an ambiguous one."""
        name = str(col.name).lower()
        table = str(col.table).lower() if col.table else ""
        if table:
            src = self.by_alias.get(table)
            if src is None or name not in src.columns:
                raise _unknown(_written(col), clause)
            return src, name
        found = [s for s in self.sources if name in s.columns]
        if len(found) > 1 and name not in self.merged:
            raise SqlError(f"Column '{col.name}' in {clause} is ambiguous")  # ErrNonUniq 1052
        return (found[0] if found else None), name

    def check_columns(self, e: exp.Expression | None, clause: str) -> bool:
        """Every column of ``e`` names one of the sources' (1054 / 1052 otherwise); whether ``e`` holds an
        aggregate (one walk of the tree for both)."""
        if e is None:
            return False
        if type(e) is exp.Column and not isinstance(e.this, exp.Star):  # most select items: no walk
            if self.resolve(e, clause)[0] is None:
                raise _unknown(_written(e), clause)
            return False
        aggregate = False
        for n in e.walk():
            if type(n) is exp.Column:
                if isinstance(n.this, exp.Star):
                    continue
                src, _ = self.resolve(n, clause)
                if src is None:
                    raise _unknown(_written(n), clause)
            elif is_aggregate(cast(exp.Expression, n)):
                aggregate = True
        return aggregate

    # --- the plan ---------------------------------------------------------------------------------
    def items(self) -> list[Item]:
        out: list[Item] = []
        texts = self.item_texts
        for i, item in enumerate(self.node.expressions):
            inner = cast(exp.Expression, item.unalias() if isinstance(item, exp.Alias) else item)
            if isinstance(inner, exp.Star) or (isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star)):
                out.extend(self._star(inner))
                continue
            aggregate = self.check_columns(inner, "field list")
            column: Column | None = None
            if isinstance(item, exp.Alias):
                name = str(item.alias)
            elif isinstance(inner, exp.Column):
                name = str(inner.name)
            elif isinstance(inner, exp.Literal) and inner.is_string and not (texts and texts[i] == "?"):
                name = str(inner.this)  # TiDB names a string literal by its value
            elif texts is not None and i < len(texts):
                name = texts[i]
            else:
                name = inner.sql(dialect="mysql")
            if isinstance(inner, exp.Column):
                src, cname = self.resolve(inner, "field list")
                if src is not None:
                    column = src.columns[cname]
                    if column is not None and not isinstance(item, exp.Alias):
                        name = column.name
            elif isinstance(inner, exp.Min | exp.Max) and isinstance(inner.this, exp.Column):
                src, cname = self.resolve(inner.this, "field list")
                column = src.columns[cname] if src is not None else None
            elif isinstance(inner, exp.Anonymous) and str(inner.this).upper() == "TIDB_PARSE_TSO":
                column = tidb_functions.PARSE_TSO_COLUMN
            out.append(Item(name, name, inner, column, aggregate))
        keys: set[str] = set()
        for it in out:  # result rows are dicts: a name given twice gets a key of its own
            base, n = it.key, 1
            while it.key.lower() in keys:
                n += 1
                it.key = f"{base}#{n}"
            keys.add(it.key.lower())
        return out

    def _star(self, star: exp.Expression) -> list[Item]:
        if not self.sources:
            raise SqlError("No tables used")  # ErrNoTablesUsed 1096
        table = str(star.table).lower() if isinstance(star, exp.Column) and star.table else ""
        if table and table not in self.by_alias:
            raise SqlError(f"Unknown table '{table}'")  # ErrBadTable 1051
        out: list[Item] = []
        done: set[str] = set()
        for src in self.sources:
            if table and src.alias != table:
                continue
            for c in src.info.columns:
                lname = c.name.lower()
                if lname in self.merged and not table:
                    if lname in done:
                        continue  # USING's column comes once
                    done.add(lname)
                    out.append(Item(c.name, c.name, exp.column(c.name), c))
                    continue
                ref = exp.column(c.name, table=src.alias) if len(self.sources) > 1 else exp.column(c.name)
                out.append(Item(c.name, c.name, ref, c))
        return out

    def run(self) -> StatementResult:
        node = self.node
        fast = self._fast_aggregate()
        if fast is not None:
            return fast
        items = self.items()
        where = node.args.get("where")
        self.check_columns(where.this if where is not None else None, "where clause")
        group = node.args.get("group")
        having = node.args.get("having")
        order = node.args.get("order")
        group_exprs = [self._by_item(g, items, "group statement", group_by=True)
                       for g in (group.expressions if group is not None else [])]
        having_e = self._alias_expanded(having.this, items, "having clause") if having is not None else None
        order_keys = [(self._by_item(o.this if isinstance(o, exp.Ordered) else o, items, "order clause"),
                       bool(o.args.get("desc")) if isinstance(o, exp.Ordered) else False)
                      for o in (order.expressions if order is not None else [])]
        if node.args.get("distinct"):
            self._check_distinct_order(items, order_keys)
        grouped = group is not None or any(it.aggregate for it in items) or contains_aggregate(
            having_e) or any(contains_aggregate(k) for k, _ in order_keys)
        rows = self._source_rows(where.this if where is not None else None)
        if grouped:
            rows, items, having_e, order_keys = self._aggregate(rows, items, group_exprs, having_e, order_keys)
        if having_e is not None:
            check = compile_expr(having_e)
            rows = (r for r in rows if truthy(check(r)))
        return self._output(rows, items, order_keys)

    def _check_distinct_order(self, items: list[Item], order_keys: list[tuple[exp.Expression, bool]]) -> None:
        """With DISTINCT, an ORDER BY key must be a selected expression or made of selected columns (TiDB's
        ``ErrFieldInOrderNotSelect``, 3065): another column has no one value per distinct row."""
        selected_sql = {it.expr.sql(dialect="mysql") for it in items}
        selected_cols = {(s.alias if s is not None else None, n) for s, n in (
            self.resolve(it.expr, "field list") for it in items if isinstance(it.expr, exp.Column))}
        for i, (key, _) in enumerate(order_keys, 1):
            if key.sql(dialect="mysql") in selected_sql or contains_aggregate(key):
                continue
            for col in key.find_all(exp.Column):
                src, name = self.resolve(col, "order clause")
                if (src.alias if src is not None else None, name) in selected_cols or src is None:
                    continue
                column = src.columns[name]
                described = f"{src.described}.{column.name if column is not None else name}"
                raise SqlError(f"Expression #{i} of ORDER BY clause is not in SELECT list, references column "
                               f"'{described}' which is not in SELECT list; this is incompatible with DISTINCT")

    def _fast_aggregate(self) -> StatementResult | None:
        """One table, a SELECT list of aggregates only, no GROUP BY / ORDER BY / LIMIT: folded as rows are read,
        none kept (TiDB pushes these down to TiKV's coprocessor); ``COUNT(*)`` without WHERE from the store's
        counts. None for any other SELECT."""
        node = self.node
        if len(self.sources) != 1 or self.joins or any(node.args.get(a) for a in (
                "group", "having", "order", "limit", "offset", "distinct")):
            return None
        inner = [cast(exp.Expression, item.unalias() if isinstance(item, exp.Alias) else item)
                 for item in node.expressions]
        if not inner or not all(is_aggregate(e) for e in inner):
            return None
        items = self.items()
        info = self.sources[0].info
        where = node.args.get("where")
        self.check_columns(where.this if where is not None else None, "where clause")
        if (where is None and len(items) == 1 and isinstance(items[0].expr, exp.Count)
                and isinstance(items[0].expr.this, exp.Star)):
            n = sum(self.txn.count(*keycodec.table_span(pid)) for pid in info.physical_ids)
            return StatementResult(statement=self.text, columns=[items[0].key], rows=[{items[0].key: n}],
                                   names=[items[0].name])
        rows = self.session.matching_rows(info, self.txn, where)
        folded = fold_aggregates([(it.key, it.expr) for it in items], rows, self.memory)
        return StatementResult(statement=self.text, columns=[it.key for it in items], rows=[folded],
                               column_defs=[it.column for it in items], names=[it.name for it in items])

    def _by_item(self, e: exp.Expression, items: list[Item], clause: str, *, group_by: bool = False
                 ) -> exp.Expression:
        """A GROUP BY / ORDER BY expression: a position is the select item's, a bare name that is a select alias
        is its expression (GROUP BY prefers a table's column of that name, as MySQL)."""
        if isinstance(e, exp.Literal) and not e.is_string:
            pos = int(str(e.this))
            if not 1 <= pos <= len(items):
                raise SqlError(f"Unknown column '{pos}' in '{clause}'")
            chosen = items[pos - 1].expr
            if group_by and contains_aggregate(chosen):
                raise SqlError(f"Can't group on '{items[pos - 1].name}'")  # ErrWrongGroupField 1056
            return chosen
        return self._alias_expanded(e, items, clause, prefer_column=group_by)

    def _alias_expanded(self, e: exp.Expression, items: list[Item], clause: str, *, prefer_column: bool = False
                        ) -> exp.Expression:
        """``e`` with each bare name that is a select item's name replaced by the item's expression: before a
        table's column of that name in ORDER BY and HAVING, after it in GROUP BY (MySQL's order of lookup)."""
        by_alias: dict[str, exp.Expression] = {}
        for it in items:
            by_alias.setdefault(it.name.lower(), it.expr)

        def swap(n: exp.Expression) -> exp.Expression:
            if not isinstance(n, exp.Column) or n.table or isinstance(n.this, exp.Star):
                return n
            name = str(n.name).lower()
            if name in by_alias and not prefer_column:
                return by_alias[name].copy()
            src, _ = self.resolve(n, clause)
            if src is None:
                if name in by_alias:
                    return by_alias[name].copy()
                raise _unknown(str(n.name), clause)
            return n

        out = e.copy().transform(swap)
        self.check_columns(out, clause)
        return out

    # --- sources --------------------------------------------------------------------------------
    def _source_rows(self, where: exp.Expression | None) -> Iterable[Row]:
        if not self.sources:
            if where is not None and not truthy(compile_expr(where)({})):
                return []
            return [{}]
        if len(self.sources) == 1:
            return self.session.matching_rows(self.sources[0].info, self.txn,
                                              exp.Where(this=where) if where is not None else None)
        pushed = self._pushed_down(where)
        rows: Iterable[Row] = self._keyed(self.sources[0], pushed.get(self.sources[0].alias))
        left = [self.sources[0]]
        for join, src in self.joins:
            rows = self._join(rows, left, join, src, pushed.get(src.alias))
            left.append(src)
        if where is not None:
            check = compile_expr(where)
            rows = (r for r in rows if truthy(check(r)))
        return rows

    def _pushed_down(self, where: exp.Expression | None) -> dict[str, exp.Where]:
        """The WHERE's conjuncts on one table each, by the table's alias, for its access path (TiDB's predicate
        push-down): only for a table no outer join NULL-extends, where filtering before the join is filtering after
        it. The whole WHERE still filters the joined rows."""
        if where is None:
            return {}
        nullable: set[str] = set()
        before: list[str] = [self.sources[0].alias]
        for join, src in self.joins:
            side = str(join.args.get("side") or "").upper()
            if side == "LEFT":
                nullable.add(src.alias)
            elif side == "RIGHT":
                nullable.update(before)
            before.append(src.alias)
        found: dict[str, list[exp.Expression]] = {}
        conjuncts = list(where.flatten()) if isinstance(where, exp.And) else [where]
        for conj in cast(list[exp.Expression], conjuncts):
            owners = {(src.alias if src is not None else None)
                      for src, _ in (self.resolve(col, "where clause") for col in conj.find_all(exp.Column))}
            if len(owners) != 1 or None in owners or contains_aggregate(conj):
                continue
            (owner,) = owners
            if owner is not None and owner not in nullable:
                found.setdefault(owner, []).append(conj)
        return {alias: exp.Where(this=exp.and_(*conds)) for alias, conds in found.items()}

    def _keyed(self, src: Source, where: exp.Where | None = None) -> Iterator[Row]:
        """A join source's rows (those ``where`` matches) keyed ``alias.name``, and bare where only this table has
        the name."""
        bare = [n for n in src.columns if n in self.unique]
        prefix = src.alias + "."
        for row in self.session.matching_rows(src.info, self.txn, where):
            out = {prefix + k: v for k, v in row.items()}
            for n in bare:
                out[n] = row.get(n)
            yield out

    def _null_row(self, src: Source) -> Row:
        prefix = src.alias + "."
        out: Row = {prefix + n: None for n in src.columns}
        out.update({n: None for n in src.columns if n in self.unique})
        return out

    def _join(self, rows: Iterable[Row], left: list[Source], join: exp.Join, src: Source,
              where: exp.Where | None = None) -> Iterable[Row]:
        side = str(join.args.get("side") or "").upper()
        kind = str(join.args.get("kind") or "").upper()
        if kind not in ("", "INNER", "CROSS", "OUTER") or side not in ("", "LEFT", "RIGHT"):
            raise SqlError(f"unsupported in SELECT: {(side + ' ' + kind).strip()} JOIN")
        using = [str(u.name).lower() for u in join.args.get("using") or []]
        on = join.args.get("on")
        left_aliases = {s.alias for s in left}
        probe_keys: list[exp.Expression] = []
        build_keys: list[exp.Expression] = []
        residual: list[exp.Expression] = []
        fix: dict[str, str] = {}
        for name in using:
            owners = [s for s in left if name in s.columns]
            if not owners or name not in src.columns:
                raise _unknown(name, "from clause")
            lkey, rkey = f"{owners[0].alias}.{name}", f"{src.alias}.{name}"
            probe_keys.append(exp.column(name, table=owners[0].alias))
            build_keys.append(exp.column(name, table=src.alias))
            fix[name] = rkey if side == "RIGHT" else lkey
            self.merged[name] = fix[name]
        if on is not None:
            self.check_columns(on, "on clause")
            for conj in cast(list[exp.Expression], list(on.flatten()) if isinstance(on, exp.And) else [on]):
                pair = self._equi(conj, left_aliases, src.alias)
                if pair is None:
                    residual.append(conj)
                else:
                    probe_keys.append(pair[0])
                    build_keys.append(pair[1])
        elif not using and side:
            raise SqlError(f"unsupported in SELECT: {side} JOIN without ON or USING")
        rest = compile_expr(cast(exp.Expression, exp.and_(*residual))) if residual else None
        lk = [compile_expr(e) for e in probe_keys]
        rk = [compile_expr(e) for e in build_keys]
        if side == "RIGHT":  # the LEFT join with the sides swapped: the new table probes, the rows so far are built
            null_left: Row = {}
            for s in left:
                null_left.update(self._null_row(s))
            return hash_join(self._keyed(src, where), rows, JoinKeys(rk, lk), rest, outer=True, null_build=null_left,
                             memory=self.memory, fix=fix)
        return hash_join(rows, self._keyed(src, where), JoinKeys(lk, rk), rest, outer=side == "LEFT",
                         null_build=self._null_row(src), memory=self.memory, fix=fix)

    def _equi(self, conj: exp.Expression, left: set[str], right: str
              ) -> tuple[exp.Expression, exp.Expression] | None:
        """``(left side, right side)`` of an equality between the joined table and the tables before it."""
        if not isinstance(conj, exp.EQ):
            return None

        def tables(e: exp.Expression) -> set[str]:
            found = set()
            for col in e.find_all(exp.Column):
                src, _ = self.resolve(col, "on clause")
                if src is not None:
                    found.add(src.alias)
            return found

        a, b = tables(conj.this), tables(conj.expression)
        if a and b and a <= left and b == {right}:
            return conj.this, conj.expression
        if a and b and b <= left and a == {right}:
            return conj.expression, conj.this
        return None

    # --- aggregation ------------------------------------------------------------------------------
    def _aggregate(self, rows: Iterable[Row], items: list[Item], group_exprs: list[exp.Expression],
                   having: exp.Expression | None, order_keys: list[tuple[exp.Expression, bool]]
                   ) -> tuple[Iterable[Row], list[Item], exp.Expression | None, list[tuple[exp.Expression, bool]]]:
        """The rows folded into one per group (one in all without GROUP BY), each the group's first row with the
        group keys (``__grp<i>``) and aggregates (``__agg<i>``); the later stages' expressions rewritten to read
        them."""
        aggs: dict[str, tuple[str, Aggregate]] = {}
        group_sql = {g.sql(dialect="mysql"): f"__grp{i}" for i, g in enumerate(group_exprs)}
        grouped_cols: set[tuple[str, str]] = set()
        for g in group_exprs:
            if isinstance(g, exp.Column):
                src, name = self.resolve(g, "group statement")
                if src is not None:
                    grouped_cols.add((src.alias, name))
        dependent = {s.alias for s in self.sources if s.info.primary_key and all(
            (s.alias, c.lower()) in grouped_cols for c in s.info.primary_key)}

        def rewrite(n: exp.Expression) -> exp.Expression:
            if is_aggregate(n):
                text = n.sql(dialect="mysql")
                if text not in aggs:
                    aggs[text] = (f"__agg{len(aggs)}", Aggregate(n, self.memory))
                return exp.column(aggs[text][0])
            slot = group_sql.get(n.sql(dialect="mysql")) if not isinstance(n, exp.Literal) else None
            if slot is not None:
                return exp.column(slot)
            return n

        strict = ONLY_FULL_GROUP_BY in self.session.sql_mode

        def checked(e: exp.Expression, i: int, where: str) -> exp.Expression:
            out = e.copy().transform(rewrite)
            if strict:
                for col in out.find_all(exp.Column):
                    if str(col.name).startswith(("__agg", "__grp")):
                        continue
                    src, name = self.resolve(col, "field list")
                    if src is None or (src.alias, name) in grouped_cols or src.alias in dependent:
                        continue
                    column = src.columns[name]
                    described = f"{src.described}.{column.name if column is not None else name}"
                    if not group_exprs:  # ErrMixOfGroupFuncAndFields 1140
                        raise SqlError(f"In aggregated query without GROUP BY, expression #{i} of {where} contains "
                                       f"nonaggregated column '{described}'; this is incompatible with "
                                       "sql_mode=only_full_group_by")
                    raise SqlError(f"Expression #{i} of {where} is not in GROUP BY clause and contains "
                                   f"nonaggregated column '{described}' which is not functionally dependent on "
                                   "columns in GROUP BY clause; this is incompatible with sql_mode=only_full_group_by")
            return out

        new_items = [Item(it.key, it.name, checked(it.expr, i, "SELECT list"), it.column)
                     for i, it in enumerate(items, 1)]
        new_having = checked(having, 1, "HAVING clause") if having is not None else None
        new_order = [(checked(k, i, "ORDER BY clause"), d) for i, (k, d) in enumerate(order_keys, 1)]
        key_fns = [compile_expr(g) for g in group_exprs]
        agg_list = list(aggs.values())
        return self._groups(rows, key_fns, agg_list, bool(group_exprs)), new_items, new_having, new_order

    def _groups(self, rows: Iterable[Row], key_fns: list[Evaluator], aggs: list[tuple[str, Aggregate]],
                has_group: bool) -> Iterator[Row]:
        groups: dict[tuple[Any, ...], tuple[Row, list[list[Any]]]] = {}
        memory = self.memory
        for row in rows:
            key = tuple(f(row) for f in key_fns)
            entry = groups.get(key)
            if entry is None:
                entry = (row, [a.start() for _, a in aggs])
                groups[key] = entry
                memory.consume(row_bytes(row.values()) + row_bytes(key) + 64 * len(aggs))
            for (_, a), state in zip(aggs, entry[1], strict=True):
                a.step(state, row)
        if not groups and not has_group:  # aggregates over no rows: one row, the columns NULL
            empty: Row = {}
            for s in self.sources:
                empty.update({n: None for n in s.columns} if len(self.sources) == 1 else self._null_row(s))
            groups[()] = (empty, [a.start() for _, a in aggs])
        for key, (first, states) in groups.items():
            out = dict(first)
            for i, v in enumerate(key):
                out[f"__grp{i}"] = v
            for (slot, a), state in zip(aggs, states, strict=True):
                out[slot] = a.result(state)
            yield out

    # --- output -----------------------------------------------------------------------------------
    def _output(self, rows: Iterable[Row], items: list[Item], order_keys: list[tuple[exp.Expression, bool]]
                ) -> StatementResult:
        node = self.node
        fns = [compile_expr(it.expr) for it in items]
        keys = [it.key for it in items]
        order_fns = [(compile_expr(k), desc) for k, desc in order_keys]
        limit, offset = _limit(node)

        def project(row: Row) -> tuple[Any, ...]:
            return tuple(f(row) for f in fns)

        distinct = node.args.get("distinct")
        if order_fns:
            decorated: Iterable[tuple[tuple[Any, ...], tuple[Any, ...]]] = (
                (tuple(f(r) for f, _ in order_fns), project(r)) for r in rows)
        else:
            decorated = (((), project(r)) for r in rows)
        if distinct:
            decorated = self._distinct(decorated)
        outs: Iterable[tuple[Any, ...]]
        if not order_fns and not distinct:  # a scan, a point read: rows as they are read
            outs = (project(r) for r in rows)
            if limit is not None or offset:
                outs = islice(outs, offset, None if limit is None else offset + limit)
        elif order_fns:
            outs = self._sorted(decorated, [d for _, d in order_fns], None if limit is None else offset + limit)
            outs = islice(outs, offset, None if limit is None else offset + limit)
        else:
            outs = (o for _, o in decorated)
            if limit is not None or offset:
                outs = islice(outs, offset, None if limit is None else offset + limit)
        result = (dict(zip(keys, o, strict=True)) for o in outs)
        names = [it.name for it in items]
        defs = [it.column if it.column is not None and it.column.name.lower() != ROWID_COLUMN else None
                for it in items]
        shown = names if names != keys else None
        if self.session.stream_rows:
            batches = iter(lambda: list(islice(result, STREAM_BATCH_ROWS)), [])
            # The first batch now, where the statement runs: an error in WHERE is the statement's, before any row.
            first = next(batches, [])
            # A short first batch is the whole result (a point read's): no ``more``, so the front sends it as a list.
            return StatementResult(statement=self.text, columns=keys, rows=first, column_defs=defs, names=shown,
                                   more=batches if len(first) == STREAM_BATCH_ROWS else None)
        return StatementResult(statement=self.text, columns=keys, rows=list(result), column_defs=defs, names=shown)

    def _distinct(self, rows: Iterable[tuple[tuple[Any, ...], tuple[Any, ...]]]
                  ) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        seen: set[Any] = set()
        for keys, out in rows:
            try:
                h: Any = out
                new = h not in seen
            except TypeError:  # a JSON value (a dict, a list): by its text
                h = repr(out)
                new = h not in seen
            if new:
                seen.add(h)
                self.memory.consume(row_bytes(out))
                yield keys, out

    def _sorted(self, rows: Iterable[tuple[tuple[Any, ...], tuple[Any, ...]]], desc: list[bool], top: int | None
                ) -> Iterator[tuple[Any, ...]]:
        """Rows in ORDER BY order; with ``top`` (LIMIT + OFFSET, up to ``TOP_N_HEAP_ROWS``) a heap of that many, else
        all of them, accounted (the caller slices the LIMIT)."""
        def cmp(a: tuple[tuple[Any, ...], Any], b: tuple[tuple[Any, ...], Any]) -> int:
            for x, y, d in zip(a[0], b[0], desc, strict=True):
                c = _nulls_first(x, y)
                if c:
                    return -c if d else c
            return 0

        if top is not None and top <= TOP_N_HEAP_ROWS:
            best = heapq.nsmallest(top, rows, key=functools.cmp_to_key(cmp))
            return (o for _, o in best)
        held: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = []
        for r in rows:
            self.memory.consume(row_bytes(r[1]) + row_bytes(r[0]))
            held.append(r)
        for i in reversed(range(len(desc))):  # stable sorts, last key first
            held.sort(key=_sort_key(held, i), reverse=desc[i])
        return (o for _, o in held)


def _sort_key(held: list[tuple[tuple[Any, ...], tuple[Any, ...]]], i: int) -> Callable[[Any], Any]:
    """The sort key of ORDER BY key ``i``: the value itself when every value is one kind Python orders as MySQL
    does (integers, binary-collated strings: TiDB's default ``utf8mb4_bin``), else MySQL's comparison."""
    kinds = {type(r[0][i]) for r in held} - {type(None)}
    if len(kinds) <= 1 and kinds <= {int, str, bytes}:
        def native(r: tuple[tuple[Any, ...], Any]) -> tuple[bool, Any]:
            v = r[0][i]
            return (False, 0) if v is None else (True, v)

        return native

    def cmp(a: tuple[tuple[Any, ...], Any], b: tuple[tuple[Any, ...], Any]) -> int:
        return _nulls_first(a[0][i], b[0][i])

    return functools.cmp_to_key(cmp)


def _nulls_first(a: Any, b: Any) -> int:
    if a is None or b is None:
        return (b is None) - (a is None)  # NULL sorts first ascending (MySQL)
    return compare(a, b) or 0


def _limit(node: exp.Select) -> tuple[int | None, int]:
    """``(LIMIT count or None, OFFSET)``."""
    def num(n: exp.Expression | None) -> int | None:
        if n is None:
            return None
        v = literal_value(n.args.get("expression") or n.this)
        if not isinstance(v, int) or v < 0:
            raise SqlError(f"LIMIT/OFFSET must be a non-negative integer, got {v!r}")
        return v

    return num(node.args.get("limit")), num(node.args.get("offset")) or 0

