"""Statements run on an embedded cluster's SQL engine directly (no MySQL wire), for the SQL front's semantic tests:
the last statement's result, its rows as tuples in column order, or the MySQL code and message it fails with."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_core.upstream.sql import mysql_errors
from cdc_core.upstream.sql.errors import SqlError


def result(cluster: Any, sql: str) -> Any:
    """The last statement's ``StatementResult``."""
    return cluster.run(cluster.cluster.sql.execute(sql))[-1]


def values(cluster: Any, sql: str) -> list[tuple[Any, ...]]:
    """The last statement's rows, each a tuple in its result's column order."""
    res = result(cluster, sql)
    return [tuple(r[c] for c in res.columns) for r in res.rows]


def error(cluster: Any, sql: str) -> tuple[int, str]:
    """The MySQL code and message (without its statement context) the script fails with."""
    with pytest.raises(SqlError) as ei:
        cluster.run(cluster.cluster.sql.execute(sql))
    return mysql_errors.code_of(ei.value).code, mysql_errors.strip_context(ei.value.message)
