"""MySQL string literals per sql_mode (cdc_core.codec.sql_literal): what a session with or without
NO_BACKSLASH_ESCAPES reads back from the literal cdcflow writes for it, by the same tokenizer rules as TiDB's lexer
(the embedded upstream tokenizes with these dialects; tests/client/test_tidb_sql.py sends them to it)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from cdc_core.codec.sql_literal import mysql_dialect, string_literal

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=80)


def _read(sql: str, nbe: bool) -> list[str]:
    return [t.text for t in mysql_dialect(no_backslash_escapes=nbe).tokenize(sql) if t.token_type == TokenType.STRING]


def test_the_two_modes_write_a_backslash_and_a_quote_as_each_reads_them() -> None:
    # TiDB Lightning's appendSQLBytes writes the same (br/pkg/lightning/backend/tidb/tidb.go)
    assert string_literal("it's a\\b", no_backslash_escapes=False) == "'it''s a\\\\b'"
    assert string_literal("it's a\\b", no_backslash_escapes=True) == "'it''s a\\b'"
    assert string_literal("\0\b\n\r\t\x1a", no_backslash_escapes=False) == "'\\0\\b\\n\\r\\t\\Z'"
    assert string_literal("\0\n", no_backslash_escapes=True) == "'\0\n'"


def test_a_backslash_escapes_only_without_the_mode() -> None:
    """TiDB's lexer (scanString): '\\n' is a newline by default and two characters under the mode; 'a\\' is a whole
    string under the mode and an unterminated one without it."""
    assert _read("SELECT 'a\\nb'", False) == ["a\nb"]
    assert _read("SELECT 'a\\nb'", True) == ["a\\nb"]
    assert _read("SELECT 'a\\', 'b'", True) == ["a\\", "b"]
    assert _read('SELECT "a""b", \'c\'\'d\'', True) == ['a"b', "c'd"]
    with pytest.raises(TokenError):
        _read("SELECT 'a\\'", False)


@given(texts, st.booleans())
def test_every_text_reads_back_in_the_mode_it_was_written_for(text: str, nbe: bool) -> None:
    assert _read(f"SELECT {string_literal(text, no_backslash_escapes=nbe)} AS x", nbe) == [text]


@given(texts, texts)
def test_a_literal_written_for_one_mode_is_not_read_alike_in_the_other(head: str, tail: str) -> None:
    """Why the session's mode matters: the default escaping of a backslash is another value under the mode."""
    text = f"{head}\\{tail}"
    assert _read(f"SELECT {string_literal(text, no_backslash_escapes=False)}", True) != [text]


_FIRST_IMPORT_RACE = """
import sys, threading
from cdc_core.client.tidb_sql import split_statements
from cdc_core.codec.sql_literal import mysql_dialect
from cdc_core.filter.event_filter import to_spark_predicate
assert "sqlglot" not in sys.modules, "sqlglot must be imported lazily"
calls = [lambda: mysql_dialect(no_backslash_escapes=True), lambda: mysql_dialect(no_backslash_escapes=False),
         lambda: split_statements("SELECT 1; SELECT 2"), lambda: to_spark_predicate("a > 1", "test")]
errors, start = [], threading.Barrier(48)
def go(i):
    start.wait()
    try:
        calls[i % len(calls)]()
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=go, args=(i,)) for i in range(48)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(errors), errors[:1])
"""


def test_threads_that_first_need_sqlglot_at_once_each_get_it_whole() -> None:
    """Threads (the checks' pool, each reading the upstream) that tokenize or parse for the first time at the same
    moment: sqlglot's modules import each other, and without ``load_sqlglot``'s lock some were handed a
    half-initialized ``sqlglot.tokens`` (``ImportError: cannot import name 'Token'``; every one of 48 threads, run
    this way, before the fix). A fresh interpreter, so that sqlglot is not imported yet."""
    import subprocess
    import sys

    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", _FIRST_IMPORT_RACE], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split()[0] == "0", out.stdout
