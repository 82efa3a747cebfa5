"""The MySQL binary protocol's prepared-statement commands, as TiDB's server answers them.

:class:`StatementConnection` is mysql-mimic's connection with COM_STMT_PREPARE, EXECUTE, SEND_LONG_DATA, FETCH,
RESET and CLOSE done as TiDB does them (``pkg/server/conn_stmt.go``, ``conn_stmt_params.go``, ``driver_tidb.go``),
in place of mysql-mimic 3.0.5's (``mysql_mimic/connection.py``, ``packets.py``), which

- splices each parameter into the SQL text as ``'value'`` unescaped (``_interpolate_params``): a bound ``it's``
  is a syntax error and a bound ``x'), (2, 'injected`` a second row -- here values are bound to the parsed tree
  (``prepared_statement``);
- refuses an execute whose new-params-bound-flag is 0 (error 1235 "Server requires the new-params-bound-flag to be
  set"), which libmariadb sends on every re-execute of a statement whose parameter types did not change -- here the
  types of the last execute that sent them are used, as TiDB's ``stmt.GetParamsType()``;
- answers a bad statement id with 1305, resets the whole session on COM_STMT_RESET, and reads only some parameter
  types (no DECIMAL, DATE, TIME, BLOB-as-bytes).

Parameter values are decoded as TiDB's ``parseBinaryParams`` and ``param.ExecArgs`` decode them. Parameters are
described at prepare as TiDB describes them (``TypeBlob``, no name), and so are a query's result columns (by the
query run with NULL parameters and ``LIMIT 0``: ``PreparedStatement.probe``), then again at each execute.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, cast

from mysql_mimic.connection import Connection
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.packets import make_binary_resultrow, make_column_definition_41
from mysql_mimic.results import AllowedResult, ResultSet, ensure_result_set
from mysql_mimic.types import Capabilities, ColumnDefinition, ColumnType, ServerStatus, uint_1, uint_2, uint_4, uint_len
from mysql_mimic.utils import aiterate, cooperative_iterate, seq

from cdc_core.upstream.sql import mysql_errors
from cdc_core.upstream.sql.mysql_errors import MysqlCode
from cdc_core.upstream.sql.prepared_statement import Float32, PreparedStatement, decimal_param
from cdc_core.upstream.sql.sql_front import ParsedStatement

_CURSOR_READ_ONLY, _CURSOR_FOR_UPDATE, _CURSOR_SCROLLABLE, _PARAMETER_COUNT_AVAILABLE = 0x01, 0x02, 0x04, 0x08
_STRING_TYPES = frozenset({0x00, 0x0F, 0xFD, 0xFE, 0xF7, 0xF8, 0xFF, 0x10})  # TypeUnspecified, Varchar, VarString,
# String, Enum, Set, Geometry, Bit: text in the connection's character set
_BLOB_TYPES = frozenset({0xF9, 0xFA, 0xFB, 0xFC})  # TinyBlob, MediumBlob, LongBlob, Blob: bytes
_FIXED = {0x01: ("b", "B"), 0x02: ("h", "H"), 0x0D: ("h", "H"), 0x03: ("i", "I"), 0x09: ("i", "I"),
          0x08: ("q", "Q")}  # Tiny, Short, Year, Long, Int24, Longlong: (signed, unsigned) struct codes
_NULL, _FLOAT, _DOUBLE, _NEWDECIMAL = 0x06, 0x04, 0x05, 0xF6
_TIMES = frozenset({0x0A, 0x07, 0x0C})  # Date, Timestamp, Datetime
_DURATION = 0x0B


def _error(code: MysqlCode, message: str) -> MysqlError:
    return MysqlError(message, cast(ErrorCode, code.code))


def _unknown_stmt(stmt_id: int, command: str) -> MysqlError:
    return _error(mysql_errors.ER_UNKNOWN_STMT_HANDLER,
                  f"Unknown prepared statement handler ({stmt_id}) given to {command}")


def _malformed() -> MysqlError:
    return _error(mysql_errors.ER_MALFORMED_PACKET, "Malformed communication packet.")


class StatementSession(Protocol):
    """What the connection needs of its session for prepared statements (``mysql_front.FrontSession``)."""

    result_flags: list[int]

    def prepare_statement(self, sql: str) -> tuple[ParsedStatement, int]: ...

    async def execute_statement(self, st: ParsedStatement, attrs: dict[str, str]) -> AllowedResult: ...


class _Reader:
    """A COM_STMT_EXECUTE payload read front to back; reading past its end is a malformed packet (TiDB's
    ``mysql.ErrMalformPacket``)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _malformed()
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def lenenc_int(self) -> int:
        first = self.uint(1)
        if first < 0xFB:
            return first
        if first == 0xFB:  # NULL: a length of 0 (TiDB's ParseLengthEncodedInt reports it as null, length 0)
            return 0
        if first == 0xFF:
            raise _malformed()
        return self.uint({0xFC: 2, 0xFD: 3, 0xFE: 8}[first])

    def lenenc_bytes(self) -> bytes:
        return self.take(self.lenenc_int())


def decode_params(data: bytes, stmt: PreparedStatement, capabilities: Capabilities,
                  decode: Callable[[bytes], str]) -> tuple[bool, list[Any], dict[str, str]]:
    """``(use_cursor, parameter values, query attributes)`` of a COM_STMT_EXECUTE payload after its statement id,
    as TiDB's ``handleStmtExecute`` and ``parseBinaryParams`` read it; the types a bound flag of 1 sends are kept on
    ``stmt`` for the executes that send a flag of 0."""
    r = _Reader(data)
    flag = r.uint(1)
    if flag & _CURSOR_FOR_UPDATE:
        raise _error(mysql_errors.ER_UNKNOWN_ERROR, "unsupported flag: CursorTypeForUpdate")
    if flag & _CURSOR_SCROLLABLE:
        raise _error(mysql_errors.ER_UNKNOWN_ERROR, "unsupported flag: CursorTypeScrollable")
    r.take(4)  # iteration count, always 1
    query_attrs = Capabilities.CLIENT_QUERY_ATTRIBUTES in capabilities
    count = stmt.num_params
    if query_attrs and (count > 0 or flag & _PARAMETER_COUNT_AVAILABLE):
        count = r.lenenc_int()
    if count < stmt.num_params:
        raise _error(mysql_errors.ER_WRONG_ARGUMENTS, "Incorrect arguments to EXECUTE")
    values: list[Any] = []
    attrs: dict[str, str] = {}
    if not count:
        return bool(flag & _CURSOR_READ_ONLY), values, attrs
    nulls = r.take((count + 7) >> 3)
    names: list[str] = []
    if r.uint(1) == 1:
        types = bytearray()
        for _ in range(count):
            types += r.take(2)
            if query_attrs:
                names.append(decode(r.lenenc_bytes()))
        stmt.param_types = bytes(types)
    types_ = stmt.param_types
    for i in range(count):
        long = stmt.long_data.get(i) if i < stmt.num_params else None
        if long is not None:
            # sent by COM_STMT_SEND_LONG_DATA: text for a string type, else bytes (conn_stmt_params.go)
            tp = types_[2 * i] if 2 * i + 1 < len(types_) else 0xFC
            values.append(_text(decode, bytes(long)) if tp in _STRING_TYPES else bytes(long))
            continue
        if nulls[i >> 3] & (1 << (i & 7)):
            values.append(None)
            continue
        if 2 * i + 1 >= len(types_):
            raise _malformed()  # no types bound yet: a flag of 0 on a statement's first execute
        values.append(_value(r, types_[2 * i], bool(types_[2 * i + 1] & 0x80), decode))
    for name, value in zip(names[stmt.num_params:], values[stmt.num_params:], strict=False):
        if name:
            attrs[name] = "" if value is None else str(value)
    return bool(flag & _CURSOR_READ_ONLY), values[:stmt.num_params], attrs


def _value(r: _Reader, tp: int, unsigned: bool, decode: Callable[[bytes], str]) -> Any:
    """One parameter's value (``param.ExecArgs``)."""
    if tp == _NULL:
        return None
    if tp in _FIXED:
        code = _FIXED[tp][unsigned]
        return struct.unpack("<" + code, r.take(struct.calcsize(code)))[0]
    if tp == _FLOAT:
        return Float32(struct.unpack("<f", r.take(4))[0])
    if tp == _DOUBLE:
        return struct.unpack("<d", r.take(8))[0]
    if tp in _TIMES:
        return _datetime_text(r.take(r.uint(1)), date_only=tp == 0x0A)
    if tp == _DURATION:
        return _duration_text(r.take(r.uint(1)))
    if tp == _NEWDECIMAL:
        return decimal_param(r.lenenc_bytes().decode("ascii", "replace"))
    if tp in _BLOB_TYPES:
        return r.lenenc_bytes()
    if tp in _STRING_TYPES:
        return _text(decode, r.lenenc_bytes())
    raise _error(mysql_errors.TIDB_UNKNOWN_FIELD_TYPE, f"stmt unknown field type {tp}")


def _text(decode: Callable[[bytes], str], raw: bytes) -> str | bytes:
    """A string parameter in the connection's character set; bytes that are not text in it stay bytes (TiDB's
    ``InputDecoder`` passes utf8 input through unchecked: drivers send ``[]byte`` / ``bytes`` as strings, and a
    binary column takes them as they are)."""
    try:
        return decode(raw)
    except UnicodeDecodeError:
        return raw


def _datetime_text(b: bytes, *, date_only: bool) -> str:
    """A DATE/DATETIME/TIMESTAMP parameter as TiDB's ``binaryDate`` / ``binaryDateTime`` / ``binaryTimestamp``
    format it (then parse it: a TIMESTAMP parameter is a DATETIME, as in MySQL)."""
    if not b:
        return "0000-00-00" if date_only else "0000-00-00 00:00:00"
    if len(b) not in (4, 7, 11):
        raise _malformed()
    text = f"{int.from_bytes(b[0:2], 'little'):04d}-{b[2]:02d}-{b[3]:02d}"
    if len(b) >= 7:
        text += f" {b[4]:02d}:{b[5]:02d}:{b[6]:02d}"
    if len(b) == 11:
        text += f".{int.from_bytes(b[7:11], 'little'):06d}"
    return text


def _duration_text(b: bytes) -> str:
    """A TIME parameter (``binaryDuration`` / ``binaryDurationWithMS``), with its days as hours."""
    if not b:
        return "00:00:00"
    if len(b) not in (8, 12) or b[0] > 1:
        raise _malformed()
    hours = int.from_bytes(b[1:5], "little") * 24 + b[5]
    text = f"{'-' if b[0] else ''}{hours:02d}:{b[6]:02d}:{b[7]:02d}"
    if len(b) == 12:
        text += f".{int.from_bytes(b[8:12], 'little'):06d}"
    return text


class StatementConnection(Connection):
    """mysql-mimic's connection with TiDB's prepared-statement commands (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stmt_ids = seq(self._MAX_PREPARED_STMT_ID)
        self.statements: dict[int, PreparedStatement] = {}

    @property
    def _session(self) -> StatementSession:
        return cast(StatementSession, self.session)

    def _statement(self, stmt_id: int, command: str) -> PreparedStatement:
        stmt = self.statements.get(stmt_id)
        if stmt is None:
            raise _unknown_stmt(stmt_id, command)
        return stmt

    async def handle_stmt_prepare(self, data: bytes) -> None:
        template, num_params = self._session.prepare_statement(self.client_charset.decode(data))
        stmt = PreparedStatement(next(self._stmt_ids), template, num_params)
        # A client that binds its result columns by the prepare's count (libmariadb: sysbench) reads no rows of a
        # statement described with none, and its next command is out of sync (2014): a query is described here.
        probe = stmt.probe()
        columns: list[bytes] = []
        if probe is not None:
            described = await ensure_result_set(await self._session.execute_statement(probe, {}))
            columns = self._column_definitions(described) if described else []
        self.statements[stmt.stmt_id] = stmt
        # status OK, statement id, columns, parameters, filler, warnings
        packets = [uint_1(0) + uint_4(stmt.stmt_id) + uint_2(len(columns)) + uint_2(num_params) + uint_1(0)
                   + uint_2(0)]
        if num_params:
            param = make_column_definition_41(server_charset=self.server_charset, column_type=ColumnType.BLOB)
            packets += [param] * num_params
            if not self.deprecate_eof():
                packets.append(self.eof())
        if columns:
            packets += columns
            if not self.deprecate_eof():
                packets.append(self.eof())
        for packet in packets:
            await self.stream.write(packet, drain=False)
        await self.stream.drain()

    def _column_definitions(self, result_set: ResultSet) -> list[bytes]:
        flags = self._session.result_flags
        return [make_column_definition_41(server_charset=self.server_charset, name=column.name,
                                          column_type=column.type, character_set=column.character_set,
                                          flags=ColumnDefinition(flags[i] if i < len(flags) else 0))
                for i, column in enumerate(result_set.columns)]

    async def handle_stmt_send_long_data(self, data: bytes) -> None:
        if len(data) < 6:
            raise _malformed()
        stmt = self._statement(int.from_bytes(data[0:4], "little"), "stmt_send_longdata")
        param_id = int.from_bytes(data[4:6], "little")
        if param_id >= stmt.num_params:
            raise _error(mysql_errors.ER_WRONG_ARGUMENTS, "Incorrect arguments to stmt_send_longdata")
        stmt.long_data.setdefault(param_id, bytearray()).extend(data[6:])  # no reply, as the protocol says

    async def handle_stmt_execute(self, data: bytes) -> None:
        if len(data) < 9:
            raise _malformed()
        stmt = self._statement(int.from_bytes(data[0:4], "little"), "stmt_execute")
        try:
            use_cursor, values, attrs = decode_params(data[4:], stmt, self.capabilities, self.client_charset.decode)
        finally:
            stmt.long_data.clear()  # TiDB's stmt.Reset() after reading the parameters, whatever they were
        stmt.cursor = None
        result_set = await ensure_result_set(await self._session.execute_statement(stmt.bind(values), attrs))
        if not result_set:
            await self.stream.write(self.ok())
            return
        for packet in [uint_len(len(result_set.columns)), *self._column_definitions(result_set)]:
            await self.stream.write(packet, drain=False)

        async def rows() -> AsyncIterator[bytes]:
            async for row in cooperative_iterate(aiterate(result_set.rows)):
                yield make_binary_resultrow(row, result_set.columns)

        if use_cursor:
            stmt.cursor = rows()
            await self.stream.write(self.ok_or_eof(flags=ServerStatus.SERVER_STATUS_CURSOR_EXISTS))
            return
        if not self.deprecate_eof():
            await self.stream.write(self.eof(), drain=False)
        async for row in rows():
            await self.stream.write(row, drain=False)
        await self.stream.write(self.ok_or_eof())

    async def handle_stmt_fetch(self, data: bytes) -> None:
        if len(data) < 8:
            raise _malformed()
        stmt = self._statement(int.from_bytes(data[0:4], "little"), "stmt_fetch")
        if stmt.cursor is None:
            raise _error(mysql_errors.ER_SP_CURSOR_NOT_OPEN, "Cursor is not open")
        wanted = int.from_bytes(data[4:8], "little")
        sent = 0
        while sent < wanted:
            try:
                row = await anext(stmt.cursor)
            except StopAsyncIteration:
                break
            await self.stream.write(row, drain=False)
            sent += 1
        done = sent < wanted
        if done:
            stmt.cursor = None
        status = ServerStatus.SERVER_STATUS_LAST_ROW_SENT if done else ServerStatus.SERVER_STATUS_CURSOR_EXISTS
        await self.stream.write(self.ok_or_eof(flags=status))

    async def handle_stmt_reset(self, data: bytes) -> None:
        if len(data) < 4:
            raise _malformed()
        stmt = self._statement(int.from_bytes(data[0:4], "little"), "stmt_reset")
        stmt.long_data.clear()  # the statement as it was right after prepare; the session is left as it is
        stmt.cursor = None
        await self.stream.write(self.ok())

    async def handle_stmt_close(self, data: bytes) -> None:
        if len(data) >= 4:  # no reply; an unknown id is ignored, as TiDB does
            self.statements.pop(int.from_bytes(data[0:4], "little"), None)
