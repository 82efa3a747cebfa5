"""``cdcflow tso``: the current TSO from PD, and decoding a TSO."""

from __future__ import annotations

import json

import typer

from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec import tso

app = typer.Typer(no_args_is_help=True, add_completion=False, help="TSO timestamps.")


@app.command()
def now(
    pd: str | None = typer.Option(None, "--pd", help="PD address (default: $CDCFLOW_UPSTREAM, then upstream.json)."),
) -> None:
    """Print a fresh TSO from the upstream's PD."""
    with UpstreamClient(resolve_pd_addr(pd)) as client:
        typer.echo(str(client.get_ts()))


@app.command()
def decode(ts: int = typer.Argument(..., help="A TSO, e.g. 450000000000000000.")) -> None:
    """Print a TSO's physical ms, logical counter and UTC datetime as JSON."""
    try:
        phys, logical = tso.parse(ts)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(json.dumps({"ts": ts, "physical_ms": phys, "logical": logical,
                           "datetime": tso.to_datetime(ts).isoformat()}))
