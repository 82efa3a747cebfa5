"""The SQL front over the MySQL wire protocol, as TiDB serves SQL: any MySQL client or driver connects.

``mysql-mimic`` speaks the protocol (handshake, COM_QUERY, COM_INIT_DB, text result sets, error packets) and
answers what a client asks of every server (``SET NAMES``, ``SELECT @@version``, ``SHOW VARIABLES``, ``SHOW
DATABASES/TABLES/COLUMNS`` from ``schema()``); everything else runs in one SQL-front session per connection
(``sql_front.Session``), which lives as long as the connection: ``USE``, ``BEGIN`` ... ``COMMIT`` span queries,
and a transaction still open at disconnect is rolled back, as in MySQL.

TiDB's session variables cdcflow and TiCDC's users rely on:

- ``tidb_snapshot``: ``SET @@tidb_snapshot = '<tso or datetime>'`` makes the session read at that ts (writes
  are refused); ``''`` ends it. A ts in the future or below the GC safe point is refused at the SET.
- ``tidb_current_ts``: the open transaction's start ts (0 outside one), read-only.
- ``tidb_last_txn_info``: the last transaction the session committed, as client-go's ``TxnInfo`` JSON
  (``{"txn_scope": "global", "start_ts", "commit_ts", ...}``), read-only. Unlike TiDB, a DDL statement sets it
  too (``start_ts`` 0, ``commit_ts`` the job's): that is how a client learns where a DDL committed.
- ``version``: ``8.0.11-TiDB-v8.5.0-cdcflow`` (TiDB reports MySQL 8.0.11 compatibility, then its own version).
- ``sql_mode``: a session value and a global one (``SET [GLOBAL|SESSION] sql_mode``, ``@@global.sql_mode``; a new
  session takes the global, TiDB's default to start with), validated as TiDB does (``sql_mode``). With
  ``NO_BACKSLASH_ESCAPES`` the session's queries are tokenized with a backslash as an ordinary character, and its
  OK and EOF packets carry the status flag ``SERVER_STATUS_NO_BACKSLASH_ESCAPES``, as TiDB's do: a client that
  escapes by the flag (PyMySQL, the MySQL C API) then writes its literals for the mode.

Errors carry MySQL's codes (``mysql_errors``). Each query's statements run in order; the last one's result is
returned (a multi-statement query gets one result, as mysql-mimic answers it). Statements are parsed by the SQL
front (TiDB's ``CLUSTERED`` keywords included), then offered to mysql-mimic's handlers first.

Accounts (:class:`Accounts`): with no password configured, any user name without a password is accepted, as a
fresh TiDB's ``root`` (the loopback default); with one, only the configured user with that password
(``mysql_native_password``, as TiDB's default plugin), anyone else gets error 1045. Prepared statements (the binary
protocol's COM_STMT_* commands) are ``stmt_protocol``'s: parsed once, their parameters bound to the tree as values
(``prepared_statement``), never pasted into SQL text; their rows go in the binary protocol's encodings. With an SSL
context (the cluster's TLS), clients may switch to TLS
(MySQL's SSL request, as TiDB with ``ssl-cert`` set). ``information_schema`` comes from ``info_schema`` (with
``TIDB_TABLE_ID``).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta, tzinfo
from decimal import Decimal
from ssl import SSLContext
from typing import Any, cast

from mysql_mimic import MysqlServer, Session
from mysql_mimic import server as mysql_mimic_server
from mysql_mimic.auth import IdentityProvider, NativePasswordAuthPlugin, User
from mysql_mimic.charset import CharacterSet
from mysql_mimic.connection import Connection
from mysql_mimic.constants import INFO_SCHEMA
from mysql_mimic.control import LocalControl
from mysql_mimic.errors import SQLSTATES, ErrorCode, MysqlError
from mysql_mimic.results import AllowedResult, ResultColumn, infer_type
from mysql_mimic.session import Query
from mysql_mimic.stream import MysqlStream
from mysql_mimic.types import ColumnType, ServerStatus, str_len
from mysql_mimic.utils import find_dbs
from mysql_mimic.variables import GlobalVariables, SessionVariables
from sqlglot import exp

from cdc_core.codec import mysql_type as mt
from cdc_core.codec.rowcodec import MySQLTime
from cdc_core.codec.tso import parse_ts_or_datetime
from cdc_core.codec.value_text import format_datetime, format_duration, format_mysql_time
from cdc_core.log import get_logger
from cdc_core.memory import MemoryLimitExceeded
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import Column, SchemaError, TableInfo
from cdc_core.upstream.sql import mysql_errors, show_create, txn_mode
from cdc_core.upstream.sql import sql_mode as sqlmode
from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.info_schema import SCHEMA, TidbInfoSchema
from cdc_core.upstream.sql.prepared_statement import PrepareError, prepare
from cdc_core.upstream.sql.session_defaults import session_variables
from cdc_core.upstream.sql.sql_front import ParsedStatement, SqlEngine, StatementResult, split_script
from cdc_core.upstream.sql.stmt_protocol import StatementConnection
from cdc_core.upstream.sql.table_listing import ListingPlan, TableListing, plan_listing
from cdc_core.upstream.sql.table_writer import AUTO_INCREMENT_KEY
from cdc_core.upstream.sql.txn import CommitMode
from cdc_core.upstream.store.mvcc import GcSafePointPassedError

log = get_logger("cdcflow.upstream.mysql")

_VARIABLES = GlobalVariables({
    **session_variables(),
    # The SQL-front session's (txn_mode.TxnSettings), kept in step by _txn_mode_middleware
    txn_mode.TXN_MODE: (str, txn_mode.DEFAULT_TXN_MODE, True),
    txn_mode.LOCK_WAIT_TIMEOUT: (int, txn_mode.DEFAULT_LOCK_WAIT_TIMEOUT, True),
})

# mysql-mimic names SQLSTATEs for its own few codes; a client shows the state of the others too.
for _c in vars(mysql_errors).values():
    if isinstance(_c, mysql_errors.MysqlCode):
        SQLSTATES.setdefault(cast(ErrorCode, _c.code), _c.sqlstate)


def _result_column(name: str, col: Column) -> ResultColumn:
    """A table column as the result set describes it: TiDB's type code is the protocol's (``ColumnType``), and
    binary strings carry the ``binary`` character set so that clients keep them as bytes."""
    ft = col.field_type()
    if ft.tp == mt.TypeTiDBVectorFloat32:
        # pkg/server/internal/column/column.go: "pretend to be a non-binary String" -- dumpType TypeLongBlob, the
        # default collation, no BinaryFlag; the value goes as its text (VectorFloat32.String) in both protocols
        return ResultColumn(name=name, type=ColumnType.LONG_BLOB, text_encoder=_vector_text,
                            binary_encoder=_vector_binary)
    if ft.tp == mt.TypeDate:
        return ResultColumn(name=name, type=ColumnType.DATE, text_encoder=_date_text, binary_encoder=_time_binary)
    if ft.tp in (mt.TypeDatetime, mt.TypeTimestamp):
        return ResultColumn(name=name, type=ColumnType(ft.tp), text_encoder=_fsp_text(col.fsp or 0),
                            binary_encoder=_time_binary)
    if ft.tp in _FSP_TYPES:  # before the binary test: TiDB flags time types BinaryFlag, but they print as text
        return ResultColumn(name=name, type=ColumnType(ft.tp), text_encoder=_fsp_text(col.fsp or 0),
                            binary_encoder=_duration_binary)
    if ft.binary or ft.tp == mt.TypeBit:
        return ResultColumn(name=name, type=ColumnType(ft.tp), character_set=CharacterSet.binary,
                            text_encoder=_bytes_text, binary_encoder=_bytes_binary)
    codes = _INT_CODES.get(ft.tp)
    if codes is not None:
        return ResultColumn(name=name, type=ColumnType(ft.tp), binary_encoder=_int_binary(codes[ft.unsigned]))
    return ResultColumn(name=name, type=ColumnType(ft.tp))


# The binary protocol's integers (TiDB's dump.DumpBinaryRow): TINY 1 byte, SHORT/YEAR 2, INT24/LONG 4, LONGLONG 8,
# unsigned when the column is (the column definition then carries UNSIGNED_FLAG, see ``result_flags``).
_INT_CODES: dict[int, tuple[str, str]] = {
    mt.TypeTiny: ("<b", "<B"), mt.TypeShort: ("<h", "<H"), mt.TypeYear: ("<h", "<H"), mt.TypeInt24: ("<i", "<I"),
    mt.TypeLong: ("<i", "<I"), mt.TypeLonglong: ("<q", "<Q")}


def _int_binary(code: str) -> Callable[[ResultColumn, Any], bytes]:
    # mysql-mimic's own encoders send a TINYINT as 0 or 1 (``int(bool(v))``) and know no unsigned integers
    def encode(column: ResultColumn, value: Any) -> bytes:
        return struct.pack(code, int(value))

    return encode


def _column_flags(col: Column | None) -> int:
    """A result column's definition flags as TiDB sends them, for what clients decode binary rows by: UNSIGNED
    (integers read unsigned) and BINARY (strings kept as bytes)."""
    if col is None:
        return 0
    ft = col.field_type()
    return ft.flag & (mt.UnsignedFlag | mt.BinaryFlag) if ft.tp != mt.TypeTiDBVectorFloat32 else 0


_FSP_TYPES = frozenset({mt.TypeDatetime, mt.TypeTimestamp, mt.TypeDuration})


def _fsp_text(fsp: int) -> Callable[[ResultColumn, Any], bytes]:
    """The text-protocol encoder of a DATETIME / TIMESTAMP / TIME(fsp) column: exactly ``fsp`` fractional digits,
    as MySQL and TiDB print them (``DATETIME(3)`` '... 03:04:05.100', ``DATETIME`` without a fraction)."""

    def encode(column: ResultColumn, value: Any) -> bytes:
        if isinstance(value, datetime):
            return format_datetime(value, fsp).encode()
        if isinstance(value, timedelta):
            return format_duration(value, fsp).encode()
        if isinstance(value, MySQLTime):  # Time.String of a zero or invalid date: 0000-00-00 00:00:00[.000]
            return format_mysql_time(value, fsp=fsp).encode()
        return str(value).encode()

    return encode


def _date_text(column: ResultColumn, value: Any) -> bytes:
    if isinstance(value, MySQLTime):
        return format_mysql_time(value, date_only=True).encode()
    return value.isoformat().encode() if isinstance(value, date) else str(value).encode()


def _time_binary(column: ResultColumn, value: Any) -> bytes:
    """A DATE/DATETIME/TIMESTAMP in the binary protocol, as TiDB's ``dump.BinaryDateTime`` writes it: the zero
    value as length 0; a DATE as length 4 (year u16, month, day); a DATETIME/TIMESTAMP as length 11 (and the time,
    microseconds u32). A ``MySQLTime`` (a zero month or day, an invalid day) goes as its fields."""
    y, mo, d = value.year, value.month, value.day
    h, mi, sec, us = ((value.hour, value.minute, value.second, value.microsecond)
                      if isinstance(value, datetime | MySQLTime) else (0, 0, 0, 0))
    if (y, mo, d, h, mi, sec, us) == (0, 0, 0, 0, 0, 0, 0):
        return b"\x00"
    if column.type == ColumnType.DATE:
        return struct.pack("<BHBB", 4, y, mo, d)
    return struct.pack("<BHBBBBBI", 11, y, mo, d, h, mi, sec, us)


def _duration_binary(column: ResultColumn, value: Any) -> bytes:
    """A TIME in the binary protocol (TiDB's ``dump.BinaryTime``): 0 for zero, else length 8 (is_negative, days u32,
    hours, minutes, seconds) or 12 (and microseconds u32), of the magnitude -- mysql-mimic's encoder takes a
    negative ``timedelta``'s days as they are (-1 day + 22:00:00 for -02:00:00)."""
    negative = value < timedelta(0)
    days, rest = divmod(abs(value), timedelta(days=1))
    h, rem = divmod(rest.seconds, 3600)
    m, sec = divmod(rem, 60)
    if not (days or rest):
        return b"\x00"
    if rest.microseconds:
        return struct.pack("<BBIBBBI", 12, negative, days, h, m, sec, rest.microseconds)
    return struct.pack("<BBIBBB", 8, negative, days, h, m, sec)


def _vector_text(column: ResultColumn, value: Any) -> bytes:
    return str(value).encode()  # VectorFloat32.String


def _vector_binary(column: ResultColumn, value: Any) -> bytes:
    return str_len(_vector_text(column, value))  # a length-encoded string, as DumpBinaryRow writes it


def _listing_column(i: int, name: str, sample: list[tuple[Any, ...]]) -> ResultColumn:
    """A listing's column typed by its first non-NULL value among the rows at hand (mysql-mimic would read on
    through the whole stream for a column that is NULL everywhere), else by ``TABLES``' declared type."""
    value = next((row[i] for row in sample if row[i] is not None), None)
    if value is not None:
        return ResultColumn(name=name, type=infer_type(value))
    declared = SCHEMA["information_schema"]["tables"].get(name.lower(), "TEXT")
    return ResultColumn(name=name, type=ColumnType.LONGLONG if "INT" in declared else ColumnType.VAR_STRING)


def _bytes_text(column: ResultColumn, value: Any) -> bytes:
    # mysql-mimic would encode with the column's charset, and Python has no "binary" codec: bytes go as they are.
    return value if isinstance(value, bytes) else str(value).encode()


def _bytes_binary(column: ResultColumn, value: Any) -> bytes:
    return str_len(_bytes_text(column, value))  # the binary protocol's length-encoded string


def _wire_value(v: Any) -> Any:
    """A typed value as mysql-mimic sends it: DECIMAL as its digits and TIME as ``[-]HH:MM:SS[.ffffff]`` (its text
    encoder would print ``Decimal``/``timedelta`` reprs); the rest as they are."""
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, timedelta):
        return format_duration(v)
    return v


def _mysql_error(exc: SqlError) -> MysqlError:
    code = mysql_errors.code_of(exc)
    return MysqlError(mysql_errors.strip_context(exc.message), cast(ErrorCode, code.code))


def _statement_error(exc: SqlError | SchemaError | GcSafePointPassedError) -> MysqlError:
    """The MySQL error a statement's failure is sent as (while it runs, or while its rows stream)."""
    if isinstance(exc, SqlError):
        return _mysql_error(exc)
    if isinstance(exc, SchemaError):  # e.g. an unknown column name: the SQL is wrong
        return _mysql_error(SqlError(str(exc)))
    # a transaction outlived the GC safe point
    return MysqlError(str(exc), cast(ErrorCode, mysql_errors.TIDB_GC_TOO_EARLY.code))


class UnknownDatabase(Exception):
    """The handshake named a database that does not exist."""


class _Connections(LocalControl):
    """mysql-mimic's connection registry, which also lets the server end every open connection at stop."""

    def __init__(self) -> None:
        super().__init__()
        self.open: set[int] = set()

    async def add(self, connection: Connection) -> int:
        connection_id = await super().add(connection)
        self.open.add(connection_id)
        return connection_id

    async def remove(self, connection_id: int) -> None:
        self.open.discard(connection_id)
        await super().remove(connection_id)


def constant_select(e: exp.Expression) -> tuple[list[tuple[Any, ...]], list[str]] | None:
    """``(rows, columns)`` of a SELECT whose every item is a literal (aliased, or a number / string, named by
    itself), as sqlglot's executor answers it; None for anything else (the executor's then)."""
    if not isinstance(e, exp.Select) or any(e.args.get(a) for a in e.args if a not in ("expressions", "hint")):
        return None
    columns: list[str] = []
    row: list[Any] = []
    for item in e.expressions:
        value = item.this if isinstance(item, exp.Alias) else item
        if isinstance(value, exp.Literal):
            text = value.this
            v: Any = text if value.is_string else int(text) if value.is_int else float(text)
        elif isinstance(item, exp.Alias) and isinstance(value, exp.Null | exp.Boolean):
            v = None if isinstance(value, exp.Null) else value.this
        else:
            return None
        columns.append(item.alias if isinstance(item, exp.Alias) else value.name)
        row.append(v)
    return [tuple(row)], columns


# What a SELECT without FROM may have (``SELECT 1+1 LIMIT 1``, ``SELECT @@version WHERE 1``)
_STATIC_SELECT_ARGS = frozenset({"expressions", "limit", "hint", "where", "offset"})
_ZONE_REFRESH_S = 60.0
_zone_cache: tuple[float, tzinfo] = (-_ZONE_REFRESH_S, UTC)


def _system_zone() -> tzinfo:
    """The machine's time zone (``time_zone = SYSTEM``), looked up once a minute (a DST change shows within it):
    every query reads it, and ``astimezone`` asks the C library each time."""
    global _zone_cache
    now = time.monotonic()
    if now - _zone_cache[0] >= _ZONE_REFRESH_S:
        _zone_cache = (now, datetime.now().astimezone().tzinfo or UTC)
    return _zone_cache[1]


def written_names(st: ParsedStatement) -> list[str | None] | None:
    """The names TiDB gives a SELECT's result columns where they differ from what the engine or mysql-mimic would:
    an item without an alias by its text as written (``version()``, ``count(*)``, ``1+1``, ``?``), not as
    mysql-mimic's variable processor or sqlglot regenerate it (``CURRENT_VERSION()``, ``COUNT(*)``); None for an
    item named otherwise (an alias, a column by its name, a string literal by its value). Read before the statement
    runs: the variable processor rewrites the tree in place."""
    texts, node = st.item_texts, st.node
    if not texts or not isinstance(node, exp.Select) or len(texts) != len(node.expressions):
        return None
    out: list[str | None] = []
    for item, text in zip(node.expressions, texts, strict=True):
        plain = isinstance(item, exp.Alias) or isinstance(item, exp.Column | exp.Star) or text[:1] in ("'", '"')
        out.append(None if plain else text)
    return out if any(n is not None for n in out) else None


def named_as_written(names: list[str | None] | None, result: AllowedResult) -> AllowedResult:
    """``result`` with its columns renamed to ``names`` (:func:`written_names`) where one is given."""
    if names is None or not isinstance(result, tuple) or len(result) != 2:
        return result
    rows, columns = result
    if not isinstance(columns, list) or len(columns) != len(names):
        return result
    renamed: list[Any] = list(columns)
    for i, name in enumerate(names):
        if name is None:
            continue
        col = renamed[i]
        if isinstance(col, ResultColumn):
            col.name = name
        else:
            renamed[i] = name
    return rows, renamed


class FrontSession(Session):
    """One MySQL connection: a SQL-front session behind mysql-mimic's protocol handlers."""

    def __init__(self, engine: SqlEngine, listing: TableListing) -> None:
        self.engine = engine
        self.listing = listing
        self.sql = engine.session()
        self.sql.stream_rows = True  # a SELECT's rows go out as they are read (see _streamed)
        super().__init__(SessionVariables(_VARIABLES))
        self.result_flags: list[int] = []  # the last result's column definition flags (``stmt_protocol``)
        self.variables.set("sql_mode", self.sql.sql_mode_text)  # the global value when the session started
        self.middlewares = [
            self._sql_mode_middleware,
            self._txn_mode_middleware,
            self._set_var_middleware,
            self._snapshot_middleware,
            self._isolation_alias_middleware,
            self._set_middleware,
            self._constant_select_middleware,
            self._static_select_middleware,
            self._use_middleware,
            self._kill_middleware,
            self._show_middleware,
            self._describe_middleware,
            self._info_schema_middleware,
        ]  # BEGIN/COMMIT/ROLLBACK are the SQL front's (mysql-mimic's own handlers would ignore them)
        # A plain statement (``ParsedStatement.plain``) holds nothing for mysql-mimic's variable processor to replace.
        self._plain_middlewares = [m for m in self.middlewares if m != self._set_var_middleware]

    @property  # type: ignore[override]
    def database(self) -> str | None:
        """The current database: the SQL-front session's (``USE`` changes it there)."""
        return self.sql.db

    @database.setter
    def database(self, name: str | None) -> None:
        """Set by mysql-mimic from the handshake (and COM_CHANGE_USER): a database that does not exist refuses
        the connection there, with the reason (as code 1043; MySQL answers 1049)."""
        if not name:
            self.sql.db = None
            return
        db = self.engine.catalog.database(name)
        if db is None:
            raise UnknownDatabase(f"Unknown database '{name}'")
        self.sql.db = db.name

    async def init(self, connection: Connection) -> None:
        await super().init(connection)
        self._sync_sql_mode()
        self._sync_txn_mode()

    async def close(self) -> None:
        self.sql.close()  # an open transaction is rolled back, as when a MySQL client disconnects
        await super().close()

    def _sync_sql_mode(self) -> None:
        """What the client sees of the session's ``sql_mode``: ``@@sql_mode`` (mysql-mimic's variables) and the
        status flag of the packets that follow (TiDB: ``SetStatusFlag(ServerStatusNoBackslashEscaped, ...)``)."""
        self.variables.set("sql_mode", self.sql.sql_mode_text, force=True)
        conn = self.connection
        flag = ServerStatus.SERVER_STATUS_NO_BACKSLASH_ESCAPES
        conn.status_flags = conn.status_flags | flag if self.sql.no_backslash_escapes else conn.status_flags & ~flag

    async def _sql_mode_middleware(self, q: Query) -> AllowedResult:
        """``SET ... sql_mode`` into the SQL-front session (mysql-mimic would keep it as a string it never reads),
        the statement's other assignments left to the handlers after; ``@@global.sql_mode`` as the global value
        (mysql-mimic reads every ``@@`` variable from the session)."""
        e = q.expression
        if isinstance(e, exp.Set):
            ours, others = sqlmode.assignments(e)
            if not ours:
                return await q.next()
            try:
                for scope, value in ours:
                    self.sql.set_sql_mode(scope, value)
            except sqlmode.SqlModeError as exc:
                raise MysqlError(exc.message, ErrorCode.WRONG_VALUE_FOR_VAR) from exc
            except SqlError as exc:
                raise _mysql_error(exc) from exc
            finally:
                self._sync_sql_mode()
            if not others:
                return [], []
            q.expression = exp.Set(expressions=others)
            return await q.next()
        if "@@" in q.sql and "sql_mode" in q.sql.lower():
            sqlmode.with_global_values(e, self.engine.global_sql_mode)
        return await q.next()

    def _sync_txn_mode(self) -> None:
        for name in txn_mode.VARIABLES:
            self.variables.set(name, self.sql.txn_settings.get(name), force=True)

    async def _txn_mode_middleware(self, q: Query) -> AllowedResult:
        """``SET ... tidb_txn_mode / innodb_lock_wait_timeout`` into the SQL-front session (either scope), and
        ``@@global.`` reads of them as the engine's global values; as ``_sql_mode_middleware`` does for sql_mode."""
        e = q.expression
        if not isinstance(e, exp.Set):
            if "@@" in q.sql and any(v in q.sql.lower() for v in txn_mode.VARIABLES):
                txn_mode.with_global_values(e, self.engine.global_txn)
            return await q.next()
        ours, others = txn_mode.assignments(e)
        if not ours:
            return await q.next()
        try:
            for scope, name, value in ours:
                self.sql.set_txn_variable(scope, name, value)
        except txn_mode.TxnModeError as exc:
            raise MysqlError(exc.message, cast(ErrorCode, exc.code)) from exc
        except SqlError as exc:
            raise _mysql_error(exc) from exc
        finally:
            self._sync_txn_mode()
        if not others:
            return [], []
        q.expression = exp.Set(expressions=others)
        return await q.next()

    async def handle_query(self, sql: str, attrs: dict[str, str]) -> AllowedResult:
        self.timestamp = datetime.now(tz=self.timezone())
        try:
            statements = split_script(sql, no_backslash_escapes=self.sql.no_backslash_escapes)
        except SqlError as exc:
            raise _mysql_error(exc) from exc
        if not statements:
            raise MysqlError("Query was empty", ErrorCode.EMPTY_QUERY)
        result: AllowedResult = None
        for st in statements:
            result = await self._statement(st, attrs)
        return result

    def prepare_statement(self, sql: str) -> tuple[ParsedStatement, int]:
        """COM_STMT_PREPARE's statement parsed with its parameter markers: ``(template, parameter count)``."""
        try:
            return prepare(sql, no_backslash_escapes=self.sql.no_backslash_escapes)
        except SqlError as exc:
            raise _mysql_error(exc) from exc
        except PrepareError as exc:
            raise MysqlError(exc.message, cast(ErrorCode, exc.code.code)) from exc

    async def execute_statement(self, st: ParsedStatement, attrs: dict[str, str]) -> AllowedResult:
        """A prepared statement's execute, its parameters bound in ``st``: one statement as a query runs it."""
        self.timestamp = datetime.now(tz=self.timezone())
        return await self._statement(st, attrs)

    async def _statement(self, st: ParsedStatement, attrs: dict[str, str]) -> AllowedResult:
        self.result_flags = []
        chain = self._plain_middlewares if st.plain else self.middlewares
        names = written_names(st)
        q = Query(expression=st.node, sql=st.text, attrs=attrs, _middlewares=chain, _query=self._runner(st))
        return named_as_written(names, await q.start())

    def _runner(self, st: ParsedStatement) -> Callable[[exp.Expression, str, dict[str, str]], Awaitable[AllowedResult]]:
        async def run(expression: exp.Expression, sql: str, attrs: dict[str, str]) -> AllowedResult:
            return await self._run(st)

        return run

    async def _run(self, st: ParsedStatement) -> AllowedResult:
        self._sync_session()
        try:
            res = await self.sql.run(st)
        except (SqlError, SchemaError, GcSafePointPassedError) as exc:
            raise _statement_error(exc) from exc
        finally:
            self.variables.set("tidb_current_ts", self.sql.txn.start_ts if self.sql.txn else 0, force=True)
        if res.commit_ts:
            # client-go's TxnInfo (txnkv/transaction/txn.go): txn_commit_mode "2pc", "async_commit" or "1pc"
            mode = (self.sql.last_commit_mode or CommitMode.TWO_PC).value
            info = {"txn_scope": "global", "start_ts": self.sql.last_start_ts, "commit_ts": res.commit_ts,
                    "txn_commit_mode": mode, "async_commit_fallback": False, "one_pc_fallback": False}
            self.variables.set("tidb_last_txn_info", json.dumps(info, separators=(",", ":")), force=True)
        await asyncio.sleep(0)  # let the change feed and other sessions run between statements
        return self._result(res)

    def _sync_session(self) -> None:
        """The SQL-front session takes the variables a statement runs under (mysql-mimic keeps them)."""
        switches = (bool(self.variables.get("tidb_enable_async_commit")), bool(self.variables.get("tidb_enable_1pc")))
        if switches != (self.sql.commit_options.async_commit, self.sql.commit_options.one_pc):
            self.sql.commit_options = replace(self.engine.commit_options, async_commit=switches[0], one_pc=switches[1])
        self.sql.guarantee_linearizability = bool(self.variables.get("tidb_guarantee_linearizability"))
        self.sql.mem_quota_query = int(self.variables.get("tidb_mem_quota_query") or 0)
        self.sql.conn_id = self.connection.connection_id
        self.sql.time_zone = self.timezone()

    def _result(self, res: StatementResult) -> AllowedResult:
        if res.columns:
            shown = res.display_names
            columns: list[ResultColumn | str] = list(shown)
            for i, col in enumerate(res.column_defs):
                if col is not None:
                    columns[i] = _result_column(shown[i], col)
            self.result_flags = [_column_flags(col) for col in res.column_defs]
            names = res.columns
            defs = list(res.column_defs) + [None] * (len(names) - len(res.column_defs))  # a computed column has none
            # The values _wire_value rewrites: a DECIMAL column's, or an expression's. Values of time columns go as
            # they are (their encoders print them, and the binary protocol takes them); no other column's value is
            # a Decimal or a timedelta.
            fix = [i for i, col in enumerate(defs) if col is None or col.kind == ct.DECIMAL]

            def wire(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
                if not fix:
                    return [tuple(map(row.get, names)) for row in rows]
                out = []
                for row in rows:
                    values = list(map(row.get, names))
                    for i in fix:
                        values[i] = _wire_value(values[i])
                    out.append(tuple(values))
                return out

            if res.more is None:
                return wire(res.rows), columns
            return self._streamed(wire(res.rows), res.more, wire), columns
        if res.affected_rows:
            self._report_affected_rows(res.affected_rows)
        return None

    async def _streamed(self, first: list[tuple[Any, ...]], more: Iterator[list[dict[str, Any]]],
                        wire: Callable[[list[dict[str, Any]]], list[tuple[Any, ...]]]
                        ) -> AsyncIterator[tuple[Any, ...]]:
        """A streamed SELECT's rows as mysql-mimic writes them: each next batch decoded off the event loop (which
        meanwhile serves PD, the change feeds and the other sessions) once the one before is on the socket, so a
        result of any size holds one batch here and the socket's buffer (the client's read timeout sees rows all
        along). An error after the first batch reaches the client as an error packet in place of the rows."""
        batch = first
        while batch:
            for row in batch:
                yield row
            await self.connection.stream.drain()
            try:
                batch = wire(await asyncio.to_thread(next, more, []))
            except (SqlError, SchemaError, GcSafePointPassedError) as exc:
                raise _statement_error(exc) from exc

    def _report_affected_rows(self, n: int) -> None:
        """The next OK packet carries ``n`` affected rows. mysql-mimic's ``Session`` cannot return them (its
        issue #80): its connection sends ``self.ok()`` for a query without rows, so that call is wrapped once."""
        conn = self.connection
        base = type(conn).ok

        def ok_once(**kwargs: Any) -> bytes:
            del conn.ok  # type: ignore[method-assign]
            return base(conn, **{"affected_rows": n, **kwargs})

        conn.ok = ok_once  # type: ignore[method-assign]

    async def use(self, database: str) -> None:
        """``USE db`` and COM_INIT_DB (``mysql -D db``)."""
        await self._run(split_script(f"USE `{database.replace('`', '``')}`")[0])

    async def _show(self, expression: exp.Show) -> AllowedResult:
        """``SHOW CREATE TABLE`` / ``SHOW CREATE DATABASE`` as TiDB answers them (``show_create``); any other SHOW
        is mysql-mimic's (over ``information_schema``)."""
        kind = expression.name.upper()
        if kind not in ("CREATE TABLE", "CREATE DATABASE"):
            return await super()._show(expression)
        target = expression.text("target")
        try:
            if kind == "CREATE DATABASE":
                if target.lower() not in {d.lower() for d in self.sql.databases()}:
                    raise SqlError(f"Unknown database '{target}'")
                return [(target, show_create.create_database(target))], list(show_create.DATABASE_COLUMNS)
            db = expression.text("db") or self.database
            if not db:
                raise SqlError("No database selected")
            info = self.sql.table_of(exp.table_(target, db=db), "SHOW CREATE TABLE")
        except SqlError as exc:
            raise _mysql_error(exc) from exc
        text = show_create.create_table(info, auto_increment_column=info.extra.get(AUTO_INCREMENT_KEY),
                                        next_auto_id=self.engine.catalog.next_row_id(info.id))
        return [(info.name, text)], list(show_create.TABLE_COLUMNS)

    def timezone(self) -> tzinfo:  # type: ignore[override]
        """``@@time_zone``: ``SYSTEM`` (TiDB's default) is the machine's zone; else mysql-mimic's ``+hh:mm``/UTC."""
        tz = str(self.variables.get("time_zone") or "SYSTEM")
        if tz.upper() == "SYSTEM":
            return _system_zone()
        return super().timezone()

    async def _isolation_alias_middleware(self, q: Query) -> AllowedResult:
        """``tx_isolation`` and ``transaction_isolation`` are one variable under two names (TiDB keeps them in step):
        a SET of either, or ``SET TRANSACTION ISOLATION LEVEL``, sets both."""
        if not (isinstance(q.expression, exp.Set) and "isolation" in q.sql.lower()):
            return await q.next()
        before = self.variables.get("transaction_isolation"), self.variables.get("tx_isolation")
        result = await q.next()
        now, alias = self.variables.get("transaction_isolation"), self.variables.get("tx_isolation")
        if now != before[0]:
            self.variables.set("tx_isolation", now)
        elif alias != before[1]:
            self.variables.set("transaction_isolation", alias)
        return result

    async def _static_select_middleware(self, q: Query) -> AllowedResult:
        """A SELECT without FROM (``SELECT TIDB_CURRENT_TSO()``, ``SELECT 1+1``, ``SELECT ?``), once mysql-mimic's
        variable processor put in the values of ``@@`` variables and of ``DATABASE()``-like functions: evaluated
        by the SQL front, so TiDB's functions and its errors apply (an unknown function is 1305). What the front's
        evaluator does not implement goes to mysql-mimic's sqlglot executor, as before."""
        e = q.expression
        if not isinstance(e, exp.Select) or any(v for k, v in e.args.items() if k not in _STATIC_SELECT_ARGS):
            return await q.next()
        self._sync_session()
        try:
            return self._result(self.sql.constant_select(e, q.sql))
        except SqlError as exc:
            if exc.message.startswith("unsupported expression"):
                return await self._static_query_middleware(q)
            raise _statement_error(exc) from exc

    async def _constant_select_middleware(self, q: Query) -> AllowedResult:
        """A SELECT of constants -- what ``SELECT @@tidb_last_txn_info`` is once ``_set_var_middleware`` put the
        values in -- answered here. mysql-mimic's static-query middleware runs sqlglot's executor, optimizer
        included, on it: several times the CPU of a point read, and every write a client makes through ``TidbSql``
        is followed by one."""
        answer = constant_select(q.expression)
        return await q.next() if answer is None else answer

    async def _snapshot_middleware(self, q: Query) -> AllowedResult:
        """``SET [@@][session.]tidb_snapshot = ...``: read at that ts from the next statement on."""
        if not (isinstance(q.expression, exp.Set) and "tidb_snapshot" in q.expression.sql().lower()):
            return await q.next()
        before = self.variables.get("tidb_snapshot")
        result = await q.next()
        text = str(self.variables.get("tidb_snapshot") or "").strip()
        try:
            ts = parse_ts_or_datetime(text) if text else 0
            if ts:
                self.sql.check_snapshot(ts)
        except (ValueError, SqlError) as exc:
            self.variables.set("tidb_snapshot", before)
            if isinstance(exc, SqlError):
                raise _mysql_error(exc) from exc
            raise MysqlError(f"tidb_snapshot: {exc}", ErrorCode.WRONG_VALUE_FOR_VAR) from exc
        self.sql.at_ts = ts
        return result

    async def _info_schema_middleware(self, q: Query) -> AllowedResult:
        """``information_schema`` (and mysql-mimic's few ``mysql`` grant tables) from ``schema()``; every other
        ``mysql.*`` table (TiDB's ``tidb_ddl_job``, ``tidb_ddl_history``) is the engine's."""
        dbs = {db.lower() for db in find_dbs(q.expression)}
        current = (self.database or "").lower()
        if dbs <= {"information_schema"} and (dbs or current == "information_schema"):
            plan = plan_listing(q.expression, current)
            if plan is not None:
                return await self._listing(plan)
            return await self._query_info_schema(q.expression)
        if dbs == {"mysql"} or (not dbs and current == "mysql"):
            names = {t.name.lower() for t in q.expression.find_all(exp.Table)}
            if names and names <= set(INFO_SCHEMA["mysql"]):
                return await self._query_info_schema(q.expression)
        return await q.next()

    async def _listing(self, plan: ListingPlan) -> AllowedResult:
        """A listing of ``information_schema.TABLES``, streamed under the ``upstream-catalog`` limiter."""
        try:
            rows, names, sample = await self.listing.run(plan, self._tables_of, self.connection.stream.drain)
        except MemoryLimitExceeded as exc:
            log.warning("table listing refused", reason=exc.message)
            raise MysqlError(exc.message, cast(ErrorCode, mysql_errors.TIDB_MEM_QUOTA_EXCEEDED.code)) from exc
        return rows, [_listing_column(i, name, sample) for i, name in enumerate(names)]

    async def _query_info_schema(self, expression: exp.Expression) -> AllowedResult:
        """Any other ``information_schema`` query: built whole by mysql-mimic's sqlglot executor, under a heap permit
        of the ``upstream-catalog`` limiter for what it builds."""
        tables = self.sql.tables()
        try:
            async with self.listing.whole(tables, f"information_schema query `{expression.sql()[:160]}`"):
                return await TidbInfoSchema(tables, self.sql.databases()).query(expression)
        except MemoryLimitExceeded as exc:
            log.warning("information_schema query refused", reason=exc.message)
            raise MysqlError(exc.message, cast(ErrorCode, mysql_errors.TIDB_MEM_QUOTA_EXCEEDED.code)) from exc

    def _tables_of(self, db: str | None) -> list[TableInfo]:
        if db is not None and not self.sql.at_ts:
            return list(self.engine.catalog.iter_tables(db))  # a copy: the catalog may change between chunks
        tables = self.sql.tables()
        return tables if db is None else [t for t in tables if t.db_name.lower() == db.lower()]

    async def schema(self) -> TidbInfoSchema:
        """``information_schema`` for SHOW and queries: the tables the session sees, at ``tidb_snapshot`` when one
        is set (TiDB answers with the snapshot's schema), with TiDB's ``TIDB_TABLE_ID``."""
        return TidbInfoSchema(self.sql.tables(), self.sql.databases())


class TlsSafeStream:
    """mysql-mimic's stream with a TLS upgrade that keeps what the client sent right after its SSL request.

    A client sends the SSL request packet and at once its TLS ClientHello; both often arrive in one read, which the
    connection's StreamReader buffers. mysql-mimic's ``start_tls`` (asyncio's ``loop.start_tls``) hands the socket
    to a new SSL protocol and leaves those buffered bytes behind, so the server never sees the ClientHello and the
    handshake hangs until a timeout (seen as "handshake operation timed out" or EOF under load). This does what
    ``loop.start_tls`` does, and feeds the buffered bytes to the SSL protocol before reading resumes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A wrapper, not a subclass: MysqlStream is compiled (mypyc) and takes no interpreted subclasses.
        self._stream = MysqlStream(reader, writer)
        self.reader, self.writer = reader, writer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def start_tls(self, ssl: SSLContext) -> None:
        from asyncio import sslproto

        loop = asyncio.get_running_loop()
        transport = cast(asyncio.Transport, self.writer.transport)
        protocol = transport.get_protocol()
        buffered = bytes(self.reader._buffer)  # type: ignore[attr-defined]
        self.reader._buffer.clear()  # type: ignore[attr-defined]
        waiter = loop.create_future()
        tls = sslproto.SSLProtocol(loop, protocol, ssl, waiter, server_side=True, call_connection_made=False)
        transport.pause_reading()
        transport.set_protocol(tls)
        tls.connection_made(transport)
        while buffered:
            buf = tls.get_buffer(len(buffered))
            n = min(len(buf), len(buffered))
            buf[:n] = buffered[:n]
            tls.buffer_updated(n)
            buffered = buffered[n:]
        transport.resume_reading()
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        self.writer._transport = tls._app_transport  # type: ignore[attr-defined]
        self.reader._transport = tls._app_transport  # type: ignore[attr-defined]


# mysql-mimic's server builds each connection's stream and connection by these module-level names
# (mysql_mimic/server.py).
mysql_mimic_server.MysqlStream = TlsSafeStream  # type: ignore[misc]
mysql_mimic_server.Connection = StatementConnection  # type: ignore[misc]


class Accounts(IdentityProvider):
    """Who may log in: anyone without a password when ``password`` is empty, else ``user`` with ``password``."""

    def __init__(self, user: str = "root", password: str = "") -> None:
        self.user, self._auth_string = user, (NativePasswordAuthPlugin.create_auth_string(password) if password
                                              else None)
        self._nobody = NativePasswordAuthPlugin.create_auth_string(secrets.token_hex(16))

    async def get_user(self, username: str) -> User | None:
        if self._auth_string is None:
            return User(name=username, auth_plugin=NativePasswordAuthPlugin.name)
        # Another user gets a password nobody knows: error 1045, as a wrong password gets (MySQL does not tell
        # which users exist).
        auth = self._auth_string if username == self.user else self._nobody
        return User(name=username, auth_string=auth, auth_plugin=NativePasswordAuthPlugin.name)


class MysqlFront:
    """The MySQL protocol server of a cluster's SQL engine, on the cluster's event loop."""

    def __init__(self, engine: SqlEngine, listing: TableListing | None = None, accounts: Accounts | None = None,
                 ssl: SSLContext | None = None) -> None:
        self.engine = engine
        self.listing = listing or TableListing()
        self._connections = _Connections()
        self._server = MysqlServer(session_factory=lambda: FrontSession(engine, self.listing),
                                   control=self._connections, identity_provider=accounts or Accounts(), ssl=ssl)
        self.addr = ""

    async def start(self, host: str, port: int = 0) -> str:
        await self._server.start_server(host=host, port=port)
        bound = self._server.sockets()[0].getsockname()
        self.addr = f"{host}:{bound[1]}"
        log.info("MySQL protocol serving", addr=self.addr)
        return self.addr

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, end every open connection (its transaction rolls back), wait for them to go."""
        self._server.close()
        for connection_id in list(self._connections.open):
            await self._connections.kill(connection_id)
        deadline = asyncio.get_running_loop().time() + grace
        while self._connections.open and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # each killed connection's task unwinds on this loop
        await self._server.wait_closed()
