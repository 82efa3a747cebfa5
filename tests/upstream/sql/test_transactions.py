"""Explicit transactions, statement-level rollback, and what the seed-002 key swap emits."""

from __future__ import annotations

from typing import Any

import pytest
from wire.eventfeed import FeedClient, T, changes_by_commit, register_all, table_id, table_regions, wait_resolved

from cdc_core.codec import key as keycodec
from cdc_core.codec import memcomparable
from cdc_core.codec.row import decode_row, encode_row
from cdc_core.errors import UpstreamError
from cdc_core.upstream.sql.errors import ErrorKind, SqlError
from cdc_core.upstream.sql.txn import write_conflict_message

SWAP = "BEGIN; UPDATE t SET a=3 WHERE a=1; UPDATE t SET a=1 WHERE a=2; UPDATE t SET a=2 WHERE a=3; COMMIT"


def test_explicit_transaction_commit_and_rollback(upstream_client: Any, fresh_db: str) -> None:
    res = upstream_client.execute(
        f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY, b INT);"
        "BEGIN; INSERT INTO t VALUES (1, 1); INSERT INTO t VALUES (2, 2); SELECT COUNT(*) AS n FROM t; COMMIT;"
        "START TRANSACTION; DELETE FROM t; SELECT COUNT(*) AS n FROM t; ROLLBACK;"
        "SELECT COUNT(*) AS n FROM t")
    kinds = [(r.statement.split()[0], r.commit_ts > 0) for r in res]
    assert kinds[3:7] == [("INSERT", False), ("INSERT", False), ("SELECT", False), ("COMMIT", True)]
    assert res[5].rows == [{"n": 2}]  # the transaction reads its own writes
    assert res[9].rows == [{"n": 0}]
    assert res[-1].rows == [{"n": 2}]  # rolled back
    # both inserts share the transaction's commit ts
    ts = res[6].commit_ts
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t", at_ts=ts - 1) == [{"n": 0}]
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t", at_ts=ts) == [{"n": 2}]


def test_failed_statement_is_undone_and_transaction_continues(upstream_cluster: Any, fresh_db: str) -> None:
    from cdc_core.upstream.sql.sql_front import split_script

    c = upstream_cluster.cluster

    async def scenario() -> tuple[list[Any], SqlError, list[Any]]:
        s = c.sql.session()
        first = [await s.run(st) for st in split_script(
            f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY); BEGIN; INSERT INTO t VALUES (1)")]
        try:
            await s.run(split_script("INSERT INTO t VALUES (2), (1)")[0])  # row 2 then a duplicate
            raise AssertionError("expected a duplicate-key error")
        except SqlError as exc:
            err = exc
        rest = [await s.run(st) for st in split_script("INSERT INTO t VALUES (3); COMMIT; SELECT a FROM t")]
        return first, err, rest

    _, err, rest = upstream_cluster.run(scenario())
    assert err.kind is ErrorKind.CONSTRAINT
    assert rest[1].commit_ts > 0
    assert rest[2].rows == [{"a": 1}, {"a": 3}]  # row 2 of the failed statement is gone


def test_open_transaction_at_end_of_script_is_rolled_back(upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY); BEGIN; INSERT INTO t VALUES (1)")
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 0}]


def test_error_inside_script_rolls_back_the_open_transaction(upstream_client: Any, fresh_db: str) -> None:
    with pytest.raises(UpstreamError, match="Duplicate entry"):
        upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY); BEGIN;"
                                "INSERT INTO t VALUES (1); INSERT INTO t VALUES (1); COMMIT")
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 0}]


def test_ddl_commits_the_open_transaction(upstream_client: Any, fresh_db: str) -> None:
    res = upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY); BEGIN;"
                                  "INSERT INTO t VALUES (1); CREATE TABLE u (a INT PRIMARY KEY); ROLLBACK")
    assert res[4].commit_ts > 0
    assert upstream_client.query(f"SELECT a FROM {fresh_db}.t") == [{"a": 1}]


def test_write_conflict_between_explicit_transactions(upstream_cluster: Any, fresh_db: str) -> None:
    from cdc_core.upstream.sql.sql_front import split_script

    c = upstream_cluster.cluster

    async def scenario() -> SqlError:
        setup = c.sql.session()
        setup_sql = f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY, b INT); INSERT INTO t VALUES (1, 0)"
        for st in split_script(setup_sql):
            await setup.run(st)
        s1, s2 = c.sql.session(), c.sql.session()
        for s in (s1, s2):
            for st in split_script(f"USE {fresh_db}; BEGIN OPTIMISTIC"):  # pessimistic: s2 would wait for s1
                await s.run(st)
        await s1.run(split_script("UPDATE t SET b = 1 WHERE a = 1")[0])
        await s2.run(split_script("UPDATE t SET b = 2 WHERE a = 1")[0])
        await s1.run(split_script("COMMIT")[0])
        try:
            await s2.run(split_script("COMMIT")[0])
        except SqlError as exc:
            return exc
        raise AssertionError("the second commit should conflict")

    err = upstream_cluster.run(scenario())
    assert err.kind is ErrorKind.CONFLICT and "Write conflict, txnStartTS=" in err.message
    assert upstream_cluster.run(c.sql.execute(f"SELECT b FROM {fresh_db}.t"))[0].rows == [{"b": 1}]


def _setup_swap(client: Any, db: str, ddl: str) -> None:
    client.execute(f"USE {db}; {ddl}; INSERT INTO t VALUES (1, 10), (2, 20)")


@pytest.mark.parametrize("clustered", [True, False])
def test_seed_002_swap_transaction(upstream_cluster: Any, upstream_client: Any, fresh_db: str, feed: FeedClient,
                                   clustered: bool) -> None:
    ddl = ("CREATE TABLE t (a INT PRIMARY KEY, b INT)" if clustered
           else "CREATE TABLE t (a INT PRIMARY KEY NONCLUSTERED, b INT)")
    _setup_swap(upstream_client, fresh_db, ddl)
    tid = table_id(upstream_cluster, fresh_db, "t")
    regions = table_regions(upstream_cluster.pd_addr, tid)
    ids = register_all(feed, regions, upstream_client.get_ts(), 100)
    res = upstream_client.execute(f"USE {fresh_db}; {SWAP}")
    commit_ts = res[-1].commit_ts
    assert commit_ts > 0 and [r.affected_rows for r in res[2:5]] == [1, 1, 1]
    assert upstream_client.query(f"SELECT a, b FROM {fresh_db}.t ORDER BY a") == [{"a": 1, "b": 20}, {"a": 2, "b": 10}]
    wait_resolved(feed, ids, regions, commit_ts)
    changes = changes_by_commit(feed, ids)
    assert list(changes) == [commit_ts]
    info = upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.table(fresh_db, "t"))
    got = [(keycodec.decode_row_key(k)[1], op, decode_row(info, v), decode_row(info, ov))
           for k, op, v, ov in changes[commit_ts]]
    put = T.Row.PUT
    if clustered:
        # handle = a: the final values of keys 1 and 2 changed; key 3 was put and deleted again: no event
        assert got == [(1, put, {1: 1, 2: 20}, {1: 1, 2: 10}), (2, put, {1: 2, 2: 10}, {1: 2, 2: 20})]
    else:
        # hidden rowids 1 and 2 keep their keys: one PUT each, with the old value
        assert got == [(1, put, {1: 2, 2: 10}, {1: 1, 2: 10}), (2, put, {1: 1, 2: 20}, {1: 2, 2: 20})]
    # a single PK change: clustered = DELETE old key + PUT new key; non-clustered = PUT with old value
    res = upstream_client.execute(f"UPDATE {fresh_db}.t SET a = 5 WHERE a = 1")
    ts2 = res[0].commit_ts
    wait_resolved(feed, ids, regions, ts2)
    rows = changes_by_commit(feed, ids)[ts2]
    if clustered:
        assert [(keycodec.decode_row_key(k)[1], op, v, ov) for k, op, v, ov in rows] == [
            (1, T.Row.DELETE, b"", encode_row(info, {1: 1, 2: 20})), (5, put, encode_row(info, {1: 5, 2: 20}), b"")]
    else:
        assert [(keycodec.decode_row_key(k)[1], op, v, ov) for k, op, v, ov in rows] == [
            (2, put, encode_row(info, {1: 5, 2: 20}), encode_row(info, {1: 1, 2: 20}))]


def test_write_conflict_text_is_tidbs() -> None:
    """TiDB's 9007 text, keys shown as its extractKeyErr shows them (pkg/store/driver/txn/error.go), here for the
    keys of TiDB's own documented samples: a row handle and a unique index on a string."""
    row = keycodec.row_key(47, 1)
    uk = keycodec.index_key(74, 1, b"\x01" + memcomparable.encode_bytes(b"bill"))
    assert write_conflict_message(30, 10, 20, row, row, "Optimistic") == (
        "Write conflict, txnStartTS=30, conflictStartTS=10, conflictCommitTS=20, key={tableID=47, handle=1}, "
        f"originalKey={row.hex()}, primary={{tableID=47, handle=1}}, originalPrimaryKey={row.hex()}, "
        "reason=Optimistic [try again later]")
    assert "key={tableID=74, indexID=1, indexValues={bill, }}, " in write_conflict_message(3, 1, 2, uk, uk, "x")
    int_uk = keycodec.index_key(9, 2, b"\x03" + keycodec.encode_int(-5) + b"\x03" + keycodec.encode_int(1000))
    assert "key={tableID=9, indexID=2, indexValues={-5, 1000, }}" in write_conflict_message(3, 1, 2, int_uk, b"", "x")
