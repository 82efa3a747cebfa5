"""The MySQL binary protocol's prepared-statement commands sent packet by packet, as libmariadb sends them.

PyMySQL (which has no server-side prepare) logs in; :class:`StmtClient` then writes COM_STMT_* payloads on its
socket and reads the replies with PyMySQL's packet reader, so a test controls every byte that matters here: the
new-params-bound-flag (libmariadb sends 0 on a re-execute whose types did not change), the NULL bitmap, the types.
An error packet is raised by PyMySQL as ``pymysql.MySQLError`` with the server's code.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pymysql

COM_STMT_PREPARE, COM_STMT_EXECUTE, COM_STMT_SEND_LONG_DATA = 0x16, 0x17, 0x18
COM_STMT_CLOSE, COM_STMT_RESET, COM_STMT_FETCH = 0x19, 0x1A, 0x1C
# MYSQL_TYPE_* codes
TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, LONGLONG, DATE, TIME, DATETIME = 1, 2, 3, 4, 5, 6, 8, 10, 11, 12
JSON, NEWDECIMAL, BLOB, VAR_STRING, STRING = 245, 246, 252, 253, 254
UNSIGNED = 0x80


def connect(mysql_addr: str, **kw: Any) -> pymysql.connections.Connection:
    """A PyMySQL connection (autocommit) to a ``host:port`` MySQL front, as root."""
    host, _, port = mysql_addr.rpartition(":")
    return pymysql.connect(host=host, port=int(port), user="root", autocommit=True, **kw)


def lenenc(b: bytes) -> bytes:
    n = len(b)
    if n < 251:
        return bytes([n]) + b
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n) + b
    return b"\xfd" + struct.pack("<I", n)[:3] + b


@dataclass(frozen=True)
class Param:
    """One bound parameter: its MYSQL_TYPE_*, flags byte (0x80 unsigned) and value bytes; ``value`` None is NULL."""

    type: int
    value: bytes | None
    flags: int = 0

    @staticmethod
    def of(v: Any) -> Param:
        """A Python value typed as libmariadb binds one of that kind."""
        if v is None:
            return Param(NULL, None)
        if isinstance(v, int):
            return Param(LONGLONG, struct.pack("<q", v))
        if isinstance(v, float):
            return Param(DOUBLE, struct.pack("<d", v))
        if isinstance(v, bytes):
            return Param(BLOB, lenenc(v))
        return Param(STRING, lenenc(str(v).encode()))


@dataclass(frozen=True)
class Column:
    name: str
    type: int
    flags: int
    charset: int


class StmtClient:
    def __init__(self, conn: pymysql.connections.Connection) -> None:
        self.conn = conn

    def _send(self, command: int, payload: bytes) -> None:
        self.conn._execute_command(command, payload)

    def _read(self) -> bytes:
        return bytes(self.conn._read_packet().get_all_data())

    def prepare(self, sql: str) -> tuple[int, int, int, list[Column]]:
        """``(stmt id, columns, params, parameter definitions)`` of a COM_STMT_PREPARE."""
        self._send(COM_STMT_PREPARE, sql.encode())
        ok = self._read()
        assert ok[0] == 0, ok
        stmt_id, columns, params = struct.unpack("<IHH", ok[1:9])
        param_defs = [self._column(self._read()) for _ in range(params)]
        if params:
            assert self._read()[0] == 0xFE  # EOF (PyMySQL does not ask for CLIENT_DEPRECATE_EOF)
        for _ in range(columns):
            self._read()
        if columns:
            assert self._read()[0] == 0xFE
        return stmt_id, columns, params, param_defs

    def execute_payload(self, stmt_id: int, params: list[Param], *, bound: bool = True, flags: int = 0) -> bytes:
        out = struct.pack("<IBI", stmt_id, flags, 1)
        if params:
            bitmap = bytearray((len(params) + 7) // 8)
            for i, p in enumerate(params):
                if p.value is None:
                    bitmap[i // 8] |= 1 << (i % 8)
            out += bytes(bitmap) + (b"\x01" if bound else b"\x00")
            if bound:
                out += b"".join(bytes([p.type, p.flags]) for p in params)
            out += b"".join(p.value for p in params if p.value is not None)
        return out

    def execute(self, stmt_id: int, params: list[Param], *, bound: bool = True, flags: int = 0) -> Any:
        """An OK's affected rows, or ``(columns, rows)`` of a result set decoded from the binary protocol."""
        self._send(COM_STMT_EXECUTE, self.execute_payload(stmt_id, params, bound=bound, flags=flags))
        return self.read_result()

    def read_result(self) -> Any:
        first = self._read()
        if first[0] == 0:
            return _lenenc_int(first, 1)[0]
        n = first[0]
        columns = [self._column(self._read()) for _ in range(n)]
        assert self._read()[0] == 0xFE
        rows = []
        while True:
            packet = self._read()
            if packet[0] == 0xFE and len(packet) < 9:
                return columns, rows
            rows.append(_binary_row(packet, columns))

    def send_long_data(self, stmt_id: int, param_id: int, data: bytes) -> None:
        self._send(COM_STMT_SEND_LONG_DATA, struct.pack("<IH", stmt_id, param_id) + data)

    def reset(self, stmt_id: int) -> None:
        self._send(COM_STMT_RESET, struct.pack("<I", stmt_id))
        assert self._read()[0] == 0

    def close(self, stmt_id: int) -> None:
        self._send(COM_STMT_CLOSE, struct.pack("<I", stmt_id))

    @staticmethod
    def _column(packet: bytes) -> Column:
        pos, fields = 0, []
        for _ in range(6):  # catalog, schema, table, org_table, name, org_name
            n, pos = _lenenc_int(packet, pos)
            fields.append(packet[pos:pos + n].decode())
            pos += n
        charset, _length, tp, flags = struct.unpack("<HIBH", packet[pos + 1:pos + 10])
        return Column(fields[4], tp, flags, charset)


def _lenenc_int(b: bytes, pos: int) -> tuple[int, int]:
    first = b[pos]
    if first < 0xFB:
        return first, pos + 1
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(b[pos + 1:pos + 1 + size], "little"), pos + 1 + size


_INTS = {TINY: 1, SHORT: 2, 13: 2, LONG: 4, 9: 4, LONGLONG: 8}


def _binary_row(packet: bytes, columns: list[Column]) -> tuple[Any, ...]:
    """A binary-protocol row as the MySQL C API decodes it (header 0x00, NULL bitmap with offset 2, the values)."""
    assert packet[0] == 0
    nbytes = (len(columns) + 7 + 2) // 8
    bitmap, pos, out = packet[1:1 + nbytes], 1 + nbytes, []
    for i, col in enumerate(columns):
        if bitmap[(i + 2) // 8] & (1 << ((i + 2) % 8)):
            out.append(None)
            continue
        if col.type in _INTS:
            size = _INTS[col.type]
            out.append(int.from_bytes(packet[pos:pos + size], "little", signed=not col.flags & 0x20))
            pos += size
        elif col.type == DOUBLE:
            out.append(struct.unpack("<d", packet[pos:pos + 8])[0])
            pos += 8
        elif col.type == FLOAT:
            out.append(struct.unpack("<f", packet[pos:pos + 4])[0])
            pos += 4
        elif col.type in (DATE, DATETIME, 7):
            n = packet[pos]
            b = packet[pos + 1:pos + 1 + n]
            pos += 1 + n
            if n == 0:
                out.append("zero")
            elif col.type == DATE:
                out.append(date(int.from_bytes(b[0:2], "little"), b[2], b[3]))
            else:
                us = int.from_bytes(b[7:11], "little") if n == 11 else 0
                h, mi, s = (b[4], b[5], b[6]) if n >= 7 else (0, 0, 0)
                out.append(datetime(int.from_bytes(b[0:2], "little"), b[2], b[3], h, mi, s, us))
        elif col.type == TIME:
            n = packet[pos]
            b = packet[pos + 1:pos + 1 + n]
            pos += 1 + n
            if n == 0:
                out.append(timedelta(0))
            else:
                us = int.from_bytes(b[8:12], "little") if n == 12 else 0
                td = timedelta(days=int.from_bytes(b[1:5], "little"), hours=b[5], minutes=b[6], seconds=b[7],
                               microseconds=us)
                out.append(-td if b[0] else td)
        else:
            n, pos = _lenenc_int(packet, pos)
            raw = packet[pos:pos + n]
            pos += n
            if col.type == NEWDECIMAL:
                out.append(Decimal(raw.decode()))
            elif col.charset == 63 and col.type != JSON:  # JSON: text, whatever the charset
                out.append(raw)
            else:
                out.append(raw.decode())
    return tuple(out)
