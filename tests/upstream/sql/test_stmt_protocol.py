"""The binary protocol's prepared-statement commands, packet by packet (``tests/wire/mysql_stmt.py``), against the
session's embedded upstream: what libmariadb (sysbench, the MySQL C API) sends, and TiDB's answers
(``pkg/server/conn_stmt.go``). mysql-mimic 3.0.5's own handling, which ``stmt_protocol`` replaces, fails the first
three tests: 1235 "Server requires the new-params-bound-flag to be set" on a re-execute, and bound values pasted
into the SQL text (a quote is a syntax error, ``x'), (2, 'injected`` a second row)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pymysql
import pytest
from wire.mysql_stmt import (
    BLOB,
    DATE,
    DATETIME,
    DOUBLE,
    JSON,
    LONGLONG,
    NEWDECIMAL,
    STRING,
    TIME,
    TINY,
    UNSIGNED,
    Param,
    StmtClient,
    connect,
    lenenc,
)

from cdc_core.upstream.embedded import EmbeddedCluster


@pytest.fixture(scope="module")
def addr(upstream_cluster: EmbeddedCluster) -> str:
    setup = StmtClient(connect(upstream_cluster.mysql_addr))
    for sql in ("CREATE DATABASE ps", "CREATE TABLE ps.kv (id BIGINT PRIMARY KEY, s VARCHAR(200), n INT)",
                "CREATE TABLE ps.typed (id INT PRIMARY KEY, ti TINYINT, u BIGINT UNSIGNED, d DECIMAL(12,3), "
                "f DOUBLE, dt DATE, ts DATETIME(6), tm TIME(6), vb VARBINARY(20), j JSON, s VARCHAR(20))"):
        setup.conn.query(sql)
    setup.conn.close()
    return upstream_cluster.mysql_addr


@pytest.fixture
def client(addr: str) -> Iterator[StmtClient]:
    c = StmtClient(connect(addr, database="ps"))
    yield c
    c.conn.close()


def _rows(client: StmtClient, sql: str) -> list[tuple[Any, ...]]:
    with client.conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_reexecute_with_new_params_bound_flag_0_reuses_the_types(client: StmtClient) -> None:
    client.conn.query("DELETE FROM kv")
    stmt, _, params, defs = client.prepare("INSERT INTO kv (id, s, n) VALUES (?, ?, ?)")
    assert params == 3 and [d.type for d in defs] == [BLOB] * 3  # TiDB describes parameters as TypeBlob
    for i in range(1000):
        # the first execute sends the types, every later one only the values, as libmariadb does
        assert client.execute(stmt, [Param.of(i), Param.of(f"v{i}"), Param.of(i * 7)], bound=i == 0) == 1
    assert _rows(client, "SELECT COUNT(*) FROM kv") == [(1000,)]
    assert sorted(_rows(client, "SELECT id, s, n FROM kv")) == [(i, f"v{i}", i * 7) for i in range(1000)]
    select, _, _, _ = client.prepare("SELECT s, n FROM kv WHERE id = ?")
    assert client.execute(select, [Param.of(5)])[1] == [("v5", 35)]
    assert client.execute(select, [Param.of(6)], bound=False)[1] == [("v6", 42)]


def test_bound_values_are_values_not_sql(client: StmtClient) -> None:
    client.conn.query("DELETE FROM kv")
    stmt, *_ = client.prepare("INSERT INTO kv (id, s) VALUES (?, ?)")
    for i, s in enumerate(["it's", "x'), (2, 'injected", "back\\slash", "?", "'; DROP TABLE kv; --"]):
        assert client.execute(stmt, [Param.of(i + 10), Param.of(s)]) == 1
    assert _rows(client, "SELECT id, s FROM kv ORDER BY id") == [
        (10, "it's"), (11, "x'), (2, 'injected"), (12, "back\\slash"), (13, "?"), (14, "'; DROP TABLE kv; --")]
    where, *_ = client.prepare("SELECT id FROM kv WHERE s = ? OR s = ?")
    assert client.execute(where, [Param.of("x' OR '1'='1"), Param.of("it's")])[1] == [(10,)]


def test_null_bitmap_with_several_nulls(client: StmtClient) -> None:
    client.conn.query("DELETE FROM kv")
    stmt, *_ = client.prepare("INSERT INTO kv (id, s, n) VALUES (?, ?, ?), (?, ?, ?), (?, ?, ?)")
    values: list[Any] = [1, None, None, 2, "b", None, 3, None, 30]  # 9 parameters: a two-byte bitmap
    assert client.execute(stmt, [Param.of(v) for v in values]) == 3
    assert _rows(client, "SELECT id, s, n FROM kv ORDER BY id") == [(1, None, None), (2, "b", None), (3, None, 30)]
    select, *_ = client.prepare("SELECT id FROM kv WHERE (s IS NULL) = ? AND id > ?")
    assert client.execute(select, [Param.of(1), Param.of(None)])[1] == []  # id > NULL: no row


def test_every_type_round_trips_through_binary_params_and_rows(client: StmtClient) -> None:
    client.conn.query("DELETE FROM typed")
    stmt, *_ = client.prepare("INSERT INTO typed VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    params = [
        Param(TINY, struct.pack("<b", 1)),
        Param(TINY, struct.pack("<b", -5)),
        Param(LONGLONG, struct.pack("<Q", 2**64 - 2), UNSIGNED),
        Param(NEWDECIMAL, lenenc(b"-123456789.125")),
        Param(DOUBLE, struct.pack("<d", 0.1)),
        Param(DATE, bytes([4]) + struct.pack("<HBB", 2024, 2, 29)),
        Param(DATETIME, bytes([11]) + struct.pack("<HBBBBBI", 2024, 2, 29, 23, 59, 58, 123456)),
        Param(TIME, bytes([12, 1]) + struct.pack("<IBBBI", 1, 2, 3, 4, 500000)),  # -(1 day 02:03:04.5)
        Param(BLOB, lenenc(b"\x00\xff'\\")),
        Param(STRING, lenenc(b'{"a": [1, "x\'y"]}')),
        Param(STRING, lenenc("żółw's".encode())),
    ]
    assert client.execute(stmt, params) == 1
    select, *_ = client.prepare("SELECT * FROM typed WHERE id = ?")
    columns, rows = client.execute(select, [Param.of(1)])
    assert rows == [(1, -5, 2**64 - 2, Decimal("-123456789.125"), 0.1, date(2024, 2, 29),
                     datetime(2024, 2, 29, 23, 59, 58, 123456), -timedelta(days=1, hours=2, minutes=3, seconds=4.5),
                     b"\x00\xff'\\", '{"a": [1, "x\'y"]}', "żółw's")]
    assert columns[2].flags & 0x20 and columns[8].charset == 63  # UNSIGNED; binary strings in charset binary
    assert [c.type for c in columns][:3] == [3, TINY, LONGLONG] and columns[9].type == JSON


def test_zero_dates_and_empty_time_params(client: StmtClient) -> None:
    client.conn.query("DELETE FROM typed")
    client.conn.query("SET SESSION sql_mode = ''")  # zero dates allowed
    stmt, *_ = client.prepare("INSERT INTO typed (id, dt, ts, tm) VALUES (?, ?, ?, ?)")
    zero = [Param(DATE, b"\x00"), Param(DATETIME, b"\x00"), Param(TIME, b"\x00")]  # length 0: the zero value
    assert client.execute(stmt, [Param.of(2), *zero]) == 1
    select, *_ = client.prepare("SELECT dt, ts, tm FROM typed WHERE id = ?")
    assert client.execute(select, [Param.of(2)])[1] == [("zero", "zero", timedelta(0))]


def test_send_long_data_reset_and_close(client: StmtClient) -> None:
    client.conn.query("DELETE FROM kv")
    stmt, *_ = client.prepare("INSERT INTO kv (id, s) VALUES (?, ?)")
    client.send_long_data(stmt, 1, b"long-")
    client.send_long_data(stmt, 1, b"data")
    assert client.execute(stmt, [Param.of(1), Param(STRING, None)]) == 1  # libmariadb flags it NULL too
    assert client.execute(stmt, [Param.of(2), Param.of("inline")], bound=False) == 1  # long data went with execute 1
    client.send_long_data(stmt, 1, b"dropped")
    client.reset(stmt)
    assert client.execute(stmt, [Param.of(3), Param.of("after reset")], bound=False) == 1
    assert _rows(client, "SELECT id, s FROM kv ORDER BY id") == [(1, "long-data"), (2, "inline"), (3, "after reset")]
    client.close(stmt)
    with pytest.raises(pymysql.MySQLError) as ei:
        client.execute(stmt, [Param.of(4), Param.of("x")])
    assert ei.value.args == (1243, f"Unknown prepared statement handler ({stmt}) given to stmt_execute")
    with pytest.raises(pymysql.MySQLError) as ei:
        client.reset(999_999)
    assert ei.value.args == (1243, "Unknown prepared statement handler (999999) given to stmt_reset")
    client.close(999_999)  # no reply, no error: the next command is answered as usual
    assert _rows(client, "SELECT 1") == [(1,)]


def test_errors_keep_the_connection_in_step(client: StmtClient) -> None:
    stmt, *_ = client.prepare("SELECT ? + 1")
    with pytest.raises(pymysql.MySQLError) as ei:
        client.execute(stmt, [Param.of(1)], bound=False)  # no types bound yet
    assert ei.value.args[0] == 1835
    with pytest.raises(pymysql.MySQLError) as ei:
        client.execute(stmt, [Param(JSON, lenenc(b"1"))])
    assert ei.value.args == (8051, "stmt unknown field type 245")
    assert client.execute(stmt, [Param.of(41)])[1] == [(42,)]
    with pytest.raises(pymysql.MySQLError) as ei:
        client.prepare("SELECT 1; SELECT 2")
    assert ei.value.args == (8115, "Can not prepare multiple statements")
    with pytest.raises(pymysql.MySQLError) as ei:
        client.prepare("SELECT FROM WHERE ?")
    assert ei.value.args[0] == 1064
    assert _rows(client, "SELECT 2") == [(2,)]


def test_limit_markers_bind_in_text_order(client: StmtClient) -> None:
    client.conn.query("DELETE FROM kv")
    client.conn.query("INSERT INTO kv (id, n) VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)")
    stmt, *_ = client.prepare("SELECT id FROM kv WHERE n > ? ORDER BY id LIMIT ?, ?")
    assert client.execute(stmt, [Param.of(1), Param.of(1), Param.of(2)])[1] == [(3,), (4,)]


def test_cursor_fetch(client: StmtClient) -> None:
    client.conn.query("DELETE FROM kv")
    client.conn.query("INSERT INTO kv (id, n) VALUES (1, 1), (2, 2), (3, 3)")
    stmt, *_ = client.prepare("SELECT id FROM kv WHERE id >= ? ORDER BY id")
    client._send(0x17, client.execute_payload(stmt, [Param.of(1)], flags=1))  # CURSOR_TYPE_READ_ONLY
    first = client._read()
    assert first[0] == 1  # one column, then its definition and an EOF with SERVER_STATUS_CURSOR_EXISTS
    client._read()
    eof = client._read()
    assert eof[0] == 0xFE and struct.unpack("<H", eof[3:5])[0] & 0x40
    client._send(0x1C, struct.pack("<II", stmt, 2))
    rows = [client._read(), client._read()]
    assert [r[-8:] for r in rows] == [struct.pack("<q", 1), struct.pack("<q", 2)]
    assert client._read()[0] == 0xFE
