"""A sysbench-like OLTP workload against the SQL front (``cdcflow upstream workload``).

Tables ``sbtest1..N (id BIGINT PRIMARY KEY, k INT, c VARCHAR, pad VARCHAR, uk INT UNIQUE)``, ids
spread over negative and positive handles so that transactions touch several regions (and so
several stores). Each transaction is one of: insert, update of a non-key column, update changing
the primary key, update changing the unique key, delete, or a multi-row transaction mixing them
across regions; the mix is configurable, the RNG seeded (per thread: ``seed + thread index``).
Optionally DDL runs at a rate (ADD/DROP COLUMN, ADD/DROP INDEX, MODIFY COLUMN) between
transactions. It runs for a duration or a transaction count and returns a summary (transactions,
rows, errors by kind, rate). Duplicate keys and write conflicts are expected under concurrency:
they are counted by kind, not fatal.

A statement of many rows (``rows_per_txn > 1``) inserts new ids above the id range. Given a ``query``, a run
starts them above the largest id an earlier run inserted there (``SELECT MAX(id) ... WHERE id > id_range``: a
range read of those rows only), so that a second run on the same tables -- the scale benchmark's backlog after its
lag phase -- inserts rows instead of failing every insert on a duplicate key.

The workload only needs a way to run a SQL script (``execute(sql) -> list of (affected rows,
commit ts)``), so it runs against any client: the CLI passes ``UpstreamClient``.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# execute(script) -> [(affected_rows, commit_ts)] per statement; raises on an error
Execute = Callable[[str], list[tuple[int, int]]]
Query = Callable[[str], list[dict[str, Any]]]

TXN_KINDS = ("insert", "update", "update_pk", "update_uk", "delete", "multi")


@dataclass
class WorkloadConfig:
    db: str = "sbtest"
    tables: int = 2
    id_range: int = 10_000  # ids are drawn from [-id_range, id_range]
    initial_rows: int = 100  # rows per table loaded before the run
    txns: int = 0  # stop after this many transactions in all (0: no limit)
    duration_s: float = 0.0  # stop after this long (0: no limit)
    threads: int = 1
    seed: int = 1
    # weights of insert / update / delete / multi-row transactions
    insert_weight: int = 30
    update_weight: int = 40
    delete_weight: int = 10
    multi_weight: int = 20
    # of the updates, the share that changes the primary key and the share that changes the unique key
    pk_update_share: float = 0.2
    uk_update_share: float = 0.2
    multi_rows: int = 4  # statements in a multi-row transaction
    ddl_per_s: float = 0.0  # DDL statements per second (0: none)
    rows_per_txn: int = 1  # rows an insert / update / delete statement touches (VALUES lists, WHERE id IN (...))
    rows_per_s: float = 0.0  # pace of the whole run in rows (statements x rows_per_txn) per second (0: no pace)

    def validate(self, *, prepare_only: bool = False) -> None:
        if self.tables < 1 or self.threads < 1 or self.id_range < 1:
            raise ValueError("tables, threads and id range must be >= 1")
        if self.rows_per_txn < 1 or self.rows_per_s < 0:
            raise ValueError("rows per transaction must be >= 1 and the rate >= 0")
        if self.txns <= 0 and self.duration_s <= 0 and not prepare_only:
            raise ValueError("give a transaction count or a duration")
        if not 0 <= self.pk_update_share + self.uk_update_share <= 1:
            raise ValueError("pk and uk update shares must be in [0, 1] and sum to at most 1")
        if min(self.insert_weight, self.update_weight, self.delete_weight, self.multi_weight) < 0:
            raise ValueError("weights must be >= 0")
        if self.insert_weight + self.update_weight + self.delete_weight + self.multi_weight <= 0:
            raise ValueError("at least one weight must be > 0")


@dataclass
class WorkloadSummary:
    txns: int = 0  # transactions attempted
    committed: int = 0
    rows: int = 0  # rows affected by committed transactions
    by_kind: Counter[str] = field(default_factory=Counter)  # committed transactions per kind
    errors: Counter[str] = field(default_factory=Counter)  # failed transactions per error kind
    ddl: int = 0
    elapsed_s: float = 0.0
    seed: int = 0  # the run's seed: the same mix again with --seed

    @property
    def txn_per_s(self) -> float:
        return self.committed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"txns": self.txns, "committed": self.committed, "rows": self.rows, "by_kind": dict(self.by_kind),
                "errors": dict(self.errors), "ddl": self.ddl, "elapsed_s": round(self.elapsed_s, 3),
                "txn_per_s": round(self.txn_per_s, 1), "seed": self.seed}

    def merge(self, other: WorkloadSummary) -> None:
        self.txns += other.txns
        self.committed += other.committed
        self.rows += other.rows
        self.by_kind.update(other.by_kind)
        self.errors.update(other.errors)
        self.ddl += other.ddl


def error_kind(exc: BaseException) -> str:
    """Classify a failed transaction by the server's message."""
    msg = str(exc).lower()
    # a pessimistic transaction's deadlock (1213) is a conflict too; its lock wait timeout (1205) a timeout
    for needle, kind in (("duplicate entry", "duplicate"), ("conflict", "conflict"), ("locked", "conflict"),
                         ("concurrent ddl", "conflict"), ("deadlock found", "conflict"),
                         ("lock wait timeout", "timeout"), ("doesn't exist", "not_found"),
                         ("cannot reach", "unavailable"), ("timed out", "timeout")):
        if needle in msg:
            return kind
    return "other"


def schema_sql(cfg: WorkloadConfig) -> str:
    parts = [f"CREATE DATABASE IF NOT EXISTS `{cfg.db}`", f"USE `{cfg.db}`"]
    for i in range(1, cfg.tables + 1):
        parts.append(f"CREATE TABLE IF NOT EXISTS sbtest{i} (id BIGINT PRIMARY KEY, k INT NOT NULL DEFAULT 0, "
                     "c VARCHAR(120), pad VARCHAR(60), uk INT, UNIQUE KEY uk_uk (uk))")
    return "; ".join(parts)


class _Worker:
    def __init__(self, cfg: WorkloadConfig, execute: Execute, index: int, first_new_id: int) -> None:
        self.cfg = cfg
        self.execute = execute
        self.rnd = random.Random(cfg.seed + index)
        self.index = index
        self.first_new_id = first_new_id
        self._inserted = 0
        self.summary = WorkloadSummary()

    def _id(self) -> int:
        return self.rnd.randint(-self.cfg.id_range, self.cfg.id_range)

    def _uk(self) -> int:
        return self.rnd.randint(1, self.cfg.id_range * 4)

    def _text(self, n: int) -> str:
        return "".join(self.rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))

    def _table(self) -> str:
        return f"sbtest{self.rnd.randint(1, self.cfg.tables)}"

    def _insert(self, t: str) -> str:
        # One duplicate fails a whole statement: a statement of many rows inserts new ids, above the id range (each
        # worker its own stretch), where a single-row one draws from the range like the other kinds.
        # (their uk is -id: the drawn uks are positive).
        many = self.cfg.rows_per_txn > 1
        ids = [self._new_id() for _ in range(self.cfg.rows_per_txn)] if many else self._ids()
        values = ", ".join(f"({i}, {self.rnd.randint(0, 1000)}, '{self._text(20)}', '{self._text(10)}', "
                           f"{-i if many else self._uk()})" for i in ids)
        return f"INSERT INTO {t} (id, k, c, pad, uk) VALUES {values}"

    def _new_id(self) -> int:
        # the threads' new ids interleave, densely: uk = -id must fit an INT, run after run
        n, self._inserted = self._inserted, self._inserted + 1
        return self.first_new_id + n * self.cfg.threads + self.index

    def _ids(self) -> list[int]:
        n = self.cfg.rows_per_txn
        return [self._id()] if n == 1 else sorted({self._id() for _ in range(n)})

    def _where_ids(self) -> str:
        ids = self._ids()
        return f"id = {ids[0]}" if len(ids) == 1 else f"id IN ({', '.join(map(str, ids))})"

    def statement(self, kind: str, t: str) -> str:
        if kind == "insert":
            return self._insert(t)
        if kind == "update":
            return f"UPDATE {t} SET k = k + 1, c = '{self._text(20)}' WHERE {self._where_ids()}"
        if kind == "update_pk":
            return f"UPDATE {t} SET id = {self._id()} WHERE id = {self._id()}"
        if kind == "update_uk":
            return f"UPDATE {t} SET uk = {self._uk()} WHERE id = {self._id()}"
        if kind == "delete":
            return f"DELETE FROM {t} WHERE {self._where_ids()}"
        raise ValueError(kind)

    def pick_kind(self) -> str:
        c = self.cfg
        kind = self.rnd.choices(["insert", "update", "delete", "multi"],
                                [c.insert_weight, c.update_weight, c.delete_weight, c.multi_weight])[0]
        if kind == "update":
            x = self.rnd.random()
            if x < c.pk_update_share:
                return "update_pk"
            if x < c.pk_update_share + c.uk_update_share:
                return "update_uk"
        return kind

    def script(self, kind: str) -> str:
        t = self._table()
        if kind != "multi":
            return f"USE `{self.cfg.db}`; {self.statement(kind, t)}"
        stmts = [self.statement(self.rnd.choice(("insert", "update", "update_pk", "update_uk", "delete")), t)
                 for _ in range(self.cfg.multi_rows)]
        return f"USE `{self.cfg.db}`; BEGIN; {'; '.join(stmts)}; COMMIT"

    def one(self) -> None:
        kind = self.pick_kind()
        self.summary.txns += 1
        try:
            results = self.execute(self.script(kind))
        except Exception as exc:
            self.summary.errors[error_kind(exc)] += 1
            return
        self.summary.committed += 1
        self.summary.by_kind[kind] += 1
        self.summary.rows += sum(n for n, _ in results)


class Workload:
    def __init__(self, cfg: WorkloadConfig, execute: Execute, query: Query | None = None) -> None:
        cfg.validate(prepare_only=True)
        self.cfg = cfg
        self.execute = execute
        self.query = query
        self._lock = threading.Lock()
        self._remaining = cfg.txns
        self._ddl_seq = 0
        self._next_at = 0.0  # monotonic time the next paced transaction may start

    def prepare(self, import_dir: str | None = None) -> None:
        """Create the tables and load ``initial_rows`` rows into each: by INSERTs of 200 rows, or with
        ``import_dir`` (a directory the upstream's TiDB can read) by ``IMPORT INTO`` of Parquet files written there
        (:func:`write_import_files`), the bulk path for millions of rows."""
        self.execute(schema_sql(self.cfg))
        if import_dir is not None:
            for i in range(1, self.cfg.tables + 1):
                pattern = write_import_files(self.cfg, i, import_dir)
                self.execute(f"USE `{self.cfg.db}`; IMPORT INTO sbtest{i} FROM '{pattern}' FORMAT 'parquet'")
            return
        rnd = random.Random(self.cfg.seed - 1)
        for i in range(1, self.cfg.tables + 1):
            ids = rnd.sample(range(-self.cfg.id_range, self.cfg.id_range + 1),
                             min(self.cfg.initial_rows, 2 * self.cfg.id_range + 1))
            for chunk in range(0, len(ids), 200):
                batch = ids[chunk:chunk + 200]
                values = ", ".join(f"({h}, {rnd.randint(0, 1000)}, 'init', 'pad', NULL)" for h in batch)
                self.execute(f"USE `{self.cfg.db}`; INSERT INTO sbtest{i} (id, k, c, pad, uk) VALUES {values}")

    def row_counts(self, query: Query) -> list[int]:
        """``COUNT(*)`` of each table (counted by the upstream)."""
        return [int(query(f"SELECT COUNT(*) AS n FROM `{self.cfg.db}`.sbtest{i}")[0]["n"])
                for i in range(1, self.cfg.tables + 1)]

    def first_new_id(self) -> int:
        """Where this run's new ids (statements of many rows) start: above the id range and above every id an
        earlier run inserted there (known only with ``query``)."""
        top = self.cfg.id_range
        if self.query is not None and self.cfg.rows_per_txn > 1:
            for i in range(1, self.cfg.tables + 1):
                rows = self.query(f"SELECT MAX(id) AS m FROM `{self.cfg.db}`.sbtest{i} WHERE id > {top}")
                if rows and rows[0]["m"] is not None:
                    top = max(top, int(rows[0]["m"]))
        return top + 1

    def _take(self) -> bool:
        """Claim one transaction of the budget (always True without a count)."""
        if self.cfg.txns <= 0:
            return True
        with self._lock:
            if self._remaining <= 0:
                return False
            self._remaining -= 1
            return True

    def _pace(self, stop: threading.Event) -> None:
        """With ``rows_per_s``, wait for this transaction's slot: slots are ``rows_per_txn / rows_per_s`` apart over
        all threads, so the run keeps the rate (a thread that fell behind starts at once, without a burst)."""
        if self.cfg.rows_per_s <= 0:
            return
        with self._lock:
            now = time.monotonic()
            at = self._next_at = max(self._next_at + self.cfg.rows_per_txn / self.cfg.rows_per_s, now)
        if at > now:
            stop.wait(at - now)

    def ddl_statement(self) -> str:
        """The next DDL of a cycle that leaves the columns the DML uses in place."""
        n = self._ddl_seq
        self._ddl_seq += 1
        t = f"sbtest{n // 5 % self.cfg.tables + 1}"
        gen = n // (5 * self.cfg.tables)
        step = n % 5
        return f"USE `{self.cfg.db}`; " + [
            f"ALTER TABLE {t} ADD COLUMN x{gen} INT DEFAULT 0",
            f"ALTER TABLE {t} ADD INDEX ik{gen} (k)",
            f"ALTER TABLE {t} MODIFY COLUMN pad VARCHAR({60 + gen % 40})",
            f"ALTER TABLE {t} DROP INDEX ik{gen}",
            f"ALTER TABLE {t} DROP COLUMN x{gen}",
        ][step]

    def run(self, stop: threading.Event | None = None) -> WorkloadSummary:
        """Run until the duration or count is spent, or until ``stop`` is set (by another thread)."""
        cfg = self.cfg
        cfg.validate()
        deadline = time.monotonic() + cfg.duration_s if cfg.duration_s > 0 else None
        stop = stop or threading.Event()
        first_new_id = self.first_new_id()
        workers = [_Worker(cfg, self.execute, i, first_new_id) for i in range(cfg.threads)]
        total = WorkloadSummary(seed=cfg.seed)

        def loop(w: _Worker) -> None:
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline) and self._take():
                self._pace(stop)
                w.one()

        def ddl_loop() -> None:
            interval = 1.0 / cfg.ddl_per_s
            while not stop.wait(interval):
                if deadline is not None and time.monotonic() >= deadline:
                    return
                try:
                    self.execute(self.ddl_statement())
                    total.ddl += 1
                except Exception as exc:
                    total.errors[f"ddl_{error_kind(exc)}"] += 1

        started = time.monotonic()
        threads = [threading.Thread(target=loop, args=(w,), name=f"workload-{i}") for i, w in enumerate(workers)]
        ddl = threading.Thread(target=ddl_loop, name="workload-ddl") if cfg.ddl_per_s > 0 else None
        for t in threads:
            t.start()
        if ddl is not None:
            ddl.start()
        try:
            for t in threads:
                t.join()
        finally:
            stop.set()
            if ddl is not None:
                ddl.join()
        total.elapsed_s = time.monotonic() - started
        for w in workers:
            total.merge(w.summary)
        return total


IMPORT_FILE_ROWS = 1_000_000  # rows per Parquet file of an import


def write_import_files(cfg: WorkloadConfig, index: int, directory: str) -> str:
    """Write ``initial_rows`` distinct rows of ``sbtest{index}`` (ids drawn from ``[-id_range, id_range]``, k, 20
    and 10 random letters, no uk) as Parquet files of ``IMPORT_FILE_ROWS`` rows; returns their glob pattern.
    Vectorized (numpy, pyarrow): a million rows take about a second."""
    import os

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng([cfg.seed, index])
    n = min(cfg.initial_rows, 2 * cfg.id_range + 1)
    ids = rng.choice(2 * cfg.id_range + 1, size=n, replace=False).astype(np.int64) - cfg.id_range
    os.makedirs(directory, exist_ok=True)

    def letters(m: int, width: int) -> pa.Array:
        codes = rng.integers(ord("a"), ord("z") + 1, size=(m, width), dtype=np.uint8)
        return pa.array(codes.view(f"S{width}").ravel(), pa.binary()).cast(pa.string())

    for f, lo in enumerate(range(0, n, IMPORT_FILE_ROWS)):
        part = ids[lo:lo + IMPORT_FILE_ROWS]
        m = len(part)
        pq.write_table(pa.table({
            "id": pa.array(part), "k": pa.array(rng.integers(0, 1001, size=m, dtype=np.int32)),
            "c": letters(m, 20), "pad": letters(m, 10), "uk": pa.nulls(m, pa.int32()),
        }), os.path.join(directory, f"sbtest{index}.{f:05d}.parquet"))
    return os.path.join(directory, f"sbtest{index}.*.parquet")


def check_consistency(cfg: WorkloadConfig, query: Query) -> dict[str, int]:
    """Every table's ids and non-null uks are unique; returns rows per table. Raises AssertionError."""
    counts = {}
    for i in range(1, cfg.tables + 1):
        rows = query(f"SELECT id, uk FROM `{cfg.db}`.sbtest{i}")
        ids = [r["id"] for r in rows]
        uks = [r["uk"] for r in rows if r["uk"] is not None]
        if len(ids) != len(set(ids)):
            raise AssertionError(f"sbtest{i}: duplicate primary keys")
        if len(uks) != len(set(uks)):
            raise AssertionError(f"sbtest{i}: duplicate unique keys")
        count = query(f"SELECT COUNT(*) AS n FROM `{cfg.db}`.sbtest{i}")[0]["n"]
        if count != len(rows):
            raise AssertionError(f"sbtest{i}: COUNT(*) {count} != {len(rows)} rows")
        counts[f"sbtest{i}"] = len(rows)
    return counts
