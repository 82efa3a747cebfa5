"""Optimistic and pessimistic transactions over the MVCC store (TiDB's transaction layer).

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

A **pessimistic** transaction (TiDB's default for explicit transactions, ``txn_mode``) runs each DML statement at
a fresh ``for_update_ts`` from PD: its reads are current reads at that ts (``begin_pessimistic_statement``), and
before the statement returns it locks the keys it wrote, and the rows a ``SELECT ... FOR UPDATE`` read, with TiKV's
``AcquirePessimisticLock`` (``lock_statement_keys``: a key another transaction holds is waited for, bounded by
``innodb_lock_wait_timeout``; a newer write than ``for_update_ts`` is a ``WriteConflictError`` on which the caller runs
the statement again). Its commit prewrites with the lock flags and ``for_update_ts`` (no write-conflict check on the
locked keys, TiKV's ``is_pessimistic_lock``), commits in the same three modes, and then releases the locks that
only guarded reads; a rollback releases them all.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sortedcontainers import SortedDict

from cdc_core.codec import key as keycodec
from cdc_core.codec import memcomparable, rowcodec
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.sql.errors import ErrorKind, SqlError
from cdc_core.upstream.store.mvcc import KeyLockedError, Mutation, MvccError, MvccStore, Op, WriteConflictError

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
                 options: CommitOptions = TWO_PC_ONLY, pessimistic: bool = False, lock_wait_timeout: float = 50.0):
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
        self.pessimistic = pessimistic
        self.lock_wait_timeout = lock_wait_timeout  # seconds a lock wait may take (innodb_lock_wait_timeout)
        self.for_update_ts = 0  # the current (or last) statement's, in a pessimistic transaction
        self.primary: bytes | None = None  # the first key it locked: its primary (TiDB's choice too)
        self._current_read = False  # a pessimistic statement runs: reads are at for_update_ts
        self._read_keys: dict[bytes, None] | None = None  # keys a SELECT ... FOR UPDATE read (to lock), in order
        self._also_lock: dict[bytes, None] = {}  # keys the statement locks without writing (rows UPDATE matched)

    @property
    def read_ts(self) -> int:
        """The ts reads are at: ``for_update_ts`` in a pessimistic statement (a current read), else ``start_ts``."""
        return self.for_update_ts if self._current_read else self.start_ts

    def _noted(self, pairs: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        for k, v in pairs:
            if self._read_keys is not None:
                self._read_keys[k] = None
            yield k, v

    # --- reads --------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        if key in self._buffer:
            return self._buffer[key]  # type: ignore[no-any-return]
        value = self.store.get(key, self.read_ts)
        if value is not None and self._read_keys is not None:
            self._read_keys[key] = None
        return value

    def scan(self, start: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        """Live ``(key, value)`` pairs in ``[start, end)`` as this transaction sees them."""
        merged: dict[bytes, bytes | None] = dict(self.store.scan(start, end, self.read_ts))
        for k in self._buffer.irange(start, end, inclusive=(True, False)):
            merged[k] = self._buffer[k]
        return list(self._noted(iter([(k, v) for k, v in sorted(merged.items()) if v is not None])))

    def iter_scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`scan` as it goes: the store's pages streamed when this transaction wrote nothing in the range (a
        read at a ts, a big SELECT), else the merged list."""
        if next(iter(self._buffer.irange(start, end or None, inclusive=(True, False))), None) is None:
            pairs = self.store.iter_scan(start, end, self.read_ts)
            return pairs if self._read_keys is None else self._noted(pairs)
        return iter(self.scan(start, end))

    def count(self, start: bytes, end: bytes) -> int:
        """How many live keys ``[start, end)`` holds as this transaction sees them, without keeping any."""
        mine = list(self._buffer.irange(start, end or None, inclusive=(True, False)))
        if not mine:
            return self.store.count(start, end, self.read_ts)
        n = sum(1 for k, _ in self.store.iter_scan(start, end, self.read_ts) if k not in self._buffer)
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
        self._current_read = False
        self._read_keys = None
        self._also_lock = {}

    def lock_too(self, key: bytes) -> None:
        """In a pessimistic statement: lock ``key`` with the statement's writes though it is not written (a row an
        UPDATE matched and left as it was: TiDB locks every row an UPDATE or DELETE matches)."""
        if self._current_read:
            self._also_lock[key] = None

    def rollback_statement(self) -> None:
        """Undo every write of the current statement (its pessimistic locks stay until the transaction ends)."""
        for key, prev in reversed(self._undo or []):
            if prev is _MISSING:
                self._buffer.pop(key, None)
            else:
                self._buffer[key] = prev
        self.end_statement()

    # --- pessimistic statements ---------------------------------------------------------------
    def begin_pessimistic_statement(self, *, for_update: bool = False) -> None:
        """A statement of a pessimistic transaction starts (or runs again): a new ``for_update_ts`` from PD, current
        reads at it, its writes undoable; ``for_update``: the rows it reads are to be locked too."""
        self.for_update_ts = self.tso.next()
        self.begin_statement()
        self._current_read = True
        self._read_keys = {} if for_update else None

    def statement_keys(self) -> list[bytes]:
        """The keys the current statement wrote, then those it read for update, in order, each once."""
        keys = dict.fromkeys(k for k, _ in self._undo or [])
        keys.update(self._also_lock)
        keys.update(self._read_keys or {})
        return list(keys)

    async def lock_statement_keys(self) -> None:
        """Lock the current statement's keys at its ``for_update_ts`` (module docstring); raises as
        ``MvccStore.acquire_pessimistic_locks`` does."""
        keys = self.statement_keys()
        if not keys:
            return
        if self.primary is None:
            self.primary = keys[0]
        await self.store.acquire_pessimistic_locks(keys, self.primary, self.start_ts, self.for_update_ts,
                                                   self.lock_wait_timeout)

    def release_locks(self) -> None:
        """Drop every pessimistic lock the transaction still holds (its end: commit, rollback, disconnect)."""
        if self.pessimistic:
            self.store.pessimistic_rollback(self.store.lock_manager.locks_of(self.start_ts), self.start_ts)

    # --- commit -------------------------------------------------------------------------------
    def mutations(self) -> list[Mutation]:
        """The buffer as mutations; a delete of a key absent at the snapshot only checks conflicts."""
        out = []
        # A pessimistic transaction's writes were made over current reads: a key is "there" if its latest read saw it
        seen_at = self.for_update_ts if self.pessimistic and self.for_update_ts else self.start_ts
        for key, value in self._buffer.items():
            if value is not None:
                out.append(Mutation(key, Op.PUT, value))
            elif self.store.get(key, seen_at) is not None:
                out.append(Mutation(key, Op.DELETE))
            else:
                out.append(Mutation(key, Op.CHECK))
        return out

    @property
    def _lock_for_update_ts(self) -> int:
        """The ``for_update_ts`` the prewrite carries (0: optimistic)."""
        return max(self.for_update_ts, self.start_ts) if self.pessimistic else 0

    def _ordered(self, muts: list[Mutation]) -> list[Mutation]:
        """The primary first (a pessimistic transaction's is the first key it locked)."""
        if self.primary is None:
            return muts
        return sorted(muts, key=lambda m: m.key != self.primary)

    def _prewrite(self, muts: list[Mutation], keys: list[bytes]) -> None:
        try:
            self.store.prewrite(muts, keys[0], self.start_ts, self._lock_for_update_ts)
        except MvccError as exc:
            self.done = True
            self.release_locks()
            raise _conflict(exc, self.start_ts) from exc

    def _validate(self, keys: list[bytes], validate: Callable[[], None] | None) -> None:
        try:
            if validate is not None:
                validate()
        except SqlError:
            self.store.rollback(keys, self.start_ts)
            self.done = True
            self.release_locks()
            raise

    def _commit_locked(self, keys: list[bytes], validate: Callable[[], None] | None, commit_ts: int | None) -> int:
        self._validate(keys, validate)
        if self.commit_mode is CommitMode.ASYNC_COMMIT:
            ts = self.store.commit_async(keys, self.start_ts, self._min_commit_ts, self._lock_for_update_ts)
        else:
            ts = commit_ts if commit_ts is not None else self.tso.next()
            self.store.commit(keys, self.start_ts, ts)
        self.done = True
        self.release_locks()  # those that guarded reads only: the written keys' were prewrite locks, now versions
        return ts

    async def commit(self, validate: Callable[[], None] | None = None) -> int:
        """Commit in the mode :class:`CommitOptions` picks (module docstring); returns the commit ts (0 when there
        was nothing to write).

        The event loop runs other work before the commit (locks are visible for 2PC and async commit, and the
        change feed sends their PREWRITE rows); ``validate`` runs right before the commit ts is taken and may raise
        ``SqlError`` to roll back (e.g. a table changed by a concurrent DDL).
        """
        muts = self._ordered(self.mutations())
        keys = [m.key for m in muts if m.op is not Op.CHECK]
        if not keys:
            self.done = True
            self.release_locks()
            return 0
        self.commit_mode = self.options.mode(keys)
        if self.options.linearizable and self.commit_mode is not CommitMode.TWO_PC:
            self._min_commit_ts = self.tso.next() + 1  # client-go: a PD ts fetched before the prewrite, plus one
        if self.commit_mode is CommitMode.ONE_PC:
            try:
                await asyncio.sleep(0)  # the 1PC request on its way to the store
            except BaseException:
                self.done = True
                self.release_locks()
                raise
            self._validate([], validate)
            try:
                ts = self.store.commit_one_pc(muts, self.start_ts, self._min_commit_ts, self._lock_for_update_ts)
            except MvccError as exc:
                raise _conflict(exc, self.start_ts) from exc
            finally:
                self.done = True
                self.release_locks()
            return ts
        self._prewrite(muts, keys)
        try:
            await asyncio.sleep(0)
        except BaseException:  # cancelled (the client went away): never leave locks behind
            self.store.rollback(keys, self.start_ts)
            self.done = True
            self.release_locks()
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
        self.release_locks()


def _index_values(data: bytes) -> str | None:
    """An index key's datums as TiDB's message lists them (``{v1, v2, }``), for the integer, unsigned, string and
    NULL datums; None for any other (the key is then shown without them)."""
    out, pos = [], 0
    while pos < len(data):
        flag, pos = data[pos], pos + 1
        if flag in (rowcodec.INT_FLAG, rowcodec.UINT_FLAG) and pos + 8 <= len(data):
            n = int.from_bytes(data[pos:pos + 8], "big")
            out.append(str(n - (1 << 63) if flag == rowcodec.INT_FLAG else n))
            pos += 8
        elif flag == rowcodec.BYTES_FLAG:
            try:
                raw, used = memcomparable.decode_bytes(data[pos:])
            except memcomparable.KeyDecodeError:
                return None
            out.append(raw.decode("utf-8", "replace"))
            pos += used
        elif flag == rowcodec.NIL_FLAG:
            out.append("NULL")
        else:
            return None
    return "{" + "".join(f"{v}, " for v in out) + "}"


def key_text(key: bytes) -> str:
    """A key as TiDB's write-conflict message shows it (``pkg/store/driver/txn/error.go`` ``extractKeyErr``:
    ``{tableID=.., handle=..}`` / ``{tableID=.., indexID=.., indexValues={.., }}``; the raw key is ``originalKey``)."""
    if len(key) >= 11 and key[:1] == b"t":
        table_id = keycodec.table_id_of(key)
        kind = key[9:11]
        if kind == b"_r" and len(key) == 19:
            return f"{{tableID={table_id}, handle={keycodec.decode_int(key[11:19])}}}"
        if kind == b"_r":
            return f"{{tableID={table_id}, handle={key[11:].hex()}}}"
        if kind == b"_i" and len(key) >= 19:
            index_id = keycodec.decode_int(key[11:19])
            values = _index_values(key[19:])
            shown = f", indexValues={values}" if values is not None else ""
            return f"{{tableID={table_id}, indexID={index_id}{shown}}}"
    return key.hex()


def write_conflict_message(start_ts: int, conflict_start_ts: int, conflict_commit_ts: int, key: bytes,
                           primary: bytes, reason: str) -> str:
    """TiDB's ErrWriteConflict (9007) text (``pkg/kv/error.go``, ``pkg/store/driver/error/error.go``
    ``newWriteConflictError``, with ``kv.TxnRetryableMark``)."""
    return (f"Write conflict, txnStartTS={start_ts}, conflictStartTS={conflict_start_ts}, "
            f"conflictCommitTS={conflict_commit_ts}, key={key_text(key)}, originalKey={key.hex()}, "
            f"primary={key_text(primary) if primary else '[]byte(nil)'}, originalPrimaryKey={primary.hex()}, "
            f"reason={reason} [try again later]")


def _conflict(exc: MvccError, start_ts: int) -> SqlError:
    """A commit's failure as TiDB's 9007: a newer write (``WriteConflictError``) or, in an optimistic commit, a key
    another transaction locks (client-go resolves or waits for it; a live one's commit then conflicts)."""
    if isinstance(exc, WriteConflictError):
        text = write_conflict_message(start_ts, exc.conflict_start_ts, exc.conflict_commit_ts, exc.key, exc.primary,
                                      "Optimistic")
    elif isinstance(exc, KeyLockedError):
        text = write_conflict_message(start_ts, exc.lock_ts, 0, exc.key, b"", "Optimistic")
    else:
        text = f"Write conflict: {exc} [try again later]"
    return SqlError(text, ErrorKind.CONFLICT)
