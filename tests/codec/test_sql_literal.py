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
