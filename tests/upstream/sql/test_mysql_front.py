"""The SQL front over the MySQL protocol, as a MySQL client sees it: PyMySQL (a maintained pure-Python driver) and
Debian's ``mariadb`` command-line client connect to the embedded upstream; sessions span queries; errors carry
MySQL's codes; TiDB's ``tidb_snapshot`` / ``tidb_current_ts`` work as in TiDB."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pymysql
import pytest

from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.sql import sql_front


def _connect(ec: EmbeddedCluster, **kw: Any) -> pymysql.connections.Connection:
    host, _, port = ec.mysql_addr.rpartition(":")
    return pymysql.connect(host=host, port=int(port), user="root", autocommit=True, **kw)


@pytest.fixture(scope="module")
def ec(upstream_cluster: Any) -> Iterator[EmbeddedCluster]:
    conn = _connect(upstream_cluster)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE my")
        cur.execute("CREATE TABLE my.t (a INT PRIMARY KEY, b VARCHAR(10), c DECIMAL(10,2))")
    conn.close()
    yield upstream_cluster


def _codes(fn: Any) -> tuple[int, str]:
    with pytest.raises(pymysql.MySQLError) as ei:
        fn()
    return ei.value.args[0], ei.value.args[1]


def test_statements_rows_and_affected_rows(ec: EmbeddedCluster) -> None:
    conn = _connect(ec, database="my")
    with conn.cursor() as cur:
        assert cur.execute("INSERT INTO t VALUES (1, 'x', 1.50), (2, NULL, NULL), (3, 'z', 3)") == 3
        assert cur.execute("UPDATE t SET b = 'y' WHERE a >= 2") == 2
        cur.execute("SELECT a, b, c FROM t ORDER BY a")
        assert [d[0] for d in cur.description] == ["a", "b", "c"]
        assert cur.fetchall() == ((1, "x", Decimal("1.50")), (2, "y", None), (3, "y", Decimal("3.00")))
        cur.execute("SELECT DATABASE(), VERSION()")
        assert cur.fetchone() == ("my", "8.0.11-TiDB-v8.5.0-cdcflow")
        assert cur.execute("DELETE FROM t WHERE a = 3") == 1
        cur.execute("SHOW TABLES")
        assert ("t",) in cur.fetchall()
    conn.close()


def test_a_big_select_streams_while_the_client_reads(ec: EmbeddedCluster, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A region's worth of rows (TiDB streams them) leaves as it is read: when the client has its first row, the
    upstream has decoded only what the socket buffers hold plus a batch, not the 30 MB result (which it used to
    build whole first, past a client's read timeout at a million rows); every row arrives, in key order."""
    n, width = 30_000, 1_000
    rows = {"id": pa.array(range(n), pa.int64()), "s": [f"{i:08d}".ljust(width, "x") for i in range(n)]}
    pq.write_table(pa.table(rows), tmp_path / "big.parquet")
    conn = _connect(ec, database="my")
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE streamed (id BIGINT PRIMARY KEY, s VARCHAR({width}))")
        cur.execute(f"IMPORT INTO streamed FROM '{tmp_path}/big.parquet' FORMAT 'parquet'")
    conn.close()

    decoded = 0
    iter_matching = sql_front.Session._iter_matching

    def counting(*args: Any) -> Iterator[Any]:
        nonlocal decoded
        for item in iter_matching(*args):
            decoded += 1
            yield item

    monkeypatch.setattr(sql_front.Session, "_iter_matching", staticmethod(counting))
    conn = _connect(ec, database="my", cursorclass=pymysql.cursors.SSCursor)
    # A fixed receive buffer (no autotuning up to tcp_rmem's 32 MB): what may wait in flight is bounded.
    conn._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
    with conn.cursor() as cur:
        cur.execute("SELECT id, s FROM streamed")
        first = cur.fetchone()
        at_first = decoded
        rest = list(cur.fetchall_unbuffered())
    conn.close()
    assert first == (0, "00000000".ljust(width, "x"))
    assert at_first < n // 2, f"the upstream decoded {at_first} of {n} rows before the client had one"
    assert len(rest) == n - 1 and decoded == n
    assert [r[0] for r in rest] == list(range(1, n)) and rest[-1][1] == f"{n - 1:08d}".ljust(width, "x")


def test_a_transaction_spans_queries_and_a_disconnect_rolls_it_back(ec: EmbeddedCluster) -> None:
    a, b = _connect(ec), _connect(ec)
    with a.cursor() as ca, b.cursor() as cb:
        ca.execute("SELECT @@tidb_current_ts")
        assert ca.fetchone() == (0,)
        ca.execute("BEGIN")
        ca.execute("INSERT INTO my.t VALUES (10, 'txn', 0)")
        ca.execute("SELECT @@tidb_current_ts")
        start_ts = ca.fetchone()[0]
        assert start_ts > 0
        cb.execute("SELECT COUNT(*) FROM my.t WHERE a = 10")
        assert cb.fetchone() == (0,), "not committed yet"
        ca.execute("COMMIT")
        cb.execute("SELECT COUNT(*) FROM my.t WHERE a = 10")
        assert cb.fetchone() == (1,)
        ca.execute("BEGIN")
        ca.execute("INSERT INTO my.t VALUES (11, 'lost', 0)")
    a.close()  # with the transaction open
    with b.cursor() as cb:
        cb.execute("SELECT COUNT(*) FROM my.t WHERE a = 11")
        assert cb.fetchone() == (0,)
    b.close()


def test_a_write_conflict_is_tidbs_9007_and_rolls_back(ec: EmbeddedCluster) -> None:
    a, b = _connect(ec, database="my"), _connect(ec, database="my")
    with a.cursor() as ca, b.cursor() as cb:
        ca.execute("INSERT INTO t VALUES (50, 'v0', 0)")
        ca.execute("BEGIN OPTIMISTIC")  # pessimistic (the default): b's UPDATE would wait for a's lock instead
        cb.execute("BEGIN OPTIMISTIC")
        ca.execute("UPDATE t SET b = 'a' WHERE a = 50")
        cb.execute("UPDATE t SET b = 'b' WHERE a = 50")
        ca.execute("COMMIT")
        code, msg = _codes(lambda: cb.execute("COMMIT"))
        assert code == 9007 and msg.startswith("Write conflict, txnStartTS=") and msg.endswith("[try again later]")
        cb.execute("SELECT b FROM t WHERE a = 50")
        assert cb.fetchone() == ("a",)
    a.close()
    b.close()


def test_errors_carry_mysql_codes(ec: EmbeddedCluster) -> None:
    conn = _connect(ec, database="my")
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (20, 'dup', 0)")
        code, msg = _codes(lambda: cur.execute("INSERT INTO t VALUES (20, 'dup', 0)"))
        assert code == 1062 and msg.startswith("Duplicate entry '20' for key")
        assert _codes(lambda: cur.execute("SELECT * FROM nope")) == (1146, "Table 'my.nope' doesn't exist")
        assert _codes(lambda: cur.execute("USE nodb"))[0] == 1049
        assert _codes(lambda: cur.execute("CREATE TABLE t (a INT PRIMARY KEY)")) == (
            1050, "Table 'my.t' already exists")
        assert _codes(lambda: cur.execute("SELEC 1"))[0] == 1064
        assert _codes(lambda: cur.execute("SELECT nope FROM t"))[0] == 1054
    conn.close()
    code, msg = _codes(lambda: _connect(ec, database="nodb"))  # the handshake names the database
    assert code == 1043 and msg == "Unknown database 'nodb'"


@pytest.mark.parametrize("sql", [
    "SELECT 1", "SELECT 1.5, 'x' AS y, 'z'", "SELECT 'abc' AS `@@tidb_last_txn_info`", "SELECT TRUE AS t",
    "SELECT NULL AS `@@tidb_last_txn_info`", "SELECT 470764012090425344 AS `@@tidb_current_ts`", "SELECT NULL",
    "SELECT 1 + 1", "SELECT -1", "SELECT 1 LIMIT 1", "SELECT a FROM t",
])
def test_a_select_of_constants_is_answered_as_sqlglots_executor_answers_it(sql: str) -> None:
    import sqlglot
    from sqlglot.executor import execute

    from cdc_core.upstream.sql.mysql_front import constant_select

    e = sqlglot.parse_one(sql, read="mysql")
    got = constant_select(e)
    if got is None:  # left to the executor
        assert sql in ("SELECT NULL", "SELECT 1 + 1", "SELECT -1", "SELECT 1 LIMIT 1", "SELECT a FROM t")
        return
    want = execute(e)
    assert got == (want.rows, list(want.columns))
    assert [type(v) for v in got[0][0]] == [type(v) for v in want.rows[0]]


def test_session_variables_and_constants_reach_the_client_typed(ec: EmbeddedCluster) -> None:
    conn = _connect(ec, database="my")
    with conn.cursor() as cur:
        cur.execute("SELECT @@tidb_current_ts, 7, 'seven' AS s, 1.25")
        assert cur.fetchone() == (0, 7, "seven", 1.25)
        assert [d[0] for d in cur.description] == ["@@tidb_current_ts", "7", "s", "1.25"]
        cur.execute("INSERT INTO t VALUES (77, 'info', 0)")
        cur.execute("SELECT @@tidb_last_txn_info")
        info = json.loads(cur.fetchone()[0])
        cur.execute("SELECT b FROM t WHERE a = 77")
        assert cur.fetchone() == ("info",) and info["commit_ts"] > info["start_ts"] > 0
        cur.execute("SELECT 1 + 1, NULL")  # an expression: sqlglot's executor evaluates it
        assert cur.fetchone() == (2, None)
    conn.close()


def test_an_explicit_transaction_commits_above_a_later_start_ts(ec: EmbeddedCluster) -> None:
    """tidb_guarantee_linearizability is ON by default and a client may switch it: with it on, a transaction that
    another client began before this one's COMMIT never sees this commit below its start ts."""
    conn, other = _connect(ec, database="my"), _connect(ec, database="my")
    with conn.cursor() as cur, other.cursor() as cur2:
        cur.execute("SELECT @@tidb_guarantee_linearizability")
        assert cur.fetchone() == (1,)
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (78, 'lin', 0)")
        cur2.execute("BEGIN")
        cur2.execute("SELECT @@tidb_current_ts")
        (later,) = cur2.fetchone()
        cur2.execute("ROLLBACK")
        cur.execute("COMMIT")
        cur.execute("SELECT @@tidb_last_txn_info")
        assert json.loads(cur.fetchone()[0])["commit_ts"] > later > 0
        cur.execute("SET tidb_guarantee_linearizability = OFF")
        cur.execute("SELECT @@tidb_guarantee_linearizability")
        assert cur.fetchone() == (0,)
        cur.execute("DELETE FROM t WHERE a = 78")
    conn.close()
    other.close()


def test_tidb_snapshot_reads_the_past_and_refuses_writes(ec: EmbeddedCluster) -> None:
    conn = _connect(ec, database="my")
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (30, 'old', 0)")
        cur.execute("BEGIN")
        cur.execute("SELECT @@tidb_current_ts")
        before = cur.fetchone()[0]
        cur.execute("COMMIT")
        cur.execute("UPDATE t SET b = 'new' WHERE a = 30")
        cur.execute(f"SET @@tidb_snapshot = '{before}'")
        cur.execute("SELECT b FROM t WHERE a = 30")
        assert cur.fetchone() == ("old",)
        code, _ = _codes(lambda: cur.execute("DELETE FROM t WHERE a = 30"))
        assert code == 1105
        code, msg = _codes(lambda: cur.execute("SET @@tidb_snapshot = '99999999999999999999'"))
        assert code == 1105 and "is in the future" in msg
        cur.execute("SELECT b FROM t WHERE a = 30")
        assert cur.fetchone() == ("old",), "a refused SET leaves the snapshot as it was"
        cur.execute("SET @@tidb_snapshot = ''")
        cur.execute("SELECT b FROM t WHERE a = 30")
        assert cur.fetchone() == ("new",)
    conn.close()


def test_information_schema_has_tidb_table_ids_and_follows_tidb_snapshot(ec: EmbeddedCluster) -> None:
    conn = _connect(ec)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE isx; CREATE TABLE isx.k (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE isx.n (id INT PRIMARY KEY NONCLUSTERED)")
        cur.execute("BEGIN")
        cur.execute("SELECT @@tidb_current_ts")
        before = cur.fetchone()[0]
        cur.execute("COMMIT")
        cur.execute("ALTER TABLE isx.k ADD COLUMN w INT; RENAME TABLE isx.n TO isx.n2")
        want = {t.name: t.id for t in ec.call(lambda: ec.cluster.catalog.tables("isx"))}
        cur.execute("SELECT TABLE_NAME, TIDB_TABLE_ID, TIDB_PK_TYPE, ENGINE FROM information_schema.tables "
                    "WHERE TABLE_SCHEMA = 'isx' ORDER BY TABLE_NAME")
        assert cur.fetchall() == (("k", want["k"], "CLUSTERED", "InnoDB"), ("n2", want["n2"], "NONCLUSTERED", "InnoDB"))
        cur.execute("SELECT COLUMN_NAME FROM information_schema.columns WHERE TABLE_SCHEMA = 'isx' AND "
                    "TABLE_NAME = 'k' ORDER BY ORDINAL_POSITION")
        assert [r[0] for r in cur.fetchall()] == ["id", "v", "w"]
        cur.execute("SELECT COUNT(*) FROM information_schema.partitions WHERE TABLE_SCHEMA = 'isx'")
        assert cur.fetchone() == (0,)
        # At a snapshot, the schema of the snapshot (as TiDB answers): n not yet renamed, k without w.
        cur.execute(f"SET @@tidb_snapshot = '{before}'")
        cur.execute("SELECT TABLE_NAME, TIDB_TABLE_ID FROM information_schema.tables WHERE TABLE_SCHEMA = 'isx' "
                    "ORDER BY TABLE_NAME")
        assert cur.fetchall() == (("k", want["k"]), ("n", want["n2"]))
        cur.execute("SHOW COLUMNS FROM isx.k")
        assert [r[0] for r in cur.fetchall()] == ["id", "v"]
        cur.execute("SET @@tidb_snapshot = ''")
        cur.execute("SHOW TABLES FROM isx")
        assert [r[0] for r in cur.fetchall()] == ["k", "n2"]
    conn.close()


def test_the_mariadb_command_line_client_connects(ec: EmbeddedCluster) -> None:
    assert shutil.which("mariadb"), "Debian's mariadb-client is missing (`make test`'s preflight installs it)"
    host, _, port = ec.mysql_addr.rpartition(":")
    script = ("USE my; INSERT INTO t VALUES (40, 'cli', 4.25); "
              "SELECT a, b, c FROM t WHERE a = 40; SELECT @@version;")
    out = subprocess.run(["mariadb", "-h", host, "-P", port, "-u", "root", "--protocol=TCP", "--batch",
                          "--skip-ssl", "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["a\tb\tc", "40\tcli\t4.25", "@@version", "8.0.11-TiDB-v8.5.0-cdcflow"]
    bad = subprocess.run(["mariadb", "-h", host, "-P", port, "-u", "root", "--protocol=TCP", "--skip-ssl",
                          "-e", "SELECT * FROM my.nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "ERROR 1146 (42S02)" in bad.stderr and "Table 'my.nope' doesn't exist" in bad.stderr


ALL_TYPES_DDL = """CREATE TABLE my.ty (id INT PRIMARY KEY, ti TINYINT UNSIGNED, bu BIGINT UNSIGNED, f FLOAT, d DOUBLE,
    dc DECIMAL(20,4), dt DATE, dtm DATETIME(6), ts TIMESTAMP(3), tm TIME, y YEAR, c CHAR(4), b BINARY(3),
    vb VARBINARY(8), bl BLOB, e ENUM('x','y'), s SET('a','b','c'), bt BIT(10), j JSON)"""
ALL_TYPES_ROW = ("(1, 255, 18446744073709551615, 1.5, -2.25e-10, '123.45678', '2024-02-29', "
                 "'2024-01-01 12:00:00.123456', '2030-05-06 07:08:09.5', '-12:34:56', 1999, 'ab  ', 'xy', 0x00ff, "
                 "x'0102', 'Y', 'c,a', b'1010101010', '{\"k\": [1, \"two\", null]}')")


def test_every_type_reaches_a_mysql_client_typed(ec: EmbeddedCluster) -> None:
    """Result columns carry TiDB's type codes (the protocol's), binary strings the binary charset: PyMySQL hands
    back ints, floats, Decimals, dates, datetimes, timedeltas, bytes and text as it would from TiDB."""
    conn = _connect(ec)
    with conn.cursor() as cur:
        cur.execute(ALL_TYPES_DDL)
        cur.execute(f"INSERT INTO my.ty VALUES {ALL_TYPES_ROW}, (2{', NULL' * 18})")
        cur.execute("SELECT * FROM my.ty ORDER BY id")
        rows = cur.fetchall()
        assert rows[0] == (1, 255, (1 << 64) - 1, 1.5, -2.25e-10, Decimal("123.4568"), dt.date(2024, 2, 29),
                           dt.datetime(2024, 1, 1, 12, 0, 0, 123456), dt.datetime(2030, 5, 6, 7, 8, 9, 500000),
                           -dt.timedelta(hours=12, minutes=34, seconds=56), 1999, "ab", b"xy\x00", b"\x00\xff",
                           b"\x01\x02", "y", "a,c", b"\x02\xaa", '{"k": [1, "two", null]}')
        assert rows[1] == (2, *([None] * 18))
        assert [d[1] for d in cur.description] == [3, 1, 8, 4, 5, 246, 10, 12, 7, 11, 13, 254, 254, 15, 252, 247,
                                                    248, 16, 245]  # pkg/parser/mysql/type.go codes
        cur.execute("SELECT id FROM my.ty WHERE dt = '2024-02-29' AND tm = '-12:34:56' AND vb = 0x00ff AND e = 'y' "
                    "AND bt = b'1010101010' AND f > 1.4 AND dtm < '2024-01-02'")
        assert cur.fetchall() == ((1,),)
        # Strict mode's refusals, with MySQL's codes (what a client's error handling keys on).
        for bad, code in (("INSERT INTO my.ty (id, e) VALUES (3, 'z')", 1265),
                          ("INSERT INTO my.ty (id, ti) VALUES (3, 256)", 1264),
                          ("INSERT INTO my.ty (id, c) VALUES (3, 'abcde')", 1406),
                          ("INSERT INTO my.ty (id, dt) VALUES (3, '2024-13-01')", 1292),
                          ("INSERT INTO my.ty (id, j) VALUES (3, '{bad')", 3140),
                          ("INSERT INTO my.ty (id, ti) VALUES (3, 'abc')", 1366)):
            assert _codes(lambda bad=bad: cur.execute(bad))[0] == code
    conn.close()
    host, _, port = ec.mysql_addr.rpartition(":")
    out = subprocess.run(["mariadb", "-h", host, "-P", port, "-u", "root", "--protocol=TCP", "--batch", "--skip-ssl",
                          "-e", "SELECT id, bu, dc, dt, ts, tm, e, s, j FROM my.ty WHERE id = 1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split("\t") == [
        "1", "18446744073709551615", "123.4568", "2024-02-29", "2030-05-06 07:08:09.500", "-12:34:56", "y", "a,c",
        '{"k": [1, "two", null]}']  # TIMESTAMP(3): three fractional digits, as MySQL and TiDB print them
    # Exactly fsp digits: none for DATETIME, padded zeros for a whole second, TIME(2) of a negative duration.
    raw = _connect(ec, conv={})  # the text the server sent, unconverted
    with raw.cursor() as cur:
        cur.execute("CREATE TABLE my.fsp (id INT PRIMARY KEY, a DATETIME, b DATETIME(3), c TIME(2), d TIMESTAMP(6))")
        cur.execute("INSERT INTO my.fsp VALUES (1, '2024-01-02 03:04:05.9', '2024-01-02 03:04:05', '-01:02:03.456', "
                    "'2024-01-02 03:04:05.1')")
        cur.execute("SELECT a, b, c, d FROM my.fsp")
        assert cur.fetchall() == (("2024-01-02 03:04:06", "2024-01-02 03:04:05.000", "-01:02:03.46",
                                   "2024-01-02 03:04:05.100000"),)
    raw.close()


def test_with_a_password_only_its_user_logs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--sql-password``: the configured user with that password; a wrong password, no password or another user
    is error 1045. cdcflow's own client passes ``$CDCFLOW_TIDB_PASSWORD``."""
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.upstream.cluster import ClusterConfig

    with EmbeddedCluster(ClusterConfig(stores=1, sql_user="cdc", sql_password="s3cret-pw")) as locked:
        host, _, port = locked.mysql_addr.rpartition(":")
        for user, password in (("cdc", "wrong"), ("cdc", ""), ("root", ""), ("root", "s3cret-pw")):
            code, _ = _codes(lambda u=user, p=password: pymysql.connect(host=host, port=int(port), user=u, password=p))
            assert code == 1045, (user, password)
        with pymysql.connect(host=host, port=int(port), user="cdc", password="s3cret-pw") as conn, \
                conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchall() == ((1,),)
        assert "s3cret-pw" not in repr(locked.cluster.config)
        monkeypatch.setenv("CDCFLOW_TIDB_PASSWORD", "s3cret-pw")
        with UpstreamClient(locked.pd_addr, tidb=f"cdc@{locked.mysql_addr}") as c:
            c.execute("CREATE DATABASE a; CREATE TABLE a.t (id INT PRIMARY KEY); INSERT INTO a.t VALUES (1)")
            assert c.query("SELECT id FROM a.t") == [{"id": 1}]


def test_vector_wide_decimal_and_zero_dates_reach_a_mysql_client_as_tidb_sends_them(ec: EmbeddedCluster) -> None:
    """TiDB v8.5's VECTOR goes to clients as a non-binary LONG BLOB holding its text (pkg/server/internal/column:
    dumpType, dumpCharset); DECIMAL(65,30) keeps every digit; zero dates are refused under the default sql_mode
    with TiDB's 1292 and stored under sql_mode '', read back as TiDB prints them."""
    conn = _connect(ec)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE my.emb (id INT PRIMARY KEY, v VECTOR(3), w VECTOR, d DECIMAL(65,30), dt DATE, "
                    "dtm DATETIME(3), ts TIMESTAMP)")
        wide = "-12345678901234567890123456789012345.123456789012345678901234567891"
        cur.execute(f"INSERT INTO my.emb (id, v, w, d) VALUES (1, '[1.1, 2.2, 3.3]', '[]', {wide}), "
                    "(2, '[-0,1e-7,3e38]', '[5]', NULL)")
        cur.execute("SELECT id, v, w, d FROM my.emb ORDER BY id")
        assert cur.fetchall() == ((1, "[1.1,2.2,3.3]", "[]", Decimal(wide)),
                                  (2, "[-0,0.0000001,300000000000000000000000000000000000000]", "[5]", None))
        assert [d[1] for d in cur.description] == [3, 251, 251, 246]  # TypeLongBlob for a vector, as TiDB sends it
        for bad, code, message in (
                ("INSERT INTO my.emb (id, v) VALUES (3, '[1,2]')", 1105,
                 "vector has 2 dimensions, does not fit VECTOR(3)"),
                ("INSERT INTO my.emb (id, v) VALUES (3, '[1,2,NaN]')", 1105, "Invalid vector text"),
                ("INSERT INTO my.emb (id, w) VALUES (3, 'null')", 1105, "Invalid vector text: null"),
                ("INSERT INTO my.emb (id, dt) VALUES (3, '0000-00-00')", 1292, "Incorrect date value: '0000-00-00'"),
                ("INSERT INTO my.emb (id, dtm) VALUES (3, '2021-00-01 00:00:00')", 1292, "Incorrect datetime value"),
                ("INSERT INTO my.emb (id, ts) VALUES (3, '0000-00-00 00:00:00')", 1292, "Incorrect timestamp value")):
            got = _codes(lambda bad=bad: cur.execute(bad))
            assert got[0] == code and message in got[1], (bad, got)
        cur.execute("SET sql_mode = ''")  # this session only, as TiDB's SET without GLOBAL
        cur.execute("INSERT INTO my.emb (id, dt, dtm, ts) VALUES (4, '0000-00-00', '0000-00-00 00:00:00', "
                    "'0000-00-00 00:00:00'), (5, '2021-00-15', '2021-05-00 10:11:12.5', '2021-02-30 00:00:00'), "
                    "(6, '2021-02-30', '2024-02-29 01:02:03', '2024-02-29 01:02:03')")
        cur.execute("UPDATE my.emb SET dt = '0000-00-00' WHERE id = 1")
    conn.close()
    raw = _connect(ec, conv={})  # the text the server sent
    with raw.cursor() as cur:
        cur.execute("SELECT id, dt, dtm, ts FROM my.emb WHERE id IN (1, 4, 5, 6) ORDER BY id")
        assert cur.fetchall() == (
            ("1", "0000-00-00", None, None),
            ("4", "0000-00-00", "0000-00-00 00:00:00.000", "0000-00-00 00:00:00"),
            ("5", "2021-00-15", "2021-05-00 10:11:12.500", "0000-00-00 00:00:00"),  # no TIMESTAMP of Feb 30
            ("6", "0000-00-00", "2024-02-29 01:02:03.000", "2024-02-29 01:02:03"))  # Feb 30: zero, no invalid dates
        cur.execute("SELECT id FROM my.emb WHERE dt = '0000-00-00' ORDER BY id")
        assert cur.fetchall() == (("1",), ("4",), ("6",))
    raw.close()
    conn = _connect(ec)
    with conn.cursor() as cur:  # a new session takes the global sql_mode again: TiDB's strict default
        assert _codes(lambda: cur.execute("INSERT INTO my.emb (id, dt) VALUES (7, '0000-00-00')"))[0] == 1292
    conn.close()


def test_the_binary_protocol_sends_vectors_and_zero_dates_as_tidbs_dump_does() -> None:
    from cdc_core.codec.rowcodec import ZERO_TIME, MySQLTime
    from cdc_core.codec.vector import VectorFloat32
    from cdc_core.schema.model import Column
    from cdc_core.upstream.sql import mysql_front

    date = mysql_front._result_column("d", Column(1, "d", "date"))
    dtm = mysql_front._result_column("t", Column(2, "t", "datetime", fsp=3))
    # dump.BinaryDateTime: length 0 for the zero value, 4 for a DATE, 11 for a DATETIME
    assert date.binary_encode(ZERO_TIME) == b"\x00" and dtm.binary_encode(ZERO_TIME) == b"\x00"
    assert date.binary_encode(MySQLTime(2021, 0, 5)) == bytes([4, 0xE5, 0x07, 0, 5])
    assert dtm.binary_encode(dt.datetime(2024, 2, 29, 1, 2, 3, 4)) == bytes([11, 0xE8, 7, 2, 29, 1, 2, 3, 4, 0, 0, 0])
    vec = mysql_front._result_column("v", Column(3, "v", "vector"))
    assert vec.binary_encode(VectorFloat32.of([1.5])) == b"\x05[1.5]"
    assert vec.text_encode(VectorFloat32.of([1.5, 2])) == b"[1.5,2]"
