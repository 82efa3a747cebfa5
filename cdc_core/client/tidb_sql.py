"""cdcflow's SQL to TiDB: the MySQL protocol, through PyMySQL, as any TiDB client speaks it.

Every SQL need of cdcflow goes here: snapshot reads (``SET @@tidb_snapshot = '<ts>'``, TiDB's stale read by
tso), the data-quality checks and ``verify``, the DDL jobs at a ts, and ``cdcflow upstream sql``. Large results
stream (PyMySQL's unbuffered ``SSCursor``: rows are read off the socket as they are consumed), so a chunk of a
table is never one message or one list.

Addresses are ``[mysql://][user[:password]@]host:port``; the user defaults to ``root`` and the password to
``$CDCFLOW_TIDB_PASSWORD`` (empty when unset). ``UpstreamClient`` finds them, in order, from its ``tidb``
argument, ``$CDCFLOW_TIDB``, or the SQL servers registered in PD (``/topology/tidb/``, see
``cdc_core/upstream/pd/etcd_service.py``), and tries them in turn until one connects.

Literals follow the session's ``sql_mode``: :meth:`TidbSql.literal` writes a string as the session reads it
(``NO_BACKSLASH_ESCAPES`` makes a backslash an ordinary character), and scripts are split into statements by the
same rule. The mode is read once per connection (``@@sql_mode``, again after a ``SET`` the session ran), and the
server's status flag ``SERVER_STATUS_NO_BACKSLASH_ESCAPES``, which TiDB sends in every OK packet
(``pkg/sessionctx/variable/sysvar.go``: setting ``sql_mode`` sets ``mysql.ServerStatusNoBackslashEscaped``), is honoured
as PyMySQL's own escaping honours it.

Values come back as the MySQL text protocol types them (PyMySQL: ``Decimal``, ``datetime``, ``timedelta``,
``bytes``, ...) and are handed out in their JSON form (``value_text.json_value``), which each column's
``convert`` reads back exactly. A failed statement is an ``UpstreamError`` with MySQL's code and the statement.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pymysql
import pymysql.cursors
from pymysql.constants import SERVER_STATUS

from cdc_core.codec.sql_literal import NO_BACKSLASH_ESCAPES, load_sqlglot, mysql_dialect, string_literal
from cdc_core.codec.value_text import json_value
from cdc_core.errors import ConfigError, UpstreamError
from cdc_core.log import get_logger
from cdc_core.tls import client_tls, handshake_hint

log = get_logger("cdcflow.client.tidb_sql")

ENV_TIDB = "CDCFLOW_TIDB"
ENV_PASSWORD = "CDCFLOW_TIDB_PASSWORD"
DEFAULT_USER = "root"
# MySQL client errors that mean the connection is gone (CR_SERVER_GONE_ERROR, CR_SERVER_LOST, CR_CONN_HOST_ERROR).
_LOST = {2006, 2013, 2003}


@dataclass(frozen=True)
class StatementResult:
    statement: str
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    affected_rows: int = 0
    commit_ts: int = 0  # commit ts of the transaction the statement committed (0: none)
    row_count: int = 0  # rows a SELECT returned (with TidbSql.stream's on_row: handed out, not kept in rows)


@dataclass(frozen=True)
class TidbAddress:
    host: str
    port: int
    user: str = DEFAULT_USER
    password: str | None = None  # None: $CDCFLOW_TIDB_PASSWORD

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, spec: str, where: str = "tidb") -> TidbAddress:
        """``[mysql://][user[:password]@]host:port``; ``where`` names the setting in errors."""
        text = spec.strip()
        if text.startswith("mysql://"):
            text = text[len("mysql://"):].rstrip("/")
        user, password = DEFAULT_USER, None
        if "@" in text:
            cred, text = text.rsplit("@", 1)
            user, sep, pw = cred.partition(":")
            user, password = unquote(user) or DEFAULT_USER, unquote(pw) if sep else None
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{where}: {spec!r} is not [mysql://][user[:password]@]host:port")
        return cls(host.strip("[]"), int(port), user, password)


def parse_addresses(spec: str, where: str = "tidb") -> list[TidbAddress]:
    """Comma-separated addresses (any of them will do)."""
    out = [TidbAddress.parse(part, where) for part in spec.split(",") if part.strip()]
    if not out:
        raise ConfigError(f"{where}: no address given")
    return out


def split_statements(script: str, *, no_backslash_escapes: bool = False) -> list[str]:
    """A script's statements: split on ``;`` outside literals, identifiers and comments (MySQL's tokens; a
    backslash in a literal escapes only without ``no_backslash_escapes``)."""
    done, _, tail = _split(script, no_backslash_escapes)
    return done + ([tail] if tail is not None else [])


def _split(script: str, no_backslash_escapes: bool) -> tuple[list[str], int, str | None]:
    """The statements a ``;`` ends, the offset just after the last ``;`` (0: none), and the statement after it."""
    load_sqlglot()  # here: commands that never run SQL start without sqlglot
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = mysql_dialect(no_backslash_escapes=no_backslash_escapes).tokenize(script)
    except TokenError as exc:
        raise UpstreamError(f"cannot split the SQL script: {exc}") from exc
    out, start, last_end, cut = [], None, None, 0
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            if start is not None:
                out.append(script[start:last_end])
            start = last_end = None
            cut = t.end + 1
            continue
        if start is None:
            start = t.start
        last_end = t.end + 1
    return out, cut, script[start:last_end] if start is not None else None


def iter_statements(pieces: Iterable[str], *, no_backslash_escapes: bool = False) -> Iterator[str]:
    """The statements of a script read piece by piece (a file of any size), split as :func:`split_statements`
    splits, each as soon as its ``;`` is read. What follows the last ``;`` read so far waits for the next piece
    (a piece may end inside a literal or a comment: such a text waits until it tokenizes); the text after the
    script's last ``;`` is its last statement."""
    pending = ""
    for piece in pieces:
        pending += piece
        if ";" not in piece:
            continue
        try:
            done, cut, _ = _split(pending, no_backslash_escapes)
        except UpstreamError:
            continue  # a token cut by the piece's end (or a bad one, which the end of the script reports)
        yield from done
        pending = pending[cut:]
    yield from split_statements(pending, no_backslash_escapes=no_backslash_escapes)


TIME_ZONE_INIT = "SET time_zone = '+00:00'"


def connect(addresses: list[TidbAddress], timeout: float = 60.0) -> tuple[pymysql.connections.Connection[Any], str]:
    """A MySQL connection (autocommit, utf8mb4) to the first of ``addresses`` that accepts one, and its address."""
    failures = []
    secure = client_tls()
    for a in addresses:
        password = a.password if a.password is not None else os.environ.get(ENV_PASSWORD, "")
        try:
            conn = pymysql.connect(
                host=a.host, port=a.port, user=a.user, password=password, autocommit=True, charset="utf8mb4",
                connect_timeout=min(timeout, 10.0), read_timeout=timeout, write_timeout=timeout,
                # TLS to TiDB when configured: the server's certificate checked against the CA and its address,
                # this certificate offered
                ssl=secure.pymysql_ssl() if secure else None,
                # TIMESTAMP values (and DATE_FORMAT of them in checksums) in UTC, as the lake holds them, whatever
                # the server's time zone
                init_command=TIME_ZONE_INIT)
        except pymysql.err.MySQLError as exc:
            failures.append(f"{a.addr}: {_message(exc)}{handshake_hint(_message(exc))}")
            continue
        return conn, a.addr
    raise UpstreamError("cannot connect to TiDB's SQL port: " + "; ".join(failures))


def connection_literal(conn: pymysql.connections.Connection[Any]) -> Callable[[str], str]:
    """The string literals of a connection made by :func:`connect` (one that is not a :class:`TidbSql`), by the
    status flag its server sent last: TiDB sends ``SERVER_STATUS_NO_BACKSLASH_ESCAPES`` in every OK packet."""
    nbe = bool(conn.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES)
    return functools.partial(string_literal, no_backslash_escapes=nbe)


class TidbSql:
    """One MySQL connection to one of ``addresses``, opened on first use and re-opened after it is lost."""

    def __init__(self, addresses: list[TidbAddress], timeout: float = 60.0) -> None:
        if not addresses:
            raise ValueError("no TiDB address")
        self.addresses = addresses
        self.timeout = timeout
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._last_commit_ts = 0
        # The ts the session reads at (``@@tidb_snapshot``; 0: the latest). It stays between reads: a run of them at
        # one ts (a window's checks, a table's statements at a time) sets it once instead of around each statement.
        self._snapshot = 0
        self._sql_mode: frozenset[str] | None = None  # the session's, read once per connection (None: not yet)
        self.addr = ""

    def _connect(self) -> pymysql.connections.Connection[Any]:
        if self._conn is None:
            self._conn, self.addr = connect(self.addresses, self.timeout)
            self._snapshot = 0
            self._sql_mode = None
        return self._conn

    @property
    def sql_mode(self) -> frozenset[str]:
        """The session's ``sql_mode`` names (``@@sql_mode``, upper case), read once per connection."""
        conn = self._connect()
        if self._sql_mode is None:
            text = "SELECT @@sql_mode"
            try:
                with conn.cursor() as cur:
                    cur.execute(text)
                    row = cur.fetchone()
            except pymysql.err.MySQLError as exc:
                raise self._fail(exc, text) from exc
            value = row[0] if row else ""
            value = value.decode() if isinstance(value, bytes) else str(value or "")
            self._sql_mode = frozenset(m.strip().upper() for m in value.split(",") if m.strip())
        return self._sql_mode

    @property
    def no_backslash_escapes(self) -> bool:
        """Whether the session reads a backslash in a string literal as an ordinary character: the server's status
        flag when it sends it (TiDB and MySQL do, in every OK packet), else the mode read at connect."""
        conn = self._connect()
        return bool(conn.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES) or \
            NO_BACKSLASH_ESCAPES in self.sql_mode

    def literal(self, text: str) -> str:
        """``text`` as a string literal this session reads back as ``text``."""
        return string_literal(text, no_backslash_escapes=self.no_backslash_escapes)

    def _fail(self, exc: pymysql.err.MySQLError, statement: str, n: int = 0) -> UpstreamError:
        where = f"statement {n} `{_short(statement)}`" if n else f"`{_short(statement)}`"
        if _code(exc) in _LOST or isinstance(exc, pymysql.err.InterfaceError):
            self.close()
            return UpstreamError(f"lost the TiDB connection at {self.addr or '?'} in {where}: {_message(exc)}")
        return UpstreamError(f"{where}: {_message(exc)} (TiDB at {self.addr})")

    def execute(self, script: str, at_ts: int = 0) -> list[StatementResult]:
        """Run a script's statements in order on this connection (one session: BEGIN ... COMMIT span statements);
        one result per statement, rows included. With ``at_ts`` the script reads at that ts (and TiDB refuses
        writes). The first failing statement raises; none is retried, since a statement that may have committed
        must not run twice."""
        results: list[StatementResult] = []
        try:
            self._read_at(at_ts)
            self._run_script(script, results)
        finally:
            self._end_script()
        return results

    def _read_at(self, ts: int) -> None:
        """The session reads at ``ts`` (0: the latest) from the next statement on; set only when it does not
        already (see ``_snapshot``)."""
        conn = self._connect()
        if ts == self._snapshot:
            return
        text = f"SET @@tidb_snapshot = '{int(ts)}'" if ts else "SET @@tidb_snapshot = ''"
        try:
            with conn.cursor() as cur:
                cur.execute(text)
        except pymysql.err.MySQLError as exc:
            raise self._fail(exc, text) from exc
        self._snapshot = ts

    def _end_script(self) -> None:
        """A script is a unit, as ``mysql -e`` runs one: a transaction it leaves open (by an error, or without
        COMMIT) is rolled back, as the server does when such a client disconnects. A snapshot it read at stays set
        for the next read (a statement at another ts, or at the latest, sets its own first)."""
        if self._conn is None:
            return
        try:
            with self._conn.cursor() as cur:
                cur.execute("SELECT @@tidb_current_ts")
                row = cur.fetchone()
                if row and row[0]:
                    log.info("rolling back a transaction a script left open", start_ts=row[0])
                    cur.execute("ROLLBACK")
        except pymysql.err.MySQLError:
            self.close()  # the server rolls back at disconnect

    def _run_script(self, script: str, results: list[StatementResult]) -> None:
        for n, text in enumerate(split_statements(script, no_backslash_escapes=self.no_backslash_escapes), 1):
            results.append(self._run_one(n, text, None))

    def stream(self, statements: Iterable[str], at_ts: int = 0,
               on_row: Callable[[dict[str, Any]], object] | None = None) -> Iterator[StatementResult]:
        """:meth:`execute` for a script of any size: ``statements`` taken one at a time (:func:`iter_statements`
        reads a file so), each result yielded once its statement ran, a SELECT's rows handed to ``on_row`` as they
        arrive off the connection (its result then carries ``row_count`` and no rows)."""
        try:
            self._read_at(at_ts)
            for n, text in enumerate(statements, 1):
                yield self._run_one(n, text, on_row)
        finally:
            self._end_script()

    def _run_one(self, n: int, text: str, on_row: Callable[[dict[str, Any]], object] | None) -> StatementResult:
        conn = self._connect()
        rows: list[dict[str, Any]] = []
        count = 0
        try:
            cursor = pymysql.cursors.SSDictCursor if on_row is not None else pymysql.cursors.DictCursor
            with conn.cursor(cursor) as cur:
                affected = cur.execute(text)
                columns = [d[0] for d in cur.description or ()]
                if columns:
                    for row in cur.fetchall_unbuffered() if on_row is not None else cur.fetchall():
                        value = {k: json_value(v) for k, v in row.items()}
                        count += 1
                        if on_row is not None:
                            on_row(value)
                        else:
                            rows.append(value)
                commit_ts = 0
                if not columns:
                    cur.execute("SELECT @@tidb_last_txn_info")
                    info = (cur.fetchone() or {}).get("@@tidb_last_txn_info") or ""
                    commit_ts = int(json.loads(info)["commit_ts"]) if info else 0
        except pymysql.err.MySQLError as exc:
            raise self._fail(exc, text, n) from exc
        if text.lstrip()[:3].upper() == "SET":
            self._sql_mode = None  # it may have set sql_mode: read again when next needed
        # tidb_last_txn_info names the session's last commit: it is this statement's only if it changed.
        own = commit_ts if commit_ts and commit_ts != self._last_commit_ts else 0
        self._last_commit_ts = commit_ts or self._last_commit_ts
        return StatementResult(text, columns, rows, 0 if columns else affected, own, count)

    def iter_rows(self, sql: str, at_ts: int = 0) -> Iterator[dict[str, Any]]:
        """The rows of one SELECT, streamed (JSON values by column name); at ``at_ts`` (a tso) when given."""
        self._read_at(at_ts)
        conn = self._connect()
        try:
            with conn.cursor(pymysql.cursors.SSDictCursor) as cur:
                cur.execute(sql)
                for row in cur.fetchall_unbuffered():
                    yield {k: json_value(v) for k, v in row.items()}
        except pymysql.err.MySQLError as exc:
            raise self._fail(exc, sql) from exc

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self._last_commit_ts = 0
        self._snapshot = 0
        self._sql_mode = None
        if conn is not None:
            try:
                conn.close()
            except pymysql.err.MySQLError:
                pass  # already gone


def _code(exc: pymysql.err.MySQLError) -> int | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


def _message(exc: pymysql.err.MySQLError) -> str:
    code = _code(exc)
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return f"{text} (MySQL error {code})" if code is not None else text


def _short(text: str, n: int = 120) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 3] + "..."
