"""Dedupe, update split, deletes-before-inserts and the net effect per Delta key (seed 002), in Spark
(``spark_jobs.normalize.net_effect``) and in Arrow on the driver (``spark_jobs.normalize.net_effect_arrow``): every case
runs on both, and random event sets give both engines the same rows."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date
from typing import Any

import pytest

from cdc_core.codec.rowcodec import ZERO_TIME, MySQLTime
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.normalize.mapped_values import MAPPED_COL, count_arrow, count_spark
from spark_jobs.normalize.mount import mount
from spark_jobs.normalize.net_effect import dedupe, net_effect, split_and_order
from spark_jobs.normalize.net_effect_arrow import net_effect_arrow
from testkit.builders import Bronze, clustered_table, nonclustered_table, rowid_table, typed_table

pytestmark = pytest.mark.spark


def _rows(spark, engine: str, b: Bronze, table: TableInfo, ignore: tuple[int, ...] = (), *,
          marks: bool = False) -> list[dict[str, Any]]:
    """The net rows of ``b`` (without the mapped values' marker, unless ``marks``)."""
    if engine == "arrow":
        rows = net_effect_arrow(b.arrow(), table, ignore).to_pylist()
    else:
        from spark_jobs.normalize.event_filters import apply_event_filters

        rows = [r.asDict() for r in net_effect(apply_event_filters(mount(spark.createDataFrame(b.arrow()), table),
                                                                   table, (), ignore), table).collect()]
    return rows if marks else [{k: v for k, v in r.items() if k != MAPPED_COL} for r in rows]


@pytest.fixture(params=["spark", "arrow"])
def engine(request) -> str:
    return str(request.param)


def _net(spark, b: Bronze, table, engine: str = "spark") -> dict:
    key = table.delta_key()
    out = {}
    for d in _rows(spark, engine, b, table):
        k = tuple(d[c] for c in key)
        assert k not in out, f"two net rows for key {k}"
        out[k if len(k) > 1 else k[0]] = d
    return out


def test_duplicates_removed_even_across_regions(spark):
    t = clustered_table()
    b = Bronze().put(t, 1, 10, {2: 1}).put(t, 1, 10, {2: 1}, region=7).delete(t, 2, 11, {2: 2})
    b.delete(t, 2, 11, {2: 2})
    assert dedupe(spark.createDataFrame(b.arrow())).count() == 2
    changes = split_and_order(mount(dedupe(spark.createDataFrame(b.arrow())), t), t)
    assert sorted((r["commit_ts"], r["_kind"]) for r in changes.collect()) == [(10, 1), (11, 0)]


def test_deletes_before_inserts_inside_a_commit(spark, engine):
    t = clustered_table()
    # Same commit ts: the insert of key 1 must win over the delete of key 1, whatever the file order.
    b = Bronze().put(t, 1, 20, {2: 9}).delete(t, 1, 20, {2: 1}).delete(t, 3, 21, {2: 3}).put(t, 3, 19, {2: 2})
    net = _net(spark, b, t, engine)
    assert net[1]["_cdc_op"] == "upsert" and net[1]["b"] == 9 and net[1]["_cdc_commit_ts"] == 20
    assert net[3]["_cdc_op"] == "delete"


def test_clustered_pk_update_arrives_as_delete_and_put(spark, engine):
    t = clustered_table()
    # UPDATE t SET a = 2 WHERE a = 1 on a clustered table: DELETE key 1 + PUT key 2 (no old value).
    b = Bronze().delete(t, 1, 30, {2: 1}).put(t, 2, 30, {1: 2, 2: 1})
    net = _net(spark, b, t, engine)
    assert net == {
        1: {"a": 1, "b": 1, "_cdc_op": "delete", "_cdc_commit_ts": 30},
        2: {"a": 2, "b": 1, "_cdc_op": "upsert", "_cdc_commit_ts": 30},
    }


def test_nonclustered_pk_and_uk_changes_split(spark, engine):
    t = nonclustered_table()
    b = Bronze()
    b.put(t, 100, 40, {1: 2, 2: "x", 3: 1}, old={1: 1, 2: "x", 3: 1})  # PK 1 -> 2
    b.put(t, 101, 40, {1: 5, 2: "z", 3: 1}, old={1: 5, 2: "y", 3: 1})  # UK y -> z, PK stays
    b.put(t, 102, 40, {1: 6, 2: "w", 3: 7}, old={1: 6, 2: "w", 3: 6})  # no key change: plain upsert
    changes = split_and_order(mount(spark.createDataFrame(b.arrow()), t), t).collect()
    kinds = sorted((r["_img"]["a"], r["_kind"]) for r in changes)
    assert kinds == [(1, 0), (2, 1), (5, 0), (5, 1), (6, 1)]
    net = _net(spark, b, t, engine)
    assert {k: (v["_cdc_op"], v["u"], v["b"]) for k, v in net.items()} == {
        1: ("delete", "x", 1), 2: ("upsert", "x", 1), 5: ("upsert", "z", 1), 6: ("upsert", "w", 7),
    }  # fmt: skip


def test_last_event_wins_across_commits(spark, engine):
    t = rowid_table()
    b = Bronze().put(t, 1, 10, {1: 1, 2: "a"}).put(t, 1, 12, {1: 3, 2: "c"}, old={1: 1, 2: "a"})
    b.put(t, 1, 11, {1: 2, 2: "b"}, old={1: 1, 2: "a"}).put(t, 2, 10, {1: 9}).delete(t, 2, 13, {1: 9})
    b.delete(t, 3, 14, None)  # a delete without an old value is still placed by _tidb_rowid
    net = _net(spark, b, t, engine)
    assert net[1]["a"] == 3 and net[1]["_cdc_op"] == "upsert" and net[1]["_cdc_commit_ts"] == 12
    assert net[2]["_cdc_op"] == "delete" and net[3]["_cdc_op"] == "delete"


def test_nonclustered_delete_without_old_value_is_dropped(spark, engine):
    t = nonclustered_table()
    # The key had no previous version (e.g. inserted and deleted in one txn): nothing to delete.
    b = Bronze().delete(t, 5, 10, None).put(t, 6, 10, {1: 1, 2: "a", 3: None})
    assert set(_net(spark, b, t, engine)) == {1}


def test_duplicates_removed_in_arrow():
    t = clustered_table()
    b = Bronze().put(t, 1, 10, {2: 1}).put(t, 1, 10, {2: 1}, region=7).put(t, 1, 10, {2: 1})
    assert net_effect_arrow(b.arrow(), t).to_pylist() == [{"a": 1, "b": 1, "_cdc_op": "upsert", "_cdc_commit_ts": 10,
                                                           MAPPED_COL: None}]


def test_ignored_transactions_dropped_on_both_engines(spark, engine):
    t = clustered_table()
    b = Bronze().put(t, 1, 10, {2: 1}).put(t, 2, 20, {2: 2}).put(t, 1, 30, {2: 3}, old={2: 1})
    assert [(r["a"], r["b"]) for r in sorted(_rows(spark, engine, b, t, (29,)), key=lambda r: r["a"])] == [
        (1, 1), (2, 2)]


def _dated_table() -> TableInfo:
    """``CREATE TABLE dated (id INT PRIMARY KEY, d DATE, t DATETIME)``."""
    return TableInfo(105, "test", "dated", (Column(1, "id", "int", nullable=False), Column(2, "d", "date"),
                                            Column(3, "t", "datetime")),
                     (Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True)


def test_an_upsert_carries_the_values_its_image_maps_to_null(spark, engine):
    """Zero dates, a zero month and an invalid day are NULL in the change set, and each upsert names the columns it
    mapped so (``_cdc_mapped``); a later image without one, and a delete, name none."""
    t = _dated_table()
    b = (Bronze().put(t, 1, 10, {1: 1, 2: ZERO_TIME, 3: "2021-00-05 10:00:00"})
         .put(t, 2, 10, {1: 2, 2: "2021-01-01", 3: MySQLTime(2021, 2, 30, 1, 2, 3)})
         .put(t, 3, 11, {1: 3, 2: ZERO_TIME}).put(t, 3, 12, {1: 3, 2: "2024-02-29"}, {1: 3, 2: ZERO_TIME})
         .put(t, 4, 13, {1: 4, 2: ZERO_TIME}).delete(t, 4, 14, {1: 4, 2: ZERO_TIME}))
    rows = {r["id"]: r for r in _rows(spark, engine, b, t, marks=True)}
    assert (rows[1]["d"], rows[1]["t"], sorted(rows[1][MAPPED_COL])) == (None, None, [2, 3])
    assert (rows[2]["d"], rows[2]["t"], rows[2][MAPPED_COL]) == (date(2021, 1, 1), None, [3])
    assert (rows[3]["d"], rows[3][MAPPED_COL]) == (date(2024, 2, 29), None)
    assert (rows[4]["_cdc_op"], rows[4][MAPPED_COL]) == ("delete", None)
    if engine == "arrow":
        assert count_arrow(net_effect_arrow(b.arrow(), t).column(MAPPED_COL), t) == {"d": 1, "t": 2}
    else:
        assert count_spark(net_effect(mount(spark.createDataFrame(b.arrow()), t), t), t) == {"d": 1, "t": 2}


def test_a_value_that_does_not_decode_names_table_and_key():
    t = clustered_table()
    b = Bronze().put(t, 1, 10, {2: 1})
    b.rows[0]["value"] = b"\x80\x00\x05"  # a rowcodec v2 header cut short
    with pytest.raises(ChangefeedError, match=r"table test\.c .*commit ts 10"):
        net_effect_arrow(b.arrow(), t)


def _composite_table() -> TableInfo:
    """``CREATE TABLE cp (a INT, s VARCHAR(8), u INT NULL UNIQUE, b VARCHAR(8), PRIMARY KEY (a, s) NONCLUSTERED)``:
    a composite Delta key and a nullable unique key."""
    return TableInfo(
        id=105, db_name="test", name="cp",
        columns=(Column(1, "a", "int", nullable=False), Column(2, "s", "varchar", nullable=False, length=8),
                 Column(3, "u", "int"), Column(4, "b", "varchar", length=8)),
        indexes=(Index("PRIMARY", ("a", "s"), unique=True, primary=True), Index("uk_u", ("u",), unique=True)),
    )  # fmt: skip


def _random_events(rng: random.Random, table: TableInfo, make: Callable[[int], dict[int, Any]]) -> Bronze:
    """Events of a few keys over a few commits: inserts, updates (some changing a key), deletes with and without
    old values, same-commit pairs and replayed duplicates, in random file order."""
    b = Bronze()
    current: dict[int, dict[int, Any]] = {}
    for ts in range(100, 100 + rng.randint(20, 60)):
        for _ in range(rng.randint(1, 4)):
            h = rng.randint(1, 12)
            r = rng.random()
            if h in current and r < 0.3:
                b.delete(table, h, ts, current.pop(h) if rng.random() < 0.8 else None)
            elif h in current and r < 0.8:
                old, current[h] = current[h], make(h)
                b.put(table, h, ts, current[h], old=old)
            elif h not in current:
                current[h] = make(h)
                b.put(table, h, ts, current[h])
            elif rng.random() < 0.5:  # a delete of a key that had no earlier version
                b.delete(table, rng.randint(50, 60), ts, None)
    b.rows += rng.sample(b.rows, k=len(b.rows) // 5)  # a reconnect replays some
    rng.shuffle(b.rows)
    return b


@pytest.mark.parametrize("seed", range(4))
def test_random_event_sets_give_both_engines_the_same_rows(spark, seed):
    from datetime import datetime, timedelta
    from decimal import Decimal

    rng = random.Random(seed)
    small = lambda: rng.choice([None, *range(4)])  # noqa: E731 -- few values, so keys collide and change

    cases = [
        (clustered_table(), lambda h: {2: small()}),
        (nonclustered_table(), lambda h: {1: rng.randint(1, 6), 2: rng.choice("wxyz"), 3: small()}),
        (rowid_table(), lambda h: {1: small(), 2: rng.choice(["p", None])}),
        (_composite_table(), lambda h: {1: rng.randint(1, 3), 2: rng.choice("st"), 3: small(), 4: rng.choice("mn")}),
        (typed_table(), lambda h: {1: h, 2: small(), 3: rng.choice([None, 2**62]), 4: rng.choice(["é", None]),
                                   5: Decimal(rng.randint(-9999, 9999)) / 1000, 6: datetime(2024, 1, 1)
                                   + timedelta(microseconds=rng.randint(0, 10**9)), 7: "t" * rng.randint(0, 3)}),
    ]
    for table, make in cases:
        b = _random_events(rng, table, make)
        key = [*table.delta_key(), "_cdc_op"]
        got = {engine: sorted(_rows(spark, engine, b, table), key=lambda r: [str(r[k]) for k in key])
               for engine in ("spark", "arrow")}
        assert got["arrow"] == got["spark"], table.qualified_name
