import pytest

from cdc_core.errors import ConfigError
from cdc_core.filter.table_filter import TableFilter


def test_db_wildcard_and_negation_last_match_wins():
    f = TableFilter(["shop.*", "!shop.tmp*"])
    assert f.match("shop", "orders")
    assert f.match("SHOP", "Orders")  # case-insensitive
    assert not f.match("shop", "tmp_orders")
    assert not f.match("other", "orders")


def test_order_matters_later_rule_overrides():
    f = TableFilter(["!shop.tmp*", "shop.*"])
    assert f.match("shop", "tmp_x")


def test_all_tables_but_never_system_schemas():
    f = TableFilter(["*.*"])
    assert f.match("a", "b")
    assert not f.match("mysql", "tidb_ddl_history")
    assert not f.match("INFORMATION_SCHEMA", "tables")


def test_backquoted_names_with_dots():
    f = TableFilter(["`my.db`.`t.1`"])
    assert f.match("my.db", "t.1")
    assert not f.match("my", "db")


def test_character_class_and_question_mark():
    f = TableFilter(["db[12].t?"])
    assert f.match("db1", "tx")
    assert not f.match("db3", "tx")
    assert not f.match("db1", "txy")


@pytest.mark.parametrize("rule", ["nodot", "a.b.c", ".t", "`db.t", "db."])
def test_malformed_rules_name_the_rule(rule):
    with pytest.raises(ConfigError, match="filter rule"):
        TableFilter([rule])


def test_rules_must_be_a_list():
    with pytest.raises(ConfigError, match="must be a list"):
        TableFilter("db.*")  # type: ignore[arg-type]
