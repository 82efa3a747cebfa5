"""The ``PARTITION BY`` clause of ``CREATE TABLE``, read apart from the rest of the statement.

sqlglot parses MySQL's LIST partitioning but not ``RANGE ... VALUES LESS THAN MAXVALUE`` nor ``HASH ... PARTITIONS
n``, so the SQL front cuts the clause off the statement (at parenthesis depth 0, outside literals) and reads it
here: ``PARTITION BY RANGE (col) (PARTITION p VALUES LESS THAN (n | MAXVALUE), ...)``, ``PARTITION BY HASH (col)
PARTITIONS n`` and ``PARTITION BY LIST (col) (PARTITION p VALUES IN (v, ...), ...)``, over one column, as TiDB's
parser accepts them (``pkg/parser/parser.y`` PartitionOpt). Anything else is a clear error naming the clause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdc_core.schema.partition import HASH, LIST, RANGE, PartitionDef
from cdc_core.upstream.errors import SqlError

__all__ = ["PartitionSpec", "cut_partition_clause", "parse_partition_clause"]


@dataclass(frozen=True)
class PartitionSpec:
    """A parsed clause: the partitions get their ids when the table is created."""

    type: int
    column: str
    names: tuple[str, ...]
    less_than: tuple[int | None, ...] = ()  # RANGE, per partition (None: MAXVALUE)
    in_values: tuple[tuple[int | None, ...], ...] = ()  # LIST, per partition

    def definitions(self, ids: list[int]) -> tuple[PartitionDef, ...]:
        """The partitions this clause defines, with ``ids`` (one per name, in order)."""
        return tuple(PartitionDef(pid, name, self.less_than[i] if self.less_than else None,
                                  self.in_values[i] if self.in_values else ())
                     for i, (pid, name) in enumerate(zip(ids, self.names, strict=True)))


def cut_partition_clause(text: str) -> tuple[str, str | None]:
    """``text`` without its top-level ``PARTITION BY ...`` clause, and the clause (None when there is none)."""
    depth, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and ch in "pP":
            m = re.compile(r"PARTITION\s+BY\b", re.IGNORECASE).match(text, i)
            if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                return text[:i].rstrip(), text[i:].strip()
        i += 1
    return text, None


_HEAD = re.compile(r"PARTITION\s+BY\s+(RANGE|HASH|LIST)\s*\(\s*`?(\w+)`?\s*\)\s*(.*)$", re.IGNORECASE | re.DOTALL)
_NUM = re.compile(r"PARTITIONS\s+(\d+)\s*$", re.IGNORECASE)
_RANGE_DEF = re.compile(r"PARTITION\s+`?(\w+)`?\s+VALUES\s+LESS\s+THAN\s*(?:\(\s*(-?\d+|MAXVALUE)\s*\)|(MAXVALUE))$",
                        re.IGNORECASE)
_LIST_DEF = re.compile(r"PARTITION\s+`?(\w+)`?\s+VALUES\s+IN\s*\(([^()]*)\)$", re.IGNORECASE)


def _definitions(body: str, clause: str) -> list[str]:
    body = body.strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise SqlError(f"partition definitions expected in parentheses: `{clause}`")
    parts, depth, start = [], 0, 1
    for i, ch in enumerate(body[1:-1], 1):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i].strip())
            start = i + 1
    parts.append(body[start:-1].strip())
    return parts


def parse_partition_clause(clause: str) -> PartitionSpec:
    m = _HEAD.match(clause.strip())
    if m is None:
        raise SqlError(f"unsupported partitioning `{clause}`: RANGE, HASH or LIST over one column is supported here")
    method, column, rest = m.group(1).upper(), m.group(2), m.group(3).strip()
    if method == "HASH":
        n = _NUM.match(rest)
        count = int(n.group(1)) if n else 1 if not rest else 0
        if count < 1:
            raise SqlError(f"unsupported HASH partitioning `{clause}`: expected PARTITIONS n (n >= 1)")
        return PartitionSpec(HASH, column, tuple(f"p{i}" for i in range(count)))
    defs = _definitions(rest, clause)
    names: list[str] = []
    if method == "RANGE":
        bounds: list[int | None] = []
        for d in defs:
            r = _RANGE_DEF.match(d)
            if r is None:
                raise SqlError(f"unsupported RANGE partition definition `{d}`")
            names.append(r.group(1))
            value = r.group(2) or r.group(3)
            bounds.append(None if value.upper() == "MAXVALUE" else int(value))
        return PartitionSpec(RANGE, column, tuple(names), less_than=tuple(bounds))
    lists: list[tuple[int | None, ...]] = []
    for d in defs:
        r = _LIST_DEF.match(d)
        if r is None:
            raise SqlError(f"unsupported LIST partition definition `{d}`")
        names.append(r.group(1))
        try:
            lists.append(tuple(None if v.strip().upper() == "NULL" else int(v) for v in r.group(2).split(",")))
        except ValueError as exc:
            raise SqlError(f"LIST partition `{d}`: values must be integers or NULL") from exc
    return PartitionSpec(LIST, column, tuple(names), in_values=tuple(lists))
