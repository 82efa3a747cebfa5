"""The SQL front (TiDB's session layer): parse a script with sqlglot and execute it in one session.

Statements of a script share a session: ``USE`` and an explicit transaction (``BEGIN`` /
``START TRANSACTION`` ... ``COMMIT`` / ``ROLLBACK``) span statements; outside one, every
statement autocommits (and is retried a few times on a write conflict, as TiDB retries
autocommit statements). Supported: CREATE/DROP DATABASE, CREATE/DROP/TRUNCATE TABLE, RENAME
TABLE, ALTER TABLE ... RENAME TO, INSERT, UPDATE, DELETE, SELECT (one table, WHERE, ORDER BY,
LIMIT, COUNT/MIN/MAX/SUM), USE, TiDB's ``SPLIT TABLE t BETWEEN (lo) AND (hi) REGIONS n`` /
``SPLIT TABLE t BY (v1), (v2)``. Anything else is an error naming the statement.

Transactions (``txn_mode``): an explicit one is pessimistic unless the session's ``tidb_txn_mode`` (or ``BEGIN
OPTIMISTIC``) says optimistic, as TiDB's default; an autocommit statement is optimistic. A pessimistic DML statement
or ``SELECT ... FOR UPDATE`` locks its keys before it returns (``txn.Transaction.lock_statement_keys``), runs again
on a write newer than its ``for_update_ts``, and fails with 1205 (the statement undone) or 1213 (the transaction
rolled back, as TiDB does) when its lock wait times out or closes a deadlock.

Errors follow MySQL: a failing statement is undone and the transaction stays usable. Because a
script stops at its first error and a session lives as long as its script, a transaction still
open when a script ends (by an error or without COMMIT) is rolled back, as when a MySQL client
disconnects. DDL implicitly commits an open transaction first, as in MySQL. The whole script is
parsed before anything runs, so a syntax error anywhere runs nothing.

``TiDB`` extensions: ``PRIMARY KEY ... [NON]CLUSTERED`` (also in ``/*T![clustered_index] ... */``
comments). A primary key of any type is clustered unless NONCLUSTERED is given, as with TiDB's default
``tidb_enable_clustered_index = ON``: an integer one is the row handle, any other a common handle.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import tzinfo
from typing import Any, Final, cast

import sqlglot
from sqlglot import Dialect, exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from cdc_core.codec import key as keycodec
from cdc_core.codec.datum_key import encode_key
from cdc_core.codec.sql_literal import mysql_dialect
from cdc_core.log import get_logger
from cdc_core.schema import column_type as ct
from cdc_core.schema import ddl_history
from cdc_core.schema.model import SchemaError, TableInfo
from cdc_core.schema.partition import HASH, KEY, PartitionInfo
from cdc_core.upstream.pd.regions import split_values
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.sql import access_path, bulk_import, txn_mode
from cdc_core.upstream.sql import sql_mode as sqlmode
from cdc_core.upstream.sql.ddl import partition_ddl, schema_meta
from cdc_core.upstream.sql.ddl.catalog import Catalog
from cdc_core.upstream.sql.ddl.column_def import parse_column_def
from cdc_core.upstream.sql.ddl.executor import AlterChange, DdlExecutor
from cdc_core.upstream.sql.ddl.partition_clause import (
    PartitionSpec,
    cut_partition_clause,
    parse_added_partitions,
    parse_partition_clause,
)
from cdc_core.upstream.sql.errors import DuplicateKeyError, ErrorKind, SqlError
from cdc_core.upstream.sql.expr import column_name, compile_expr, literal_value, truthy
from cdc_core.upstream.sql.mem_quota import DEFAULT_MEM_QUOTA_QUERY
from cdc_core.upstream.sql.select_plan import run_select
from cdc_core.upstream.sql.statement_result import STREAM_BATCH_ROWS as STREAM_BATCH_ROWS  # re-exported
from cdc_core.upstream.sql.statement_result import StatementResult
from cdc_core.upstream.sql.table_writer import (
    AUTO_INCREMENT_KEY,
    StoredRow,
    TableWriter,
    convert_value,
    row_with_rowid,
)
from cdc_core.upstream.sql.tidb_functions import StatementContext, enter_statement, leave_statement
from cdc_core.upstream.sql.txn import CommitMode, CommitOptions, Transaction
from cdc_core.upstream.store.lock_manager import DeadlockError, LockWaitTimeoutError
from cdc_core.upstream.store.mvcc import KeyLockedError, MvccStore, WriteConflictError

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # it warns when it falls back to a Command
log = get_logger("cdcflow.upstream.sql")
_DIALECT = MySQL()
_CLUSTER_WORDS = {"CLUSTERED": True, "NONCLUSTERED": False}
# ALTER TABLE t ADD PARTITION (<definitions>) / DROP PARTITION p[, q] / TRUNCATE PARTITION p[, q]; the ADD body is read
# as the definitions of the table's partitioning method (group 3, prefixed with the method by the caller).
_PARTITION_OP_RE = re.compile(r"^\s*ALTER\s+TABLE\s+([`\w.]+)\s+(ADD|DROP|TRUNCATE)\s+PARTITION\b\s*(.*)$",
                              re.IGNORECASE | re.DOTALL)
# Partition DDL that changes which key ranges hold a table's rows (cdc_core.upstream.sql.ddl.partition_ddl).
_REORGANIZE_RE = re.compile(r"^\s*ALTER\s+TABLE\s+([`\w.]+)\s+REORGANIZE\s+PARTITION\s+(.+?)\s+INTO\s*(\(.*\))\s*$",
                            re.IGNORECASE | re.DOTALL)
_PARTITION_BY_RE = re.compile(r"^\s*ALTER\s+TABLE\s+([`\w.]+)\s+(PARTITION\s+BY\b.*)$", re.IGNORECASE | re.DOTALL)
_REMOVE_PARTITIONING_RE = re.compile(r"^\s*ALTER\s+TABLE\s+([`\w.]+)\s+REMOVE\s+PARTITIONING\s*$", re.IGNORECASE)
_EXCHANGE_RE = re.compile(r"^\s*ALTER\s+TABLE\s+([`\w.]+)\s+EXCHANGE\s+PARTITION\s+`?(\w+)`?\s+WITH\s+TABLE\s+"
                          r"([`\w.]+)(?:\s+(WITH|WITHOUT)\s+VALIDATION)?\s*$", re.IGNORECASE | re.DOTALL)
_COALESCE_RE = re.compile(r"^\s*ALTER\s+TABLE\s+([`\w.]+)\s+COALESCE\s+PARTITION\s+(\d+)\s*$", re.IGNORECASE)
_PARTITION_LAYOUT_RES = (_PARTITION_OP_RE, _COALESCE_RE, _EXCHANGE_RE, _REORGANIZE_RE, _PARTITION_BY_RE,
                         _REMOVE_PARTITIONING_RE)
_RENAME_RE = re.compile(r"^\s*RENAME\s+TABLE\s+(.+)$", re.IGNORECASE | re.DOTALL)
# TiDB's SPLIT TABLE (sqlglot cannot parse it): BETWEEN (lo) AND (hi) REGIONS n, or BY (v1), (v2)...
_SPLIT_RE = re.compile(
    r"^\s*SPLIT\s+TABLE\s+([`\w.]+)\s+(?:BETWEEN\s*\(\s*(-?\d+)\s*\)\s*AND\s*\(\s*(-?\d+)\s*\)"
    r"\s*REGIONS\s+(\d+)|BY\s+((?:\(\s*(?:-?\d+|'[^'\\]*')\s*\)\s*,?\s*)+))\s*$",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class ParsedStatement:
    text: str
    node: exp.Expression
    clustered: bool | None  # CLUSTERED / NONCLUSTERED given (CREATE TABLE)
    partition: PartitionSpec | None = None  # CREATE TABLE ... PARTITION BY
    # No session variable, hint or function call in it (see :func:`plain_tokens`): the MySQL front skips
    # mysql-mimic's variable processor, a walk of the whole tree (a 1,000-key point read's: 1,503 nodes).
    plain: bool = False
    # A SELECT's items as written (the source text of each, ``?`` for a parameter): the result columns' names.
    item_texts: tuple[str, ...] | None = None

def _short(text: str, n: int = 80) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 3] + "..."


# Tokens a "(" may follow in a statement without a function call: a list, a row constructor, a subexpression.
_BEFORE_PAREN: Final = frozenset({
    TokenType.IN, TokenType.VALUES, TokenType.COMMA, TokenType.L_PAREN, TokenType.WHERE, TokenType.AND,
    TokenType.OR, TokenType.NOT, TokenType.EQ, TokenType.NEQ, TokenType.LT, TokenType.LTE, TokenType.GT,
    TokenType.GTE, TokenType.PLUS, TokenType.DASH, TokenType.STAR, TokenType.SLASH, TokenType.SELECT, TokenType.SET})
# What mysql-mimic's VariableProcessor replaces comes from these (mysql_mimic/variable_processor.py): SET_VAR hints,
# ``@@`` session parameters, the functions of ``mysql_function_mapping`` (called, or sqlglot's no-paren functions)
# and the column-like ``CURRENT_USER`` / ``CURRENT_TIME`` / ``CURRENT_TIMESTAMP`` / ``CURRENT_DATE``.
_VARIABLE_TOKENS: Final = frozenset({TokenType.SESSION_PARAMETER, TokenType.PARAMETER, TokenType.HINT,
                                     *MySQL.Parser.NO_PAREN_FUNCTIONS})
_NAME_TOKENS: Final = (TokenType.VAR, TokenType.IDENTIFIER)
_VARIABLE_WORDS: Final = frozenset({"CURRENT_USER", "CURRENT_TIME", "CURRENT_TIMESTAMP", "CURRENT_DATE", "LOCALTIME",
                                    "LOCALTIMESTAMP"})


def plain_tokens(tokens: list[Any]) -> bool:
    """Whether a statement's tokens hold nothing mysql-mimic's variable processor replaces: no hint, no ``@`` /
    ``@@`` variable, no no-paren function (``CURRENT_DATE``) and no call (a name followed by ``(``, but the table of
    ``INSERT INTO t (columns)``). Sound, not complete: a statement it calls plain parses to a tree the processor
    leaves as it is (``tests/upstream/test_sql_front.py`` checks it), one it does not may be plain too."""
    for i, t in enumerate(tokens):
        tt = t.token_type
        if tt in _VARIABLE_TOKENS or (tt in _NAME_TOKENS and t.text.upper() in _VARIABLE_WORDS):
            return False
        if tt == TokenType.L_PAREN and i > 0 and tokens[i - 1].token_type not in _BEFORE_PAREN:
            if not _insert_target(tokens, i - 1):
                return False
    return True


def _insert_target(tokens: list[Any], i: int) -> bool:
    """Whether token ``i`` ends the table name of ``INSERT INTO t`` / ``INTO db.t`` (a column list follows)."""
    kinds = [t.token_type for t in tokens[max(0, i - 3):i + 1]]
    return kinds[-1] in _NAME_TOKENS and (kinds[-2:-1] == [TokenType.INTO] or (
        len(kinds) == 4 and kinds[0] == TokenType.INTO and kinds[1] in _NAME_TOKENS and kinds[2] == TokenType.DOT))


def _parse_tokens(tokens: list[Any], sql: str, text: str) -> exp.Expression:
    """One statement, ``text``, from its tokens (of the script ``sql``), as ``sqlglot.parse_one`` parses ``text``."""
    result = _DIALECT.parser().parse(tokens, sql)
    if not result or result[0] is None:
        raise ParseError(f"No expression was parsed from '{text}'")
    return cast(exp.Expression, result[0] if len(result) == 1 else exp.Block(expressions=result))


# ``IN (`` and a long run of integer literals, as the window checks' point reads send their keys (1,000 a
# statement): the run is held out of the text before it is tokenized, which with the parse of its literals is a
# third of such a read's cost, and put back into the tree as the nodes sqlglot builds for it (:func:`_put_back`).
_INT_RUN_RE = re.compile(r"\bIN\s*\(\s*(-?\d+(?:\s*,\s*-?\d+){31,})\s*\)", re.IGNORECASE | re.ASCII)
_HELD_RUN = "__cdcflow_int_run_"


class _NotHeld(Exception):
    """A held run did not come back as the whole list of an ``IN`` (it was in a string, a comment, a name)."""


def split_script(sql: str, *, no_backslash_escapes: bool = False) -> list[ParsedStatement]:
    """Split a script on ``;`` (outside literals and comments) and parse each statement; a backslash in a string
    literal escapes the next character unless ``no_backslash_escapes`` (the session's ``sql_mode`` has
    ``NO_BACKSLASH_ESCAPES``: TiDB's lexer, ``scanString``)."""
    dialect = mysql_dialect(no_backslash_escapes=no_backslash_escapes)
    held: dict[str, str] = {}

    def hold(m: re.Match[str]) -> str:
        name = f"{_HELD_RUN}{len(held)}__"
        held[name] = m.group(1)
        return m.group(0)[:m.start(1) - m.start()] + name + m.group(0)[m.end(1) - m.start():]

    reduced = _INT_RUN_RE.sub(hold, sql) if len(sql) > 128 else sql
    if held:
        try:
            return _split_script(reduced, held, dialect)
        except _NotHeld:
            pass  # parsed as written
    return _split_script(sql, {}, dialect)


def _put_back(node: exp.Expression, held: dict[str, str], put: set[str]) -> None:
    """The held runs of ``node`` (placeholder columns) put back as the literals sqlglot parses them to (``-5``: a
    negated 5), their names added to ``put``. Raises ``_NotHeld`` when a placeholder is anything but an ``IN``'s
    only item."""
    for col in list(node.find_all(exp.Column)):
        run = held.get(col.name)
        if run is None:
            continue
        parent = col.parent
        if col.table or not isinstance(parent, exp.In) or parent.expressions != [col] or col.name in put:
            raise _NotHeld(col.name)
        parent.set("expressions", [exp.Neg(this=_number(v[1:])) if v[0] == "-" else _number(v)
                                   for v in (x.strip() for x in run.split(","))])
        put.add(col.name)


def _number(text: str) -> exp.Literal:
    return exp.Literal(this=text, is_string=False)  # Literal.number's node, built at a third of its cost


def _split_script(sql: str, held: dict[str, str], dialect: Dialect = _DIALECT) -> list[ParsedStatement]:
    """:func:`split_script` of ``sql``, whose runs ``held`` (placeholder: the run's text) go back into the trees."""
    put: set[str] = set()
    try:
        tokens = dialect.tokenize(sql)
    except TokenError as exc:
        if held:  # the error is reported of the script as written
            raise _NotHeld() from exc
        raise SqlError(f"cannot tokenize SQL: {exc}") from exc
    groups: list[list[Any]] = [[]]
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            groups.append([])
        else:
            groups[-1].append(t)
    out: list[ParsedStatement] = []
    for g in groups:
        if not g:
            continue
        n = len(out) + 1
        clustered: bool | None = None
        cut: list[tuple[int, int]] = []
        for t in g:
            word = t.text.upper()
            if t.token_type == TokenType.VAR and word in _CLUSTER_WORDS:
                clustered = _CLUSTER_WORDS[word]
                cut.append((t.start, t.end + 1))
            for c in t.comments or ():
                m = re.search(r"\b(NONCLUSTERED|CLUSTERED)\b", c, re.IGNORECASE)
                if m:
                    clustered = _CLUSTER_WORDS[m.group(1).upper()]
        start, end = g[0].start, g[-1].end + 1
        pieces, pos = [], start
        for a, b in cut:
            pieces.append(sql[pos:a])
            pos = b
        pieces.append(sql[pos:end])
        text = " ".join("".join(pieces).split()) if cut else sql[start:end].strip()
        original = sql[start:end].strip()
        partition = None
        if re.match(r"^\s*CREATE\s+TABLE\b", text, re.IGNORECASE):
            text, clause = cut_partition_clause(text)
            partition = parse_partition_clause(clause) if clause is not None else None
        if any(r.match(text) for r in _PARTITION_LAYOUT_RES):  # sqlglot cannot parse these: read here
            command = exp.Command(this="ALTER_PARTITION", expression=exp.Literal.string(text))
            out.append(ParsedStatement(original, command, None))
            continue
        if re.match(r"^\s*IMPORT\s+INTO\b", text, re.IGNORECASE):  # TiDB syntax sqlglot does not parse
            out.append(ParsedStatement(original, exp.Command(this="IMPORT", expression=exp.Literal.string(text)), None))
            continue
        if re.match(r"^\s*SPLIT\b", text, re.IGNORECASE):
            out.append(ParsedStatement(original, exp.Command(this="SPLIT", expression=exp.Literal.string(text)), None))
            continue
        try:
            # The statement's tokens are those of the script: parsed as they are, not tokenized a second time (a
            # third of a point read's parse), unless a word was cut out of the text (CLUSTERED, a partition clause)
            # or a token holds comments (the script's tokens hold those around the statement's text too).
            as_is = not cut and text == original and partition is None and not any(t.comments for t in g)
            node = _parse_tokens(g, sql, text) if as_is else sqlglot.parse_one(text, read=dialect)
            plain = as_is and plain_tokens(g)
        except (ParseError, TokenError) as exc:
            if held:
                raise _NotHeld() from exc
            if isinstance(exc, TokenError):
                raise SqlError(f"statement {n} `{_short(original)}`: syntax error: {exc}") from exc
            err = exc.errors[0] if exc.errors else {}
            where = f" near {err.get('highlight')!r}" if err.get("highlight") else ""
            raise SqlError(
                f"statement {n} `{_short(original)}`: syntax error: {err.get('description', exc)}{where}") from exc
        if node is None:
            continue
        node = cast(exp.Expression, node)
        if held:
            _put_back(node, held, put)
            for name in put:
                original = original.replace(name, held[name])
        texts = select_item_texts(g, sql) if isinstance(node, exp.Select) else None
        if texts is not None and held:
            texts = tuple(_held_back(t, held) for t in texts)
        out.append(ParsedStatement(original, node, clustered, partition, plain, texts))
    if put != held.keys():
        raise _NotHeld(sorted(held.keys() - put))
    return out


def _held_back(text: str, held: dict[str, str]) -> str:
    for name, run in held.items():
        text = text.replace(name, run)
    return text


# Words that end a SELECT list (at parenthesis depth 0)
_AFTER_ITEMS: Final = frozenset({TokenType.FROM, TokenType.WHERE, TokenType.GROUP_BY, TokenType.HAVING,
                                 TokenType.ORDER_BY, TokenType.LIMIT, TokenType.UNION, TokenType.INTO,
                                 TokenType.FOR, TokenType.LOCK, TokenType.WINDOW})
_BEFORE_ITEMS: Final = frozenset({TokenType.DISTINCT, TokenType.ALL, TokenType.HINT})


def select_item_texts(tokens: Sequence[Any], sql: str) -> tuple[str, ...] | None:
    """The source text of each item of a SELECT's list, from the statement's tokens (TiDB names a result column
    by its item's text, ``SelectField.Text()``; sqlglot would regenerate it normalised: ``COUNT(*)`` for
    ``count(*)``). None when the tokens do not start a SELECT."""
    if not tokens or tokens[0].token_type != TokenType.SELECT:
        return None
    i = 1
    while i < len(tokens) and (tokens[i].token_type in _BEFORE_ITEMS or (
            tokens[i].token_type == TokenType.VAR and tokens[i].text.upper() in (
                "SQL_CALC_FOUND_ROWS", "SQL_NO_CACHE", "SQL_CACHE", "STRAIGHT_JOIN", "HIGH_PRIORITY"))):
        i += 1
    items: list[str] = []
    depth, start = 0, i
    for j in range(i, len(tokens) + 1):
        t = tokens[j] if j < len(tokens) else None
        if t is not None:
            if t.token_type == TokenType.L_PAREN:
                depth += 1
                continue
            if t.token_type == TokenType.R_PAREN:
                depth -= 1
                continue
            if depth or (t.token_type != TokenType.COMMA and t.token_type not in _AFTER_ITEMS):
                continue
        if j > start:
            items.append(sql[tokens[start].start:tokens[j - 1].end + 1].strip())
        if t is None or t.token_type != TokenType.COMMA:
            break
        start = j + 1
    return tuple(items)


def _table_ref(node: exp.Expression | None, what: str) -> exp.Table:
    if not isinstance(node, exp.Table) or not node.name:
        shown = node.sql(dialect="mysql") if node is not None else "nothing"
        raise SqlError(f"{what}: expected a table name, got {shown!r}")
    return node


def _reject(node: exp.Expression, what: str, *args: str) -> None:
    for a in args:
        if node.args.get(a):
            raise SqlError(f"unsupported in {what}: {a.rstrip('_').upper()} clause")


class SqlEngine:
    """Shared state of all sessions: the store, the TSO, the catalog and the DDL executor."""

    AUTOCOMMIT_RETRIES = txn_mode.RETRY_LIMIT

    def __init__(self, store: MvccStore, tso: TsoAllocator, catalog: Catalog, ddl: DdlExecutor, *,
                 import_region_keys: int = bulk_import.DEFAULT_REGION_KEYS) -> None:
        self.store = store
        self.tso = tso
        self.catalog = catalog
        self.ddl = ddl
        self.import_region_keys = import_region_keys  # IMPORT INTO splits the table into regions of this many keys
        self.global_sql_mode = sqlmode.DEFAULT_SQL_MODE  # SET GLOBAL sql_mode: what sessions started later take
        self.global_txn = txn_mode.TxnSettings()  # SET GLOBAL tidb_txn_mode / innodb_lock_wait_timeout
        # How user transactions commit: TiDB's defaults (async commit and 1PC on), 1PC when one region holds the keys
        self.commit_options = CommitOptions(single_region=self._single_region)

    def _single_region(self, keys: Sequence[bytes]) -> bool:
        return self.ddl.regions.locate(min(keys)).contains(max(keys))

    def session(self, at_ts: int = 0) -> Session:
        return Session(self, at_ts)

    async def execute(self, sql: str, at_ts: int = 0) -> list[StatementResult]:
        return await self.session(at_ts).execute(sql)


class Session:
    _SNAPSHOT_SCHEMAS = 4  # snapshot ts whose schemas a session keeps

    def __init__(self, engine: SqlEngine, at_ts: int = 0) -> None:
        self.engine = engine
        self._at_ts = at_ts
        # The schema at each snapshot ts read lately: a reader that goes back to one ts statement after statement
        # (the window checks' point reads, each between ``SET tidb_snapshot = ts`` and ``= ''``) replays the DDL
        # history once, not per statement.
        self._snapshot_schemas: dict[int, dict[tuple[str, str], TableInfo | None]] = {}
        self.db: str | None = None
        self.txn: Transaction | None = None
        self.last_start_ts = 0  # start ts of the last transaction committed here (0: a DDL, or none yet)
        self.sql_mode_text = engine.global_sql_mode  # the session's sql_mode, normalized (sql_mode.normalize)
        self.txn_settings = engine.global_txn.copy()  # the session's tidb_txn_mode and innodb_lock_wait_timeout
        self.last_commit_mode: CommitMode | None = None  # how it committed
        # How this session's transactions commit (TiDB's tidb_enable_async_commit / tidb_enable_1pc)
        self.commit_options = engine.commit_options
        # tidb_guarantee_linearizability (ON by default): an explicit transaction's async-commit or 1PC commit ts
        # is above a PD ts fetched before its prewrite; an autocommit statement needs none (txn.py)
        self.guarantee_linearizability = True
        # A plain SELECT (no ORDER BY, LIMIT or aggregate) returns its first batch of rows and the rest as
        # ``StatementResult.more``, read by the caller while it sends them (the MySQL front): else every row at once.
        self.stream_rows = False
        self.mem_quota_query = DEFAULT_MEM_QUOTA_QUERY  # tidb_mem_quota_query: what one statement may hold
        self.conn_id = 0  # the MySQL connection's id, for TiDB's messages that name it
        self.time_zone: tzinfo | None = None  # @@time_zone (None: the system's), for TIDB_PARSE_TSO

    @property
    def at_ts(self) -> int:
        """The snapshot ts reads are at (0: the latest); the schema read is the one at that ts."""
        return self._at_ts

    @at_ts.setter
    def at_ts(self, ts: int) -> None:
        self._at_ts = ts  # each snapshot ts has its own schema (_snapshot_schema)

    def tables(self) -> list[TableInfo]:
        """Every table the session sees (at its snapshot ts when one is set), system tables included, by id."""
        if self.at_ts:
            return sorted(self._snapshot_schema().values(), key=lambda t: t.id)
        return self.catalog.tables()

    def databases(self) -> list[str]:
        """Every database the session sees (at its snapshot ts when one is set), those without tables too."""
        if self.at_ts:
            return [d.name for d in schema_meta.databases_at(self.engine.store, self.at_ts)]
        return [d.name for d in self.catalog.databases()]

    @property
    def catalog(self) -> Catalog:
        return self.engine.catalog

    @property
    def sql_mode(self) -> frozenset[str]:
        """The mode names of the session's ``sql_mode`` (what reads, writes and the tokenizer honour)."""
        return sqlmode.modes(self.sql_mode_text)

    @property
    def date_rules(self) -> ct.DateRules:
        """What a DATE/DATETIME/TIMESTAMP an INSERT or UPDATE writes takes under the session's ``sql_mode`` (zero
        dates, zero months or days, invalid days: ``column_type.DateRules``)."""
        return ct.DateRules.of_sql_mode(self.sql_mode)

    @property
    def no_backslash_escapes(self) -> bool:
        return sqlmode.NO_BACKSLASH_ESCAPES in self.sql_mode

    def set_sql_mode(self, scope: sqlmode.Scope, value: exp.Expression) -> None:
        """``SET [GLOBAL|SESSION] sql_mode = value``, validated as TiDB does (``SqlModeError``). A global value is what
        sessions started later take; this session keeps its own."""
        text = sqlmode.normalize(sqlmode.evaluate(value, scope=scope, session=self.sql_mode_text,
                                                  global_value=self.engine.global_sql_mode))
        if scope == "GLOBAL":
            self.engine.global_sql_mode = text
        else:
            self.sql_mode_text = text

    def set_txn_variable(self, scope: txn_mode.Scope, name: str, value: exp.Expression) -> None:
        """``SET [GLOBAL|SESSION] tidb_txn_mode | innodb_lock_wait_timeout = value``, validated as TiDB does
        (``TxnModeError``). A global value is what sessions started later take; this session keeps its own."""
        v = txn_mode.evaluate(value, name=name, scope=scope, session=self.txn_settings,
                              global_=self.engine.global_txn)
        (self.engine.global_txn if scope == "GLOBAL" else self.txn_settings).set(name, v)

    # --- scripts ------------------------------------------------------------------------------
    async def execute(self, sql: str) -> list[StatementResult]:
        """Run every statement of ``sql`` in order; the first error stops the script, and the session ends with
        it (an open transaction is rolled back)."""
        try:
            return await self.run_script(sql)
        finally:
            self.close()

    def check_snapshot(self, ts: int) -> None:
        """A snapshot read at ``ts`` is possible: not in the future, not below the GC safe point."""
        now = self.engine.tso.next()
        if ts > now:
            raise SqlError(f"at_ts {ts} is in the future (the TSO is at {now})")
        sp = self.engine.store.safe_point
        if ts < sp:
            raise SqlError(f"GC safe point passed: ts {ts} < safe point {sp}", ErrorKind.GC)

    async def run_script(self, sql: str) -> list[StatementResult]:
        """Run every statement of ``sql`` in order, the session staying open (a connection's queries); the first
        error stops the script."""
        if self.at_ts:
            self.check_snapshot(self.at_ts)
        statements = split_script(sql, no_backslash_escapes=self.no_backslash_escapes)
        if not statements:
            raise SqlError("empty SQL: no statement to execute")
        results = []
        for i, st in enumerate(statements, start=1):
            results.append(await self.run_numbered(st, i))
            await asyncio.sleep(0)  # let the change feed and other sessions run
        return results

    async def run_numbered(self, st: ParsedStatement, i: int) -> StatementResult:
        """``run``, with errors naming the statement (its number in the script and its text)."""
        try:
            return await self.run(st)
        except SqlError as exc:
            raise exc.with_context(f"statement {i} `{_short(st.text)}`") from exc
        except SchemaError as exc:  # e.g. an unknown column name: the SQL is wrong
            raise SqlError(f"statement {i} `{_short(st.text)}`: {exc}") from exc

    def close(self) -> None:
        if self.txn is not None:
            log.info("rolling back a transaction left open by a script", start_ts=self.txn.start_ts)
            self.txn.rollback()
            self.txn = None

    async def run(self, st: ParsedStatement) -> StatementResult:
        node = st.node
        if self.at_ts and not isinstance(node, exp.Select | exp.Use):
            raise SqlError(f"a read at ts {self.at_ts} runs SELECT and USE only, not {type(node).__name__.upper()}")
        res = StatementResult(statement=st.text)
        if isinstance(node, exp.Transaction):
            res.commit_ts = await self._commit_open()
            options = replace(self.commit_options, linearizable=self.guarantee_linearizability)
            pessimistic = txn_mode.begin_pessimistic(self.txn_settings.txn_mode,
                                                     [str(m) for m in node.args.get("modes") or ()])
            self.txn = Transaction(self.engine.store, self.engine.tso, options=options, pessimistic=pessimistic,
                                   lock_wait_timeout=self.txn_settings.lock_wait_timeout)
        elif isinstance(node, exp.Commit):
            res.commit_ts = await self._commit_open()
        elif isinstance(node, exp.Rollback):
            if node.args.get("savepoint"):
                raise SqlError("ROLLBACK TO SAVEPOINT is not supported")
            if self.txn is not None:
                self.txn.rollback()
                self.txn = None
        elif isinstance(node, exp.Set) and (sets := sqlmode.assignments(node))[0] and not sets[1]:
            for scope, value in sets[0]:
                self.set_sql_mode(scope, value)
        elif isinstance(node, exp.Set) and (tsets := txn_mode.assignments(node))[0] and not tsets[1]:
            for scope, name, value in tsets[0]:
                self.set_txn_variable(scope, name, value)
        elif isinstance(node, exp.Use):
            name = str(node.this.name) if node.this is not None else ""
            if self.catalog.database(name) is None:
                raise SqlError(f"Unknown database '{name}'", ErrorKind.NOT_FOUND)
            self.db = self.catalog.database(name).name  # type: ignore[union-attr]
        elif isinstance(node, exp.Select):
            return await self._read(st, self._select)
        elif isinstance(node, exp.Insert):
            return await self._write(st, self._insert)
        elif isinstance(node, exp.Update):
            return await self._write(st, self._update)
        elif isinstance(node, exp.Delete):
            return await self._write(st, self._delete)
        elif isinstance(node, exp.Command) and str(node.this).upper() == "SPLIT":
            return self._split_table(st)
        elif isinstance(node, exp.Command) and str(node.this).upper() == "IMPORT":
            return await self._import(st)
        else:
            return await self._ddl(st)
        return res

    # --- transactions -------------------------------------------------------------------------
    async def _commit_open(self) -> int:
        txn, self.txn = self.txn, None
        if txn is None:
            return 0
        commit_ts = await txn.commit(self._validator(txn))
        self.last_start_ts, self.last_commit_mode = txn.start_ts, txn.commit_mode
        return commit_ts

    def _validator(self, txn: Transaction) -> Callable[[], None]:
        def validate() -> None:
            for table_id, version in txn.tables_written.items():
                info = self.catalog.table_by_id(table_id)
                if info is None or info.schema_version != version:
                    raise SqlError(
                        f"table id {table_id} was changed by a concurrent DDL while the transaction ran; "
                        "the transaction was rolled back",
                        ErrorKind.CONFLICT,
                    )

        return validate

    def _in_context(self, fn: Callable[[Any, Transaction], Any], arg: Any, txn: Transaction) -> Any:
        """``fn(arg, txn)`` with the statement's context set (what TiDB's functions read: ``tidb_functions``)."""
        token = enter_statement(StatementContext(txn.start_ts, self.db, self.time_zone))
        try:
            return fn(arg, txn)
        finally:
            leave_statement(token)

    async def _read(self, st: ParsedStatement, fn: Callable[[ParsedStatement, Transaction], StatementResult]
                    ) -> StatementResult:
        txn = self.txn
        lock = (st.node.args.get("locks") or [None])[0]
        # FOR SHARE / LOCK IN SHARE MODE take no lock (TiDB's no-op implementation of them)
        if txn is not None and txn.pessimistic and isinstance(lock, exp.Lock) and lock.args.get("update"):
            # SELECT ... FOR UPDATE: a current read whose rows are locked, so read whole before it returns
            def locked_read() -> StatementResult:
                res = cast(StatementResult, self._in_context(fn, st, txn))
                if res.more is not None:
                    res.rows = res.rows + [r for batch in res.more for r in batch]
                    res.more = None
                return res

            wait = lock.args.get("wait")  # sqlglot: True for NOWAIT, False for SKIP LOCKED, WAIT n's n
            if wait is False:
                raise SqlError("unsupported in SELECT: SKIP LOCKED")
            nowait = wait is True
            timeout = 0.0 if nowait else float(literal_value(wait)) if isinstance(wait, exp.Expression) else None
            return await self._pessimistic_statement(txn, locked_read, for_update=True, timeout=timeout,
                                                     nowait=nowait)
        if txn is not None:
            return cast(StatementResult, self._in_context(fn, st, txn))
        if self.at_ts:
            # A read at a ts reads the MVCC store alone (the table's schema too, from the DDL history at that ts),
            # a page at a time under the store's lock: it runs off the event loop, which meanwhile serves PD, the
            # change feeds and the other sessions (a snapshot chunk or a check's read decodes many rows).
            snapshot = Transaction(self.engine.store, self.engine.tso, self.at_ts, read_only=True)
            return cast(StatementResult, await asyncio.to_thread(self._in_context, fn, st, snapshot))
        ts = self.engine.tso.next()
        return cast(StatementResult, self._in_context(fn, st, Transaction(self.engine.store, self.engine.tso, ts,
                                                                          read_only=True)))

    async def _write(self, st: ParsedStatement, fn: Callable[[exp.Expression, Transaction], int]
                     ) -> StatementResult:
        open_txn = self.txn
        if open_txn is not None and open_txn.pessimistic:
            return await self._pessimistic_statement(
                open_txn, lambda: StatementResult(statement=st.text,
                                                  affected_rows=self._in_context(fn, st.node, open_txn)))
        if open_txn is not None:
            open_txn.begin_statement()
            try:
                n = self._in_context(fn, st.node, open_txn)
            except BaseException:
                open_txn.rollback_statement()
                raise
            open_txn.end_statement()
            return StatementResult(statement=st.text, affected_rows=n)
        # An autocommit statement: optimistic (txn_mode), retried on a write conflict as TiDB retries it
        retries = self.engine.AUTOCOMMIT_RETRIES
        for attempt in range(retries):
            txn = Transaction(self.engine.store, self.engine.tso, options=self.commit_options)
            n = self._in_context(fn, st.node, txn)
            try:
                commit_ts = await txn.commit(self._validator(txn))
            except SqlError as exc:
                if exc.kind is ErrorKind.CONFLICT and attempt + 1 < retries:
                    await self._back_off(exc, txn, attempt)
                    continue
                raise
            self.last_start_ts, self.last_commit_mode = txn.start_ts, txn.commit_mode
            return StatementResult(statement=st.text, affected_rows=n, commit_ts=commit_ts)
        raise AssertionError("unreachable")

    async def _back_off(self, exc: SqlError, txn: Transaction, attempt: int) -> None:
        """Before an autocommit statement runs again: a key a pessimistic transaction locks is waited for until it
        is released (client-go backs off on the lock until its transaction ends; bounded here by
        ``innodb_lock_wait_timeout``); a write conflict, or a prewrite lock (a commit in flight, or one stuck: with
        no lock TTL to resolve it by, it is retried a few times and then a 9007), is given a short pause."""
        locked = exc.__cause__
        lm = self.engine.store.lock_manager
        if isinstance(locked, KeyLockedError) and (held := lm.holder(locked.key)) is not None \
                and held.start_ts == locked.lock_ts:
            try:
                await lm.wait(locked.key, txn.start_ts, locked.lock_ts, self.txn_settings.lock_wait_timeout)
                return
            except LockWaitTimeoutError:
                raise exc from None
        await asyncio.sleep(0.005 * (attempt + 1))

    async def _pessimistic_statement(self, txn: Transaction, run: Callable[[], StatementResult], *,
                                     for_update: bool = False, timeout: float | None = None,
                                     nowait: bool = False) -> StatementResult:
        """Run a statement of a pessimistic transaction: at a new ``for_update_ts`` each time, its keys locked before
        it returns, run again when a key was written after that ts (TiDB's pessimistic retry, ``txn_mode``). A
        duplicate entry on a key another transaction locks (its uncommitted DELETE, say) waits for that key and
        checks again, as TiDB checks a pessimistic INSERT's keys once it holds their locks. ``timeout``: this
        statement's bound on a wait (``FOR UPDATE WAIT n``); ``nowait``: ``FOR UPDATE NOWAIT``, a locked row is 3572
        at once (TiDB's ErrLockAcquireFailAndNoWaitSet)."""
        # TiDB reads innodb_lock_wait_timeout for each statement
        txn.lock_wait_timeout = self.txn_settings.lock_wait_timeout if timeout is None else timeout
        for _attempt in range(txn_mode.MAX_PESSIMISTIC_RETRIES):
            txn.begin_pessimistic_statement(for_update=for_update)
            try:
                try:
                    res = run()
                except DuplicateKeyError as dup:
                    holder = self._lock_holder(dup.key, txn.start_ts)
                    if holder is None:
                        raise
                    txn.rollback_statement()
                    await self.engine.store.lock_manager.wait(dup.key, txn.start_ts, holder, txn.lock_wait_timeout)
                    continue
                await txn.lock_statement_keys()
            except WriteConflictError as exc:
                txn.rollback_statement()
                log.debug("pessimistic write conflict, retry statement", start_ts=txn.start_ts,
                          for_update_ts=txn.for_update_ts, conflict_commit_ts=exc.conflict_commit_ts)
                continue
            except DeadlockError as exc:
                # TiDB rolls the whole transaction back on a deadlock (its docs, "Handle Transaction Errors")
                txn.rollback_statement()
                txn.rollback()
                self.txn = None
                raise SqlError("Deadlock found when trying to get lock; try restarting transaction",
                               ErrorKind.DEADLOCK) from exc
            except LockWaitTimeoutError as exc:
                txn.rollback_statement()
                if nowait:
                    raise SqlError("Statement aborted because lock(s) could not be acquired immediately and NOWAIT "
                                   "is set.") from exc
                raise SqlError("Lock wait timeout exceeded; try restarting transaction",
                               ErrorKind.LOCK_WAIT_TIMEOUT) from exc
            except BaseException:
                txn.rollback_statement()
                raise
            txn.end_statement()
            return res
        raise SqlError("pessimistic lock retry limit reached")  # TiDB's pkg/executor/adapter.go, a plain error

    def _lock_holder(self, key: bytes, start_ts: int) -> int | None:
        """The start ts of another transaction that locks ``key`` (pessimistically or by a prewrite), else None."""
        store = self.engine.store
        held = store.lock_manager.holder(key) or store.lock_of(key)
        return held.start_ts if held is not None and held.start_ts != start_ts else None

    # --- DDL ----------------------------------------------------------------------------------
    def _current_db(self, table: exp.Table | None = None) -> str:
        if table is not None and table.db:
            return str(table.db)
        if self.db is None:
            raise SqlError("No database selected (USE a database or qualify the table name)")
        return self.db

    def _split_name(self, text: str) -> tuple[str, str]:
        """``[db.]table`` of a table name as written (each part bare or backtick-quoted: a quoted one may hold dots
        and doubled backticks)."""
        try:
            tokens = _DIALECT.tokenize(text)
        except TokenError as exc:
            raise SqlError(f"bad table name {text!r}: {exc}") from exc
        return self._name_of(tokens, text)

    def _name_of(self, tokens: Sequence[Any], text: str) -> tuple[str, str]:
        parts = [t.text for t in tokens[::2]]
        if len(tokens) not in (1, 3) or any(t.token_type != TokenType.DOT for t in tokens[1::2]) or any(
                t.token_type in (TokenType.DOT, TokenType.COMMA, TokenType.STRING) for t in tokens[::2]):
            raise SqlError(f"bad table name {text!r}")
        return (self._current_db(), parts[0]) if len(parts) == 1 else (parts[0], parts[1])

    def _rename_pairs(self, body: str) -> list[tuple[tuple[str, str], tuple[str, str]]]:
        """The ``old TO new`` pairs of a ``RENAME TABLE`` (names as :meth:`_split_name` reads them)."""
        try:
            tokens = _DIALECT.tokenize(body)
        except TokenError as exc:
            raise SqlError(f"bad RENAME TABLE clause {body.strip()!r}: {exc}") from exc
        pairs, piece = [], []
        for t in [*tokens, None]:
            if t is not None and t.token_type != TokenType.COMMA:
                piece.append(t)
                continue
            to = [i for i, x in enumerate(piece) if x.token_type == TokenType.VAR and x.text.upper() == "TO"]
            text = body[piece[0].start:piece[-1].end + 1] if piece else ""
            if len(to) != 1:
                raise SqlError(f"bad RENAME TABLE clause {text.strip()!r} (expected `old TO new`)")
            pairs.append((self._name_of(piece[:to[0]], text), self._name_of(piece[to[0] + 1:], text)))
            piece = []
        return pairs

    async def _ddl(self, st: ParsedStatement) -> StatementResult:
        node = st.node
        ddl = self.engine.ddl
        action: Callable[[], list[int]]
        if isinstance(node, exp.Create) and str(node.args.get("kind", "")).upper() in ("DATABASE", "SCHEMA"):
            name = str(node.this.name)
            action = lambda: [ddl.create_database(name, bool(node.args.get("exists")), st.text)]  # noqa: E731
        elif isinstance(node, exp.Create) and str(node.args.get("kind", "")).upper() == "TABLE":
            if node.args.get("replace") or node.args.get("expression") is not None:
                raise SqlError("unsupported CREATE TABLE form (CREATE OR REPLACE / CREATE TABLE ... AS SELECT)")
            schema = node.this
            if not isinstance(schema, exp.Schema):
                raise SqlError("unsupported CREATE TABLE form (CREATE TABLE ... LIKE / without columns)")
            db = self._current_db(_table_ref(schema.this, "CREATE TABLE"))
            action = lambda: [ddl.create_table(node, db, st.text, st.clustered, st.partition)]  # noqa: E731
        elif isinstance(node, exp.Drop) and str(node.args.get("kind", "")).upper() in ("DATABASE", "SCHEMA"):
            tables = node.args.get("tables") or [node.this]
            name = str(tables[0].name)
            action = lambda: [ddl.drop_database(name, bool(node.args.get("exists")), st.text)]  # noqa: E731
        elif isinstance(node, exp.Drop) and str(node.args.get("kind", "")).upper() == "TABLE":
            refs = [(self._current_db(t), str(t.name))
                    for t in (node.args.get("tables") or [node.this])]
            action = lambda: [ddl.drop_table(d, n, bool(node.args.get("exists")), st.text) for d, n in refs]  # noqa: E731
        elif isinstance(node, exp.TruncateTable):
            refs = [(self._current_db(t), str(t.name)) for t in node.expressions]
            action = lambda: [ddl.truncate_table(d, n, st.text) for d, n in refs]  # noqa: E731
        elif isinstance(node, exp.Alter) and len(node.args.get("actions") or []) == 1 and isinstance(
            node.args["actions"][0], exp.AlterRename
        ):
            old = _table_ref(node.this, "ALTER TABLE")
            new = _table_ref(node.args["actions"][0].this, "RENAME TO")
            od, nd = self._current_db(old), (str(new.db) if new.db else self._current_db(old))
            action = lambda: [ddl.rename_table(od, str(old.name), nd, str(new.name), st.text)]  # noqa: E731
        elif isinstance(node, exp.Alter) and str(node.args.get("kind", "")).upper() == "TABLE":
            action = self._alter_action(node, st.text, st.clustered)
        elif isinstance(node, exp.Create) and str(node.args.get("kind", "")).upper() == "INDEX":
            ix = node.this
            ref = _table_ref(ix.args.get("table"), "CREATE INDEX")
            cols = tuple(column_name(o.this if isinstance(o, exp.Ordered) else o)
                         for o in ix.args["params"].args.get("columns") or [])
            d, unique = self._current_db(ref), bool(node.args.get("unique"))
            action = lambda: [ddl.add_index(d, str(ref.name), str(ix.name), cols, unique, st.text)]  # noqa: E731
        elif isinstance(node, exp.Drop) and str(node.args.get("kind", "")).upper() == "INDEX":
            on = node.args.get("cluster")
            if not isinstance(on, exp.OnProperty):
                raise SqlError("DROP INDEX needs `ON table`")
            ref = _table_ref(on.this, "DROP INDEX")
            d, ix_name = self._current_db(ref), str((node.args.get("tables") or [node.this])[0].name)
            action = lambda: [ddl.drop_index(d, str(ref.name), ix_name, st.text)]  # noqa: E731
        elif (isinstance(node, exp.Command) and str(node.this).upper() == "ALTER_PARTITION"
              and (layout := self._partition_layout(ddl, st.text)) is not None):
            action = layout
        elif isinstance(node, exp.Command) and _RENAME_RE.match(st.text):
            pairs = self._rename_pairs(_RENAME_RE.match(st.text).group(1))  # type: ignore[union-attr]
            action = lambda: [ddl.rename_tables(pairs, st.text)]  # noqa: E731
        else:
            kind = node.key.upper() if not isinstance(node, exp.Command) else str(node.this).upper()
            raise SqlError(f"unsupported statement ({kind}): `{_short(st.text)}`")
        # MySQL: DDL implicitly commits the open transaction.
        await self._commit_open()
        try:
            commit_ts = [ts for ts in action() if ts]
        finally:
            # TiDB's statement returns once its job is synced and in the history table: the owner waits for every
            # server to load the schema first, and other sessions' transactions may commit meanwhile.
            await ddl.wait_synced()
        if commit_ts:
            self.last_start_ts = 0  # a DDL job's transactions are the DDL owner's, not this session's
            self.last_commit_mode = CommitMode.TWO_PC
        return StatementResult(statement=st.text, commit_ts=commit_ts[-1] if commit_ts else 0)

    def _partition_layout(self, ddl: DdlExecutor, text: str) -> Callable[[], list[int]] | None:
        """ADD / DROP / TRUNCATE / COALESCE / EXCHANGE / REORGANIZE PARTITION, PARTITION BY, REMOVE PARTITIONING;
        None for any other statement. New definitions are read in the table's own partitioning."""
        if (m := _PARTITION_OP_RE.match(text)) is not None:
            d, t = self._split_name(m.group(1))
            op, body = m.group(2).lower(), m.group(3).strip()
            scheme = self._partitioning(d, t, required=False)
            if op == "add" and scheme is not None and scheme.type in (HASH, KEY):  # a reorganization of them all
                added = parse_added_partitions(body, scheme)
                return lambda: [partition_ddl.add_hash_partitions(ddl, d, t, added, text)]
            if op == "add":
                change = ddl.partition_change("add", (), parse_added_partitions(body, scheme) if scheme else None)
            elif scheme is not None and op == "truncate" and body.upper() == "ALL":
                change = ddl.partition_change(op, tuple(p.name for p in scheme.definitions))
            else:
                change = ddl.partition_change(op, tuple(n.strip().strip("`") for n in body.split(",")))
            return lambda: [ddl.alter(d, t, [change], text)]
        if (m := _COALESCE_RE.match(text)) is not None:
            d, t = self._split_name(m.group(1))
            count = int(m.group(2))
            return lambda: [partition_ddl.coalesce_partitions(ddl, d, t, count, text)]
        if (m := _EXCHANGE_RE.match(text)) is not None:
            (d, t), (nd, nt) = self._split_name(m.group(1)), self._split_name(m.group(3))
            checked, part = (m.group(4) or "WITH").upper() == "WITH", m.group(2)
            return lambda: [partition_ddl.exchange_partition(ddl, d, t, part, nd, nt, checked, text)]
        if (m := _REORGANIZE_RE.match(text)) is not None:
            d, t = self._split_name(m.group(1))
            scheme = self._partitioning(d, t, required=True)
            assert scheme is not None
            if scheme.type in (HASH, KEY):  # TiDB's ReorganizePartitions takes only ADD/COALESCE for these
                raise SqlError("Unsupported reorganize partition")
            spec = parse_added_partitions(m.group(3), scheme)
            names = tuple(n.strip().strip("`") for n in m.group(2).split(","))
            return lambda: [partition_ddl.reorganize_partition(ddl, d, t, names, spec, text)]
        if (m := _PARTITION_BY_RE.match(text)) is not None:
            d, t = self._split_name(m.group(1))
            by = parse_partition_clause(m.group(2).strip())
            return lambda: [partition_ddl.partition_by(ddl, d, t, by, text)]
        if (m := _REMOVE_PARTITIONING_RE.match(text)) is not None:
            d, t = self._split_name(m.group(1))
            return lambda: [partition_ddl.partition_by(ddl, d, t, None, text)]
        return None

    def _partitioning(self, db: str, table: str, *, required: bool) -> PartitionInfo | None:
        """The partitioning of ``db.table`` (None when it has none, unless ``required``)."""
        target = self.catalog.table(db, table)
        scheme = target.partition if target is not None else None
        if scheme is None and required:
            if target is None:
                raise SqlError(f"Table '{db}.{table}' doesn't exist", ErrorKind.NOT_FOUND)
            raise SqlError("Partition management on a not partitioned table is not possible")
        return scheme

    def _alter_action(self, node: exp.Alter, text: str, clustered: bool | None = None) -> Callable[[], list[int]]:
        """ALTER TABLE: one change is its own job; several are TiDB's multi-schema change, one job. ``clustered``:
        the statement said CLUSTERED (TiDB adds no clustered primary key to a table) or NONCLUSTERED."""
        ddl = self.engine.ddl
        actions = node.args.get("actions") or []
        if not actions:
            raise SqlError(f"ALTER TABLE without a change: `{_short(text)}`")
        ref = _table_ref(node.this, "ALTER TABLE")
        db, table = self._current_db(ref), str(ref.name)
        if clustered and any(isinstance(c, exp.PrimaryKey) for a in actions for c in a.expressions or ()):
            raise SqlError("Adding clustered primary key is not supported. Please consider adding NONCLUSTERED "
                           "primary key instead")
        changes = [self._alter_change(a) for a in actions]
        return lambda: [ddl.alter(db, table, changes, text)]

    def _alter_change(self, a: exp.Expression) -> AlterChange:
        ddl = self.engine.ddl
        if isinstance(a, exp.ColumnDef):
            return ddl.add_column_change(parse_column_def(a))
        if isinstance(a, exp.Drop) and str(a.args.get("kind", "")).upper() == "COLUMN":
            return ddl.drop_column_change(str((a.args.get("tables") or [a.this])[0].name))
        if isinstance(a, exp.DropPrimaryKey):
            return ddl.drop_primary_key_change()
        if isinstance(a, exp.Drop) and str(a.args.get("kind", "")).upper() in ("INDEX", "KEY"):
            dropped = str((a.args.get("tables") or [a.this])[0].name)
            return ddl.drop_primary_key_change() if dropped.lower() == "primary" else ddl.drop_index_change(dropped)
        if isinstance(a, exp.RenameColumn):
            return ddl.rename_column_change(column_name(a.this), column_name(a.args["to"]))
        if isinstance(a, exp.ModifyColumn):
            frm = a.args.get("rename_from")
            return ddl.modify_column_change(parse_column_def(a.this), str(frm.name) if frm is not None else None)
        if isinstance(a, exp.AddConstraint) and len(a.expressions) == 1:
            c = a.expressions[0]
            if isinstance(c, exp.PrimaryKey):
                return ddl.add_primary_key_change(tuple(column_name(e) for e in c.expressions))
            if isinstance(c, exp.IndexColumnConstraint):
                name = str(c.this.name) if c.this is not None else None
                return ddl.add_index_change(name, tuple(column_name(e) for e in c.expressions), False)
            if isinstance(c, exp.UniqueColumnConstraint) and isinstance(c.this, exp.Schema):
                sch = c.this
                name = str(sch.this.name) if sch.this is not None else None
                return ddl.add_index_change(name, tuple(column_name(e) for e in sch.expressions), True)
        raise SqlError(f"unsupported ALTER TABLE change `{a.sql(dialect='mysql')}`")

    def _split_table(self, st: ParsedStatement) -> StatementResult:
        """``SPLIT TABLE t BETWEEN (lo) AND (hi) REGIONS n`` / ``SPLIT TABLE t BY (v1), (v2)``.

        Splits the table's row regions at integer handles (the clustered integer PK, else the
        hidden ``_tidb_rowid``), or at values of a common handle's leading column (integers, or quoted strings
        for a string one); answers TiDB's result row (TOTAL_SPLIT_REGION, SCATTER_FINISH_RATIO).
        """
        m = _SPLIT_RE.match(st.text)
        if m is None:
            raise SqlError("expected `SPLIT TABLE t BETWEEN (lo) AND (hi) REGIONS n` or `SPLIT TABLE t BY (v1), (v2)`"
                           " (index splits are not supported)")
        db, name = self._split_name(m.group(1))
        info = self.catalog.table(db, name)
        if info is None:
            raise SqlError(f"Table '{db}.{name}' doesn't exist", ErrorKind.NOT_FOUND)
        regions = self.engine.ddl.regions
        try:
            values: list[Any]
            if m.group(4) is not None:
                values = split_values(int(m.group(2)), int(m.group(3)), int(m.group(4)))
            else:
                values = [v[1:-1] if v.startswith("'") else int(v)
                          for v in re.findall(r"-?\d+|'[^'\\]*'", m.group(5))]
            if info.is_common_handle:  # keys led by the first PK column's datum (TiDB splits on PK value tuples)
                first = info.column(info.primary_key[0])
                if first.kind == "int" and any(isinstance(v, str) for v in values):
                    raise ValueError(f"the common handle of {info.qualified_name} leads with {first.sql_type}: "
                                     "split it at integers")
                datums = [encode_key([(first.field_type(), first.to_stored(first.convert(v)))]) for v in values]
                keys = [keycodec.common_row_key(pid, d) for pid in info.physical_ids for d in datums]
            else:  # a partitioned table splits each partition at the values, as TiDB's SPLIT TABLE does
                if any(isinstance(v, str) for v in values):
                    raise ValueError(f"{info.qualified_name} is keyed by an integer handle: split it at integers")
                keys = [keycodec.row_key(pid, v) for pid in info.physical_ids for v in values]
        except ValueError as exc:
            raise SqlError(f"SPLIT TABLE: {exc}") from exc
        before = len(regions)
        regions.split(keys)
        created = len(regions) - before
        log.info("split table", table=info.qualified_name, new_regions=created)
        return StatementResult(statement=st.text, columns=["TOTAL_SPLIT_REGION", "SCATTER_FINISH_RATIO"],
                               rows=[{"TOTAL_SPLIT_REGION": created, "SCATTER_FINISH_RATIO": 1.0}])

    async def _import(self, st: ParsedStatement) -> StatementResult:
        if self.txn is not None:
            raise SqlError("IMPORT INTO cannot run in an explicit transaction")
        imp = bulk_import.parse(st.text)
        db, name = self._split_name(imp.table)
        info = self.catalog.table(db, name)
        if info is None:
            raise SqlError(f"Table '{db}.{name}' doesn't exist", ErrorKind.NOT_FOUND)
        e = self.engine
        row = await bulk_import.run_import(imp, info, store=e.store, tso=e.tso, catalog=e.catalog,
                                           regions=e.ddl.regions, region_keys=e.import_region_keys)
        return StatementResult(statement=st.text, columns=list(bulk_import.RESULT_COLUMNS), rows=[row],
                               affected_rows=int(row["Imported_Rows"]))

    # --- DML ----------------------------------------------------------------------------------
    def _table(self, ref: exp.Expression | None, what: str) -> TableInfo:
        t = _table_ref(ref, what)
        db = self._current_db(t)
        info = self._snapshot_table(db, str(t.name)) if self.at_ts else self.catalog.table(db, str(t.name))
        if info is None:
            raise SqlError(f"Table '{db}.{t.name}' doesn't exist", ErrorKind.NOT_FOUND)
        return info

    def _snapshot_table(self, db: str, name: str) -> TableInfo | None:
        """The table as it was at the session's read ts (TiDB reads a snapshot with the schema of that snapshot,
        loaded from its meta keys there: ``schema_meta.table_at``)."""
        ts = self.at_ts
        found = self._snapshot_schemas.pop(ts, None)
        if found is None:
            found = {}
            while len(self._snapshot_schemas) >= self._SNAPSHOT_SCHEMAS:
                del self._snapshot_schemas[next(iter(self._snapshot_schemas))]  # the least recently read
        self._snapshot_schemas[ts] = found  # last: the most recently read
        key = (db.lower(), name.lower())
        if key not in found:
            found[key] = schema_meta.table_at(self.engine.store, ts, db, name, self.catalog)
        return found[key]

    def _snapshot_schema(self) -> dict[tuple[str, str], TableInfo]:
        """Every table at the session's read ts by (db, name), lowercased, from the meta keys there."""
        return {(t.db_name.lower(), t.name.lower()): t
                for t in schema_meta.tables_at(self.engine.store, self.at_ts)}

    def _writable(self, ref: exp.Expression | None, what: str) -> TableInfo:
        info = self._table(ref, what)
        if info.db_id == ddl_history.SYSTEM_DB_ID:
            raise SqlError(f"table {info.qualified_name} is a system table and cannot be written")
        return info

    def _insert(self, node: exp.Expression, txn: Transaction) -> int:
        assert isinstance(node, exp.Insert)
        if node.args.get("conflict"):
            raise SqlError("unsupported in INSERT: ON DUPLICATE KEY UPDATE")
        if node.args.get("ignore"):
            raise SqlError("unsupported: INSERT IGNORE")
        target = node.this
        names: list[str] | None = None
        if isinstance(target, exp.Schema):
            names = [column_name(e) for e in target.expressions]
            target = target.this
        info = self._writable(target, "INSERT")
        values_node = node.args.get("expression")
        if not isinstance(values_node, exp.Values):
            raise SqlError("unsupported INSERT form (only INSERT ... VALUES (...), ...)")
        columns = [info.column(n) for n in names] if names else list(info.columns)
        if len({c.name for c in columns}) != len(columns):
            raise SqlError("a column is named twice in the INSERT column list")
        auto_inc = info.extra.get(AUTO_INCREMENT_KEY)
        writer = TableWriter(txn, info, self.catalog)
        dates = self.date_rules
        count = 0
        for rownum, tup in enumerate(values_node.expressions, start=1):
            exprs = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
            if len(exprs) != len(columns):
                raise SqlError(f"Column count doesn't match value count at row {rownum}")
            given = {c.name: convert_value(info, c.name, literal_value(e), dates)
                     for c, e in zip(columns, exprs, strict=True)}
            values: dict[str, Any] = {}
            for c in info.columns:
                if c.name in given:
                    values[c.name] = given[c.name]
                elif c.default is None and not c.nullable and c.name != auto_inc:
                    raise SqlError(f"Field '{c.name}' doesn't have a default value", ErrorKind.CONSTRAINT)
                else:
                    values[c.name] = c.default
            writer.insert(values)
            count += 1
        return count

    @staticmethod
    def _matching(info: TableInfo, txn: Transaction, where: exp.Expression | None
                  ) -> list[tuple[StoredRow, dict[str, Any]]]:
        """The rows ``WHERE`` matches, read by the access path it allows (point gets, a handle range, a scan)."""
        return list(Session._iter_matching(info, txn, where))

    @staticmethod
    def _iter_matching(info: TableInfo, txn: Transaction, where: exp.Expression | None
                       ) -> Iterator[tuple[StoredRow, dict[str, Any]]]:
        """:meth:`_matching` one row at a time (an aggregate folds them without holding them)."""
        cond = where.this if where is not None else None
        access = access_path.plan(info, cond)
        # An exact point read matches every row it reads; any other read is filtered by the WHERE, compiled once.
        check = compile_expr(cond) if cond is not None and not access.exact else None
        for handle, pid, value in access_path.read(txn, info, access):
            row = StoredRow(handle, access_path.decoded(info, value), pid)
            ctx = row_with_rowid(info, row)
            if check is None or truthy(check(ctx)):
                yield row, ctx

    def _update(self, node: exp.Expression, txn: Transaction) -> int:
        assert isinstance(node, exp.Update)
        _reject(node, "UPDATE", "order", "limit", "from", "from_", "joins", "returning")
        info = self._writable(node.this, "UPDATE")
        assignments = []
        for a in node.expressions:
            if not isinstance(a, exp.EQ):
                raise SqlError(f"bad SET clause {a.sql(dialect='mysql')!r}")
            assignments.append((info.column(column_name(a.this)), compile_expr(a.expression)))
        writer = TableWriter(txn, info, self.catalog)
        dates = self.date_rules
        changed = 0
        for row, ctx in self._matching(info, txn, node.args.get("where")):
            new = dict(row.values)
            for col, e in assignments:  # MySQL: left to right, later SETs see earlier ones
                v = convert_value(info, col.name, e(ctx), dates)
                new[col.name] = v
                ctx[col.name.lower()] = v
            if writer.update(row, new):
                changed += 1
            else:
                txn.lock_too(keycodec.record_key(row.physical_id or info.id, row.handle))
        return changed

    def _delete(self, node: exp.Expression, txn: Transaction) -> int:
        assert isinstance(node, exp.Delete)
        _reject(node, "DELETE", "order", "limit", "using", "joins", "returning", "tables")
        info = self._writable(node.this, "DELETE")
        writer = TableWriter(txn, info, self.catalog)
        matched = self._matching(info, txn, node.args.get("where"))
        for row, _ in matched:
            writer.delete(row)
        return len(matched)

    def _select(self, st: ParsedStatement, txn: Transaction) -> StatementResult:
        node = st.node
        assert isinstance(node, exp.Select)
        return run_select(self, node, st.text, st.item_texts, txn)

    def constant_select(self, node: exp.Select, text: str) -> StatementResult:
        """A SELECT without FROM, as the MySQL front hands it over: evaluated in the open transaction, else at a
        fresh ts (what ``TIDB_CURRENT_TSO()`` returns then, as TiDB's autocommit statement's start ts)."""
        txn = self.txn or Transaction(self.engine.store, self.engine.tso, self.engine.tso.next(), read_only=True)
        return cast(StatementResult, self._in_context(
            lambda n, t: run_select(self, n, text, None, t), node, txn))

    def table_of(self, ref: exp.Expression | None, what: str) -> TableInfo:
        """A table a statement names, as the session sees it (at its snapshot ts when one is set)."""
        return self._table(ref, what)

    def matching_rows(self, info: TableInfo, txn: Transaction, where: exp.Expression | None
                      ) -> Iterator[dict[str, Any]]:
        """The evaluation rows (lower-case name -> value, ``_tidb_rowid`` too) ``WHERE`` matches, one at a time."""
        return (ctx for _row, ctx in self._iter_matching(info, txn, where))
