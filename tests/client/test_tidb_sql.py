"""cdcflow's SQL over the MySQL protocol: TiDB found through PD's etcd, scripts, commit ts, snapshot reads,
streaming, one connection per thread, addresses and errors."""

from __future__ import annotations

import json
import threading
from typing import Any

import grpc
import pytest

from cdc_core.client.tidb_sql import TidbAddress, TidbSql, iter_statements, parse_addresses, split_statements
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import ConfigError, UpstreamError
from cdc_core.proto import etcdserverpb_pb2, etcdserverpb_pb2_grpc


def test_tidb_registers_in_pds_etcd_as_tidb_does(upstream_cluster: Any) -> None:
    """The keys TiDB's infosync writes, read with etcd's own Range on a PD member's port."""
    with grpc.insecure_channel(upstream_cluster.pd_addr) as ch:
        kv = etcdserverpb_pb2_grpc.KVStub(ch)
        resp = kv.Range(etcdserverpb_pb2.RangeRequest(key=b"/topology/tidb/", range_end=b"/topology/tidb0"),
                        timeout=5)
        keys = [x.key.decode() for x in resp.kvs]
        addr = upstream_cluster.mysql_addr
        assert keys == [f"/topology/tidb/{addr}/info", f"/topology/tidb/{addr}/ttl"]
        info = json.loads(resp.kvs[0].value)
        assert set(info) == {"version", "git_hash", "status_port", "deploy_path", "start_timestamp", "labels"}
        assert int(resp.kvs[1].value) > 1_600_000_000 * 10**9  # unix nanoseconds
        assert resp.count == 2 and not resp.more and resp.header.revision >= resp.kvs[1].mod_revision
        one = kv.Range(etcdserverpb_pb2.RangeRequest(key=keys[0].encode()), timeout=5)  # no range_end: the key alone
        assert [x.key.decode() for x in one.kvs] == keys[:1]
        limited = kv.Range(etcdserverpb_pb2.RangeRequest(key=b"/topology/", range_end=b"\0", limit=1,
                                                         keys_only=True), timeout=5)
        assert limited.more and limited.count == 2 and limited.kvs[0].value == b""
        counted = kv.Range(etcdserverpb_pb2.RangeRequest(key=b"/topology/", range_end=b"\0", count_only=True),
                           timeout=5)
        assert counted.count == 2 and not counted.kvs
        with pytest.raises(grpc.RpcError) as ei:
            kv.Range(etcdserverpb_pb2.RangeRequest(key=b""), timeout=5)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "key is not provided" in ei.value.details()
    # A TiDB that is gone leaves its info key (TiDB writes it without a lease); its ttl key expired: not alive.
    keys = upstream_cluster.cluster.etcd
    upstream_cluster.call(lambda: keys.put("/topology/tidb/10.9.9.9:4000/info", "{}"))
    try:
        with UpstreamClient(upstream_cluster.pd_addr) as c:
            assert c.tidb_addresses() == [addr]
            assert c.query("SELECT 1 AS one") == [{"one": 1}]
    finally:
        upstream_cluster.call(lambda: keys.delete_prefix("/topology/tidb/10.9.9.9:4000/"))


def test_statements_commit_ts_and_open_transactions(upstream_client: Any, fresh_db: str) -> None:
    res = upstream_client.execute(
        f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY, b VARCHAR(8)); INSERT INTO t VALUES (1, 'a;b');"
        "BEGIN; INSERT INTO t VALUES (2, NULL); UPDATE t SET b = 'x' WHERE a = 1; COMMIT; SELECT * FROM t")
    ddl, ins, begin, ins2, upd, commit, sel = res[1:]
    assert 0 < ddl.commit_ts < ins.commit_ts < commit.commit_ts  # from @@tidb_last_txn_info
    assert begin.commit_ts == ins2.commit_ts == upd.commit_ts == 0 and (ins2.affected_rows, upd.affected_rows) == (1, 1)
    assert sel.columns == ["a", "b"] and sel.rows == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    # a script that leaves a transaction open is rolled back at its end, as `mysql -e` is at disconnect
    upstream_client.execute(f"BEGIN; INSERT INTO {fresh_db}.t VALUES (3, 'gone')")
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 2}]
    assert upstream_client.query("SELECT @@tidb_current_ts AS ts") == [{"ts": 0}]


def test_snapshot_reads_stream_and_leave_the_session_at_the_latest(upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"CREATE TABLE {fresh_db}.t (a INT PRIMARY KEY)")
    values = ", ".join(f"({i})" for i in range(5000))
    upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES {values}")
    ts = upstream_client.get_ts()
    upstream_client.execute(f"DELETE FROM {fresh_db}.t WHERE a >= 100")
    rows = upstream_client.iter_rows(f"SELECT a FROM {fresh_db}.t ORDER BY a", at_ts=ts)
    first = next(rows)
    assert first == {"a": 0}
    assert sum(1 for _ in rows) == 4999  # streamed off the socket (SSCursor), all 5000 at ts
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 100}]  # back at the latest
    assert upstream_client.query("SELECT @@tidb_snapshot AS s") == [{"s": ""}]
    # an abandoned stream still resets the snapshot before the connection serves another read
    gen = upstream_client.iter_rows(f"SELECT a FROM {fresh_db}.t", at_ts=ts)
    next(gen)
    gen.close()
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 100}]


TRICKY_SCRIPTS = (
    "CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2);\nSELECT 'a;b', `x;y` FROM t -- c;omment\n; "
    "/* block ; */ UPDATE t SET a = 1",
    "INSERT INTO t VALUES ('it''s; ok', \"d;q\");;; SELECT 1",
    "SELECT 1; -- only a comment after",
    "SELECT 'x\\';y'; SELECT 2;",
)


@pytest.mark.parametrize("script", TRICKY_SCRIPTS)
def test_a_script_read_in_pieces_splits_as_a_whole_one(script: str) -> None:
    want = split_statements(script)
    for n in (1, 2, 3, 5, 7, 13, 1 << 20):  # pieces ending inside literals, identifiers and comments
        assert list(iter_statements(script[i:i + n] for i in range(0, len(script), n))) == want, n


def test_a_streamed_script_hands_rows_out_as_they_arrive(upstream_client: Any, fresh_db: str) -> None:
    statements = iter_statements(iter([f"CREATE TABLE {fresh_db}.t (a INT PRIMARY KEY); INSERT INTO {fresh_db}.t ",
                                       "VALUES " + ", ".join(f"({i})" for i in range(3000)) + "; SELECT a FROM ",
                                       f"{fresh_db}.t ORDER BY a; DELETE FROM {fresh_db}.t WHERE a > 5"]))
    seen: list[dict[str, Any]] = []
    results = list(upstream_client.sql().stream(statements, on_row=seen.append))
    assert [r.affected_rows for r in results] == [0, 3000, 0, 2994]
    assert results[2].rows == [] and results[2].row_count == 3000 and seen == [{"a": i} for i in range(3000)]
    assert results[1].commit_ts < results[3].commit_ts
    with pytest.raises(UpstreamError, match=r"statement 2 `SELECT nope FROM .*`: .*Unknown column .nope. in "
                                            r".field list. \(MySQL error 1054\)"):
        list(upstream_client.sql().stream(iter_statements([f"SELECT 1; SELECT nope FROM {fresh_db}.t"]),
                                          on_row=seen.append))


def test_one_connection_per_thread(upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"CREATE TABLE {fresh_db}.t (a INT PRIMARY KEY, b INT)")
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(20):
                upstream_client.execute(f"USE {fresh_db}; BEGIN; INSERT INTO t VALUES ({i * 100 + j}, {i}); COMMIT")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = upstream_client.query(f"SELECT a, b FROM {fresh_db}.t")
    assert sorted((r["a"], r["b"]) for r in rows) == [(i * 100 + j, i) for i in range(4) for j in range(20)]


def test_addresses_and_errors(upstream_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert TidbAddress.parse("mysql://u:p%40ss@db.local:4000/") == TidbAddress("db.local", 4000, "u", "p@ss")
    assert TidbAddress.parse("10.0.0.1:4000") == TidbAddress("10.0.0.1", 4000, "root", None)
    assert [a.addr for a in parse_addresses("a:1, b:2")] == ["a:1", "b:2"]
    for bad in ("db.local", "db:port", "db:0", "db:70000"):
        with pytest.raises(ConfigError, match=r"tidb: .* is not \[mysql://\]"):
            TidbAddress.parse(bad)
    assert split_statements("SELECT ';'; /* ; */ SELECT `a;b` FROM t;; ") == ["SELECT ';'", "SELECT `a;b` FROM t"]
    # explicit addresses win over PD's registry; every address is tried and each failure named
    with UpstreamClient(upstream_cluster.pd_addr, tidb=f"127.0.0.1:1,{upstream_cluster.mysql_addr}") as c:
        assert c.query("SELECT 1 AS one") == [{"one": 1}]
    with UpstreamClient(upstream_cluster.pd_addr, tidb="127.0.0.1:1") as c:
        with pytest.raises(UpstreamError, match=r"cannot connect to TiDB's SQL port: 127\.0\.0\.1:1: .*2003"):
            c.query("SELECT 1")
    monkeypatch.setenv("CDCFLOW_TIDB", "nonsense")
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        with pytest.raises(ConfigError, match="CDCFLOW_TIDB: 'nonsense'"):
            c.query("SELECT 1")
    sql = TidbSql([TidbAddress.parse(upstream_cluster.mysql_addr)])
    try:
        with pytest.raises(UpstreamError, match=r"statement 2 `SELEC 2`: .*\(MySQL error 1064\)"):
            sql.execute("SELECT 1; SELEC 2; SELECT 3")
        assert sql.execute("SELECT 3 AS x")[0].rows == [{"x": 3}]  # the connection survives a failed statement
    finally:
        sql.close()


def test_reads_at_one_ts_set_the_snapshot_once_and_the_latest_is_read_again_after_them(
        upstream_client: Any, fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session stays at the snapshot it read at: reads at that ts (streamed or scripts) set it once; a read or a
    write at the latest sets it back first; a re-opened connection starts at the latest."""
    import pymysql

    upstream_client.execute(f"CREATE TABLE {fresh_db}.t (a INT PRIMARY KEY); INSERT INTO {fresh_db}.t VALUES (1)")
    ts = upstream_client.get_ts()
    upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES (2)")
    sent: list[str] = []
    execute = pymysql.cursors.Cursor.execute
    monkeypatch.setattr(pymysql.cursors.Cursor, "execute",
                        lambda self, query, args=None: (sent.append(query), execute(self, query, args))[1])
    sql = TidbSql(upstream_client.sql_addresses())
    try:
        for _ in range(3):
            assert list(sql.iter_rows(f"SELECT a FROM {fresh_db}.t", at_ts=ts)) == [{"a": 1}]
            assert sql.execute(f"SELECT COUNT(*) AS n FROM {fresh_db}.t", at_ts=ts)[0].rows == [{"n": 1}]
        assert [q for q in sent if "tidb_snapshot" in q] == [f"SET @@tidb_snapshot = '{ts}'"]
        assert sorted(r["a"] for r in sql.iter_rows(f"SELECT a FROM {fresh_db}.t")) == [1, 2]
        sql.execute(f"INSERT INTO {fresh_db}.t VALUES (3)")  # a write, at the latest: TiDB refuses one at a snapshot
        assert [q for q in sent if "tidb_snapshot" in q] == [f"SET @@tidb_snapshot = '{ts}'",
                                                             "SET @@tidb_snapshot = ''"]
        assert list(sql.iter_rows(f"SELECT a FROM {fresh_db}.t", at_ts=ts)) == [{"a": 1}]
        sql.close()
        assert sorted(r["a"] for r in sql.iter_rows(f"SELECT a FROM {fresh_db}.t")) == [1, 2, 3]
        assert sum("tidb_snapshot" in q for q in sent) == 3  # none for the new connection's read at the latest
    finally:
        sql.close()


@pytest.fixture
def global_sql_mode(upstream_client: Any) -> Any:
    """Sets the upstream's GLOBAL sql_mode for a test and puts the value it had back after (the session's upstream
    is every test's)."""
    before = upstream_client.query("SELECT @@global.sql_mode AS m")[0]["m"]
    sql = TidbSql(upstream_client.sql_addresses())

    def put(mode: str) -> None:
        sql.execute(f"SET GLOBAL sql_mode = {sql.literal(mode)}")

    yield put
    sql.execute(f"SET GLOBAL sql_mode = {sql.literal(before)}")
    sql.close()


KEYS = ["it's", "a\\b", "\\", "'\\'", "x\\'y", "中文\\n", "\\%_", "back`tick", 'dq"\\"']


@pytest.mark.parametrize("mode", ["", "NO_BACKSLASH_ESCAPES", "ANSI_QUOTES,NO_BACKSLASH_ESCAPES"])
def test_literals_follow_the_sessions_sql_mode(upstream_client: Any, fresh_db: str, global_sql_mode: Any,
                                               mode: str) -> None:
    """Keys with quotes and backslashes, written by TidbSql.literal and found again by a point read, whatever the
    session's mode: a new connection reads it once (@@sql_mode) and honours the server's status flag."""
    global_sql_mode(mode)
    sql = TidbSql(upstream_client.sql_addresses())
    try:
        assert ("NO_BACKSLASH_ESCAPES" in sql.sql_mode) == sql.no_backslash_escapes == bool(mode)
        assert sql.sql_mode == frozenset(filter(None, mode.split(",")))
        t = f"`{fresh_db}`.`t`"
        values = ", ".join(f"({i}, {sql.literal(k)})" for i, k in enumerate(KEYS))
        sql.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, k VARCHAR(20) NOT NULL UNIQUE); "
                    f"INSERT INTO {t} VALUES {values}")
        rows = sql.execute(f"SELECT id, k FROM {t} ORDER BY id")[-1].rows
        assert [r["k"] for r in rows] == KEYS
        for i, k in enumerate(KEYS):
            assert list(sql.iter_rows(f"SELECT id FROM {t} WHERE k = {sql.literal(k)}")) == [{"id": i}], k
        # a script splits as the session tokenizes it: under the mode 'a\' ends a string
        first, second = sql.literal("a;b\\"), sql.literal("\\")
        ends = sql.execute(f"SELECT {first} AS s; SELECT {second} AS s")
        assert [r.rows for r in ends] == [[{"s": "a;b\\"}], [{"s": "\\"}]]
    finally:
        sql.close()


def test_a_set_in_a_script_is_seen_by_the_next_literal(upstream_client: Any) -> None:
    sql = TidbSql(upstream_client.sql_addresses())
    try:
        assert not sql.no_backslash_escapes
        sql.execute("SET sql_mode = 'NO_BACKSLASH_ESCAPES'")
        assert sql.no_backslash_escapes and sql.literal("a\\b") == "'a\\b'"
        text = sql.literal("a\\b")
        assert sql.execute(f"SELECT {text} AS s")[-1].rows == [{"s": "a\\b"}]
        sql.execute("SET sql_mode = DEFAULT")
        assert "NO_BACKSLASH_ESCAPES" not in sql.sql_mode and sql.literal("a\\b") == "'a\\\\b'"
    finally:
        sql.close()


def test_scripts_split_by_the_mode() -> None:
    assert split_statements("SELECT 'a\\'; SELECT 2", no_backslash_escapes=True) == ["SELECT 'a\\'", "SELECT 2"]
    assert split_statements("SELECT 'a\\';' ; SELECT 2") == ["SELECT 'a\\';'", "SELECT 2"]  # by default: a';
    pieces = ["SELECT 'x\\", "'; SELECT 3;"]
    assert list(iter_statements(pieces, no_backslash_escapes=True)) == ["SELECT 'x\\'", "SELECT 3"]
