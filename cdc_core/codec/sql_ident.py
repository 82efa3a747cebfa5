"""Identifiers in the SQL text cdcflow writes: the one quoting of a database, table or column name, for TiDB's SQL and
for Spark SQL alike.

Both quote with backticks and write a backtick inside the name twice (TiDB: ``CREATE TABLE `a``b` `` names the
table a`b, pingcap/docs ``schema-object-names.md``; Spark: ``SqlBaseLexer.g4``'s ``BACKQUOTED_IDENTIFIER``, ``'``'``
inside one), and neither gives anything else inside backticks a meaning: a quoted name may hold dots, quotes,
backslashes, spaces and any Unicode text. Spark's ``F.col`` parses its argument as a column reference (``a.b`` is a
field ``b`` of a struct ``a``), so a column is referred to as ``F.col(quote_ident(name))`` and a column of an aliased
frame as ``F.col("i." + quote_ident(name))``.

The quoting is the same under every ``sql_mode`` but ``ANSI_QUOTES`` (which adds ``"`` as a second identifier quote,
backticks still quote), so it does not depend on the session.
"""

from __future__ import annotations

from collections.abc import Iterable


def quote_ident(name: str) -> str:
    """``name`` as one backtick-quoted identifier (a backtick in it doubled)."""
    return "`" + name.replace("`", "``") + "`"


def quote_table(db: str, table: str) -> str:
    """```db`.`table``` for TiDB."""
    return f"{quote_ident(db)}.{quote_ident(table)}"


def quote_list(names: Iterable[str]) -> str:
    """The names quoted and joined with ``", "`` (a column list)."""
    return ", ".join(quote_ident(n) for n in names)
