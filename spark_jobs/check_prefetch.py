"""The upstream half of a check's changed-key comparison, read while the apply that precedes the check runs.

What :mod:`spark_jobs.window_checks` compares a Delta table with at a check ``ts`` -- the upstream's ``COUNT(*)``
at ``ts`` and its rows at the keys the bronze events of ``(after_ts, ts]`` name -- depends on the bronze window
and on the upstream's snapshot at ``ts``, neither of which the apply changes. So the apply job of a DML step that
ends at a check starts :func:`start` beside its Spark merge: a thread reads those counts and rows (the upstream
has little else to do then; during the check it was the step everyone waited on) and stages them next to the
bronze window. The check job takes a table's from :func:`staged` and reads the upstream only for a table with
none. Nothing is lost when the read-ahead fails or is late: the check reads the upstream itself.

Layout: ``<window dir>/_checks/ts=<ts:020d>-after=<after_ts:020d>/<table id>-<digest>.arrow``, an Arrow IPC file
of the upstream rows at the keys (silver schema; no rows in ``count`` mode) whose schema metadata holds the key
count and the upstream count. ``digest`` is the table JSON's: a check of another schema version finds nothing. The
window directory's readers list ``*.parquet`` in it and never look inside ``_checks``; retention removes it with
its window.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdc_core.codec.changelog import window_dir
from cdc_core.schema.model import TableInfo

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

STAGE_DIR = "_checks"
_KEYS = b"cdcflow.keys"
_COUNT = b"cdcflow.count"
_MODE = b"cdcflow.mode"
THREADS = 4  # tables read at once: each waits on its statements, the upstream answers one at a time


@dataclass(frozen=True)
class Staged:
    """A table's upstream half, as read ahead: ``rows`` at its changed keys (None in ``count`` mode) and ``count``."""

    rows: pa.Table | None
    count: int


def stage_dir(sink: str, changefeed_id: str, window_end_ts: int, ts: int, after_ts: int) -> Path:
    return window_dir(sink, changefeed_id, window_end_ts) / STAGE_DIR / f"ts={ts:020d}-after={after_ts:020d}"


def _file(d: Path, table: TableInfo) -> Path:
    digest = hashlib.sha256(table.to_json().encode()).hexdigest()[:16]
    return d / f"{table.id}-{digest}.arrow"


def _write(path: Path, table: TableInfo, keys: int, count: int, rows: pa.Table | None, mode: str) -> None:
    """``path`` whole or not at all (written under a temporary name, then renamed)."""
    import pyarrow as pa

    data = rows if rows is not None else table.arrow_schema().empty_table()
    data = data.replace_schema_metadata({_KEYS: str(keys).encode(), _COUNT: str(count).encode(),
                                         _MODE: mode.encode()})
    tmp = path.with_name(f".{path.name}.tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)
    tmp.replace(path)


def staged(sink: str, changefeed_id: str, window_end_ts: int, table: TableInfo, *, ts: int, after_ts: int,
           keys: int, mode: str) -> Staged | None:
    """The upstream half of ``table``'s check at ``ts`` read ahead for ``keys`` changed keys, or None: none was
    staged, or it was staged for another key count (then it is not this check's) or without the rows ``mode``
    needs."""
    import pyarrow as pa

    path = _file(stage_dir(sink, changefeed_id, window_end_ts, ts, after_ts), table)
    try:
        with pa.memory_map(str(path)) as source:
            data = pa.ipc.open_file(source).read_all()
    except FileNotFoundError:
        return None
    meta = data.schema.metadata or {}
    if int(meta.get(_KEYS, b"-1")) != keys or (mode == "checksum" and meta.get(_MODE) != b"checksum"):
        log.warning("read-ahead of %s at %d is not this check's (%s keys in %s mode staged, %d changed keys in %s "
                    "mode): reading the upstream", table.qualified_name, ts, meta.get(_KEYS, b"?").decode(),
                    meta.get(_MODE, b"?").decode(), keys, mode)
        return None
    count = int(meta[_COUNT])
    return Staged(rows=data.replace_schema_metadata(None) if mode == "checksum" else None, count=count)


def prefetch(args: dict[str, Any], stop: threading.Event | None = None) -> dict[str, Any]:
    """Read and stage the upstream half of the changed-key checks ``args`` describes (``window_checks``'s job
    arguments: ``sink_uri``, ``changefeed_id``, ``window_end_ts``, ``after_ts``, ``ts``, ``mode``, ``pd_addr``,
    ``tidb``, ``tables``), for the tables the check job will check on the driver. Returns what it staged. ``stop``
    set: no more tables are started."""
    from concurrent.futures import ThreadPoolExecutor

    from cdc_core.client.upstream import UpstreamClient
    from spark_jobs import window_checks as wc
    from spark_jobs.changed_keys import changed_keys_arrow

    started = time.monotonic()
    sink, cid, end = args["sink_uri"], args["changefeed_id"], int(args["window_end_ts"])
    after_ts, ts, mode = int(args["after_ts"]), int(args["ts"]), args.get("mode", "checksum")
    tables = [t for t, content in wc.table_entries(args["tables"]) if content and wc.checkable_on_driver(t)]
    if mode == "off" or not tables or not args.get("pd_addr"):
        return {"tables": 0, "keys": 0, "seconds": 0.0}
    keys = changed_keys_arrow(sink, cid, end, tables, after_ts, ts, limit=wc.DRIVER_KEYS)
    d = stage_dir(sink, cid, end, ts, after_ts)
    d.mkdir(parents=True, exist_ok=True)
    todo = [(t, keys[t.qualified_name]) for t in tables if keys.get(t.qualified_name) is not None]

    with UpstreamClient(args["pd_addr"], tidb=args.get("tidb")) as client:
        client.sql_addresses()  # found once, before the threads share the client

        def one(entry: tuple[TableInfo, pa.Table]) -> int:
            table, k = entry
            if stop is not None and stop.is_set():
                return 0
            count = wc.upstream_count(args["pd_addr"], args.get("tidb"), ts, table, client)
            rows = (wc.upstream_rows_at(args["pd_addr"], args.get("tidb"), ts, table, k, client)
                    if mode == "checksum" else None)
            _write(_file(d, table), table, k.num_rows, count, rows, mode)
            return k.num_rows

        with ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="check-prefetch") as pool:
            done = list(pool.map(one, todo))
    out = {"tables": len(todo), "keys": sum(done), "seconds": round(time.monotonic() - started, 3)}
    log.info("read ahead the upstream half of the checks at %d: %d table(s), %d keys, %.3f s", ts, out["tables"],
             out["keys"], out["seconds"])
    return out


class ReadAhead:
    """:func:`prefetch` in a thread of its own: started by :func:`start`, ended by :meth:`join`, which never
    raises (a read-ahead that failed leaves the check to read the upstream itself)."""

    def __init__(self, args: dict[str, Any] | None) -> None:
        self._stop = threading.Event()
        self.result: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None
        if args:
            self._thread = threading.Thread(target=self._run, args=(args,), name="check-prefetch", daemon=True)
            self._thread.start()

    def _run(self, args: dict[str, Any]) -> None:
        try:
            self.result = prefetch(args, self._stop)
        except Exception:  # the check reads the upstream itself, and says so if it cannot
            log.warning("reading the checks' upstream half ahead failed; the check will read it", exc_info=True)
            self.result = {"failed": True}

    def join(self, *, cancel: bool = False) -> dict[str, Any] | None:
        """Wait for the read-ahead (``cancel``: tables not started yet are not read); its result, None if none ran."""
        if self._thread is None:
            return None
        if cancel:
            self._stop.set()
        self._thread.join()
        return self.result


def start(args: dict[str, Any] | None) -> ReadAhead:
    """A :class:`ReadAhead` of ``args`` (None: one that reads nothing)."""
    return ReadAhead(args)
