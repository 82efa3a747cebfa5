"""`cdcflow verify ID [--at-ts TS]`: compare the upstream snapshot with the Delta tables."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from cdc_core.changefeed import reconcile
from cdc_core.changefeed.state import load_state
from cdc_core.codec import tso
from cdc_core.errors import ConfigError
from cdc_core.schema.model import TableInfo


def verify(
    changefeed_id: str,
    at_ts: Annotated[str | None, typer.Option("--at-ts", help="TSO or ISO datetime (default: the checkpoint)")] = None,
) -> None:
    """Compare every replicated table at a ts with its Delta table; exit 1 on any difference."""
    st = load_state(changefeed_id)
    try:
        ts = tso.parse_ts_or_datetime(at_ts) if at_ts else st.checkpoint_ts
    except ValueError as exc:
        raise ConfigError(f"--at-ts: {exc}") from exc
    if ts > st.checkpoint_ts:
        raise ConfigError(f"--at-ts {ts} is after the checkpoint {st.checkpoint_ts}: Delta does not hold that yet")
    ok = True

    def show(t: TableInfo, rep: dict[str, Any]) -> None:
        nonlocal ok
        ok &= bool(rep["passed"])
        print(json.dumps({"table": t.qualified_name, "ts": ts, **rep}, sort_keys=True))

    # Each table whole (the full reconciliation), below the checkpoint against the Delta table as it was at ts.
    reconcile.reconcile(changefeed_id, ts, on_table=show)
    if not ok:
        raise typer.Exit(1)
