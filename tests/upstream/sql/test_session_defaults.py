"""TiDB's session defaults as a stock driver reads them (PyMySQL), and ``tidb_mem_quota_query`` in effect."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from cdc_core.upstream.sql.session_defaults import TIDB_SESSION_DEFAULTS


def test_what_clients_read_at_connect_is_tidb_s(conn: Any) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT @@transaction_isolation, @@tx_isolation, @@sql_mode, @@autocommit, "
                    "@@tidb_mem_quota_query, @@lower_case_table_names, @@version, @@time_zone")
        assert cur.fetchone() == (
            "REPEATABLE-READ", "REPEATABLE-READ",
            "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
            "NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION", 1, 1 << 30, 2, "8.0.11-TiDB-v8.5.0-cdcflow", "SYSTEM")
        cur.execute("SHOW VARIABLES LIKE 'transaction_isolation'")
        assert cur.fetchall() == (("transaction_isolation", "REPEATABLE-READ"),)


def test_tx_isolation_is_transaction_isolation_under_another_name(conn: Any) -> None:
    with conn.cursor() as cur:
        cur.execute("SET tx_isolation = 'READ-COMMITTED'")
        cur.execute("SELECT @@transaction_isolation, @@tx_isolation")
        assert cur.fetchone() == ("READ-COMMITTED", "READ-COMMITTED")
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SELECT @@transaction_isolation, @@tx_isolation")
        assert cur.fetchone() == ("REPEATABLE-READ", "REPEATABLE-READ")


def test_the_transaction_mode_variables_have_tidb_defaults(conn: Any) -> None:
    # txn_mode.py owns them (its rules and validation), not this table; a session reads TiDB's defaults
    assert "tidb_txn_mode" not in TIDB_SESSION_DEFAULTS and "innodb_lock_wait_timeout" not in TIDB_SESSION_DEFAULTS
    with conn.cursor() as cur:
        cur.execute("SELECT @@tidb_txn_mode, @@innodb_lock_wait_timeout, @@transaction_isolation")
        assert cur.fetchone() == ("pessimistic", 50, "REPEATABLE-READ")


def test_tidb_mem_quota_query_bounds_a_query(conn: Any, fresh_db: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {fresh_db}.t (id INT PRIMARY KEY, c VARCHAR(20))")
        cur.execute(f"INSERT INTO {fresh_db}.t VALUES " + ", ".join(f"({i}, 'v{i % 50}')" for i in range(500)))
        cur.execute("SET tidb_mem_quota_query = 4096")
        with pytest.raises(pymysql.err.MySQLError) as ei:
            cur.execute(f"SELECT DISTINCT c FROM {fresh_db}.t")
        code, message = ei.value.args
        assert code == 8175 and message.startswith("Your query has been cancelled due to exceeding the allowed "
                                                   "memory limit for a single SQL query.")
        assert message.endswith(f"[conn={conn.thread_id()}]")
        cur.execute(f"SELECT c FROM {fresh_db}.t")  # a plain scan streams: not held, not accounted
        assert len(cur.fetchall()) == 500
        cur.execute("SET tidb_mem_quota_query = DEFAULT")
        cur.execute(f"SELECT DISTINCT c FROM {fresh_db}.t")
        assert len(cur.fetchall()) == 50
