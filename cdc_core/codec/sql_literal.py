"""MySQL string literals as a session's ``sql_mode`` writes and reads them, for the client (``tidb_sql``) and the
embedded upstream's SQL front alike.

By default a backslash escapes the next character inside a quoted string (``'a\\'b'`` is a'b, ``'\\n'`` a newline),
and a quote is also escaped by doubling it (``'a''b'``). Under ``NO_BACKSLASH_ESCAPES`` a backslash is an ordinary
character (``'a\\b'`` is a\\b, ``'a\\'`` a complete string) and doubling is the only escape (TiDB's lexer:
``pkg/parser/lexer.go`` ``scanString`` reads ``\\`` as an escape only without ``mysql.ModeNoBackslashEscapes``;
MySQL's reference, "String Literals"). A literal cdcflow writes must follow the mode of the session it is sent on:
``'a\\\\b'`` is a\\b by default and a\\\\b under the mode.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlglot import Dialect

NO_BACKSLASH_ESCAPES = "NO_BACKSLASH_ESCAPES"
# The escapes TiDB Lightning's TiDB backend writes (br/pkg/lightning/backend/tidb/tidb.go, appendSQLBytes): a
# quote doubled in both modes; by default NUL, backspace, newline, carriage return, tab and Ctrl-Z as their
# backslash escapes (a statement's text stays one printable line) and a backslash doubled.
_BACKSLASHED = {"\0": "\\0", "\b": "\\b", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1a": "\\Z", "'": "''",
                "\\": "\\\\"}
_ESCAPE_TABLE = str.maketrans(_BACKSLASHED)
_SQLGLOT_IMPORT = threading.Lock()
_sqlglot_loaded = False


def load_sqlglot() -> None:
    """Import sqlglot (its package, MySQL dialect, tokens and errors) once, under a lock, before a function-level
    ``from sqlglot... import``: sqlglot is imported lazily (commands that never run SQL start without its ~0.5 s),
    and threads that first need it at the same time (the checks' pool, each reading the upstream) would each start
    its import; its modules import each other, so one thread could be handed another's half-initialized module
    ("cannot import name 'Token' from partially initialized module 'sqlglot.tokens'")."""
    global _sqlglot_loaded
    if _sqlglot_loaded:
        return
    with _SQLGLOT_IMPORT:
        import sqlglot
        import sqlglot.dialects.mysql
        import sqlglot.errors
        import sqlglot.tokens  # noqa: F401

        _sqlglot_loaded = True


def string_literal(text: str, *, no_backslash_escapes: bool) -> str:
    """``text`` as a quoted string literal of a session with (``no_backslash_escapes``) or without the mode."""
    if no_backslash_escapes:
        return "'" + text.replace("'", "''") + "'"
    return "'" + text.translate(_ESCAPE_TABLE) + "'"


@functools.cache
def mysql_dialect(*, no_backslash_escapes: bool) -> Dialect:
    """sqlglot's MySQL dialect, whose tokenizer reads string literals as a session with or without the mode does
    (sqlglot's MySQL tokenizer always takes ``\\`` as an escape)."""
    load_sqlglot()
    from sqlglot import Dialect
    from sqlglot.dialects.mysql import MySQL

    if not no_backslash_escapes:
        return Dialect.get_or_raise("mysql")

    class MySQLNoBackslashEscapes(MySQL):
        class Tokenizer(MySQL.Tokenizer):
            STRING_ESCAPES = ["'", '"']  # a quote doubled, inside a string quoted by it

    return MySQLNoBackslashEscapes()
