"""Partitioned tables as TiDB keeps them: one logical table, one physical table id per partition.

TiDB's ``model.PartitionInfo`` (``pkg/meta/model/table.go``): ``{"type", "expr", "columns", "enable",
"is_empty_columns", "definitions": [{"id", "name", "less_than", "in_values", ...}], "num", ...}``, ``type`` one of
``ast.PartitionType`` (``pkg/parser/ast/model.go``): RANGE 1, HASH 2, LIST 3, KEY 4. A partitioning is either an
expression (``expr``: RANGE/HASH/LIST over one integer column here) or a column list (``columns``: RANGE COLUMNS,
LIST COLUMNS, KEY). Every partition's rows live under its own id (``t{partition id}_r...``), so TiKV's change feed
reports them by partition; TiCDC maps each partition id back to the logical table, and so does cdcflow.

Bounds are kept as TiDB writes them (``pkg/ddl/partition.go`` generatePartValuesWithTp): one text per column, ``10``
for an integer, ``'it''s'`` for a string (``driver.WrapInSingleQuotes``: backslashes doubled, quotes doubled),
``_binary 0x6162`` for a binary string, ``'2024-01-01'`` / ``'2024-01-01 00:00:00'`` for dates and datetimes,
``MAXVALUE`` in ``less_than``, ``NULL`` and ``DEFAULT`` in ``in_values``. What they mean needs the columns' types:
:mod:`cdc_core.schema.partition_rule` evaluates a rule against a table's columns. Readers that only need the ids
(the schema storage, the puller, the mount) never evaluate anything; a rule this module cannot read (an expression
such as ``YEAR(d)``) is kept with ``rules_known`` false and only what needs the rule refuses it.

cdcflow's own form (:meth:`PartitionInfo.to_dict`, in schema logs and snapshots) holds the same texts; older state
files held one integer column (``"column"``, ``less_than`` an integer or null for MAXVALUE, ``in_values`` integers
or null for NULL), which :meth:`PartitionInfo.from_dict` still reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

from cdc_core.errors import CdcflowError

__all__ = ["DEFAULT", "HASH", "KEY", "LIST", "MAXVALUE", "NULL", "RANGE", "PartitionDef", "PartitionError",
           "PartitionInfo", "quote_string", "unquote_string"]

RANGE: Final = 1  # ast.PartitionTypeRange
HASH: Final = 2  # ast.PartitionTypeHash
LIST: Final = 3  # ast.PartitionTypeList
KEY: Final = 4  # ast.PartitionTypeKey
TYPE_NAMES: Final = {RANGE: "RANGE", HASH: "HASH", LIST: "LIST", KEY: "KEY"}
MAXVALUE: Final = "MAXVALUE"
NULL: Final = "NULL"
DEFAULT: Final = "DEFAULT"  # LIST's catch-all partition: ``in_values`` [["DEFAULT"]]
_ONE_COLUMN: Final = re.compile(r"^(?:`((?:[^`]|``)+)`|(\w+))$")


class PartitionError(CdcflowError):
    """A row that no partition takes (MySQL error 1526), or a partition definition that does not hold."""


def quote_string(text: str) -> str:
    """TiDB's ``driver.WrapInSingleQuotes`` (``pkg/types/parser_driver/value_expr.go``): how a string bound is
    written into the partition info."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def unquote_string(text: str) -> str:
    """TiDB's ``driver.UnwrapFromSingleQuotes``, the inverse of :func:`quote_string`."""
    if len(text) < 2 or text[0] != "'" or text[-1] != "'":
        return text
    return text[1:-1].replace("\\\\", "\\").replace("''", "'")


def _texts(v: Any) -> tuple[str, ...]:
    """One bound or value tuple as texts; a bare integer or None is the one-column form older callers pass."""
    if isinstance(v, tuple | list):
        return tuple(str(x) for x in v)
    return (NULL if v is None else str(v),)


@dataclass(frozen=True)
class PartitionDef:
    """One partition: its physical id, name, and for RANGE its ``less_than`` texts (one per column), for LIST its
    ``in_values`` (value tuples, one text per column). An integer ``less_than`` (or None for MAXVALUE) and
    integer ``in_values`` (None for NULL) are the one-column form and are normalized to texts."""

    id: int
    name: str
    less_than: tuple[str, ...] = ()
    in_values: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        lt: Any = self.less_than
        # None is "no bound" here; a RANGE partition without one is MAXVALUE (PartitionInfo fills it in).
        object.__setattr__(self, "less_than", () if lt is None else _texts(lt))
        object.__setattr__(self, "in_values", tuple(_texts(v) for v in self.in_values))

    @property
    def is_default(self) -> bool:
        """LIST's DEFAULT partition (it takes every value no other partition lists)."""
        return any(len(v) == 1 and v[0].upper() == DEFAULT for v in self.in_values)


@dataclass(frozen=True)
class PartitionInfo:
    """A partitioned table's partitioning: ``type``, the partitioning ``columns`` (one for an expression
    partitioning, the list for COLUMNS and KEY; a single name is taken as a one-column tuple), the definitions in
    order, and whether the rule is the column list (``by_columns``: RANGE/LIST COLUMNS, KEY) or an expression on
    one column (``expr``, TiDB's text, ``\\`id\\``` when empty)."""

    type: int
    columns: tuple[str, ...]
    definitions: tuple[PartitionDef, ...] = field(default_factory=tuple)
    rules_known: bool = True  # False: an expression or bounds cdcflow cannot evaluate (ids only)
    by_columns: bool = False
    expr: str = ""
    empty_columns: bool = False  # KEY(): the columns are the primary key's (TiDB's IsEmptyColumns)

    def __post_init__(self) -> None:
        given: Any = self.columns
        cols = (given,) if isinstance(given, str) else tuple(given)
        object.__setattr__(self, "columns", cols)
        if self.type == KEY:
            object.__setattr__(self, "by_columns", True)
        if not self.by_columns and not self.expr and len(cols) == 1:
            object.__setattr__(self, "expr", f"`{cols[0]}`")
        if self.type == RANGE:  # the one-column form's None bound is MAXVALUE
            n = max(len(cols), 1)
            defs = tuple(d if d.less_than else PartitionDef(d.id, d.name, (MAXVALUE,) * n, d.in_values)
                         for d in self.definitions)
            object.__setattr__(self, "definitions", defs)
        else:
            object.__setattr__(self, "definitions", tuple(self.definitions))

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(d.id for d in self.definitions)

    @property
    def method(self) -> str:
        """The keyword of the partitioning (RANGE, HASH, LIST, KEY)."""
        return TYPE_NAMES[self.type]

    @property
    def method_name(self) -> str:
        """``information_schema.PARTITIONS.PARTITION_METHOD`` (``pkg/executor/infoschema_reader.go``): RANGE
        COLUMNS and LIST COLUMNS for column lists, KEY as it is."""
        return f"{self.method} COLUMNS" if self.by_columns and self.type in (RANGE, LIST) else self.method

    @property
    def expression(self) -> str:
        """``PARTITION_EXPRESSION``: the expression, or the columns backticked and joined by commas."""
        if self.by_columns:
            return ",".join(f"`{c}`" for c in self.columns)
        return self.expr

    def clause_head(self) -> str:
        """``PARTITION BY ...`` up to the definitions, as ``SHOW CREATE TABLE`` writes it (``AppendPartitionInfo``):
        what the partition DDL parses a statement's new definitions against."""
        cols = ",".join("`" + c.replace("`", "``") + "`" for c in self.columns)
        if self.type == KEY:
            return f"PARTITION BY KEY ({'' if self.empty_columns else cols})"
        if self.by_columns:
            return f"PARTITION BY {self.method} COLUMNS({cols})"
        return f"PARTITION BY {self.method} ({self.expr})"

    def find(self, name: str) -> PartitionDef | None:
        lname = name.lower()
        return next((d for d in self.definitions if d.name.lower() == lname), None)

    def description(self, d: PartitionDef) -> str | None:
        """``information_schema.PARTITIONS.PARTITION_DESCRIPTION``: RANGE's bounds joined by commas, LIST's values
        (a tuple of several in parentheses), none for HASH/KEY."""
        if self.type == RANGE:
            return ",".join(d.less_than)
        if self.type == LIST:
            return ",".join(v[0] if len(v) == 1 else "(" + ",".join(v) + ")" for v in d.in_values)
        return None

    def check_shape(self, table: str) -> None:
        """The rules that need no column type: at least one partition, unique names, as many bound texts as
        columns, MAXVALUE only where TiDB takes it. Ordering and duplicate values need the types
        (:func:`cdc_core.schema.partition_rule.validate`)."""
        if not self.definitions:
            raise PartitionError(f"table {table!r}: a partitioned table needs at least one partition")
        seen: set[str] = set()
        for d in self.definitions:
            if d.name.lower() in seen:
                raise PartitionError(f"Duplicate partition name {d.name}")
            seen.add(d.name.lower())
        n = len(self.columns)
        for d in self.definitions:
            if self.type == RANGE and len(d.less_than) != n:
                raise PartitionError("Inconsistency in usage of column lists for partitioning")
            if self.type == LIST:
                if not d.in_values:
                    raise PartitionError(f"table {table!r}: LIST partition {d.name!r} lists no values")
                for v in d.in_values:
                    if len(v) != n and not (len(v) == 1 and v[0].upper() == DEFAULT):
                        raise PartitionError("Inconsistency in usage of column lists for partitioning")
                    if any(x.upper() == MAXVALUE for x in v):
                        raise PartitionError("Cannot use MAXVALUE as value in VALUES IN")
        if self.type == RANGE:
            if any(x.upper() == NULL for d in self.definitions for x in d.less_than):
                raise PartitionError("Not allowed to use NULL value in VALUES LESS THAN")
            for d in self.definitions[:-1]:
                if d.less_than[0].upper() == MAXVALUE and not self.by_columns:
                    raise PartitionError("MAXVALUE can only be used in last partition definition")
        if self.type == LIST and sum(d.is_default for d in self.definitions) > 1:
            raise PartitionError("Multiple definition of same constant in list partitioning")

    # --- TiDB's JSON --------------------------------------------------------------------------
    def to_tidb(self) -> dict[str, Any]:
        def cistr(s: str) -> dict[str, str]:
            return {"O": s, "L": s.lower()}

        return {
            "type": self.type, "expr": "" if self.by_columns else self.expr,
            "columns": [cistr(c) for c in self.columns] if self.by_columns else None, "enable": True,
            "is_empty_columns": self.empty_columns,
            "definitions": [
                {"id": d.id, "name": cistr(d.name),
                 "less_than": list(d.less_than) if self.type == RANGE else None,
                 "in_values": [list(v) for v in d.in_values] if self.type == LIST else None,
                 "policy_ref_info": None}
                for d in self.definitions],
            "adding_definitions": None, "dropping_definitions": None, "NewPartitionIDs": None, "states": None,
            "num": len(self.definitions) if self.type in (HASH, KEY) else 0, "ddl_state": 0, "new_table_id": 0,
            "ddl_type": 0, "ddl_expr": "", "ddl_columns": None, "ddl_update_indexes": None,
        }  # fmt: skip

    @classmethod
    def from_tidb(cls, d: dict[str, Any], where: str) -> PartitionInfo:
        try:
            tp = int(d["type"])
            if tp not in TYPE_NAMES:
                raise PartitionError(f"{where}: partition type {tp} is not supported (RANGE, HASH, LIST and KEY are)")
            expr = str(d.get("expr") or "").strip()
            raw_cols = d.get("columns") or []
            by_columns = bool(raw_cols) or tp == KEY
            if by_columns:
                columns = tuple(str(c.get("O") if isinstance(c, dict) else c) for c in raw_cols)
                known = bool(columns)
            else:
                # An expression that is one column (`id`) is what is evaluated; anything else (YEAR(`d`)) is not.
                m = _ONE_COLUMN.match(expr)
                known = m is not None
                columns = ((m.group(1) or m.group(2)).replace("``", "`"),) if m else ()
            defs = []
            for pd in d.get("definitions") or ():
                name = pd["name"]["O"] if isinstance(pd.get("name"), dict) else str(pd.get("name"))
                less = tuple(str(x) for x in pd.get("less_than") or ()) if tp == RANGE else ()
                values = tuple(tuple(str(x) for x in v) for v in pd.get("in_values") or ()) if tp == LIST else ()
                defs.append(PartitionDef(int(pd["id"]), name, less, values))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PartitionError(f"{where}: malformed partition info: {exc}") from exc
        return cls(tp, columns, tuple(defs), known, by_columns, "" if by_columns else expr,
                   bool(d.get("is_empty_columns")))

    # --- cdcflow's TableInfo JSON ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "columns": list(self.columns), "by_columns": self.by_columns, "expr": self.expr,
                "empty_columns": self.empty_columns, "rules_known": self.rules_known,
                "definitions": [{"id": d.id, "name": d.name, "less_than": list(d.less_than),
                                 "in_values": [list(v) for v in d.in_values]} for d in self.definitions]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PartitionInfo:
        if "columns" not in d:  # an older state file: one integer column, integer bounds
            return cls(int(d["type"]), (str(d["column"]),), tuple(
                PartitionDef(int(x["id"]), str(x["name"]), _old_bound(x.get("less_than")),
                             tuple(_old_value(v) for v in x.get("in_values") or ()))
                for x in d["definitions"]), bool(d.get("rules_known", True)))
        return cls(int(d["type"]), tuple(str(c) for c in d["columns"]), tuple(
            PartitionDef(int(x["id"]), str(x["name"]), tuple(x.get("less_than") or ()),
                         tuple(tuple(v) for v in x.get("in_values") or ()))
            for x in d["definitions"]), bool(d.get("rules_known", True)), bool(d.get("by_columns", False)),
            str(d.get("expr") or ""), bool(d.get("empty_columns", False)))


def _old_bound(v: Any) -> tuple[str, ...]:
    return (MAXVALUE,) if v is None else (str(int(v)),)


def _old_value(v: Any) -> tuple[str, ...]:
    return (NULL,) if v is None else (str(int(v)),)
