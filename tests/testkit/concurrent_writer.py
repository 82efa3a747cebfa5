"""A second client that keeps writing while a test's workload runs on its own connection: explicit transactions
into one table of its own, each ``BEGIN``, its statements and ``COMMIT`` as separate requests, so that some of them
commit while a DDL of the workload waits for its schema to sync -- and then, by async commit or 1PC, at the DDL's
commit ts (cdc_core/upstream/store/concurrency_manager.py). Half its transactions run under
``tidb_guarantee_linearizability = OFF`` (TiDB's documented trade of linearizability for a PD round trip per
commit): those commit at ``max_ts + 1`` and so share a DDL's commit ts whenever nothing read since the job; the
others, as TiDB's default does, commit above a PD ts fetched at their COMMIT, and share one only with a job that
commits while their commit is in flight. It inserts rows in both regions of its table (a transaction over both
commits by async commit, one over one region by 1PC), updates and deletes them.

:func:`schema_sync_delay` widens the moment in which that happens: the embedded TiDB's schema sync takes 10 ms, a
real cluster's (its servers loading the new schema through etcd) tens to hundreds; under a loaded CI machine 10 ms
can pass with no writer commit in it, twelve DDLs in a row.

:func:`shared_commit_ts` reads back from a changefeed's bronze windows which DDL commit ts also hold row changes.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from cdc_core.changefeed import ddl_puller
from cdc_core.codec import changelog
from cdc_core.schema import ddl_history

TABLE = "shared_ts"


class ConcurrentWriter:
    """``with ConcurrentWriter(mysql_addr, db, seed):`` -- writes from a thread until the block ends; the table is
    created first (``CREATE TABLE <db>.shared_ts``, split at handle 0 into two regions as every table is)."""

    def __init__(self, mysql_addr: str, db: str, seed: int) -> None:
        host, _, port = mysql_addr.rpartition(":")
        self._connect = lambda: pymysql.connect(host=host, port=int(port), user="root", autocommit=True,
                                                database=db)
        self.db = db
        self.rng = random.Random(seed)
        self.commits = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._next_id = 1

    def create(self) -> None:
        conn = self._connect()
        try:
            conn.cursor().execute(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, v INT, s VARCHAR(8))")
        finally:
            conn.close()

    def __enter__(self) -> ConcurrentWriter:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="concurrent-writer", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)
        if self._failure is not None and et is None:
            raise AssertionError(f"the concurrent writer failed: {self._failure!r}") from self._failure

    def _statements(self) -> list[str]:
        r = self.rng
        out = []
        for _ in range(r.randint(1, 2)):
            kind = r.random()
            if kind < 0.6 or self._next_id < 4:
                i = self._next_id
                self._next_id += 1
                sign = r.choice((-1, 1))  # the table's regions split at handle 0
                out.append(f"INSERT INTO {TABLE} VALUES ({sign * i}, {r.randrange(1000)}, 's{r.randrange(99)}')")
            elif kind < 0.9:
                i = r.choice((-1, 1)) * r.randrange(1, self._next_id)
                out.append(f"UPDATE {TABLE} SET v = v + 1, s = 'u{r.randrange(99)}' WHERE id = {i}")
            else:
                out.append(f"DELETE FROM {TABLE} WHERE id = {r.choice((-1, 1)) * r.randrange(1, self._next_id)}")
        return out

    def _run(self) -> None:
        try:
            conn = self._connect()
            try:
                cur = conn.cursor()
                linearizable = True
                while not self._stop.is_set():
                    if (self.rng.random() < 0.5) != linearizable:
                        linearizable = not linearizable
                        cur.execute(f"SET tidb_guarantee_linearizability = {'ON' if linearizable else 'OFF'}")
                    cur.execute("BEGIN")
                    try:
                        for st in self._statements():
                            cur.execute(st)
                        cur.execute("COMMIT")
                        self.commits += 1
                    except pymysql.MySQLError:
                        self.errors += 1  # e.g. a duplicate id: the transaction rolls back, as in MySQL
                        cur.execute("ROLLBACK")
            finally:
                conn.close()
        except BaseException as exc:  # reported by __exit__
            self._failure = exc


@contextmanager
def schema_sync_delay(upstream_cluster: Any, seconds: float) -> Iterator[None]:
    """The embedded cluster's DDL statements wait ``seconds`` for the schema to sync, inside the block."""
    ddl = upstream_cluster.cluster.ddl
    before = ddl.schema_sync_s
    ddl.schema_sync_s = seconds
    try:
        yield
    finally:
        ddl.schema_sync_s = before


def shared_commit_ts(sink: Path, changefeed_id: str) -> dict[int, int]:
    """``{DDL commit ts: row changes at that ts}`` over the changefeed's bronze windows, for the DDL commit ts that
    row changes of other tables (not TiDB's DDL job table) share."""
    uri = f"file://{sink}"
    out: dict[int, int] = {}
    for end in changelog.list_windows(uri, changefeed_id):
        window = changelog.read_window(uri, changefeed_id, end)
        ddl_ts = {j.finished_ts for j in ddl_puller.decode_jobs(window)}
        if not ddl_ts:
            continue
        rows = window.filter(pc.not_equal(window["table_id"], ddl_history.JOB_TABLE_ID))
        at = rows["commit_ts"].filter(pc.is_in(rows["commit_ts"], value_set=pa.array(sorted(ddl_ts), pa.int64())))
        for ts in at.to_pylist():
            out[ts] = out.get(ts, 0) + 1
    return out
