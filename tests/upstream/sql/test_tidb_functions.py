"""TiDB's functions through a stock driver (PyMySQL): TIDB_CURRENT_TSO, TIDB_VERSION, TIDB_PARSE_TSO(_LOGICAL),
anywhere an expression stands; an unknown function is TiDB's 1305; result columns named as written."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pymysql
import pytest

from cdc_core.codec.tso import compose


def one(conn: Any, sql: str, args: Any = None) -> tuple[Any, ...]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()  # type: ignore[no-any-return]


def names(conn: Any, sql: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(sql)
        cur.fetchall()
        return [d[0] for d in cur.description]


def test_tidb_current_tso_is_a_fresh_ts_outside_a_transaction_and_the_start_ts_inside(conn: Any) -> None:
    a, b = one(conn, "SELECT TIDB_CURRENT_TSO()")[0], one(conn, "SELECT TIDB_CURRENT_TSO()")[0]
    assert 0 < a < b
    physical = a >> 18
    assert abs(physical / 1000 - datetime.now().timestamp()) < 60
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT TIDB_CURRENT_TSO(), @@tidb_current_ts")
        ts, current = cur.fetchone()
        cur.execute("SELECT TIDB_CURRENT_TSO()")
        assert cur.fetchone()[0] == ts == current  # the transaction's start ts, statement after statement
        cur.execute("COMMIT")


def test_tidb_version_is_tidb_s_text(conn: Any) -> None:
    (text,) = one(conn, "SELECT TIDB_VERSION()")
    lines = text.split("\n")
    assert lines[0] == "Release Version: v8.5.0"
    assert [line.split(":")[0] for line in lines] == [
        "Release Version", "Edition", "Git Commit Hash", "Git Branch", "UTC Build Time", "GoVersion",
        "Race Enabled", "Check Table Before Drop", "Store"]
    assert names(conn, "SELECT tidb_version()") == ["tidb_version()"]


def test_tidb_parse_tso_in_the_session_time_zone(conn: Any) -> None:
    ts = compose(1_700_000_000_123, 7)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT TIDB_PARSE_TSO(%s), TIDB_PARSE_TSO_LOGICAL(%s), TIDB_PARSE_TSO(0)", (ts, ts))
        assert cur.fetchone() == (datetime(2023, 11, 14, 22, 13, 20, 123000), 7, None)
        cur.execute("SET time_zone = '+08:00'")
        cur.execute("SELECT TIDB_PARSE_TSO(%s)", (ts,))
        assert cur.fetchone() == (datetime(2023, 11, 15, 6, 13, 20, 123000),)


def test_tidb_functions_work_in_a_table_s_expressions(conn: Any, fresh_db: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {fresh_db}.t (id INT PRIMARY KEY, ts BIGINT)")
        cur.execute(f"INSERT INTO {fresh_db}.t VALUES (1, 0), (2, 0)")
        cur.execute(f"UPDATE {fresh_db}.t SET ts = TIDB_CURRENT_TSO() WHERE id = 2")
        cur.execute(f"SELECT id FROM {fresh_db}.t WHERE ts < TIDB_CURRENT_TSO() AND TIDB_PARSE_TSO(ts) IS NOT NULL")
        assert cur.fetchall() == ((2,),)


def test_an_unknown_function_is_tidb_s_1305(conn: Any, fresh_db: str) -> None:
    with conn.cursor() as cur:
        with pytest.raises(pymysql.err.MySQLError) as ei:
            cur.execute("SELECT NO_SUCH_FN(1)")
        assert ei.value.args[0] == 1046  # no database selected: TiDB's ErrNoDB
        cur.execute(f"USE {fresh_db}")
        with pytest.raises(pymysql.err.MySQLError) as ei:
            cur.execute("SELECT NO_SUCH_FN(1)")
        assert ei.value.args == (1305, f"FUNCTION {fresh_db}.no_such_fn does not exist")


def test_columns_are_named_as_written(conn: Any, fresh_db: str) -> None:
    assert names(conn, "SELECT version(), 1+1, 'abc', 2 AS two, @@version") == [
        "version()", "1+1", "abc", "two", "@@version"]
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {fresh_db}.t (id INT PRIMARY KEY)")
    assert names(conn, f"SELECT count(*), COUNT( id ), MAX(id) + 1 FROM {fresh_db}.t") == [
        "count(*)", "COUNT( id )", "MAX(id) + 1"]
