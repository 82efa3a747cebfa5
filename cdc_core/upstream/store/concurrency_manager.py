"""TiKV's concurrency manager, the part a commit ts depends on: ``max_ts``, the largest ts anything read at.

With async commit and 1PC (TiDB's defaults since v5.0: ``tidb_enable_async_commit``, ``tidb_enable_1pc``) a
transaction's commit ts does not come from PD. TiKV computes it from ``max_ts`` (tikv
``src/storage/txn/actions/prewrite.rs`` ``async_commit_timestamps``: ``max(max_ts, start_ts, for_update_ts) + 1``),
which every snapshot read raises to its read ts before it reads (``src/storage/mod.rs`` ``prepare_snap_ctx``) and
the resolved-ts advancers raise to the PD ts they are about to publish (``components/cdc/src/endpoint.rs``,
``components/resolved_ts/src/advance.rs``: ``cm.update_max_ts(min_ts)``). So a commit ts is above every read that
could have missed the write and every resolved ts already promised, and yet it need not be unique: two
transactions committing with no read between them take the same one, and so can a transaction and a DDL whose
commit ts PD handed out right after the read that set ``max_ts``.

All stores of the embedded cluster share one MVCC store (``cluster.py``), so they share one manager; it is kept by
``MvccStore`` and changed only under that store's lock, where a commit's ts is taken in the same critical section
as its writes (a read then either sees the commit or raised ``max_ts`` above it first).
"""

from __future__ import annotations

from cdc_core.codec.tso import MAX_TS

__all__ = ["ConcurrencyManager"]


class ConcurrencyManager:
    """``max_ts`` and the commit ts it gives. Not thread-safe by itself: the owner serializes calls.

    ==========================  ===========
    operation                   cost
    ==========================  ===========
    :meth:`update_max_ts`       O(1)
    :meth:`async_commit_ts`     O(1)
    ==========================  ===========
    """

    __slots__ = ("max_ts",)

    def __init__(self) -> None:
        self.max_ts = 0

    def update_max_ts(self, ts: int) -> None:
        """A read at ``ts`` (or a resolved ts about to be published): later commit ts go above it. A read at the
        largest ts ("the latest") is ignored, as TiKV ignores ``TimeStamp::max()``
        (``components/concurrency_manager/src/lib.rs``)."""
        if self.max_ts < ts < MAX_TS:
            self.max_ts = ts

    def async_commit_ts(self, start_ts: int, for_update_ts: int = 0, min_commit_ts: int = 0) -> int:
        """The commit ts of an async-commit or 1PC transaction committed now: ``max(max_ts, start_ts,
        for_update_ts) + 1``, and no less than the ``min_commit_ts`` its client asked for (``lock.min_commit_ts``)."""
        return max(max(self.max_ts, start_ts, for_update_ts) + 1, min_commit_ts)
