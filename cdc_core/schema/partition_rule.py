"""A table's partitioning rule evaluated over its columns' types: the partition a row goes to, and the rows a
partition holds.

:class:`PartitionRule` is a :class:`~cdc_core.schema.partition.PartitionInfo` bound to the partitioning columns of
one table (their types give the bound texts their values). It follows TiDB's ``pkg/table/tables/partition.go``:

* RANGE (an integer column or a column list) -- ``locateRangeColumnPartition``: the first partition whose upper
  bound the row is below, found by Go's ``sort.Search`` over the bounds, a bound ``(b0, b1, ...)`` being the row
  comparison ``(c0, c1, ...) < (b0, b1, ...)`` of SQL, NULL-aware (``IF(c0 != b0, c0 < b0, IF(c0 != b0 IS NULL,
  NULL, ...))``, the planner's ``constructBinaryOpFunction``), or ``<=`` over the columns before a MAXVALUE
  (``getRangeLocateExprs``); a comparison that is NULL counts as below, so a NULL in a leading column goes to the
  first partition. No partition: "Table has no partition for value ..." (1526).
* LIST -- ``locateListPartitionByRow`` / ``locateListColumnsPartitionByRow``: the partition listing the row's value
  tuple, NULL matching NULL (a NULL datum's key is the NULL key), else the DEFAULT partition.
* HASH -- ``locateHashPartition``: ``|v % n|`` with Go's signed remainder (an unsigned value read as int64), NULL
  to partition 0.
* KEY -- ``LocateKeyPartition`` (:mod:`cdc_core.schema.partition_hash`).

Strings compare as TiDB's default collation ``utf8mb4_bin`` does: their UTF-8 bytes after trailing spaces are
dropped (``binPaddingCollator.Compare``); binary strings as bytes. :meth:`PartitionRule.rows_predicate` writes the
same rule as a SQL predicate (DataFusion's, as delta-rs takes it) over the silver table's columns; KEY and HASH
over a BIGINT UNSIGNED column have none (no CRC-32 in DataFusion, and such a column is a DECIMAL there), and
:meth:`PartitionRule.batch_indexes` evaluates the rule over Arrow batches of the silver table instead.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from cdc_core.codec.rowcodec import MySQLTime
from cdc_core.codec.value_text import format_datetime, format_duration
from cdc_core.schema import column_type as ct
from cdc_core.schema import partition_hash
from cdc_core.schema.partition import (
    HASH,
    KEY,
    LIST,
    MAXVALUE,
    NULL,
    RANGE,
    PartitionDef,
    PartitionError,
    PartitionInfo,
    quote_string,
    unquote_string,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from cdc_core.schema.model import Column

__all__ = ["COLUMNS_TYPES", "PartitionRule", "bound_text", "check_column_types", "compare_key", "partition_columns",
           "rule_of", "validate"]

# pkg/ddl/partition.go isColTypeAllowedAsPartitioningCol: integers, DATE, DATETIME, TIME, CHAR, VARCHAR (BINARY and
# VARBINARY are CHAR and VARCHAR with the binary charset).
COLUMNS_TYPES: Final = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "date", "datetime", "time",
                                  "char", "varchar", "binary", "varbinary"})
_EXPR_KINDS: Final = frozenset({ct.INT, ct.YEAR})  # an expression partitioning evaluates an integer
_BINARY_BOUND: Final = re.compile(r"^(?:_binary\s+)?0x([0-9a-fA-F]*)$", re.IGNORECASE)
_INT: Final = re.compile(r"^[+-]?\d+$")


class _Max:
    """MAXVALUE: above every value."""

    def __repr__(self) -> str:
        return MAXVALUE


_MAX: Final = _Max()


def _literal(text: str) -> Any:
    """The value a bound text holds (``partition.py`` lists the forms TiDB writes)."""
    t = text.strip()
    upper = t.upper()
    if upper == MAXVALUE:
        return _MAX
    if upper == NULL:
        return None
    if len(t) >= 2 and t[0] == "'" and t[-1] == "'":
        return unquote_string(t)
    m = _BINARY_BOUND.match(t)
    if m is not None:
        return bytes.fromhex(m.group(1))
    if _INT.match(t):
        return int(t)
    raise PartitionError(f"bound {text!r} is not a value cdcflow reads (an integer, a quoted string, _binary 0x...)")


def _time_key(v: Any) -> tuple[int, ...]:
    if isinstance(v, dt.datetime | MySQLTime):
        return v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond
    return v.year, v.month, v.day, 0, 0, 0, 0


def compare_key(col: Column, value: Any) -> Any:
    """What TiDB compares a column's value by: ``utf8mb4_bin``'s key for strings (trailing spaces dropped), the
    bytes of binary strings, a tuple of a date's fields, a TIME's microseconds, a number itself; None for NULL."""
    if value is None:
        return None
    kind = col.kind
    if kind in (ct.TEXT, ct.ENUM, ct.SET):
        return (value.encode() if isinstance(value, str) else bytes(value)).rstrip(b" ")
    if kind in (ct.BINARY, ct.BIT):
        return bytes(value)
    if kind in (ct.DATE, ct.DATETIME, ct.TIMESTAMP):
        return _time_key(value)
    if kind == ct.TIME:
        return value // dt.timedelta(microseconds=1)
    return value


def _go_sort_search(n: int, f: Any) -> int:
    """Go's ``sort.Search``: the smallest i in [0, n) with f(i) true (f false, then true), n when none."""
    i, j = 0, n
    while i < j:
        h = (i + j) >> 1
        if not f(h):
            i = h + 1
        else:
            j = h
    return i


def _below(row: Sequence[Any], bound: Sequence[Any]) -> bool | None:
    """The row comparison TiDB's RANGE bound is (``getRangeLocateExprs``): ``row < bound`` over every column, or
    ``row[:k] <= bound[:k]`` when ``bound[k]`` is MAXVALUE (k >= 1); True when the first is MAXVALUE. None is
    SQL's NULL: a NULL at a position the comparison reaches."""
    if bound[0] is _MAX:
        return True
    k = next((i for i, b in enumerate(bound) if b is _MAX), len(bound))
    inclusive = k < len(bound)
    for i in range(k):
        a, b = row[i], bound[i]
        if a is None:
            return None
        if i == k - 1:
            return bool(a <= b) if inclusive else bool(a < b)
        if a != b:
            return bool(a < b)
    return None  # not reached: k >= 1


def _increasing(curr: Sequence[Any], prev: Sequence[Any]) -> bool:
    """``checkTwoRangeColumns``: whether bound ``curr`` is above ``prev`` (MAXVALUE above all, the rest after it
    ignored)."""
    for c, p in zip(curr, prev, strict=True):
        if c is _MAX:
            return True
        if p is _MAX:
            return False
        if c != p:
            return bool(c > p)
    return False


def _sql_name(col: Column) -> str:
    return '"' + col.name.replace('"', '""') + '"'


@dataclass(frozen=True)
class _Sql:
    """How one partitioning column and its values read in DataFusion SQL over the silver table."""

    col: Column

    @property
    def ref(self) -> str:
        name = _sql_name(self.col)
        # utf8mb4_bin compares without trailing spaces; the silver table keeps a VARCHAR's
        return f"rtrim({name}, ' ')" if self.col.kind == ct.TEXT else name

    def lit(self, key: Any) -> str:
        kind = self.col.kind
        if kind == ct.TEXT:
            return "'" + key.decode().replace("'", "''") + "'"
        if kind == ct.BINARY:
            return f"X'{key.hex()}'"
        if kind == ct.DATE:
            return f"DATE '{key[0]:04d}-{key[1]:02d}-{key[2]:02d}'"
        if kind == ct.DATETIME:
            y, mo, d, h, mi, s, us = key
            return f"TIMESTAMP '{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}.{us:06d}'"
        if kind == ct.TIME:
            return str(key * 1000)  # the silver table holds TIME as nanoseconds
        return str(int(key))


class PartitionRule:
    """A partitioning bound to the types of its columns (``columns``: the table's columns of the partitioning, in
    its order). Build with :func:`rule_of`; every method raises ``PartitionError`` with TiDB's text."""

    def __init__(self, part: PartitionInfo, columns: tuple[Column, ...]) -> None:
        self.part = part
        self.columns = columns
        check_column_types(part.type, part.by_columns, columns)
        defs = part.definitions
        self.bounds: list[tuple[Any, ...]] = []
        self.groups: list[list[tuple[Any, ...]]] = []
        self.default = -1
        self._listed: dict[tuple[Any, ...], int] = {}
        if part.type == RANGE:
            self.bounds = [tuple(self._bound(c, t, d) for c, t in zip(columns, d.less_than, strict=True)) for d in defs]
        elif part.type == LIST:
            for i, d in enumerate(defs):
                if d.is_default:
                    self.default = i
                    self.groups.append([])
                    continue
                group = [tuple(self._bound(c, t, d) for c, t in zip(columns, v, strict=True)) for v in d.in_values]
                self.groups.append(group)
                for key in group:
                    self._listed.setdefault(key, i)

    def _bound(self, col: Column, text: str, d: PartitionDef) -> Any:
        value = _literal(text)
        if value is _MAX or value is None:
            return value
        try:
            return compare_key(col, col.convert(value))
        except ValueError as exc:  # SchemaError: the value does not fit the column
            raise PartitionError(f"partition {d.name!r}: bound {text} is not a value of column {col.name!r} "
                                 f"({col.sql_type}): {exc}") from None

    # --- a row --------------------------------------------------------------------------------
    def index(self, values: Sequence[Any]) -> int:
        """The index in the definitions of the partition of a row whose partitioning columns hold ``values`` (the
        columns' Python values, in :attr:`columns` order)."""
        p = self.part
        n = len(p.definitions)
        if p.type == KEY:
            return partition_hash.key_partition(self.columns, values, n)
        if p.type == HASH:
            v = values[0]
            if v is None:
                return 0
            iv = int(v)
            if iv >= 1 << 63:  # datum.GetInt64() of an unsigned value
                iv -= 1 << 64
            return abs(iv) % n  # Go's iv % n keeps iv's sign; TiDB takes its absolute value
        keys = tuple(compare_key(c, v) for c, v in zip(self.columns, values, strict=True))
        if p.type == RANGE:
            found = _go_sort_search(n, lambda i: _below(keys, self.bounds[i]) is not False)
            if found < n:
                return found
        else:
            found = self._listed.get(keys, self.default)
            if found >= 0:
                return found
        if p.by_columns:
            raise PartitionError("Table has no partition for value from column_list")
        shown = values[0]
        raise PartitionError(f"Table has no partition for value {'NULL' if shown is None else shown}")

    def locate(self, row: Mapping[str, Any]) -> PartitionDef:
        """The partition of ``row`` (column name -> Python value, the table's names)."""
        return self.part.definitions[self.index([row.get(c.name) for c in self.columns])]

    # --- rows of the silver table -------------------------------------------------------------
    def rows_predicate(self, defs: Sequence[PartitionDef]) -> str | None:
        """A SQL predicate true of exactly the rows :meth:`index` puts in any of ``defs``, over the silver
        table's columns (DataFusion's SQL, as delta-rs takes it); None when the rule has no such predicate (KEY;
        HASH over a BIGINT UNSIGNED column): use :meth:`batch_indexes`."""
        p = self.part
        if p.type == KEY or any(c.type == "bigint" and c.unsigned for c in self.columns):
            return None
        positions = {d.id: i for i, d in enumerate(p.definitions)}
        parts = [self._one_predicate(positions[d.id]) for d in defs]
        return " OR ".join(parts) if parts else "false"

    def _one_predicate(self, i: int) -> str:
        p = self.part
        sql = [_Sql(c) for c in self.columns]
        if p.type == HASH:
            test = f"abs({sql[0].ref} % {len(p.definitions)}) = {i}"
            return f"({sql[0].ref} IS NULL OR {test})" if i == 0 else f"coalesce({test}, false)"
        if p.type == RANGE:
            def in_or_below(k: int) -> str:  # a NULL comparison counts as below (sort.Search takes it)
                return f"coalesce({self._below_sql(sql, self.bounds[k])}, true)"

            return in_or_below(0) if i == 0 else f"({in_or_below(i)} AND NOT {in_or_below(i - 1)})"
        if i == self.default:
            others = [self._list_sql(sql, k) for k in range(len(p.definitions)) if k != i]
            return f"NOT ({' OR '.join(others)})" if others else "true"
        return self._list_sql(sql, i)

    @staticmethod
    def _below_sql(sql: Sequence[_Sql], bound: Sequence[Any]) -> str:
        """:func:`_below` in SQL: ``(c0 < b0) OR (c0 = b0 AND ...)``, the same three-valued result."""
        if bound[0] is _MAX:
            return "true"
        k = next((i for i, b in enumerate(bound) if b is _MAX), len(bound))
        op = "<=" if k < len(bound) else "<"
        out = f"{sql[k - 1].ref} {op} {sql[k - 1].lit(bound[k - 1])}"
        for i in range(k - 2, -1, -1):
            ref, lit = sql[i].ref, sql[i].lit(bound[i])
            out = f"({ref} < {lit} OR ({ref} = {lit} AND {out}))"
        return f"({out})"

    def _list_sql(self, sql: Sequence[_Sql], i: int) -> str:
        tuples = []
        for key in self.groups[i]:
            atoms = [f"{s.ref} IS NULL" if v is None else f"coalesce({s.ref} = {s.lit(v)}, false)"
                     for s, v in zip(sql, key, strict=True)]
            tuples.append("(" + " AND ".join(atoms) + ")")
        return "(" + " OR ".join(tuples) + ")" if tuples else "false"

    def batch_indexes(self, batch: pa.RecordBatch) -> list[int]:
        """The partition index of each row of ``batch`` (silver-table columns: Arrow types as the row decoder's),
        -1 for a row no partition takes (only a WITHOUT VALIDATION exchange leaves one)."""
        columns = []
        for c in self.columns:
            raw = batch.column(c.name).to_pylist()
            plain = c.kind == ct.INT and not (c.type == "bigint" and c.unsigned)
            columns.append(raw if plain else [c.from_arrow(v) for v in raw])
        out = []
        for values in zip(*columns, strict=True):
            try:
                out.append(self.index(values))
            except PartitionError:
                out.append(-1)
        return out

    # --- definitions ----------------------------------------------------------------------------
    def check_definitions(self) -> None:
        """TiDB's rules on the bounds and values (``checkPartitionDefinitionConstraints``): RANGE bounds strictly
        increasing (``checkRangePartitionValue`` / ``checkRangeColumnsPartitionValue``), no value tuple listed
        twice (``checkListPartitionValue``)."""
        for prev, curr in zip(self.bounds, self.bounds[1:], strict=False):
            if not _increasing(curr, prev):
                raise PartitionError("VALUES LESS THAN value must be strictly increasing for each partition")
        seen: set[tuple[Any, ...]] = set()
        for group in self.groups:
            for key in group:
                if key in seen:
                    raise PartitionError("Multiple definition of same constant in list partitioning")
                seen.add(key)

    def same_bound(self, a: PartitionDef, b: PartitionDef) -> bool:
        """Whether two RANGE partitions of this rule end at the same bound (REORGANIZE's end check)."""
        return self.bound_of(a) == self.bound_of(b)

    def bound_of(self, d: PartitionDef) -> tuple[Any, ...]:
        return tuple(self._bound(c, t, d) for c, t in zip(self.columns, d.less_than, strict=True))


def check_column_types(part_type: int, by_columns: bool, columns: Sequence[Column]) -> None:
    """Refuse a column the partitioning cannot be over (``checkColumnsPartitionType``, ``checkPartitionFuncType``):
    KEY takes most types (:func:`partition_hash.check_key_column`), COLUMNS :data:`COLUMNS_TYPES`, an expression an
    integer column."""
    for c in columns:
        if part_type == KEY:
            partition_hash.check_key_column(c)
        elif (c.type not in COLUMNS_TYPES) if by_columns else (c.kind not in _EXPR_KINDS):
            raise PartitionError(f"Field '{c.name}' is of a not allowed type for this type of partitioning")


def partition_columns(part: PartitionInfo, columns: Sequence[Column]) -> tuple[Column, ...]:
    """The table's columns the partitioning names, in its order (TiDB's errors for one it does not have)."""
    if not part.rules_known:
        raise PartitionError(f"the partitioning `{part.expr or part.expression}` is not evaluated by cdcflow (only "
                             "a column, or a list of columns, is)")
    by_name = {c.name.lower(): c for c in columns}
    out = []
    for name in part.columns:
        col = by_name.get(name.lower())
        if col is None:
            if part.by_columns:
                raise PartitionError("Field in list of fields for partition function not found in table")
            raise PartitionError(f"Unknown column '{name}' in 'partition function'")
        if col.collate:
            raise PartitionError(f"column {col.name!r} has the collation {col.collate}, and cdcflow compares "
                                 "partition values by their bytes as utf8mb4_bin does: a row's partition is not "
                                 "known")
        out.append(col)
    if not out:
        raise PartitionError("Table partition metadata not correct, neither partition expression or list of "
                             "partition columns")
    return tuple(out)


@functools.lru_cache(maxsize=512)
def _compiled(part: PartitionInfo, columns: tuple[Column, ...]) -> PartitionRule:
    return PartitionRule(part, columns)


def rule_of(part: PartitionInfo, columns: Sequence[Column]) -> PartitionRule:
    """``part`` bound to the types of ``columns`` (the table's columns; compiled once per partitioning and column
    types: the upstream asks for it for every row it writes)."""
    return _compiled(part, partition_columns(part, columns))


def validate(part: PartitionInfo, columns: Sequence[Column], table: str) -> PartitionRule:
    """``part`` once it passes TiDB's partition rules for a table with ``columns``; its rule."""
    part.check_shape(table)
    r = rule_of(part, columns)
    r.check_definitions()
    return r


def bound_text(col: Column, value: Any) -> str:
    """A bound's text as TiDB writes it into the partition info (``generatePartValuesWithTp``): the column's
    value (``Column.convert``'s) as an integer, a quoted string, ``_binary 0x..`` for a binary string, a quoted
    date/datetime/time; NULL as ``NULL``."""
    if value is None:
        return NULL
    kind = col.kind
    if kind in (ct.INT, ct.YEAR):
        return str(int(value))
    if kind == ct.BINARY:
        return "_binary 0x" + bytes(value).hex()
    if kind == ct.TEXT:
        return quote_string(value)
    if kind == ct.DATE:
        return quote_string(value.isoformat())
    if kind == ct.DATETIME:
        return quote_string(format_datetime(value, col.fsp or 0))
    if kind == ct.TIME:
        return quote_string(format_duration(value, col.fsp or 0))
    raise PartitionError("Partition column values of incorrect type")

