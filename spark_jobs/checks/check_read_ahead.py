"""The upstream side of a window's checks, read while the window applies.

What the window checks on the driver compare Delta with -- the window's changed keys (from its bronze changelog),
the upstream's row count (from the count checked at the previous barrier and those keys) and its rows at those
keys, all at the window's end ts -- is fixed once the window is
pulled: applying it changes none of it. :func:`start` reads it in a thread of this process while the window
applies (the apply waits on Delta, this on the upstream, which is otherwise idle then); :func:`take` hands it to
the ``window_checks`` job of the same arguments, which reads it itself when nothing was read ahead (another
process, an error here). Under spark-submit both jobs run in the task's one application
(``cdc_core.changefeed.spark_engine.one_application``), whose driver process keeps the thread. The engine starts it
as the job ``window_checks_read_ahead`` (:func:`start`); the reads are :mod:`spark_jobs.upstream_read`'s.

A result waits in this process until its job takes it: at most ``KEEP`` of them (each what the window's checks
would hold anyway), the oldest dropped first (one an apply that failed left behind).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdc_core.changefeed.job_args.window_checks import ReadAheadArgs, WindowChecksArgs
from cdc_core.codec.sink_uri import table_path
from cdc_core.schema.model import TableInfo
from spark_jobs.checks import data_quality as dq
from spark_jobs.upstream_read import checkable_on_driver, upstream_side

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

KEEP = 2  # results read ahead held at once
TABLE_THREADS = 4  # tables one job reads and checks at once (here and in window_checks)
# Changed keys of a window's tables that its checks hold on the driver, in all; a table past the budget is checked
# in Spark (:mod:`spark_jobs.normalize.changed_keys`).
DRIVER_KEYS = 200_000
_ahead: OrderedDict[str, Future[UpstreamSide]] = OrderedDict()
_lock = threading.Lock()


@dataclass(frozen=True)
class UpstreamSide:
    """A window's changed keys by table (None: past the driver's budget), and the upstream's row count and rows at
    them at the window's end ts for the tables whose content is checked (rows in mode "checksum" only)."""

    keys: dict[str, pa.Table | None]
    counts: dict[str, int]
    rows: dict[str, pa.Table]


def start(opts: ReadAheadArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: start reading what the ``window_checks`` job of the
    same arguments will compare Delta with, and return at once."""
    if opts.mode == "off":
        return {"reading_ahead": 0}
    future: Future[UpstreamSide] = Future()
    with _lock:
        _ahead[opts.key()] = future
        while len(_ahead) > KEEP:
            _ahead.popitem(last=False)
    threading.Thread(target=_run, args=(opts, future), name="check-read-ahead", daemon=True).start()
    return {"reading_ahead": len(opts.tables)}


def _run(args: WindowChecksArgs, future: Future[UpstreamSide]) -> None:
    try:
        future.set_result(read(args))
    except BaseException as exc:  # handed to take(), whose job then reads for itself
        future.set_exception(exc)


def take(args: WindowChecksArgs) -> UpstreamSide | None:
    """What :func:`start` read for the job of ``args`` (waiting for the read to end), or None: nothing was read
    ahead here, or the read failed (logged; the job reads for itself)."""
    with _lock:
        future = _ahead.pop(args.key(), None)
    if future is None:
        return None
    try:
        return future.result()
    except Exception:
        log.warning("the checks' upstream side read ahead failed; the checks read it themselves", exc_info=True)
        return None


def read(args: WindowChecksArgs) -> UpstreamSide:
    """The upstream side of the ``window_checks`` job of ``args``, read as that job reads it (:func:`driver_keys`
    and ``upstream_read.upstream_side``), ``TABLE_THREADS`` tables at a time over one client."""
    from cdc_core.client.upstream import UpstreamClient

    mode, pd_addr, tidb, ts = args.mode, args.pd_addr, args.tidb, args.ts
    keys = driver_keys(args)
    content = [t for t, c in args.tables if c and keys.get(t.qualified_name) is not None]
    counts: dict[str, int] = {}
    rows: dict[str, pa.Table] = {}
    if content and pd_addr:
        with UpstreamClient(pd_addr, tidb=tidb) as client:

            def one(table: TableInfo) -> None:
                at = keys[table.qualified_name]
                assert at is not None
                base = (dq.count_as_of(table_path(args.sink_uri, table), args.after_ts) if args.derives_count(table)
                        else None)
                count, got = upstream_side(pd_addr, tidb, ts, table, at, mode, client, after_ts=args.after_ts,
                                           base=base)
                if got is not None:
                    rows[table.qualified_name] = got
                counts[table.qualified_name] = count  # last: a count means the table was read whole

            with ThreadPoolExecutor(max_workers=min(TABLE_THREADS, len(content)),
                                    thread_name_prefix="check-read-ahead") as pool:
                list(pool.map(one, content))
    return UpstreamSide(keys, counts, rows)


def driver_keys(args: WindowChecksArgs) -> dict[str, pa.Table | None]:
    """The window's changed keys of the tables of ``args`` the driver can check
    (``upstream_read.checkable_on_driver``), by name; None for those past the driver's budget (``DRIVER_KEYS``: Spark
    checks them)."""
    from spark_jobs.normalize.changed_keys import changed_keys_arrow

    return changed_keys_arrow(args.sink_uri, args.changefeed_id, args.window_end_ts,
                              [t for t, _ in args.tables if checkable_on_driver(t)], args.after_ts, args.ts,
                              limit=DRIVER_KEYS)
