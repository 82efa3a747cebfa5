"""A query's memory account (``mem_quota``): TiDB's 8175 text past the quota, no limit at a non-positive quota."""

from __future__ import annotations

import pytest

from cdc_core.upstream.sql import mysql_errors
from cdc_core.upstream.sql.errors import SqlError
from cdc_core.upstream.sql.mem_quota import QueryMemory, row_bytes


def test_past_the_quota_is_tidb_s_error_naming_the_connection() -> None:
    m = QueryMemory(quota=1000, conn_id=7)
    m.consume(600)
    m.release(300)
    m.consume(700)
    assert m.used == 1000 and m.peak == 1000
    with pytest.raises(SqlError) as ei:
        m.consume(1)
    assert mysql_errors.code_of(ei.value) is mysql_errors.TIDB_MEM_QUOTA_EXCEEDED
    assert ei.value.message.endswith("increase the tidb_mem_quota_query limit and try again.[conn=7]")


def test_no_quota_and_row_sizes() -> None:
    m = QueryMemory(quota=0)
    m.consume(1 << 40)
    assert m.used == 1 << 40
    assert row_bytes(["x" * 100]) > row_bytes(["x"]) > row_bytes([])
