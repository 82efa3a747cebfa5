"""Partition info as TiDB keeps it: ``model.PartitionInfo`` JSON both ways for RANGE, HASH, LIST, KEY and the COLUMNS
forms (type codes, ``columns``, ``less_than``/``in_values`` texts, ``num``, ``is_empty_columns``), cdcflow's own
form and the one older state files hold, what ``information_schema.PARTITIONS`` shows, and the checks that need no
column type."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_core.schema.model import Column, Index, TableInfo
from cdc_core.schema.partition import (
    HASH,
    KEY,
    LIST,
    RANGE,
    PartitionDef,
    PartitionError,
    PartitionInfo,
    quote_string,
    unquote_string,
)

RANGE_P = PartitionInfo(RANGE, "id", (PartitionDef(101, "p0", 10), PartitionDef(102, "p1", 100),
                                      PartitionDef(103, "pmax", None)))
HASH_P = PartitionInfo(HASH, "id", tuple(PartitionDef(201 + i, f"p{i}") for i in range(3)))
LIST_P = PartitionInfo(LIST, "k", (PartitionDef(301, "a", in_values=(1, None)), PartitionDef(302, "b", in_values=(3,))))
KEY_P = PartitionInfo(KEY, ("a", "b"), tuple(PartitionDef(401 + i, f"p{i}") for i in range(4)))
RCOLS = PartitionInfo(RANGE, ("a", "d"), (PartitionDef(501, "p0", ("10", "'2024-01-01'")),
                                          PartitionDef(502, "p1", ("10", "MAXVALUE")),
                                          PartitionDef(503, "p2", ("MAXVALUE", "MAXVALUE"))), by_columns=True)
LCOLS = PartitionInfo(LIST, ("a", "s"), (PartitionDef(601, "x", in_values=(("1", "'it''s'"), ("NULL", "NULL"))),
                                         PartitionDef(602, "y", in_values=(("DEFAULT",),))), by_columns=True)


def test_the_one_column_form_is_normalized_to_texts() -> None:
    assert RANGE_P.columns == ("id",) and RANGE_P.expr == "`id`" and not RANGE_P.by_columns
    assert [d.less_than for d in RANGE_P.definitions] == [("10",), ("100",), ("MAXVALUE",)]
    assert [d.in_values for d in LIST_P.definitions] == [(("1",), ("NULL",)), (("3",),)]
    assert KEY_P.by_columns and KEY_P.expr == ""
    assert LCOLS.definitions[1].is_default and not LCOLS.definitions[0].is_default


def test_tidb_json_as_tidb_writes_it() -> None:
    raw = RCOLS.to_tidb()
    # pkg/meta/model/table.go PartitionInfo: a column list is in `columns` (CIStr), `expr` empty
    assert (raw["type"], raw["expr"], raw["columns"], raw["num"], raw["enable"]) == (
        1, "", [{"O": "a", "L": "a"}, {"O": "d", "L": "d"}], 0, True)
    assert [d["less_than"] for d in raw["definitions"]] == [["10", "'2024-01-01'"], ["10", "MAXVALUE"],
                                                            ["MAXVALUE", "MAXVALUE"]]
    assert all(d["in_values"] is None for d in raw["definitions"])
    key = KEY_P.to_tidb()
    assert (key["type"], key["expr"], key["num"], key["is_empty_columns"]) == (4, "", 4, False)
    assert [d["less_than"] for d in key["definitions"]] == [None] * 4
    assert LCOLS.to_tidb()["definitions"][0]["in_values"] == [["1", "'it''s'"], ["NULL", "NULL"]]
    assert HASH_P.to_tidb()["expr"] == "`id`" and HASH_P.to_tidb()["columns"] is None
    assert HASH_P.to_tidb()["num"] == 3
    for part in (RANGE_P, HASH_P, LIST_P, KEY_P, RCOLS, LCOLS):
        assert PartitionInfo.from_tidb(part.to_tidb(), "t") == part
    empty = PartitionInfo(KEY, ("id",), (PartitionDef(1, "p0"),), empty_columns=True)
    assert PartitionInfo.from_tidb(empty.to_tidb(), "t").empty_columns
    with pytest.raises(PartitionError, match="partition type 5 is not supported"):
        PartitionInfo.from_tidb({**HASH_P.to_tidb(), "type": 5}, "test.t")


def test_a_tidb_sample_reads() -> None:
    # What a v8.5 cluster writes for CREATE TABLE t (a INT, b VARCHAR(8)) PARTITION BY LIST COLUMNS(a, b) (...)
    raw: dict[str, Any] = {
        "type": 3, "expr": "", "columns": [{"O": "a", "L": "a"}, {"O": "B", "L": "b"}], "enable": True,
        "is_empty_columns": False, "definitions": [
            {"id": 112, "name": {"O": "p0", "L": "p0"}, "less_than": None,
             "in_values": [["1", "'x'"], ["2", "NULL"]], "policy_ref_info": None},
            {"id": 113, "name": {"O": "pDef", "L": "pdef"}, "less_than": None, "in_values": [["DEFAULT"]],
             "policy_ref_info": None}],
        "adding_definitions": None, "dropping_definitions": None, "NewPartitionIDs": None, "states": None,
        "num": 0, "ddl_state": 0, "new_table_id": 0, "ddl_type": 0, "ddl_expr": "", "ddl_columns": None}
    part = PartitionInfo.from_tidb(raw, "d.t")
    assert part.ids == (112, 113) and part.columns == ("a", "B") and part.by_columns and part.rules_known
    assert part.method_name == "LIST COLUMNS" and part.expression == "`a`,`B`"
    assert [part.description(d) for d in part.definitions] == ["(1,'x'),(2,NULL)", "DEFAULT"]


def test_cdcflow_form_and_older_state_files() -> None:
    for part in (RANGE_P, HASH_P, LIST_P, KEY_P, RCOLS, LCOLS):
        assert PartitionInfo.from_dict(part.to_dict()) == part
    # A schema log written before column lists: one integer column, integer bounds, null for MAXVALUE / NULL.
    old_range = {"type": 1, "column": "id", "rules_known": True, "definitions": [
        {"id": 101, "name": "p0", "less_than": 10, "in_values": []},
        {"id": 103, "name": "pmax", "less_than": None, "in_values": []}]}
    assert PartitionInfo.from_dict(old_range) == PartitionInfo(
        RANGE, ("id",), (PartitionDef(101, "p0", ("10",)), PartitionDef(103, "pmax", ("MAXVALUE",))))
    old_list = {"type": 3, "column": "k", "rules_known": True, "definitions": [
        {"id": 301, "name": "a", "less_than": None, "in_values": [1, None]}]}
    assert PartitionInfo.from_dict(old_list).definitions[0].in_values == (("1",), ("NULL",))
    t = TableInfo(id=100, db_name="d", name="t", columns=(Column(1, "id", "int", nullable=False),),
                  indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True,
                  partition=RCOLS)
    assert t.physical_ids == (501, 502, 503)
    assert TableInfo.from_json(t.to_json()) == t


def test_information_schema_columns() -> None:
    assert (RANGE_P.method_name, RANGE_P.expression) == ("RANGE", "`id`")
    assert [RANGE_P.description(d) for d in RANGE_P.definitions] == ["10", "100", "MAXVALUE"]
    assert [LIST_P.description(d) for d in LIST_P.definitions] == ["1,NULL", "3"]
    assert (RCOLS.method_name, RCOLS.expression, RCOLS.description(RCOLS.definitions[0])) == (
        "RANGE COLUMNS", "`a`,`d`", "10,'2024-01-01'")
    assert (KEY_P.method_name, KEY_P.expression, KEY_P.description(KEY_P.definitions[0])) == ("KEY", "`a`,`b`", None)
    assert KEY_P.clause_head() == "PARTITION BY KEY (`a`,`b`)"
    assert RCOLS.clause_head() == "PARTITION BY RANGE COLUMNS(`a`,`d`)" and HASH_P.clause_head() == \
        "PARTITION BY HASH (`id`)"


def test_strings_are_quoted_as_tidb_does() -> None:
    # driver.WrapInSingleQuotes: backslashes and quotes doubled
    assert quote_string("it's a \\ b") == "'it''s a \\\\ b'"
    assert unquote_string(quote_string("it's a \\ b")) == "it's a \\ b"
    assert unquote_string("10") == "10"


def test_a_rule_it_cannot_evaluate_still_gives_the_ids() -> None:
    # HASH (YEAR(d)), as a real cluster may hold: the ids are all a reader needs.
    expr = PartitionInfo.from_tidb({**HASH_P.to_tidb(), "expr": "YEAR(`d`)"}, "t")
    assert expr.ids == HASH_P.ids and not expr.rules_known and expr.expr == "YEAR(`d`)"
    assert PartitionInfo.from_dict(expr.to_dict()) == expr
    quoted = PartitionInfo.from_tidb({**HASH_P.to_tidb(), "expr": "`my col`"}, "t")
    assert quoted.rules_known and quoted.columns == ("my col",)


@pytest.mark.parametrize(("part", "message"), [
    (PartitionInfo(RANGE, "id", ()), "needs at least one partition"),
    (PartitionInfo(HASH, "id", (PartitionDef(1, "p"), PartitionDef(2, "P"))), "Duplicate partition name P"),
    (PartitionInfo(RANGE, "id", (PartitionDef(1, "a", None), PartitionDef(2, "b", 5))),
     "MAXVALUE can only be used in last partition definition"),
    (PartitionInfo(RANGE, ("a", "b"), (PartitionDef(1, "a", ("1",)),), by_columns=True),
     "Inconsistency in usage of column lists for partitioning"),
    (PartitionInfo(RANGE, ("a",), (PartitionDef(1, "a", ("NULL",)),), by_columns=True),
     "Not allowed to use NULL value in VALUES LESS THAN"),
    (PartitionInfo(LIST, "k", (PartitionDef(1, "a", in_values=(("MAXVALUE",),)),)),
     "Cannot use MAXVALUE as value in VALUES IN"),
    (PartitionInfo(LIST, "k", (PartitionDef(1, "a", in_values=(("DEFAULT",),)),
                               PartitionDef(2, "b", in_values=(("DEFAULT",),)))),
     "Multiple definition of same constant in list partitioning"),
])
def test_shapes_it_refuses(part: PartitionInfo, message: str) -> None:
    with pytest.raises(PartitionError, match=message):
        part.check_shape("t")
