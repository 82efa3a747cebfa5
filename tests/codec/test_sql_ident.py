"""The one quoting of identifiers (cdc_core.codec.sql_ident): whatever a name holds, the quoted text is one
identifier that MySQL's and Spark's parsers read back as the name."""

from __future__ import annotations

import sqlglot
from hypothesis import given
from hypothesis import strategies as st
from sqlglot import exp

from cdc_core.codec.sql_ident import quote_ident, quote_list, quote_table

names = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\0"), min_size=1, max_size=64)


def test_a_backtick_in_a_name_is_doubled_and_nothing_else_changes() -> None:
    assert quote_ident("t") == "`t`"
    assert quote_ident("a`b") == "`a``b`"
    assert quote_ident("``") == "``````"
    assert quote_ident("a.b c'\"\\中") == "`a.b c'\"\\中`"
    assert quote_table("d`b", "t.1") == "`d``b`.`t.1`"
    assert quote_list(["a", "b`"]) == "`a`, `b```"


@given(names, names, names)
def test_mysqls_parser_reads_back_the_names(db: str, table: str, column: str) -> None:
    node = sqlglot.parse_one(f"SELECT {quote_ident(column)} FROM {quote_table(db, table)}", read="mysql")
    t = node.find(exp.Table)
    assert t is not None and (t.db, t.name) == (db, table)
    assert [c.name for c in node.find_all(exp.Column)] == [column]
