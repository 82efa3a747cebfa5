"""``SHOW CREATE TABLE`` / ``SHOW CREATE DATABASE`` as TiDB prints them, and empty databases in ``SHOW DATABASES``
and ``information_schema.schemata`` (now and under ``@@tidb_snapshot``), through a stock driver (PyMySQL)."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest


def query(conn: Any, sql: str) -> tuple[tuple[Any, ...], list[str]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall(), [d[0] for d in cur.description]


def test_show_create_table_prints_tidb_s_statement(conn: Any, fresh_db: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {fresh_db}.sbtest1 (id INT NOT NULL AUTO_INCREMENT, k INT NOT NULL DEFAULT '0', "
                    "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', note VARCHAR(20), "
                    "PRIMARY KEY (id), UNIQUE KEY c_pad (c, pad), KEY k_1 (k))")
        cur.execute(f"INSERT INTO {fresh_db}.sbtest1 (k, c, pad) VALUES (1, 'a', 'b'), (2, 'c', 'd')")
    rows, columns = query(conn, f"SHOW CREATE TABLE {fresh_db}.sbtest1")
    assert columns == ["Table", "Create Table"]
    assert rows == (("sbtest1",
                     "CREATE TABLE `sbtest1` (\n"
                     "  `id` int NOT NULL AUTO_INCREMENT,\n"
                     "  `k` int NOT NULL DEFAULT '0',\n"
                     "  `c` char(120) NOT NULL DEFAULT '',\n"
                     "  `pad` char(60) NOT NULL DEFAULT '',\n"
                     "  `note` varchar(20) DEFAULT NULL,\n"
                     "  PRIMARY KEY (`id`) /*T![clustered_index] CLUSTERED */,\n"
                     "  UNIQUE KEY `c_pad` (`c`,`pad`),\n"
                     "  KEY `k_1` (`k`)\n"
                     ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin AUTO_INCREMENT=3"),)


def test_show_create_table_of_a_nonclustered_partitioned_table(conn: Any, fresh_db: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"USE {fresh_db}")
        cur.execute("CREATE TABLE p (id BIGINT UNSIGNED, v DECIMAL(10,2), PRIMARY KEY (id) NONCLUSTERED) "
                    "PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN "
                    "MAXVALUE)")
    (row,), _ = query(conn, "SHOW CREATE TABLE p")
    assert row[1] == ("CREATE TABLE `p` (\n"
                      "  `id` bigint unsigned NOT NULL,\n"
                      "  `v` decimal(10,2) DEFAULT NULL,\n"
                      "  PRIMARY KEY (`id`) /*T![clustered_index] NONCLUSTERED */\n"
                      ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin\n"
                      "PARTITION BY RANGE (`id`)\n"
                      "(PARTITION `p0` VALUES LESS THAN (10),\n"
                      " PARTITION `p1` VALUES LESS THAN (MAXVALUE))")


def test_show_create_of_what_does_not_exist(conn: Any, fresh_db: str) -> None:
    with conn.cursor() as cur:
        with pytest.raises(pymysql.err.MySQLError) as ei:
            cur.execute(f"SHOW CREATE TABLE {fresh_db}.missing")
        assert ei.value.args == (1146, f"Table '{fresh_db}.missing' doesn't exist")
        with pytest.raises(pymysql.err.MySQLError) as ei:
            cur.execute("SHOW CREATE DATABASE no_such_db")
        assert ei.value.args[0] == 1049
    rows, columns = query(conn, f"SHOW CREATE DATABASE {fresh_db}")
    assert columns == ["Database", "Create Database"]
    assert rows == ((fresh_db, f"CREATE DATABASE `{fresh_db}` /*!40100 DEFAULT CHARACTER SET utf8mb4 */"),)


def test_an_empty_database_is_listed_now_and_at_a_snapshot(conn: Any, upstream_cluster: Any) -> None:
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE empty_db_listed")
        cur.execute("SELECT TIDB_CURRENT_TSO()")
        (after,) = cur.fetchone()
        cur.execute("SHOW DATABASES")
        assert ("empty_db_listed",) in cur.fetchall()
        cur.execute("SELECT schema_name FROM information_schema.schemata WHERE schema_name = 'empty_db_listed'")
        assert cur.fetchall() == (("empty_db_listed",),)
        cur.execute("DROP DATABASE empty_db_listed")
        cur.execute("SHOW DATABASES")
        assert ("empty_db_listed",) not in cur.fetchall()
        cur.execute(f"SET @@tidb_snapshot = '{after}'")  # a database that existed then
        cur.execute("SHOW DATABASES")
        assert ("empty_db_listed",) in cur.fetchall()
        cur.execute("SET @@tidb_snapshot = ''")
