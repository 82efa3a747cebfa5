"""Partitioned tables as TiDB keeps them: one logical table, one physical table id per partition.

TiDB's ``model.PartitionInfo`` (``pkg/meta/model/table.go``): ``{"type", "expr", "columns", "enable",
"definitions": [{"id", "name", "less_than", "in_values", ...}], "num", ...}``, ``type`` one of
``PartitionTypeRange`` (1), ``PartitionTypeHash`` (2), ``PartitionTypeList`` (3). Every partition's rows live under
its own id (``t{partition id}_r...``), so TiKV's change feed reports them by partition; TiCDC maps each partition id
back to the logical table, and so does cdcflow: one Delta table per logical table.

Supported here: RANGE, HASH and LIST over one integer column (``PARTITION BY RANGE (a)``, ``HASH (a) PARTITIONS n``,
``LIST (a)``), which is what :meth:`PartitionInfo.locate` evaluates for the embedded upstream's writes. Readers
(the schema storage, the puller, the mount) only need the ids, whatever the expression: a table partitioned by an
expression or by RANGE/LIST COLUMNS of other types (dates, strings) is read with ``rules_known`` false, and only
what needs the rule (the rows a dropped partition held) refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Final

from cdc_core.errors import CdcflowError

__all__ = ["HASH", "LIST", "RANGE", "PartitionDef", "PartitionError", "PartitionInfo"]

RANGE: Final = 1  # model.PartitionTypeRange
HASH: Final = 2  # model.PartitionTypeHash
LIST: Final = 3  # model.PartitionTypeList
TYPE_NAMES: Final = {RANGE: "RANGE", HASH: "HASH", LIST: "LIST"}
MAXVALUE: Final = "MAXVALUE"


class PartitionError(CdcflowError):
    """A row that no partition takes (MySQL error 1526), or a partition definition that does not hold."""


@dataclass(frozen=True)
class PartitionDef:
    id: int  # the physical table id of the partition's rows
    name: str
    less_than: int | None = None  # RANGE: exclusive upper bound; None = MAXVALUE
    in_values: tuple[int | None, ...] = ()  # LIST: the values it takes (None: NULL)


@dataclass(frozen=True)
class PartitionInfo:
    type: int
    column: str  # the partitioning column (its expression is the column itself)
    definitions: tuple[PartitionDef, ...] = field(default_factory=tuple)
    rules_known: bool = True  # False: an expression or bounds this module cannot evaluate (ids only)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(d.id for d in self.definitions)

    @property
    def method(self) -> str:
        return TYPE_NAMES[self.type]

    def validate(self, table: str) -> None:
        names = [d.name.lower() for d in self.definitions]
        if not self.definitions:
            raise PartitionError(f"table {table!r}: a partitioned table needs at least one partition")
        if len(set(names)) != len(names):
            raise PartitionError(f"table {table!r}: duplicate partition name")
        if self.type == RANGE:
            bounds = [d.less_than for d in self.definitions]
            if any(b is None for b in bounds[:-1]) or any(
                    a is not None and b is not None and a >= b for a, b in pairwise(bounds)):
                raise PartitionError(f"table {table!r}: VALUES LESS THAN value must be strictly increasing for each "
                                     "partition (MAXVALUE only last)")
        if self.type == LIST:
            seen: set[int | None] = set()
            for d in self.definitions:
                if seen & set(d.in_values):
                    raise PartitionError(f"table {table!r}: multiple definition of same constant in list partitioning")
                seen |= set(d.in_values)

    def locate(self, value: Any) -> PartitionDef:
        """The partition a row whose partitioning column is ``value`` goes to, as TiDB's ``locateRangePartition`` /
        ``locateHashPartition`` / ``locateListPartition`` (``pkg/table/tables/partition.go``): NULL to the first
        RANGE partition and to HASH partition 0, HASH by ``|v % n|`` with Go's signed remainder."""
        if not self.rules_known:
            raise PartitionError(f"cannot evaluate the partitioning of column {self.column!r} here")
        if self.type == HASH:
            if value is None:
                return self.definitions[0]
            v = int(value)
            rem = abs(v) % len(self.definitions)  # Go's v % n keeps v's sign; TiDB takes its absolute value
            return self.definitions[rem]
        if self.type == RANGE:
            for d in self.definitions:
                if value is None or d.less_than is None or int(value) < d.less_than:
                    return d  # NULL sorts below every value: the first partition
            raise PartitionError(f"Table has no partition for value {value}")
        for d in self.definitions:
            if (None if value is None else int(value)) in d.in_values:
                return d
        raise PartitionError(f"Table has no partition for value {'NULL' if value is None else value}")

    def rows_predicate(self, d: PartitionDef) -> str:
        """A SQL predicate (DataFusion's, as delta-rs takes it) true of exactly the rows :meth:`locate` puts in
        ``d``: what leaves a Delta table when the partition is dropped or truncated upstream."""
        if not self.rules_known:
            raise PartitionError(f"partitioning by {self.method} on {self.column!r} with bounds other than integers: "
                                 f"the rows of partition {d.name!r} cannot be told apart here")
        col = '"' + self.column.replace('"', '""') + '"'
        i = self.definitions.index(d)
        if self.type == HASH:  # DataFusion's % keeps the dividend's sign, as Go's does
            test = f"abs({col} % {len(self.definitions)}) = {i}"
            return f"({test} OR {col} IS NULL)" if i == 0 else test
        if self.type == RANGE:
            parts = []
            lo = self.definitions[i - 1].less_than if i > 0 else None
            if lo is not None:
                parts.append(f"{col} >= {lo}")
            if d.less_than is not None:
                parts.append(f"{col} < {d.less_than}")
            test = " AND ".join(parts) or "true"
            return f"({test} OR {col} IS NULL)" if i == 0 else f"({test})"
        values = [v for v in d.in_values if v is not None]
        tests = [f"{col} IN ({', '.join(map(str, values))})"] if values else []
        if None in d.in_values:
            tests.append(f"{col} IS NULL")
        return "(" + " OR ".join(tests or ["false"]) + ")"

    def description(self, d: PartitionDef) -> str | None:
        """``information_schema.PARTITIONS.PARTITION_DESCRIPTION``."""
        if self.type == RANGE:
            return MAXVALUE if d.less_than is None else str(d.less_than)
        if self.type == LIST:
            return ",".join("NULL" if v is None else str(v) for v in d.in_values)
        return None

    # --- TiDB's JSON --------------------------------------------------------------------------
    def to_tidb(self) -> dict[str, Any]:
        def cistr(s: str) -> dict[str, str]:
            return {"O": s, "L": s.lower()}

        return {
            "type": self.type, "expr": f"`{self.column}`", "columns": None, "enable": True, "is_empty_columns": False,
            "definitions": [
                {"id": d.id, "name": cistr(d.name),
                 "less_than": ([MAXVALUE if d.less_than is None else str(d.less_than)] if self.type == RANGE
                               else None),
                 "in_values": ([["NULL" if v is None else str(v)] for v in d.in_values] if self.type == LIST
                               else None),
                 "policy_ref_info": None}
                for d in self.definitions],
            "adding_definitions": None, "dropping_definitions": None, "NewPartitionIDs": None, "states": None,
            "num": len(self.definitions) if self.type == HASH else 0, "ddl_state": 0, "new_table_id": 0,
            "ddl_type": 0, "ddl_expr": "", "ddl_columns": None, "ddl_update_indexes": None,
        }  # fmt: skip

    @classmethod
    def from_tidb(cls, d: dict[str, Any], where: str) -> PartitionInfo:
        try:
            tp = int(d["type"])
            if tp not in TYPE_NAMES:
                raise PartitionError(f"{where}: partition type {tp} is not supported (RANGE, HASH and LIST are)")
            expr = str(d.get("expr") or "").strip()
            columns = d.get("columns") or []
            if columns:  # RANGE COLUMNS / LIST COLUMNS (a, ...): readers only need the ids
                column = str(columns[0].get("O") if isinstance(columns[0], dict) else columns[0])
            else:
                column = expr.strip("`")
            known = len(columns) <= 1 and (bool(columns) or column.replace("_", "").isalnum())
            defs = []
            for pd in d.get("definitions") or ():
                name = pd["name"]["O"] if isinstance(pd.get("name"), dict) else str(pd.get("name"))
                less = None
                values: tuple[int | None, ...] = ()
                try:
                    if tp == RANGE and pd.get("less_than"):
                        text = str(pd["less_than"][0])
                        less = None if text.upper() == MAXVALUE else _int_or_none(text)
                    if tp == LIST:
                        values = tuple(_int_or_none(str(v[0])) for v in pd.get("in_values") or ())
                except ValueError:  # a date, a string, an expression: the ids are what readers need
                    known, less, values = False, None, ()
                defs.append(PartitionDef(int(pd["id"]), name, less, values))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise PartitionError(f"{where}: malformed partition info: {exc}") from exc
        return cls(tp, column, tuple(defs), known)

    # --- cdcflow's TableInfo JSON ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "column": self.column, "rules_known": self.rules_known,
                "definitions": [{"id": d.id, "name": d.name, "less_than": d.less_than, "in_values": list(d.in_values)}
                                for d in self.definitions]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PartitionInfo:
        return cls(int(d["type"]), str(d["column"]), tuple(
            PartitionDef(int(x["id"]), str(x["name"]), x.get("less_than"), tuple(x.get("in_values") or ()))
            for x in d["definitions"]), bool(d.get("rules_known", True)))


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    if text.upper() == "NULL":
        return None
    return int(text.strip("'\""))
