"""Event filters (TiCDC's ``[[filter.event-filters]]``) and ``ignore-txn-start-ts``.

```toml
[filter]
rules = ["shop.*"]
ignore-txn-start-ts = [449816189483237377]

[[filter.event-filters]]
matcher = ["shop.orders"]                 # table-filter rules choosing the tables this applies to
ignore-event = ["delete", "drop table"]   # DML kinds and DDL types
ignore-sql = ["^ALTER TABLE .* ADD INDEX"] # regexes on DDL queries
ignore-insert-value-expr = "total < 0"    # SQL (MySQL dialect) on the new row
ignore-update-old-value-expr = "status = 'draft'"
ignore-update-new-value-expr = "status = 'test'"
ignore-delete-value-expr = "id > 1000000"
```

Expressions are validated when the changefeed is created (a clear error naming the filter and the
expression) and transpiled by sqlglot to Spark SQL, which evaluates them over whole windows in
the Spark job; Python never evaluates them. DDL filtering happens here: an ignored DDL still
updates the changefeed's schema storage but is not applied to Delta.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdc_core.codec.sql_literal import load_sqlglot
from cdc_core.errors import ConfigError
from cdc_core.filter.table_filter import TableFilter
from cdc_core.schema.ddl_job import JOB_TYPES

DML_EVENTS = ("insert", "update", "delete")
# TiCDC's group names besides the single types.
EVENT_GROUPS = {"all dml": DML_EVENTS, "all ddl": JOB_TYPES}
EXPR_KEYS = (
    "ignore-insert-value-expr",
    "ignore-update-old-value-expr",
    "ignore-update-new-value-expr",
    "ignore-delete-value-expr",
)
_KEYS = {"matcher", "ignore-event", "ignore-sql", *EXPR_KEYS}


def to_spark_predicate(text: str, where: str) -> str:
    """Validate a MySQL boolean expression on a row and return it as Spark SQL."""
    # Imported here: every config load (each Airflow task and DAG parse, each CLI call) imports this module,
    # and most configs have no expression (sqlglot costs ~0.5 s to import).
    load_sqlglot()
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: the expression must be a non-empty string")
    # Expressions are row predicates: no subqueries, aggregates or window functions.
    forbidden = (exp.Select, exp.Subquery, exp.AggFunc, exp.Window, exp.Star)
    try:
        tree = sqlglot.parse_one(text, read="mysql")
    except ParseError as exc:
        detail = exc.errors[0].get("description") if exc.errors else str(exc)
        raise ConfigError(f"{where}: expression {text!r} does not parse: {detail}") from exc
    bad = next((n for n in tree.walk() if isinstance(n, forbidden)), None)
    if bad is not None:
        raise ConfigError(
            f"{where}: expression {text!r} must be a condition on the row's columns; "
            f"{type(bad).__name__.lower()} `{bad.sql(dialect='mysql')}` is not allowed"
        )
    if isinstance(tree, exp.Column | exp.Literal):
        raise ConfigError(f"{where}: expression {text!r} is not a condition (e.g. `price < 0`)")
    return tree.sql(dialect="spark")


@dataclass(frozen=True)
class EventFilterRule:
    matcher: TableFilter
    ignore_dml: frozenset[str] = frozenset()
    ignore_ddl: frozenset[str] = frozenset()
    ignore_sql: tuple[re.Pattern[str], ...] = ()
    # Spark SQL predicates by TOML key (None when not set).
    exprs: Mapping[str, str | None] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)

    def dml_spec(self) -> dict[str, Any]:
        """The JSON-able form the Spark job evaluates (keys with underscores)."""
        return {
            "ignore_event": sorted(self.ignore_dml),
            **{k.replace("-", "_"): self.exprs.get(k) for k in EXPR_KEYS},
        }

    @property
    def filters_dml(self) -> bool:
        return bool(self.ignore_dml) or any(self.exprs.get(k) for k in EXPR_KEYS)


def _parse_rule(d: Mapping[str, Any], where: str) -> EventFilterRule:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: must be a table (`[[filter.event-filters]]`)")
    unknown = set(d) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_KEYS))}")
    matcher_rules = d.get("matcher", ["*.*"])
    if not isinstance(matcher_rules, list):
        raise ConfigError(f"{where}: `matcher` must be a list of table-filter rules")
    try:
        matcher = TableFilter(matcher_rules)
    except ConfigError as exc:
        raise ConfigError(f"{where} matcher: {exc}") from exc
    events = d.get("ignore-event", [])
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise ConfigError(f"{where}: `ignore-event` must be a list of event types")
    dml: set[str] = set()
    ddl: set[str] = set()
    for e in events:
        name = e.strip().lower()
        members = EVENT_GROUPS.get(name, (name,))
        for m in members:
            if m in DML_EVENTS:
                dml.add(m)
            elif m in JOB_TYPES:
                ddl.add(m)
            else:
                known = ", ".join([*DML_EVENTS, *EVENT_GROUPS, *JOB_TYPES])
                raise ConfigError(f"{where}: unknown event type {e!r} in `ignore-event` (known: {known})")
    sqls = d.get("ignore-sql", [])
    if not isinstance(sqls, list):
        raise ConfigError(f"{where}: `ignore-sql` must be a list of regular expressions")
    patterns = []
    for s in sqls:
        try:
            patterns.append(re.compile(s, re.IGNORECASE))
        except (re.error, TypeError) as exc:
            raise ConfigError(f"{where}: `ignore-sql` pattern {s!r} is not a valid regular expression: {exc}") from exc
    exprs = {k: (to_spark_predicate(d[k], f"{where} `{k}`") if d.get(k) is not None else None) for k in EXPR_KEYS}
    return EventFilterRule(matcher, frozenset(dml), frozenset(ddl), tuple(patterns), exprs, dict(d))


@dataclass(frozen=True)
class EventFilter:
    rules: tuple[EventFilterRule, ...] = ()
    ignore_txn_start_ts: frozenset[int] = frozenset()

    @classmethod
    def from_config(cls, rules: Sequence[Mapping[str, Any]], ignore_txn_start_ts: Sequence[int],
                    where: str) -> EventFilter:
        if not isinstance(rules, list):
            raise ConfigError(f"{where}: `event-filters` must be an array of tables ([[filter.event-filters]])")
        parsed = tuple(_parse_rule(r, f"{where} [[filter.event-filters]] #{i + 1}") for i, r in enumerate(rules))
        if not isinstance(ignore_txn_start_ts, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in ignore_txn_start_ts
        ):
            raise ConfigError(f"{where}: `ignore-txn-start-ts` must be a list of positive TSO integers")
        return cls(parsed, frozenset(ignore_txn_start_ts))

    def dml_specs(self, schema: str, table: str) -> list[dict[str, Any]]:
        """The DML filters that apply to ``schema.table``, in the form the Spark job evaluates."""
        return [r.dml_spec() for r in self.rules if r.filters_dml and r.matcher.match(schema, table)]

    def drops_rows_of(self, schema: str, table: str) -> bool:
        """Whether row changes of ``schema.table`` may be dropped on purpose (a DML filter matches it, or
        ``ignore-txn-start-ts`` is set: a listed transaction may touch any table), so that the table need not
        equal the upstream row for row."""
        return bool(self.ignore_txn_start_ts or self.dml_specs(schema, table))

    def ignores_ddl(self, job_type: str, query: str, schema: str | None, table: str | None) -> bool:
        """Whether a DDL is not applied downstream (it still updates the schema storage)."""
        for r in self.rules:
            if table is not None and schema is not None:
                if not r.matcher.match(schema, table):
                    continue
            elif schema is not None and not r.matcher.match_schema(schema):
                continue
            if job_type in r.ignore_ddl or any(p.search(query) for p in r.ignore_sql):
                return True
        return False
