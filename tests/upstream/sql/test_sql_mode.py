"""The embedded upstream's sql_mode (cdc_core.upstream.sql.sql_mode), as TiDB keeps it: TiDB's default, its names and
combination modes validated and normalized as pkg/parser/mysql's FormatSQLModeStr / GetSQLMode do, a global value
that new sessions take and a session one; through the MySQL protocol: @@sql_mode of both scopes, error 1231, the
status flag SERVER_STATUS_NO_BACKSLASH_ESCAPES, and string literals tokenized as the mode says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
import sqlglot
from pymysql.constants import SERVER_STATUS

from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.sql import sql_mode
from cdc_core.upstream.sql.sql_mode import DEFAULT_SQL_MODE, SqlModeError, assignments, evaluate, modes, normalize

NBE = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES


def test_tidbs_default_and_names_normalized_as_tidb_does() -> None:
    assert DEFAULT_SQL_MODE == ("ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                                "ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION")
    assert normalize("") == "" and normalize(",,") == ""
    assert normalize("no_backslash_escapes,strict_trans_tables  ") == "NO_BACKSLASH_ESCAPES,STRICT_TRANS_TABLES"
    assert normalize("ANSI_QUOTES,ANSI_QUOTES") == "ANSI_QUOTES"
    # a combination mode: its modes, then itself (FormatSQLModeStr)
    assert normalize("ansi") == "REAL_AS_FLOAT,PIPES_AS_CONCAT,ANSI_QUOTES,IGNORE_SPACE,ONLY_FULL_GROUP_BY,ANSI"
    assert normalize("TRADITIONAL,ALLOW_INVALID_DATES") == (
        "STRICT_TRANS_TABLES,STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
        "NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION,TRADITIONAL,ALLOW_INVALID_DATES")
    assert modes(normalize("ansi")) >= {"ANSI", "ANSI_QUOTES"} and modes("") == frozenset()
    assert {"NO_BACKSLASH_ESCAPES", "ALLOW_INVALID_DATES", "NO_ZERO_DATE", "STRICT_ALL_TABLES"} <= sql_mode.MODES


def test_an_unknown_name_is_error_1231_naming_it() -> None:
    with pytest.raises(SqlModeError, match="can't be set to the value of 'NO_SUCH_MODE'"):
        normalize("ANSI,no_such_mode")
    with pytest.raises(SqlModeError, match="of ' STRICT_TRANS_TABLES'"):  # TiDB trims the end only
        normalize("ANSI_QUOTES, STRICT_TRANS_TABLES")
    assert SqlModeError.CODE == 1231


def _set(sql: str) -> Any:
    node = sqlglot.parse_one(sql, read="mysql")
    assert isinstance(node, sqlglot.exp.Set)
    return node


def test_set_statements_name_their_scope_and_values() -> None:
    ours, others = assignments(_set("SET @@global.sql_mode = 'a', time_zone = '+00:00', LOCAL sql_mode = DEFAULT"))
    assert [scope for scope, _ in ours] == ["GLOBAL", "SESSION"] and len(others) == 1
    (_, value), = assignments(_set("SET sql_mode = CONCAT(@@sql_mode, ',', @@GLOBAL.sql_mode)"))[0]
    assert evaluate(value, scope="SESSION", session="S", global_value="G") == "S,G"
    (_, default), = assignments(_set("SET SESSION sql_mode = DEFAULT"))[0]
    assert evaluate(default, scope="SESSION", session="S", global_value="G") == "G"
    assert evaluate(default, scope="GLOBAL", session="S", global_value="G") == DEFAULT_SQL_MODE
    (_, null), = assignments(_set("SET sql_mode = NULL"))[0]
    with pytest.raises(SqlModeError, match="'NULL'"):
        evaluate(null, scope="SESSION", session="", global_value="")
    assert assignments(_set("SET time_zone = '+00:00'")) == ([], [_set("SET time_zone = '+00:00'").expressions[0]])


def _connect(ec: EmbeddedCluster) -> pymysql.connections.Connection[Any]:
    host, _, port = ec.mysql_addr.rpartition(":")
    return pymysql.connect(host=host, port=int(port), user="root", autocommit=True)


def _one(conn: pymysql.connections.Connection[Any], sql: str, args: Any = None) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
    return row[0] if row is not None and len(row) == 1 else row


@pytest.fixture
def ec(upstream_cluster: EmbeddedCluster) -> Iterator[EmbeddedCluster]:
    """The session's upstream, its global sql_mode put back after the test (other tests share it)."""
    conn = _connect(upstream_cluster)
    before = _one(conn, "SELECT @@global.sql_mode")
    try:
        yield upstream_cluster
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = %s", (before,))
        conn.close()


def test_sessions_start_with_the_global_value_and_keep_their_own(ec: EmbeddedCluster) -> None:
    a = _connect(ec)
    assert _one(a, "SELECT @@sql_mode") == _one(a, "SELECT @@global.sql_mode") == DEFAULT_SQL_MODE
    _one(a, "SET sql_mode = 'ansi_quotes'")
    assert _one(a, "SELECT @@sql_mode, @@session.sql_mode, @@global.sql_mode") == (
        "ANSI_QUOTES", "ANSI_QUOTES", DEFAULT_SQL_MODE)
    _one(a, "SET GLOBAL sql_mode = 'STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES'")
    assert _one(a, "SELECT @@sql_mode") == "ANSI_QUOTES"  # SET GLOBAL leaves the session's own value
    b = _connect(ec)
    assert _one(b, "SELECT @@sql_mode") == "STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES"
    with b.cursor() as cur:
        cur.execute("SHOW VARIABLES LIKE 'sql_mode'")
        assert cur.fetchall() == (("sql_mode", "STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES"),)
    _one(b, "SET @@global.sql_mode = DEFAULT")
    assert _one(_connect(ec), "SELECT @@sql_mode") == DEFAULT_SQL_MODE
    _one(b, "SET sql_mode = DEFAULT, time_zone = '+01:00'")  # the global value; the other item as before
    assert _one(b, "SELECT @@sql_mode, @@time_zone") == (DEFAULT_SQL_MODE, "+01:00")
    for conn in (a, b):
        conn.close()


def test_a_bad_value_is_refused_with_1231_and_changes_nothing(ec: EmbeddedCluster) -> None:
    conn = _connect(ec)
    for value in ("NO_SUCH_MODE", "ANSI, NO_BACKSLASH_ESCAPES"):
        with pytest.raises(pymysql.MySQLError) as err:
            _one(conn, "SET sql_mode = %s", (value,))
        assert err.value.args[0] == 1231 and "can't be set to the value of" in err.value.args[1]
    with pytest.raises(pymysql.MySQLError) as err:
        _one(conn, "SET GLOBAL sql_mode = NULL")
    assert err.value.args[0] == 1231
    assert _one(conn, "SELECT @@sql_mode, @@global.sql_mode") == (DEFAULT_SQL_MODE, DEFAULT_SQL_MODE)
    conn.close()


def test_no_backslash_escapes_makes_a_backslash_ordinary_and_the_status_flag_says_so(ec: EmbeddedCluster) -> None:
    conn = _connect(ec)
    assert _one(conn, "SELECT 'a\\nb'") == "a\nb" and not conn.server_status & NBE
    _one(conn, "SET sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
    assert conn.server_status & NBE  # the SET's own OK packet carries it, as TiDB's does
    assert _one(conn, "SELECT 'a\\nb'") == "a\\nb"
    assert _one(conn, "SELECT 'a\\', 'b'") == ("a\\", "b")
    # PyMySQL escapes its parameters by the flag: a value with a backslash and a quote comes back as it is
    assert _one(conn, "SELECT %s", ("x\\'y\\",)) == "x\\'y\\"
    _one(conn, "SET sql_mode = ''")
    assert not conn.server_status & NBE and _one(conn, "SELECT %s", ("x\\'y\\",)) == "x\\'y\\"
    # a session started under a global NO_BACKSLASH_ESCAPES has the flag before its first query
    _one(conn, "SET GLOBAL sql_mode = 'NO_BACKSLASH_ESCAPES'")
    other = _connect(ec)
    assert other.server_status & NBE and _one(other, "SELECT 'c:\\dir'") == "c:\\dir"
    for c in (conn, other):
        c.close()


def test_the_engine_session_exposes_its_modes(ec: EmbeddedCluster) -> None:
    session = ec.cluster.sql.session()
    assert session.sql_mode == modes(DEFAULT_SQL_MODE) and not session.no_backslash_escapes
    (value,) = (v for _, v in assignments(_set("SET sql_mode = 'ALLOW_INVALID_DATES,NO_BACKSLASH_ESCAPES'"))[0])
    session.set_sql_mode("SESSION", value)
    assert session.sql_mode == {"ALLOW_INVALID_DATES", "NO_BACKSLASH_ESCAPES"} and session.no_backslash_escapes
    assert ec.cluster.sql.global_sql_mode == DEFAULT_SQL_MODE
