"""Dedupe, update split, deletes-before-inserts and the net effect per Delta key (seed 002)."""

from __future__ import annotations

import pytest
from spark_jobs_builders import Bronze, clustered_table, nonclustered_table, rowid_table

from spark_jobs.mount import mount
from spark_jobs.net_effect import dedupe, net_effect, split_and_order

pytestmark = pytest.mark.spark


def _net(spark, b: Bronze, table) -> dict:
    df = net_effect(mount(spark.createDataFrame(b.arrow()), table), table)
    key = table.delta_key()
    out = {}
    for r in df.collect():
        d = r.asDict()
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


def test_deletes_before_inserts_inside_a_commit(spark):
    t = clustered_table()
    # Same commit ts: the insert of key 1 must win over the delete of key 1, whatever the file order.
    b = Bronze().put(t, 1, 20, {2: 9}).delete(t, 1, 20, {2: 1}).delete(t, 3, 21, {2: 3}).put(t, 3, 19, {2: 2})
    net = _net(spark, b, t)
    assert net[1]["_cdc_op"] == "upsert" and net[1]["b"] == 9 and net[1]["_cdc_commit_ts"] == 20
    assert net[3]["_cdc_op"] == "delete"


def test_clustered_pk_update_arrives_as_delete_and_put(spark):
    t = clustered_table()
    # UPDATE t SET a = 2 WHERE a = 1 on a clustered table: DELETE key 1 + PUT key 2 (no old value).
    b = Bronze().delete(t, 1, 30, {2: 1}).put(t, 2, 30, {1: 2, 2: 1})
    net = _net(spark, b, t)
    assert net == {
        1: {"a": 1, "b": 1, "_cdc_op": "delete", "_cdc_commit_ts": 30},
        2: {"a": 2, "b": 1, "_cdc_op": "upsert", "_cdc_commit_ts": 30},
    }


def test_nonclustered_pk_and_uk_changes_split(spark):
    t = nonclustered_table()
    b = Bronze()
    b.put(t, 100, 40, {1: 2, 2: "x", 3: 1}, old={1: 1, 2: "x", 3: 1})  # PK 1 -> 2
    b.put(t, 101, 40, {1: 5, 2: "z", 3: 1}, old={1: 5, 2: "y", 3: 1})  # UK y -> z, PK stays
    b.put(t, 102, 40, {1: 6, 2: "w", 3: 7}, old={1: 6, 2: "w", 3: 6})  # no key change: plain upsert
    changes = split_and_order(mount(spark.createDataFrame(b.arrow()), t), t).collect()
    kinds = sorted((r["_img"]["a"], r["_kind"]) for r in changes)
    assert kinds == [(1, 0), (2, 1), (5, 0), (5, 1), (6, 1)]
    net = _net(spark, b, t)
    assert {k: (v["_cdc_op"], v["u"], v["b"]) for k, v in net.items()} == {
        1: ("delete", "x", 1), 2: ("upsert", "x", 1), 5: ("upsert", "z", 1), 6: ("upsert", "w", 7),
    }  # fmt: skip


def test_last_event_wins_across_commits(spark):
    t = rowid_table()
    b = Bronze().put(t, 1, 10, {1: 1, 2: "a"}).put(t, 1, 12, {1: 3, 2: "c"}, old={1: 1, 2: "a"})
    b.put(t, 1, 11, {1: 2, 2: "b"}, old={1: 1, 2: "a"}).put(t, 2, 10, {1: 9}).delete(t, 2, 13, {1: 9})
    b.delete(t, 3, 14, None)  # a delete without an old value is still placed by _tidb_rowid
    net = _net(spark, b, t)
    assert net[1]["a"] == 3 and net[1]["_cdc_op"] == "upsert" and net[1]["_cdc_commit_ts"] == 12
    assert net[2]["_cdc_op"] == "delete" and net[3]["_cdc_op"] == "delete"


def test_nonclustered_delete_without_old_value_is_dropped(spark):
    t = nonclustered_table()
    # The key had no previous version (e.g. inserted and deleted in one txn): nothing to delete.
    b = Bronze().delete(t, 5, 10, None).put(t, 6, 10, {1: 1, 2: "a", 3: None})
    assert set(_net(spark, b, t)) == {1}
