"""Optimistic transactions over the MVCC store (TiDB's transaction layer).

A ``Transaction`` reads a snapshot at its start ts overlaid with its own buffered writes, and
commits with two-phase commit: prewrite every key (conflicts abort the transaction), then take
the commit ts from the TSO *after* the prewrite and commit every key in the same event-loop step
as the TSO call. The CDC service computes resolved ts from the TSO and the locks in one step too,
so a resolved ts can never be at or above the commit ts of a transaction it has not seen.

Statement-level atomicity (MySQL's "the statement fails, the transaction continues") is an undo
log: ``begin_statement`` / ``rollback_statement``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from sortedcontainers import SortedDict

from cdc_core.upstream.errors import ErrorKind, SqlError
from cdc_core.upstream.mvcc import Mutation, MvccError, MvccStore, Op, WriteConflictError
from cdc_core.upstream.tso import TsoAllocator

_MISSING = object()


class Transaction:
    def __init__(self, store: MvccStore, tso: TsoAllocator, start_ts: int | None = None, *, read_only: bool = False):
        self.store = store
        self.tso = tso
        self.start_ts = start_ts if start_ts is not None else tso.next()
        self.read_only = read_only
        self._buffer: SortedDict = SortedDict()  # key -> bytes | None (None = delete)
        self._undo: list[tuple[bytes, object]] | None = None
        # table id -> schema version the writes were made under (checked at commit)
        self.tables_written: dict[int, int] = {}
        self.done = False

    # --- reads --------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        if key in self._buffer:
            return self._buffer[key]  # type: ignore[no-any-return]
        return self.store.get(key, self.start_ts)

    def scan(self, start: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        """Live ``(key, value)`` pairs in ``[start, end)`` as this transaction sees them."""
        merged: dict[bytes, bytes | None] = dict(self.store.scan(start, end, self.start_ts))
        for k in self._buffer.irange(start, end, inclusive=(True, False)):
            merged[k] = self._buffer[k]
        return [(k, v) for k, v in sorted(merged.items()) if v is not None]

    def iter_scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`scan` as it goes: the store's pages streamed when this transaction wrote nothing in the range (a
        read at a ts, a big SELECT), else the merged list."""
        if next(iter(self._buffer.irange(start, end or None, inclusive=(True, False))), None) is None:
            return self.store.iter_scan(start, end, self.start_ts)
        return iter(self.scan(start, end))

    def count(self, start: bytes, end: bytes) -> int:
        """How many live keys ``[start, end)`` holds as this transaction sees them, without keeping any."""
        mine = list(self._buffer.irange(start, end or None, inclusive=(True, False)))
        if not mine:
            return self.store.count(start, end, self.start_ts)
        n = sum(1 for k, _ in self.store.iter_scan(start, end, self.start_ts) if k not in self._buffer)
        return n + sum(1 for k in mine if self._buffer[k] is not None)

    # --- writes -------------------------------------------------------------------------------
    def _write(self, key: bytes, value: bytes | None) -> None:
        if self.read_only:
            raise SqlError("this transaction is read-only (a snapshot read at a ts)")
        if self._undo is not None:
            self._undo.append((key, self._buffer.get(key, _MISSING)))
        self._buffer[key] = value

    def put(self, key: bytes, value: bytes) -> None:
        self._write(key, value)

    def delete(self, key: bytes) -> None:
        self._write(key, None)

    @property
    def has_writes(self) -> bool:
        return bool(self._buffer)

    # --- statement atomicity ------------------------------------------------------------------
    def begin_statement(self) -> None:
        self._undo = []

    def end_statement(self) -> None:
        self._undo = None

    def rollback_statement(self) -> None:
        """Undo every write of the current statement."""
        for key, prev in reversed(self._undo or []):
            if prev is _MISSING:
                self._buffer.pop(key, None)
            else:
                self._buffer[key] = prev
        self._undo = None

    # --- commit -------------------------------------------------------------------------------
    def mutations(self) -> list[Mutation]:
        """The buffer as mutations; a delete of a key absent at the snapshot only checks conflicts."""
        out = []
        for key, value in self._buffer.items():
            if value is not None:
                out.append(Mutation(key, Op.PUT, value))
            elif self.store.get(key, self.start_ts) is not None:
                out.append(Mutation(key, Op.DELETE))
            else:
                out.append(Mutation(key, Op.CHECK))
        return out

    def _prewrite(self) -> tuple[list[Mutation], list[bytes]]:
        muts = self.mutations()
        keys = [m.key for m in muts if m.op is not Op.CHECK]
        if not keys:
            return muts, []
        try:
            self.store.prewrite(muts, keys[0], self.start_ts)
        except MvccError as exc:
            self.done = True
            what = str(exc) if isinstance(exc, WriteConflictError) else f"write conflict: {exc}"
            raise SqlError(f"{what}; the transaction was rolled back", ErrorKind.CONFLICT) from exc
        return muts, keys

    def _commit_locked(self, keys: list[bytes], validate: Callable[[], None] | None, commit_ts: int | None) -> int:
        try:
            if validate is not None:
                validate()
        except SqlError:
            self.store.rollback(keys, self.start_ts)
            self.done = True
            raise
        ts = commit_ts if commit_ts is not None else self.tso.next()
        self.store.commit(keys, self.start_ts, ts)
        self.done = True
        return ts

    async def commit(self, validate: Callable[[], None] | None = None) -> int:
        """Two-phase commit; returns the commit ts (0 when there was nothing to write).

        Between prewrite and commit the event loop runs other work (locks are visible, the change
        feed sends PREWRITE rows); ``validate`` runs right before the commit ts is taken and may
        raise ``SqlError`` to roll back (e.g. a table changed by a concurrent DDL).
        """
        _, keys = self._prewrite()
        if not keys:
            self.done = True
            return 0
        try:
            await asyncio.sleep(0)
        except BaseException:  # cancelled (the client went away): never leave locks behind
            self.store.rollback(keys, self.start_ts)
            self.done = True
            raise
        return self._commit_locked(keys, validate, None)

    def commit_now(self, commit_ts: int | None = None) -> int:
        """Prewrite and commit in one event-loop step (DDL jobs).

        A DDL writes its own commit ts into the history row, so it takes ``commit_ts`` from the
        TSO before the prewrite; that is equivalent to taking it after, because nothing can run
        (allocate a ts, compute a resolved ts, read locks) between the two in this single step.
        """
        _, keys = self._prewrite()
        if not keys:
            self.done = True
            return 0
        return self._commit_locked(keys, None, commit_ts)

    def rollback(self) -> None:
        self._buffer.clear()
        self.done = True
