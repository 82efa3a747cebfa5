"""`cdcflow verify ID [--at-ts TS]`: compare the upstream snapshot with the Delta tables."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cdc_core.changefeed import spark_engine
from cdc_core.changefeed.config import load_config
from cdc_core.changefeed.schema_loader import load_schema
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec import tso
from cdc_core.errors import ConfigError


def verify(
    changefeed_id: str,
    at_ts: Annotated[str | None, typer.Option("--at-ts", help="TSO or ISO datetime (default: the checkpoint)")] = None,
) -> None:
    """Compare every replicated table at a ts with its Delta table; exit 1 on any difference."""
    cfg = load_config(changefeed_id)
    st = load_state(changefeed_id)
    try:
        ts = tso.parse_ts_or_datetime(at_ts) if at_ts else st.checkpoint_ts
    except ValueError as exc:
        raise ConfigError(f"--at-ts: {exc}") from exc
    if ts > st.checkpoint_ts:
        raise ConfigError(f"--at-ts {ts} is after the checkpoint {st.checkpoint_ts}: Delta does not hold that yet")
    ok = True
    pd_addr = resolve_pd_addr(cfg.upstream)
    with UpstreamClient(pd_addr, tidb=cfg.tidb) as c:
        tables = [t for t in load_schema(c, ts).tables_at(ts) if cfg.table_filter.match(t.db_name, t.name)]
    efilter = cfg.event_filter
    for t in tables:
        # As the barrier checks: a table whose row changes event filters drop is not compared row by row.
        content = not efilter.drops_rows_of(t.db_name, t.name)
        # The job reads the upstream rows at ts itself, chunk by chunk over TiDB's SQL.
        rep = spark_engine.run_job(
            "data_quality",
            {"sink_uri": cfg.sink_uri, "table": t.to_json(), "pd_addr": pd_addr, "tidb": cfg.tidb, "mode": "checksum",
             "ts": ts, "content": content,
             # Below the checkpoint, the Delta table as it was at ts (time travel by the commits' cdcflow.ts).
             "as_of_ts": ts if ts < st.checkpoint_ts else None},
        )
        ok &= bool(rep["passed"])
        print(json.dumps({"table": t.qualified_name, "ts": ts, **rep}, sort_keys=True))
    if not ok:
        raise typer.Exit(1)
