"""TiDB table-filter rules: ``db.*``, ``!db.tmp*``, ``*.*``, backquoted names, case-insensitive.

Semantics follow TiDB's table filter: rules are read in order and the *last* rule that matches a
table decides (a ``!`` rule excludes); a table no rule matches is excluded. Wildcards are ``*``
(any run), ``?`` (one character) and ``[...]`` character classes, in the schema and the table
part separately. System schemas (``mysql``, ``information_schema``, ``performance_schema``,
``metrics_schema``) are never replicated.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from cdc_core.errors import ConfigError

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "metrics_schema"})


@dataclass(frozen=True)
class _Rule:
    text: str
    negated: bool
    schema: re.Pattern[str]
    table: re.Pattern[str]


def _split(rule: str) -> tuple[str, str]:
    """Split ``schema.table`` at the first dot outside backquotes; strip the quotes."""
    parts: list[str] = []
    cur: list[str] = []
    quoted = False
    i = 0
    while i < len(rule):
        ch = rule[i]
        if ch == "`":
            if quoted and i + 1 < len(rule) and rule[i + 1] == "`":
                cur.append("`")
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    if quoted:
        raise ConfigError(f"filter rule {rule!r}: unterminated backquote")
    parts.append("".join(cur))
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ConfigError(f"filter rule {rule!r}: expected `schema.table` (e.g. `db.*` or `!db.tmp*`)")
    return parts[0], parts[1]


def _compile(glob: str, rule: str) -> re.Pattern[str]:
    try:
        return re.compile(fnmatch.translate(glob.lower()))
    except re.error as exc:
        raise ConfigError(f"filter rule {rule!r}: bad pattern {glob!r}: {exc}") from exc


class TableFilter:
    """Decides whether ``schema.table`` is replicated."""

    def __init__(self, rules: list[str] | tuple[str, ...] = ("*.*",)) -> None:
        if isinstance(rules, str):
            raise ConfigError("[filter] rules must be a list of strings, e.g. rules = [\"db.*\"]")
        self._rules: list[_Rule] = []
        for raw in rules:
            if not isinstance(raw, str):
                raise ConfigError(f"filter rule {raw!r} is not a string")
            text = raw.strip()
            if not text or text.startswith("#"):
                continue
            negated = text.startswith("!")
            body = text[1:].strip() if negated else text
            schema, table = _split(body)
            self._rules.append(_Rule(text, negated, _compile(schema, text), _compile(table, text)))
        self.rules = tuple(r.text for r in self._rules)

    def match(self, schema: str, table: str) -> bool:
        s, t = schema.lower(), table.lower()
        if s in SYSTEM_SCHEMAS:
            return False
        for rule in reversed(self._rules):
            if rule.schema.match(s) and rule.table.match(t):
                return not rule.negated
        return False

    def match_schema(self, schema: str) -> bool:
        """Whether any table of ``schema`` could match (for schema-level DDL)."""
        s = schema.lower()
        if s in SYSTEM_SCHEMAS:
            return False
        return any(r.schema.match(s) and not r.negated for r in self._rules)
