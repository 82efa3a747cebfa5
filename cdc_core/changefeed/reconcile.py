"""The full reconciliation: every replicated table of a changefeed compared whole with the upstream at one ts.

The window checks cost what a window changed (``spark_jobs.checks.window_checks``); this costs what the tables hold, so
it runs apart from them: ``cdcflow verify`` (any ts at or below the checkpoint, nothing recorded), a window planned
with ``full_check`` (its check step), and the maintenance DAG's ``reconcile`` task, per changefeed once its last
reconciliation is older than the interval (``due``), at the checkpoint and under the window lease, recording the
results and putting the changefeed in error on a difference (a lake that differs from the upstream at the
checkpoint is not built on). The tables go ``BATCH`` at a time to the ``data_quality`` Spark job, which reconciles
them concurrently: chunked checksums computed by the upstream and by Spark, rows diffed only in chunks that differ
(``spark_jobs.checks.chunk_checksum``), sample keys of the rows that differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cdc_core.changefeed import dq_results, spark_engine
from cdc_core.changefeed.config import ChangefeedConfig, DqMode, load_config
from cdc_core.changefeed.job_args.data_quality import ReconcileArgs
from cdc_core.changefeed.schema_loader import load_schema
from cdc_core.changefeed.state import load_state, locked_state
from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.errors import ConfigError, DataQualityError
from cdc_core.log import get_logger
from cdc_core.schema.model import TableInfo

log = get_logger(__name__)

WHERE = "reconciliation"
DEFAULT_INTERVAL_HOURS = 168  # weekly


def tables_at(cfg: ChangefeedConfig, ts: int) -> list[TableInfo]:
    """The changefeed's tables at ``ts``, from TiDB's meta snapshot there."""
    with UpstreamClient(resolve_pd_addr(cfg.upstream), tidb=cfg.tidb) as c:
        return load_schema(c, ts, cfg.table_filter).tables_at(ts)


BATCH = 8  # tables per data_quality job: reconciled concurrently inside it; between jobs, progress is reported


# A reconciliation compares rows by checksum whatever mode the changefeed's window checks run in.
RECONCILE_MODE: DqMode = "checksum"


def table_entry(cfg: ChangefeedConfig, table: TableInfo) -> tuple[TableInfo, bool]:
    """A table as the ``data_quality`` and ``window_checks`` jobs take it: with whether its content is checked.
    Event filters that drop its row changes make it differ from the upstream on purpose: its rows and count are not
    compared (content false; key uniqueness, NOT NULL and schema still are)."""
    return table, not cfg.event_filter.drops_rows_of(table.db_name, table.name)


def _job_args(cfg: ChangefeedConfig, ts: int, as_of_ts: int | None, tables: list[TableInfo], *,
              single: bool = False) -> ReconcileArgs:
    return ReconcileArgs(sink_uri=cfg.sink_uri, pd_addr=resolve_pd_addr(cfg.upstream), tidb=cfg.tidb,
                         mode=RECONCILE_MODE, ts=ts, as_of_ts=as_of_ts,
                         tables=tuple(table_entry(cfg, t) for t in tables), single=single,
                         history=() if single else tuple(t.qualified_name for t in tables if cfg.keeps_history(t)))


def check_table(cfg: ChangefeedConfig, table: TableInfo, ts: int, *, as_of_ts: int | None = None) -> dict[str, Any]:
    """One table whole at ``ts`` (``as_of_ts``: the Delta table as of that ts, below the checkpoint)."""
    return spark_engine.run_job(_job_args(cfg, ts, as_of_ts, [table], single=True))


def reconcile(changefeed_id: str, ts: int | None = None, *,
              on_table: Callable[[TableInfo, dict[str, Any]], object] | None = None) -> dict[str, Any]:
    """Every replicated table at ``ts`` (default: the checkpoint) against its Delta table; ``{name: report}``.
    ``BATCH`` tables per ``data_quality`` job, all jobs in one Spark application; ``on_table`` hears of each
    table once its job has ended."""
    cfg = load_config(changefeed_id)
    checkpoint = load_state(changefeed_id).checkpoint_ts
    at = checkpoint if ts is None else ts
    if at > checkpoint:
        raise ConfigError(f"ts {at} is after the checkpoint {checkpoint}: Delta does not hold that yet")
    reports: dict[str, Any] = {}
    tables = tables_at(cfg, at)
    as_of = at if at < checkpoint else None
    with spark_engine.one_application():
        for i in range(0, len(tables), BATCH):
            batch = tables[i:i + BATCH]
            done = spark_engine.run_job(_job_args(cfg, at, as_of, batch))["tables"]
            for t in batch:
                reports[t.qualified_name] = rep = done[t.qualified_name]
                if on_table is not None:
                    on_table(t, rep)
    return reports


def due(changefeed_id: str, interval_hours: float, now: float | None = None) -> bool:
    """Whether the changefeed's last recorded reconciliation is older than ``interval_hours`` (or absent)."""
    last = load_state(changefeed_id).last_reconciliation
    return last is None or (now or time.time()) - float(last.get("at") or 0) >= interval_hours * 3600


def reconcile_and_record(changefeed_id: str) -> dict[str, Any]:
    """:func:`reconcile` at the checkpoint (hold the window lease), recorded in the data-quality result log and
    the state; a difference puts the changefeed in error and raises ``DataQualityError``."""
    cfg = load_config(changefeed_id)
    started = time.monotonic()
    ts = load_state(changefeed_id).checkpoint_ts
    reports = reconcile(changefeed_id, ts)
    failed = sorted(n for n, r in reports.items() if not r["passed"])
    dq_results.append(cfg.sink_uri, changefeed_id, ts, WHERE, "checksum", reports)
    message = None
    if failed:
        message = "reconciliation: " + dq_results.failure_message({n: reports[n] for n in failed}, ts)
    with locked_state(changefeed_id) as st:
        st.last_reconciliation = {"ts": ts, "at": time.time(), "passed": not failed, "failed": failed}
        if message is not None:
            st.state = "error"
            st.error = {"message": message, "step": WHERE, "at": time.time(), "ts": ts}
    out = {"changefeed_id": changefeed_id, "ts": ts, "tables": len(reports), "failed": failed,
           "seconds": round(time.monotonic() - started, 3)}
    log.info("reconciled changefeed", **out)
    if message is not None:
        raise DataQualityError(message)
    return out
