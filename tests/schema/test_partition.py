"""Partition info as TiDB keeps it: locating rows (RANGE, HASH with Go's remainder, LIST with NULL), the
``model.PartitionInfo`` JSON both ways, cdcflow's TableInfo JSON, and bad definitions."""

from __future__ import annotations

import pytest

from cdc_core.schema.model import Column, Index, TableInfo
from cdc_core.schema.partition import HASH, LIST, RANGE, PartitionDef, PartitionError, PartitionInfo

RANGE_P = PartitionInfo(RANGE, "id", (PartitionDef(101, "p0", 10), PartitionDef(102, "p1", 100),
                                      PartitionDef(103, "pmax", None)))
HASH_P = PartitionInfo(HASH, "id", tuple(PartitionDef(201 + i, f"p{i}") for i in range(3)))
LIST_P = PartitionInfo(LIST, "k", (PartitionDef(301, "a", in_values=(1, None)), PartitionDef(302, "b", in_values=(3,))))


def test_rows_go_where_tidb_puts_them() -> None:
    assert [RANGE_P.locate(v).name for v in (None, -5, 9, 10, 99, 100, 10**12)] == ["p0", "p0", "p0", "p1", "p1",
                                                                                    "pmax", "pmax"]
    # Go's -4 % 3 is -1 and TiDB takes its absolute value: partition 1 (Python's -4 % 3 would say 2).
    assert [HASH_P.locate(v).id for v in (0, 1, 5, -4, None)] == [201, 202, 203, 202, 201]
    assert [LIST_P.locate(v).name for v in (1, None, 3)] == ["a", "a", "b"]
    with pytest.raises(PartitionError, match="Table has no partition for value 2"):
        LIST_P.locate(2)
    bounded = PartitionInfo(RANGE, "id", (PartitionDef(1, "p0", 10),))
    with pytest.raises(PartitionError, match="Table has no partition for value 10"):
        bounded.locate(10)


def test_tidb_json_round_trips_and_names_the_partitions() -> None:
    for part in (RANGE_P, HASH_P, LIST_P):
        raw = part.to_tidb()
        assert raw["type"] == part.type and raw["expr"] == f"`{part.column}`" and raw["enable"] is True
        assert [d["id"] for d in raw["definitions"]] == list(part.ids)
        assert PartitionInfo.from_tidb(raw, "t") == part
    assert RANGE_P.to_tidb()["definitions"][2]["less_than"] == ["MAXVALUE"]
    assert LIST_P.to_tidb()["definitions"][0]["in_values"] == [["1"], ["NULL"]]
    assert HASH_P.to_tidb()["num"] == 3
    with pytest.raises(PartitionError, match="partition type 4 is not supported"):
        PartitionInfo.from_tidb({**HASH_P.to_tidb(), "type": 4}, "test.t")


def test_a_partitioned_table_is_keyed_by_its_partitions() -> None:
    t = TableInfo(id=100, db_name="d", name="t", columns=(Column(1, "id", "int", nullable=False),),
                  indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True,
                  partition=RANGE_P)
    assert t.physical_ids == (101, 102, 103)
    assert TableInfo.from_json(t.to_json()) == t
    assert TableInfo(id=7, db_name="d", name="n", columns=t.columns).physical_ids == (7,)


def test_bad_definitions_are_refused() -> None:
    with pytest.raises(PartitionError, match="strictly increasing"):
        PartitionInfo(RANGE, "id", (PartitionDef(1, "a", 10), PartitionDef(2, "b", 5))).validate("t")
    with pytest.raises(PartitionError, match="strictly increasing"):
        PartitionInfo(RANGE, "id", (PartitionDef(1, "a", None), PartitionDef(2, "b", 5))).validate("t")
    with pytest.raises(PartitionError, match="duplicate partition name"):
        PartitionInfo(HASH, "id", (PartitionDef(1, "p"), PartitionDef(2, "P"))).validate("t")
    with pytest.raises(PartitionError, match="same constant"):
        PartitionInfo(LIST, "k", (PartitionDef(1, "a", in_values=(1,)), PartitionDef(2, "b", in_values=(1,)))
                      ).validate("t")


def test_rows_predicate_selects_what_locate_puts_there() -> None:
    assert [RANGE_P.rows_predicate(d) for d in RANGE_P.definitions] == [
        '("id" < 10 OR "id" IS NULL)', '("id" >= 10 AND "id" < 100)', '("id" >= 100)']
    assert [HASH_P.rows_predicate(d) for d in HASH_P.definitions] == [
        '(abs("id" % 3) = 0 OR "id" IS NULL)', 'abs("id" % 3) = 1', 'abs("id" % 3) = 2']
    assert [LIST_P.rows_predicate(d) for d in LIST_P.definitions] == ['("k" IN (1) OR "k" IS NULL)', '("k" IN (3))']


def test_a_rule_it_cannot_evaluate_still_gives_the_ids() -> None:
    # RANGE COLUMNS over a DATE, as a real cluster's sales tables are often cut: the ids are all a reader needs.
    raw = {"type": RANGE, "expr": "", "columns": [{"O": "day", "L": "day"}], "enable": True, "definitions": [
        {"id": 71, "name": {"O": "p2024", "L": "p2024"}, "less_than": ["'2025-01-01'"], "in_values": None},
        {"id": 72, "name": {"O": "pmax", "L": "pmax"}, "less_than": ["MAXVALUE"], "in_values": None}]}
    part = PartitionInfo.from_tidb(raw, "sales.orders")
    assert part.ids == (71, 72) and not part.rules_known
    assert PartitionInfo.from_dict(part.to_dict()) == part
    with pytest.raises(PartitionError, match="cannot be told apart"):
        part.rows_predicate(part.definitions[0])
    expr = PartitionInfo.from_tidb({**HASH_P.to_tidb(), "expr": "YEAR(`d`)"}, "t")
    assert expr.ids == HASH_P.ids and not expr.rules_known
