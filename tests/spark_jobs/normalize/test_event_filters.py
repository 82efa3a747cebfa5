"""Event filters evaluated in Spark by apply_window (seed 003, TiCDC semantics), end to end on Delta."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from cdc_core.changefeed.job_args.apply_window import ApplyArgs
from cdc_core.codec.sink_uri import table_path
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.apply_window import apply_window, run_job
from spark_jobs.normalize.bronze import write_bronze
from testkit.builders import Bronze, clustered_table, nonclustered_table

pytestmark = pytest.mark.spark
CF = "cf1"


@pytest.fixture
def sink(tmp_path):
    return f"file://{tmp_path}/lake"


def _rows(sink, table):
    rows = DeltaTable(table_path(sink, table)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: tuple(r[k] for k in table.delta_key()))


def _base(spark, sink, c):
    """Rows a=1..4 with b = 10*a, applied unfiltered in window 100."""
    b = Bronze()
    for a in range(1, 5):
        b.put(c, a, 50 + a, {1: a, 2: 10 * a})
    write_bronze(sink, CF, 100, b.arrow())
    apply_window(sink, CF, 100, [c], spark=spark)


def _mixed(c) -> Bronze:
    """Window 200: insert a=5 (b=50) and a=6 (b=5), update a=1 b 10->11 and a=2 b 20->99,
    delete a=3 and a=4."""
    b = Bronze().put(c, 5, 110, {1: 5, 2: 50}).put(c, 6, 111, {1: 6, 2: 5})
    b.put(c, 1, 120, {1: 1, 2: 11}, old={1: 1, 2: 10}).put(c, 2, 121, {1: 2, 2: 99}, old={1: 2, 2: 20})
    b.delete(c, 3, 130, {1: 3, 2: 30}).delete(c, 4, 131, {1: 4, 2: 40})
    return b


def _run(spark, sink, c, filters, **kw):
    _base(spark, sink, c)
    write_bronze(sink, CF, 200, _mixed(c).arrow())
    return apply_window(sink, CF, 200, [{"table": c.to_json(), "event_filters": filters}], spark=spark, **kw)


UNFILTERED = [{"a": 1, "b": 11}, {"a": 2, "b": 99}, {"a": 5, "b": 50}, {"a": 6, "b": 5}]


def test_no_filters_applies_everything(spark, sink):
    c = clustered_table()
    _run(spark, sink, c, [])
    assert _rows(sink, c) == UNFILTERED


@pytest.mark.parametrize(
    ("ignore", "expected"),
    [
        (["insert"], [{"a": 1, "b": 11}, {"a": 2, "b": 99}]),
        (["update"], [{"a": 1, "b": 10}, {"a": 2, "b": 20}, {"a": 5, "b": 50}, {"a": 6, "b": 5}]),
        (["delete"], [{"a": 1, "b": 11}, {"a": 2, "b": 99}, {"a": 3, "b": 30}, {"a": 4, "b": 40},
                      {"a": 5, "b": 50}, {"a": 6, "b": 5}]),
        (["all dml"], [{"a": a, "b": 10 * a} for a in range(1, 5)]),
        (["create table"], UNFILTERED),  # a DDL type: the DDL side's business, no DML effect
    ],
)  # fmt: skip
def test_ignore_event_types(spark, sink, ignore, expected):
    c = clustered_table()
    _run(spark, sink, c, [{"ignore_event": ignore}])
    assert _rows(sink, c) == expected


def test_value_expressions_per_event_kind(spark, sink):
    c = clustered_table()
    filters = [
        {"ignore_insert_value_expr": "b < 10"},  # drops the insert a=6 (b=5)
        {"ignore_update_old_value_expr": "b = 10", "ignore_update_new_value_expr": None},  # update of a=1
        {"ignore_delete_value_expr": "a = 4 AND b = 40"},  # the delete of a=4 (old row)
    ]
    _run(spark, sink, c, filters)
    assert _rows(sink, c) == [{"a": 1, "b": 10}, {"a": 2, "b": 99}, {"a": 4, "b": 40}, {"a": 5, "b": 50}]


def test_update_new_value_expr_and_null_is_not_true(spark, sink):
    c = clustered_table()
    # b = 99 only on the new row of a=2's update; an expression that is NULL ignores nothing.
    _run(spark, sink, c, [{"ignore_update_new_value_expr": "b = 99"}, {"ignore_insert_value_expr": "NULL"}])
    assert _rows(sink, c) == [{"a": 1, "b": 11}, {"a": 2, "b": 20}, {"a": 5, "b": 50}, {"a": 6, "b": 5}]


def test_ignore_txn_start_ts(spark, sink):
    c = clustered_table()
    # The builder's start_ts is commit_ts - 1: drop the insert committed at 110 and the delete at 130.
    _run(spark, sink, c, [], ignore_txn_start_ts=[109, 129])
    assert _rows(sink, c) == [{"a": 1, "b": 11}, {"a": 2, "b": 99}, {"a": 3, "b": 30}, {"a": 6, "b": 5}]


def test_filter_before_the_update_split(spark, sink):
    """A non-clustered PK change is one update upstream: ignoring it drops both split halves."""
    nc = nonclustered_table()
    write_bronze(sink, CF, 100, Bronze().put(nc, 100, 10, {1: 1, 2: "x", 3: 1}).arrow())
    apply_window(sink, CF, 100, [nc], spark=spark)
    write_bronze(sink, CF, 200, Bronze().put(nc, 100, 150, {1: 2, 2: "x", 3: 1}, old={1: 1, 2: "x", 3: 1}).arrow())
    apply_window(sink, CF, 200, [{"table": nc.to_dict(), "event_filters": [{"ignore_update_old_value_expr": "a = 1"}]}],
                 spark=spark)  # fmt: skip
    assert _rows(sink, nc) == [{"a": 1, "u": "x", "b": 1}]


def test_columns_named_like_event_fields(spark, sink):
    """User columns ``key``/``op``/``commit_ts`` bind to the row image, not to the event's fields."""
    t = TableInfo(
        id=150, db_name="test", name="odd",
        columns=(Column(1, "id", "int", nullable=False), Column(2, "op", "varchar", length=10),
                 Column(3, "commit_ts", "bigint")),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True,
    )  # fmt: skip
    b = Bronze().put(t, 1, 10, {1: 1, 2: "keep", 3: 1}).put(t, 2, 11, {1: 2, 2: "put", 3: 1})
    b.put(t, 3, 12, {1: 3, 2: "x", 3: 12})
    write_bronze(sink, CF, 100, b.arrow())
    flt = [{"ignore_insert_value_expr": "op = 'put'"}, {"ignore_insert_value_expr": "commit_ts = 12"}]
    apply_window(sink, CF, 100, [{"table": t.to_json(), "event_filters": flt}], spark=spark)
    assert _rows(sink, t) == [{"id": 1, "op": "keep", "commit_ts": 1}]


@pytest.mark.parametrize(
    ("expr", "match"),
    [
        ("no_such_column > 1", "not valid Spark SQL"),
        ("b >>>= (", "not valid Spark SQL"),
        ("b + 1", "not a boolean"),
    ],
)
def test_bad_expression_is_a_clear_error(spark, sink, expr, match):
    c = clustered_table()
    with pytest.raises(ChangefeedError, match=match) as ei:
        _run(spark, sink, c, [{"ignore_delete_value_expr": expr}])
    assert expr in str(ei.value) and "test.c" in str(ei.value)


def test_malformed_filter_dict(spark, sink):
    c = clustered_table()
    with pytest.raises(ChangefeedError, match="unknown DML event types"):
        _run(spark, sink, c, [{"ignore_event": ["upsert"]}])
    with pytest.raises(ChangefeedError, match="unknown keys"):
        _run(spark, sink, c, [{"ignore_everything": True}])


def test_run_job_passes_filters_and_txn_ts(spark, sink):
    c = clustered_table()
    _base(spark, sink, c)
    write_bronze(sink, CF, 200, _mixed(c).arrow())
    # The changefeed's form: filters in a dict keyed by table id (as a string, JSON keys are).
    out = run_job(ApplyArgs.from_dict({"sink_uri": sink, "changefeed_id": CF, "window_end_ts": 200, "after_ts": 100,
                                       "tables": [c.to_json()],
                                       "event_filters": {str(c.id): [{"ignore_event": ["delete"]}]},
                                       "ignore_txn_start_ts": [109]}))  # fmt: skip
    assert out["tables"]["test.c"]["rows_deleted"] == 0
    assert _rows(sink, c) == [{"a": 1, "b": 11}, {"a": 2, "b": 99}, {"a": 3, "b": 30}, {"a": 4, "b": 40},
                              {"a": 6, "b": 5}]  # fmt: skip
