"""A query's memory quota (TiDB's ``tidb_mem_quota_query``): what the rows a SELECT holds cost, checked as they grow.

The stages whose state grows with the data -- DISTINCT's seen rows, GROUP BY's groups, a sort without a LIMIT, a
hash join's build side -- account each row they keep against one :class:`QueryMemory` per statement; past the quota
the statement fails with TiDB's ``ErrMemoryExceedForQuery`` (8175, ``pkg/errno/errname.go``), as TiDB's default
``tidb_mem_oom_action = CANCEL`` does, instead of holding an unbounded list. A streamed scan holds one batch and is
not accounted. Sizes are estimates of the Python objects held (:func:`row_bytes`), of the order of what they cost.

Cost: :meth:`QueryMemory.consume` O(1); :func:`row_bytes` O(values of the row).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any, Final

from cdc_core.upstream.sql.errors import SqlError

DEFAULT_MEM_QUOTA_QUERY: Final = 1 << 30  # TiDB's default tidb_mem_quota_query: 1 GiB
# ErrMemoryExceedForQuery's text (pkg/errno/errname.go); mysql_errors maps it to 8175
MEM_QUOTA_EXCEEDED_TEXT: Final = (
    "Your query has been cancelled due to exceeding the allowed memory limit for a single SQL query. Please try "
    "narrowing your query scope or increase the tidb_mem_quota_query limit and try again.[conn={conn}]")
_ROW_OVERHEAD: Final = 64  # a tuple or dict and the pointer to it
_SLOT: Final = 8


def value_bytes(v: Any) -> int:
    """What one held value costs, roughly (CPython's object sizes)."""
    t = type(v)
    if t is int or v is None or t is bool:
        return 28
    if t is str:
        return 49 + len(v)
    if t is bytes:
        return 33 + len(v)
    if t is Decimal:
        return 104
    if t is tuple:
        return row_bytes(v)
    return 64


def row_bytes(values: Iterable[Any]) -> int:
    """What a held row of ``values`` costs, roughly."""
    n = _ROW_OVERHEAD
    for v in values:
        n += _SLOT + value_bytes(v)
    return n


class QueryMemory:
    """One statement's memory account: ``consume`` what a stage keeps, ``release`` what it drops.

    ``quota`` <= 0 is no limit (TiDB: a non-positive ``tidb_mem_quota_query`` disables the quota)."""

    def __init__(self, quota: int = DEFAULT_MEM_QUOTA_QUERY, conn_id: int = 0) -> None:
        self.quota, self.conn_id = quota, conn_id
        self.used = 0
        self.peak = 0

    def consume(self, n: int) -> None:
        """Account ``n`` more bytes; past the quota, TiDB's 8175 error (nothing stays accounted)."""
        self.used += n
        if self.used > self.peak:
            self.peak = self.used
            if 0 < self.quota < self.used:
                self.used = 0
                raise SqlError(MEM_QUOTA_EXCEEDED_TEXT.format(conn=self.conn_id))

    def release(self, n: int) -> None:
        self.used = max(0, self.used - n)
