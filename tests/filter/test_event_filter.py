import pytest

from cdc_core.changefeed import config as cfgmod
from cdc_core.errors import ConfigError
from cdc_core.filter.event_filter import EventFilter, to_spark_predicate

BASE = 'changefeed-id = "a"\nsink-uri = "/x"\n[filter]\nrules = ["shop.*"]\n'


def test_full_event_filter_config_round_trips_and_transpiles():
    text = BASE + """ignore-txn-start-ts = [42, 43]
[[filter.event-filters]]
matcher = ["shop.orders"]
ignore-event = ["delete", "drop table"]
ignore-sql = ["^ALTER TABLE .* ADD INDEX"]
ignore-insert-value-expr = "IFNULL(total, 0) < 0"
ignore-update-new-value-expr = "status = 'test'"
"""
    c = cfgmod.parse_config(text, "f.toml")
    f = c.event_filter
    assert f.ignore_txn_start_ts == {42, 43}
    [spec] = f.dml_specs("shop", "orders")
    assert spec == {
        "ignore_event": ["delete"],
        "ignore_insert_value_expr": "COALESCE(total, 0) < 0",  # MySQL's IFNULL, as Spark SQL
        "ignore_update_old_value_expr": None,
        "ignore_update_new_value_expr": "status = 'test'",
        "ignore_delete_value_expr": None,
    }
    assert f.dml_specs("shop", "items") == []
    assert f.ignores_ddl("drop table", "DROP TABLE shop.orders", "shop", "orders")
    assert f.ignores_ddl("add index", "ALTER TABLE shop.orders ADD INDEX ix (a)", "shop", "orders")
    assert not f.ignores_ddl("add column", "ALTER TABLE shop.orders ADD COLUMN c INT", "shop", "orders")
    assert not f.ignores_ddl("drop table", "DROP TABLE shop.items", "shop", "items")
    assert cfgmod.parse_config(c.to_toml(), "again.toml") == c


def test_groups_expand():
    f = EventFilter.from_config([{"ignore-event": ["all dml"]}], [], "x")
    assert f.dml_specs("a", "b")[0]["ignore_event"] == ["delete", "insert", "update"]
    g = EventFilter.from_config([{"ignore-event": ["all ddl"]}], [], "x")
    assert g.ignores_ddl("truncate table", "TRUNCATE t", "a", "b")


@pytest.mark.parametrize(
    "rule, message",
    [
        ('ignore-insert-value-expr = "price >"', r"#1 `ignore-insert-value-expr`: expression 'price >' does not parse"),
        ('ignore-delete-value-expr = "id IN (SELECT id FROM t)"', "must be a condition on the row"),
        ('ignore-update-old-value-expr = "COUNT(*) > 1"', "is not allowed"),
        ('ignore-insert-value-expr = "price"', "is not a condition"),
        ('ignore-event = ["upsert"]', "unknown event type 'upsert'"),
        ('ignore-sql = ["(unclosed"]', "not a valid regular expression"),
        ('matcher = ["nodot"]', "matcher"),
        ("bogus = 1", "unknown key"),
    ],
)
def test_invalid_filters_are_rejected_at_create_with_the_place_named(rule, message):
    with pytest.raises(ConfigError, match=message) as ei:
        cfgmod.parse_config(BASE + "[[filter.event-filters]]\n" + rule + "\n", "feed.toml")
    assert "feed.toml" in str(ei.value)


def test_ignore_txn_start_ts_must_be_tsos():
    with pytest.raises(ConfigError, match="ignore-txn-start-ts"):
        cfgmod.parse_config(BASE + 'ignore-txn-start-ts = ["x"]\n', "f.toml")


def test_predicate_transpiles_mysql_to_spark():
    # MySQL's null-safe equality becomes the standard form Spark SQL also reads.
    assert to_spark_predicate("a <=> NULL AND b LIKE 'x%'", "w") == "a IS NOT DISTINCT FROM NULL AND b LIKE 'x%'"
