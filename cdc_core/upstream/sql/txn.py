"""Optimistic transactions over the MVCC store (TiDB's transaction layer).

A ``Transaction`` reads a snapshot at its start ts overlaid with its own buffered writes, and commits the way TiDB
v5.0+ does by default (``tidb_enable_async_commit`` and ``tidb_enable_1pc`` on; client-go
``txnkv/transaction/2pc.go`` ``checkAsyncCommit`` / ``checkOnePC``, limits from client-go ``config/client.go``):

* **1PC** when every key is in one region and the transaction is small (at most 256 keys of 4 KiB in all): one
  request to the store, which takes the commit ts from its ``max_ts`` and writes the versions with no lock (the
  change feed sees COMMITTED rows);
* **async commit** when it is small but spans regions: prewrite every key, then commit at ``max(max_ts,
  start_ts) + 1`` (``MvccStore.commit_async``);
* **2PC** otherwise (or with both off): prewrite, then the commit ts from the TSO *after* the prewrite, committed in
  the same event-loop step as the TSO call.

For the first two, an explicit transaction (BEGIN ... COMMIT) also asks for linearizability, as TiDB does with
``tidb_guarantee_linearizability`` on (its default; an autocommit statement needs none, ``pkg/session/session.go``:
its start ts came from PD after every earlier commit): client-go fetches a PD ts before the prewrite and asks for a
commit ts above it (``txnkv/transaction/2pc.go``, ``twoPhaseCommitter.execute``: ``minCommitTS = latestTS + 1``),
which TiKV takes as the lock's ``min_commit_ts``.
Either way the commit ts need not be unique: two transactions, or a transaction and a DDL (whose commit ts PD hands
out, possibly the very ``latestTS + 1``), can commit at the same ts (``concurrency_manager``). The CDC service
raises ``max_ts`` to every resolved ts before it publishes it, and computes it from the TSO and the locks in one
step, so a resolved ts can never be at or above the commit ts of a transaction it has not seen. Between the
client's reads and its commit request the event loop runs other work (a request in flight), for every mode.

Statement-level atomicity (MySQL's "the statement fails, the transaction continues") is an undo
log: ``begin_statement`` / ``rollback_statement``.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sortedcontainers import SortedDict

from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.sql.errors import ErrorKind, SqlError
from cdc_core.upstream.store.mvcc import Mutation, MvccError, MvccStore, Op, WriteConflictError

_MISSING = object()
# client-go config/client.go AsyncCommit: KeysLimit 256, TotalKeySizeLimit 4 KiB (beyond them: 2PC)
ASYNC_COMMIT_KEYS_LIMIT = 256
ASYNC_COMMIT_KEY_BYTES_LIMIT = 4 * 1024


class CommitMode(enum.Enum):
    ONE_PC = "1pc"
    ASYNC_COMMIT = "async_commit"  # the names of client-go's TxnInfo.txn_commit_mode
    TWO_PC = "2pc"


@dataclass(frozen=True)
class CommitOptions:
    """What decides a transaction's commit mode: TiDB's session switches and, for 1PC, whether its keys are in one
    region (``single_region(keys)``; None: never known to be, so no 1PC)."""

    async_commit: bool = True  # tidb_enable_async_commit (ON by default since TiDB v5.0)
    one_pc: bool = True  # tidb_enable_1pc (ON by default since TiDB v5.0)
    single_region: Callable[[Sequence[bytes]], bool] | None = None
    # An explicit transaction under tidb_guarantee_linearizability (ON by default): a PD ts + 1 is the least
    # commit ts an async-commit or 1PC commit may take
    linearizable: bool = False

    def mode(self, keys: Sequence[bytes]) -> CommitMode:
        small = len(keys) <= ASYNC_COMMIT_KEYS_LIMIT and sum(map(len, keys)) <= ASYNC_COMMIT_KEY_BYTES_LIMIT
        if not small or not (self.async_commit or self.one_pc):
            return CommitMode.TWO_PC
        if self.one_pc and self.single_region is not None and self.single_region(keys):
            return CommitMode.ONE_PC
        return CommitMode.ASYNC_COMMIT if self.async_commit else CommitMode.TWO_PC


TWO_PC_ONLY = CommitOptions(async_commit=False, one_pc=False)


class Transaction:
    def __init__(self, store: MvccStore, tso: TsoAllocator, start_ts: int | None = None, *, read_only: bool = False,
                 options: CommitOptions = TWO_PC_ONLY):
        self.store = store
        self.tso = tso
        self.start_ts = start_ts if start_ts is not None else tso.next()
        self.read_only = read_only
        self.options = options
        self.commit_mode: CommitMode | None = None  # how it committed (None: not yet, or nothing to write)
        self._min_commit_ts = 0  # the least commit ts the client asks the store for (linearizability)
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

    def _prewrite(self, muts: list[Mutation], keys: list[bytes]) -> None:
        try:
            self.store.prewrite(muts, keys[0], self.start_ts)
        except MvccError as exc:
            self.done = True
            raise _conflict(exc) from exc

    def _validate(self, keys: list[bytes], validate: Callable[[], None] | None) -> None:
        try:
            if validate is not None:
                validate()
        except SqlError:
            self.store.rollback(keys, self.start_ts)
            self.done = True
            raise

    def _commit_locked(self, keys: list[bytes], validate: Callable[[], None] | None, commit_ts: int | None) -> int:
        self._validate(keys, validate)
        if self.commit_mode is CommitMode.ASYNC_COMMIT:
            ts = self.store.commit_async(keys, self.start_ts, self._min_commit_ts)
        else:
            ts = commit_ts if commit_ts is not None else self.tso.next()
            self.store.commit(keys, self.start_ts, ts)
        self.done = True
        return ts

    async def commit(self, validate: Callable[[], None] | None = None) -> int:
        """Commit in the mode :class:`CommitOptions` picks (module docstring); returns the commit ts (0 when there
        was nothing to write).

        The event loop runs other work before the commit (locks are visible for 2PC and async commit, and the
        change feed sends their PREWRITE rows); ``validate`` runs right before the commit ts is taken and may raise
        ``SqlError`` to roll back (e.g. a table changed by a concurrent DDL).
        """
        muts = self.mutations()
        keys = [m.key for m in muts if m.op is not Op.CHECK]
        if not keys:
            self.done = True
            return 0
        self.commit_mode = self.options.mode(keys)
        if self.options.linearizable and self.commit_mode is not CommitMode.TWO_PC:
            self._min_commit_ts = self.tso.next() + 1  # client-go: a PD ts fetched before the prewrite, plus one
        if self.commit_mode is CommitMode.ONE_PC:
            try:
                await asyncio.sleep(0)  # the 1PC request on its way to the store
            except BaseException:
                self.done = True
                raise
            self._validate([], validate)
            try:
                ts = self.store.commit_one_pc(muts, self.start_ts, self._min_commit_ts)
            except MvccError as exc:
                raise _conflict(exc) from exc
            finally:
                self.done = True
            return ts
        self._prewrite(muts, keys)
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
        muts = self.mutations()
        keys = [m.key for m in muts if m.op is not Op.CHECK]
        if not keys:
            self.done = True
            return 0
        self.commit_mode = CommitMode.TWO_PC
        self._prewrite(muts, keys)
        return self._commit_locked(keys, None, commit_ts)

    def rollback(self) -> None:
        self._buffer.clear()
        self.done = True


def _conflict(exc: MvccError) -> SqlError:
    what = str(exc) if isinstance(exc, WriteConflictError) else f"write conflict: {exc}"
    return SqlError(f"{what}; the transaction was rolled back", ErrorKind.CONFLICT)
