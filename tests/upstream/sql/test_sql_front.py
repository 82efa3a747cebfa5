"""The SQL front over the MySQL protocol (cdcflow's client and a stock driver): statements, both table kinds,
constraints, transactions."""

from __future__ import annotations

import re
from typing import Any

import pymysql
import pytest

from cdc_core.codec import key as keycodec
from cdc_core.codec.row import decode_row
from cdc_core.codec.sql_literal import string_literal
from cdc_core.errors import UpstreamError
from cdc_core.schema import ddl_history
from cdc_core.upstream.sql.errors import ErrorKind, SqlError
from cdc_core.upstream.sql.sql_front import split_script


def engine_error(cluster: Any, sql: str) -> SqlError:
    with pytest.raises(SqlError) as ei:
        cluster.run(cluster.cluster.sql.execute(sql))
    return ei.value


def mysql_code(cluster: Any, sql: str) -> tuple[int, str]:
    """The MySQL error code and message a stock driver gets for ``sql``."""
    host, _, port = cluster.mysql_addr.rpartition(":")
    conn = pymysql.connect(host=host, port=int(port), user="root")
    try:
        with pytest.raises(pymysql.err.MySQLError) as ei:
            conn.cursor().execute(sql)
    finally:
        conn.close()
    return ei.value.args[0], ei.value.args[1]


def test_split_script_handles_literals_comments_and_clustered_hints() -> None:
    stmts = split_script("SELECT 'a;b'; -- c;\n CREATE TABLE t (a INT PRIMARY KEY NONCLUSTERED);;"
                         "CREATE TABLE u (a INT, PRIMARY KEY (a) /*T![clustered_index] CLUSTERED */)")
    assert [s.clustered for s in stmts] == [None, False, True]
    assert stmts[0].text == "SELECT 'a;b'"


def test_a_script_s_statements_parse_from_its_tokens_as_each_text_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """split_script parses each statement from the script's tokens (one tokenization): the same trees as
    sqlglot.parse_one of each statement's text, literals with ``;`` and multi-line text included; a statement with
    comments around it is parsed from its text."""
    import sqlglot

    parse_one, texts = sqlglot.parse_one, []
    monkeypatch.setattr(sqlglot, "parse_one", lambda text, **kw: (texts.append(text), parse_one(text, **kw))[1])

    script = ("SELECT *, `_tidb_rowid` FROM `d`.`t` WHERE (`a`, `b`) IN ((1, 'x;y'), (2, X'00ff'));\n"
              "/* a comment */ UPDATE d.t SET k = k + 1, s = CONCAT(s, ';') WHERE id IN (1, 2, 3) -- trailing\n;"
              "INSERT INTO d.t (id, v) VALUES (1, 'it''s'), (2, NULL) ON DUPLICATE KEY UPDATE v = VALUES(v);"
              "SELECT @@tidb_current_ts; SET tidb_snapshot = '2024-01-01 00:00:00'; DELETE FROM d.t WHERE id = -1;"
              "SELECT COUNT(*) AS n, BIT_XOR(CAST(CRC32(CONCAT_WS(',', a, b)) AS UNSIGNED)) FROM d.t\n  WHERE a >= 10")
    stmts = split_script(script)
    assert len(stmts) == 7 and [t.split()[0] for t in texts] == ["UPDATE"]
    monkeypatch.setattr(sqlglot, "parse_one", parse_one)
    for st in stmts:
        assert st.node == sqlglot.parse_one(st.text, read="mysql"), st.text
        assert st.node.sql(dialect="mysql") == sqlglot.parse_one(st.text, read="mysql").sql(dialect="mysql")


def test_a_long_run_of_integer_keys_is_held_out_of_the_tokenizer_and_parses_as_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``IN (`` and a long run of integers (the window checks' point reads) is cut out before tokenizing and put
    back as the nodes sqlglot parses it to: every statement equals the one parsed as written (negative keys, NOT IN,
    several runs, a run in UPDATE/DELETE). A run inside a string, a comment or a quoted name is no IN list: the
    script is then parsed as written."""
    from cdc_core.upstream.sql import sql_front

    keys = ", ".join(str(k) for k in [7, -12, 0, 10**15, -(2**63), 2**64 - 1, *range(100, 140)])
    scripts = [f"SELECT *, `_tidb_rowid` FROM `d`.`t` WHERE `id` IN ({keys})",
               f"select a from t where id not in ( {keys} ) and b = 1; DELETE FROM t WHERE x IN ({keys})",
               f"SELECT * FROM t WHERE a IN ({keys}) OR b in({keys}) OR c IN (1, 2)",
               f"UPDATE t SET k = k + 1 WHERE id IN ({keys}); SELECT 1",
               f"SELECT 'x IN ({keys})'", f"SELECT 1 /* IN ({keys}) */", f"SELECT `IN ({keys})` FROM t",
               f"SELECT * FROM t WHERE __cdcflow_int_run_0__ = 1 AND id IN ({keys})"]
    held = []
    put_back = sql_front._put_back
    monkeypatch.setattr(sql_front, "_put_back", lambda node, runs, put: (held.append(len(runs)),
                                                                         put_back(node, runs, put))[1])
    for script in scripts:  # the same texts, trees and flags
        assert split_script(script) == sql_front._split_script(script, {}), script[:60]
    assert split_script(scripts[0])[0].text == scripts[0]
    assert len(held) >= 5, "the IN lists were parsed as written"
    bad = f"SELECT * FROM t WHERE id IN ({keys}) AND"  # an error names the statement as written
    with pytest.raises(SqlError) as held_error:
        split_script(bad)
    with pytest.raises(SqlError) as as_written:
        sql_front._split_script(bad, {})
    assert str(held_error.value) == str(as_written.value) and "__cdcflow" not in str(held_error.value)


# Statements mysql-mimic's variable processor leaves as they are, and statements it changes (or might: a call).
_PLAIN = [
    "SELECT *, `_tidb_rowid` FROM `d`.`t` WHERE `id` IN (1, -2, 3)",
    "SELECT * FROM `d`.`t` WHERE (`a`, `b`) IN ((1, 'now()'), (2, X'00ff')) AND v > (1 + 2)",
    "INSERT INTO sbtest1 (id, k, c, pad) VALUES (1, 2, 'x', 'y'), (-3, 4, 'CURRENT_DATE', NULL)",
    "INSERT INTO `d`.`t` (`id`, `v`) VALUES (1, 'a')",
    "INSERT INTO d.t VALUES (1, 'a')",
    "UPDATE sbtest1 SET k = k + 1 WHERE id IN (5, 6) AND NOT (k = 3)",
    "DELETE FROM d.t WHERE id = -1",
    "SET autocommit = 1",
    "BEGIN",
]
_NOT_PLAIN = [
    "SELECT @@tidb_current_ts", "SELECT @x", "SET @@tidb_snapshot = @@tidb_current_ts",
    "SELECT /*+ SET_VAR(sql_mode='') */ * FROM t", "SELECT NOW()", "SELECT CURRENT_DATE", "SELECT database()",
    "SELECT CURRENT_USER", "SELECT * FROM t WHERE d < CURDATE()", "INSERT INTO t (a) VALUES (VERSION())",
    "SELECT COUNT(*) FROM t", "SELECT LOCALTIME", "SELECT `CURRENT_TIMESTAMP` FROM t",
]


def test_a_plain_statement_holds_nothing_mysql_mimics_variable_processor_replaces() -> None:
    """``ParsedStatement.plain`` lets the MySQL front skip mysql-mimic's variable processor: differential against
    the processor itself, which must leave every plain statement's tree as it is (and calls, variables and hints are
    never plain; most of them it changes)."""
    from datetime import datetime
    from types import SimpleNamespace

    from mysql_mimic.session import mysql_function_mapping
    from mysql_mimic.variable_processor import VariableProcessor

    session = SimpleNamespace(timestamp=datetime(2026, 1, 2, 3, 4, 5), connection=SimpleNamespace(connection_id=7),
                              variables={"version": "8.0.11-TiDB", "external_user": "root",
                                         "tidb_current_ts": 42}, username="root", database="d")

    def processed(node: Any) -> Any:
        copy = node.copy()
        variables = dict(session.variables)
        with VariableProcessor(mysql_function_mapping(session), variables, copy).set_variables():  # type: ignore[arg-type]
            return copy

    for sql in _PLAIN:
        (st,) = split_script(sql)
        assert st.plain, sql
        assert processed(st.node) == st.node, sql
    changed = 0
    for sql in _NOT_PLAIN:
        (st,) = split_script(sql)
        assert not st.plain, sql
        changed += processed(st.node) != st.node
    assert changed >= len(_NOT_PLAIN) - 3  # COUNT(*), a quoted name and a user variable it leaves as they are
    (commented,) = split_script("/* c */ SELECT * FROM t WHERE id = 1")
    assert not commented.plain  # parsed from its text: not looked at (plain is a fast path, never required)


def test_create_insert_select_clustered(upstream_client: Any, fresh_db: str) -> None:
    res = upstream_client.execute(
        f"USE {fresh_db}; CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT 'anon', "
        "price DECIMAL(8,2), at DATETIME, note TEXT);"
        "INSERT INTO t VALUES (2, 'b', 1.5, '2024-01-02 03:04:05', NULL), (1, 'a', NULL, NULL, 'x');"
        "INSERT INTO t (id) VALUES (3);"
        "SELECT * FROM t ORDER BY id")
    assert res[1].commit_ts > 0 and res[2].affected_rows == 2 and res[3].affected_rows == 1
    assert res[2].commit_ts < res[3].commit_ts
    assert res[-1].columns == ["id", "name", "price", "at", "note"]
    assert res[-1].rows == [
        {"id": 1, "name": "a", "price": None, "at": None, "note": "x"},
        {"id": 2, "name": "b", "price": "1.50", "at": "2024-01-02 03:04:05", "note": None},
        {"id": 3, "name": "anon", "price": None, "at": None, "note": None},
    ]
    q = upstream_client.query
    assert q(f"SELECT name AS n FROM {fresh_db}.t WHERE price IS NULL AND NOT id = 3") == [{"n": "a"}]
    assert q(f"SELECT id FROM {fresh_db}.t WHERE id IN (1, 3) OR name = 'b' ORDER BY id DESC") == [
        {"id": 3}, {"id": 2}, {"id": 1}]
    assert q(f"SELECT id FROM {fresh_db}.t WHERE id BETWEEN 2 AND 3 AND at > '2024-01-01' ") == [{"id": 2}]
    assert q(f"SELECT COUNT(*) AS n, MAX(id) AS m FROM {fresh_db}.t WHERE note IS NOT NULL OR id > 1") == [
        {"n": 3, "m": 3}]
    assert q(f"SELECT id FROM {fresh_db}.t ORDER BY id LIMIT 1 OFFSET 1") == [{"id": 2}]
    [row] = upstream_client.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 1")
    [job] = ddl_history.jobs_from_sql([row], 0)  # TiDB's model.Job JSON, as a LONGBLOB
    assert job.table_info is not None and job.table_info.pk_is_handle


def test_update_and_delete(upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY, b INT, c VARCHAR(5));"
                            "INSERT INTO t VALUES (1, 10, 'x'), (2, 20, 'y'), (3, 30, NULL)")
    res = upstream_client.execute(f"UPDATE {fresh_db}.t SET b = b + 1, c = 'z' WHERE a >= 2")
    assert res[0].affected_rows == 2 and res[0].commit_ts > 0
    res = upstream_client.execute(f"UPDATE {fresh_db}.t SET b = 21 WHERE a = 2")  # unchanged row
    assert res[0].affected_rows == 0
    res = upstream_client.execute(f"DELETE FROM {fresh_db}.t WHERE c IS NULL OR a = 1")
    assert res[0].affected_rows == 1
    assert upstream_client.query(f"SELECT * FROM {fresh_db}.t ORDER BY a") == [
        {"a": 2, "b": 21, "c": "z"}, {"a": 3, "b": 31, "c": "z"}]
    assert upstream_client.execute(f"DELETE FROM {fresh_db}.t")[0].affected_rows == 2
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 0}]


def test_non_clustered_table_uses_hidden_rowid(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(
        f"USE {fresh_db}; CREATE TABLE n (a INT, b VARCHAR(10), PRIMARY KEY (a) NONCLUSTERED, UNIQUE KEY ub (b));"
        "CREATE TABLE c (x VARCHAR(10) PRIMARY KEY, y INT);"
        "CREATE TABLE k (p INT, q INT, PRIMARY KEY (p, q));"
        "INSERT INTO n VALUES (5, 'five'), (6, 'six')")
    infos = {t.name: t for t in upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.tables(fresh_db))}
    assert not infos["n"].pk_is_handle and not infos["c"].pk_is_handle and not infos["k"].pk_is_handle
    rows = upstream_client.query(f"SELECT _tidb_rowid, a, b FROM {fresh_db}.n ORDER BY a")
    assert rows == [{"_tidb_rowid": 1, "a": 5, "b": "five"}, {"_tidb_rowid": 2, "a": 6, "b": "six"}]
    # the row's key is the rowid handle, its value is encoded by column id
    store = upstream_cluster.cluster.store
    ts = upstream_client.get_ts()
    value = upstream_cluster.call(lambda: store.get(keycodec.row_key(infos["n"].id, 1), ts))
    assert decode_row(infos["n"], value) == {1: 5, 2: "five"}
    assert value[0] == 128  # rowcodec v2
    assert "_tidb_rowid" not in upstream_client.query(f"SELECT * FROM {fresh_db}.n")[0]


def test_vectors_and_zero_dates_are_stored_as_tidb_stores_them(upstream_cluster: Any, upstream_client: Any,
                                                              fresh_db: str) -> None:
    """A VECTOR's value is VectorFloat32.SerializeTo's bytes, a zero date the packed zero (a one-byte 0), a zero
    month kept as written (sql_mode '' in the session of cdcflow's client, set back after); the rows read
    back over SQL as TiDB prints them, in the JSON form of cdcflow's client."""
    from cdc_core.codec import rowcodec
    from cdc_core.codec.vector import VectorFloat32

    upstream_client.execute(
        f"CREATE TABLE {fresh_db}.z (id INT PRIMARY KEY, v VECTOR(2), d DATE, t DATETIME);"
        f"SET sql_mode = ''; INSERT INTO {fresh_db}.z VALUES (1, '[1.1,2.2]', '0000-00-00', '2021-00-05 10:00:00')")
    (info,) = [t for t in upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.tables(fresh_db))]
    ts = upstream_client.get_ts()
    value = upstream_cluster.call(lambda: upstream_cluster.cluster.store.get(keycodec.row_key(info.id, 1), ts))
    row = rowcodec.parse_row_v2(value)
    assert row.value(2) == bytes([2, 0, 0, 0, 0xCD, 0xCC, 0x8C, 0x3F, 0xCD, 0xCC, 0x0C, 0x40])  # TestVectorEndianess
    assert row.value(3) == b"\x00"  # Time.ToPackedUint of the zero date, a compact uint
    assert rowcodec.unpack_time(int.from_bytes(row.value(4), "little")) == (2021, 0, 5, 10, 0, 0, 0)
    assert decode_row(info, value) == {1: 1, 2: VectorFloat32.of([1.1, 2.2]), 3: rowcodec.ZERO_TIME,
                                       4: rowcodec.MySQLTime(2021, 0, 5, 10)}
    assert upstream_client.query(f"SELECT v, d, t FROM {fresh_db}.z") == [
        {"v": "[1.1,2.2]", "d": "0000-00-00", "t": "2021-00-05 10:00:00"}]
    upstream_client.execute("SET sql_mode = DEFAULT")  # the client's session again takes the global: strict
    with pytest.raises(UpstreamError, match=r"Incorrect date value.*MySQL error 1292"):
        upstream_client.execute(f"INSERT INTO {fresh_db}.z (id, d) VALUES (2, '0000-00-00')")


def test_constraint_errors(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(
        f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY, b INT NOT NULL, u VARCHAR(4), UNIQUE (u));"
        "CREATE TABLE n (a INT PRIMARY KEY NONCLUSTERED, b INT);"
        "INSERT INTO t VALUES (1, 1, 'x'); INSERT INTO n VALUES (1, 1)")
    cases = {
        f"INSERT INTO {fresh_db}.t VALUES (1, 2, 'y')": "Duplicate entry '1' for key 't.PRIMARY'",
        f"INSERT INTO {fresh_db}.t VALUES (2, 2, 'x')": "Duplicate entry 'x' for key 't.u'",
        f"INSERT INTO {fresh_db}.n VALUES (1, 5)": "Duplicate entry '1' for key 'n.PRIMARY'",
        f"INSERT INTO {fresh_db}.t VALUES (3, NULL, 'z')": "Column 'b' cannot be null",
        f"INSERT INTO {fresh_db}.t (a) VALUES (3)": "Field 'b' doesn't have a default value",
        f"UPDATE {fresh_db}.t SET b = NULL": "Column 'b' cannot be null",
        f"INSERT INTO {fresh_db}.t VALUES (1, 1, 'x'), (1, 1, 'x')": "Duplicate entry",
    }
    for sql, msg in cases.items():
        err = engine_error(upstream_cluster, sql)
        assert err.kind is ErrorKind.CONSTRAINT, sql
        assert msg in err.message, (sql, err.message)
    # a failing multi-row statement wrote nothing
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 1}]
    # NULLs never collide in a unique index
    upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES (5, 1, NULL), (6, 1, NULL)")
    code, details = mysql_code(upstream_cluster, f"INSERT INTO {fresh_db}.t VALUES (1, 1, 'q')")
    assert code == 1062 and "Duplicate entry '1'" in details  # ER_DUP_ENTRY


def test_bad_sql_and_bad_values(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"CREATE TABLE {fresh_db}.t (a INT PRIMARY KEY, v VARCHAR(3), d DATETIME)")
    invalid = {
        "SELEC 1": "syntax error",
        f"INSERT INTO {fresh_db}.t VALUES ('abc', 'x', NULL)": "is not an integer",
        f"INSERT INTO {fresh_db}.t VALUES (1, 'toolong', NULL)": "too long",
        f"INSERT INTO {fresh_db}.t VALUES (1, 'x', 'not a date')": "not a date/time",
        f"INSERT INTO {fresh_db}.t VALUES (99999999999, 'x', NULL)": "out of range",
        f"INSERT INTO {fresh_db}.t VALUES (1)": "Column count doesn't match",
        f"CREATE TABLE {fresh_db}.x (a GEOMETRY)": "unsupported type",
        "SHOW TABLES": "unsupported statement",
        f"ALTER TABLE {fresh_db}.t ALTER COLUMN v SET DEFAULT 'y'": "unsupported ALTER TABLE change",
        f"ALTER TABLE {fresh_db}.t ADD COLUMN z INT, DROP COLUMN z": "Unsupported operate same column 'z'",
        f"SELECT a, COUNT(*) FROM {fresh_db}.t": "GROUP BY",
        f"SELECT * FROM {fresh_db}.t GROUP BY v": "not in GROUP BY clause",  # ONLY_FULL_GROUP_BY (1055)
        f"UPDATE {fresh_db}.t SET a = 1 LIMIT 1": "LIMIT",
        f"INSERT INTO {fresh_db}.t VALUES (1, 'x', NULL) ON DUPLICATE KEY UPDATE a = 2": "ON DUPLICATE KEY",
        f"SELECT nope FROM {fresh_db}.t WHERE a = 1": "Unknown column 'nope' in 'field list'",
        "SELECT * FROM t": "No database selected",
        "INSERT INTO mysql.tidb_ddl_history (job_id, db_name) VALUES (1, 'x')": "system table",
    }
    for sql, msg in invalid.items():
        err = engine_error(upstream_cluster, sql)
        assert err.kind is ErrorKind.INVALID, (sql, err.kind, err.message)
        assert msg in err.message, (sql, err.message)
        assert "statement 1" in err.message
    assert engine_error(upstream_cluster, f"SELECT * FROM {fresh_db}.missing").kind is ErrorKind.NOT_FOUND
    assert engine_error(upstream_cluster, f"CREATE DATABASE {fresh_db}").kind is ErrorKind.EXISTS
    code, details = mysql_code(upstream_cluster, "CREATE VIEW v AS SELECT 1")
    assert code == 1235 and "unsupported statement" in details  # ER_NOT_SUPPORTED_YET
    with pytest.raises(UpstreamError, match="unsupported statement"):
        upstream_client.execute("GRANT ALL ON *.* TO u")


def test_script_stops_at_first_error_and_reports_the_statement(upstream_client: Any, fresh_db: str) -> None:
    script = (f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY); INSERT INTO t VALUES (1);"
              " INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)")
    with pytest.raises(UpstreamError, match=r"statement 4 `INSERT INTO t VALUES \(1\)`: Duplicate entry"):
        upstream_client.execute(script)
    # statements before the failure committed; the ones after never ran
    assert upstream_client.query(f"SELECT a FROM {fresh_db}.t") == [{"a": 1}]


def test_aggregates_fold_over_the_scan_without_holding_rows(upstream_client: Any, fresh_db: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import zlib

    from cdc_core.upstream.sql.sql_front import Session

    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(10));"
                            "INSERT INTO t VALUES (1, 5, 'a'), (2, NULL, 'b'), (3, -7, NULL), (4, 9, 'd')")

    def no_list(*args: Any) -> Any:
        raise AssertionError("an aggregate-only SELECT must not collect the rows")

    monkeypatch.setattr(Session, "_matching", staticmethod(no_list))
    (row,) = upstream_client.query(
        f"SELECT COUNT(*) AS n, COUNT(v) AS nv, SUM(v) AS sv, MIN(v) AS lo, MAX(s) AS hi, "
        f"BIT_XOR(CRC32(CONCAT_WS(',', id, v, s))) AS x FROM {fresh_db}.t WHERE id >= 2")
    crc = [zlib.crc32(t.encode()) for t in ("2,b", "3,-7", "4,9,d")]
    assert row == {"n": 3, "nv": 2, "sv": 2, "lo": -7, "hi": "d", "x": crc[0] ^ crc[1] ^ crc[2]}
    (empty,) = upstream_client.query(f"SELECT COUNT(*) AS n, BIT_XOR(v) AS x, MAX(v) AS m FROM {fresh_db}.t "
                                     "WHERE id > 100")
    assert empty == {"n": 0, "x": 0, "m": None}  # MySQL: BIT_XOR of no rows is 0, MAX is NULL


def test_a_streamed_select_shorter_than_a_batch_is_whole_and_a_longer_one_streams_the_rest(
        upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    """A point read's result (fewer rows than ``STREAM_BATCH_ROWS``) comes whole, without ``more``: the MySQL front
    then sends it as a list (mysql-mimic's fast path). A result of a batch or more keeps ``more``, which yields the
    rest (nothing, for a result of exactly one batch)."""
    from cdc_core.upstream.sql.sql_front import STREAM_BATCH_ROWS

    n = STREAM_BATCH_ROWS + 10
    upstream_client.execute(f"CREATE TABLE {fresh_db}.t (id INT PRIMARY KEY, v DECIMAL(6,2))")
    upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES " + ", ".join(f"({i}, {i}.25)" for i in range(n)))
    session = upstream_cluster.cluster.sql.session()
    session.stream_rows = True

    def select(where: str) -> Any:
        (res,) = upstream_cluster.run(session.execute(f"SELECT * FROM {fresh_db}.t WHERE {where}"))
        return res

    short = select(f"id IN ({', '.join(str(i) for i in range(0, n, 2))})")
    assert short.more is None and len(short.rows) == (n + 1) // 2 < STREAM_BATCH_ROWS
    exact = select(f"id < {STREAM_BATCH_ROWS}")
    assert exact.more is not None and len(exact.rows) == STREAM_BATCH_ROWS and list(exact.more) == []
    longer = select("id >= 0")
    assert longer.more is not None and [r["id"] for b in longer.more for r in b] == list(range(STREAM_BATCH_ROWS, n))


def test_names_of_any_characters_are_created_renamed_and_dropped(upstream_cluster: Any, upstream_client: Any) -> None:
    """Quoted names hold dots, doubled backticks, quotes, backslashes, spaces and any text; RENAME TABLE reads them
    as TiDB's parser does (a dot inside backticks is part of the name)."""
    db, t, moved = "we`ird.db/ x'\"\\é", "t`a.b/c d'\\ü中", "r`en, TO.x"

    def q(n: str) -> str:
        return "`" + n.replace("`", "``") + "`"

    upstream_client.execute(f"CREATE DATABASE {q(db)}; CREATE TABLE {q(db)}.{q(t)} ({q('k`ey')} INT PRIMARY KEY)")
    upstream_client.execute(f"INSERT INTO {q(db)}.{q(t)} VALUES (1); USE {q(db)}; RENAME TABLE {q(t)} TO {q(moved)}")
    assert upstream_client.query(f"SELECT * FROM {q(db)}.{q(moved)}") == [{"k`ey": 1}]
    upstream_client.execute(f"RENAME TABLE {q(db)}.{q(moved)} TO {q(db)}.{q(t)}, {q(db)}.{q(t)} TO {q(db)}.x")
    listed = upstream_client.query(
        f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
        f"{string_literal(db, no_backslash_escapes=False)}")
    assert [r["TABLE_NAME"] for r in listed] == ["x"]  # a swap in one statement: t moved back, then on to x
    for bad in (f"RENAME TABLE {q(db)}.x", f"RENAME TABLE {q(db)}.x TO", f"RENAME TABLE {q(db)}.x. TO y"):
        assert re.search(r"bad (RENAME TABLE clause|table name)", str(engine_error(upstream_cluster, bad))), bad
    upstream_client.execute(f"DROP TABLE {q(db)}.x; DROP DATABASE {q(db)}")
