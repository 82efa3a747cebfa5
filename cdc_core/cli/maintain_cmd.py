"""``cdcflow maintain ID [--retention-hours H]``: what the maintenance DAG (``cdcflow__maintenance``) runs, for one
changefeed, now: each of its silver tables purged of rows deletion vectors mark, compacted and vacuumed under the
window leases of every changefeed writing to it; its sink's data-quality log compacted and vacuumed; its bronze
changelog beyond the retention folded and pruned; the silver tables its rebuilds moved aside removed after
``--trash-days``. The engine's side of each step is :mod:`cdc_core.changefeed.upkeep` (the DAG's tasks call the
same functions). The vacuum keeps every file -- data or deletion vector -- that a version younger than the
retention names, so time travel inside it keeps working.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cdc_core.changefeed import upkeep
from cdc_core.errors import ConfigError

console = Console(stderr=True)


def maintain(
    changefeed_id: str,
    retention_hours: Annotated[int, typer.Option(
        "--retention-hours", help="keep what versions of the last H hours need (vacuum, bronze)")] =
        upkeep.DEFAULT_RETENTION_HOURS,
    trash_days: Annotated[float, typer.Option(
        "--trash-days", help="remove the tables rebuilds moved aside more than this many days ago")] =
        upkeep.DEFAULT_TRASH_RETENTION_DAYS,
    allow_short_retention: Annotated[bool, typer.Option(
        "--allow-short-retention", help="let a retention under Delta's 168-hour safety check through")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Purge, compact and vacuum the changefeed's Delta tables; prune its bronze changelog (the maintenance DAG's
    work, for one changefeed)."""
    if retention_hours < 0:
        raise ConfigError(f"--retention-hours must be >= 0, got {retention_hours}")
    every = upkeep.list_changefeeds()
    mine = [cf for cf in every if cf["changefeed_id"] == changefeed_id]
    if not mine:
        raise ConfigError(f"changefeed {changefeed_id!r} does not exist (or its config does not load)")
    # every changefeed's tables, so that a table two changefeeds share is maintained under both their leases
    tables = [t for t in upkeep.find_silver_tables(every) if changefeed_id in t["changefeed_ids"]]
    enforce = not allow_short_retention
    out: dict[str, Any] = {"changefeed_id": changefeed_id, "retention_hours": retention_hours, "tables": []}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, disable=as_json) as progress:
        bar = progress.add_task("maintaining tables", total=len(tables) + 3)
        for t in tables:
            progress.update(bar, description=f"compact + vacuum {t['name']}")
            out["tables"].append(upkeep.maintain_table(t, retention_hours, enforce_retention_duration=enforce))
            progress.advance(bar)
        progress.update(bar, description="data-quality log")
        out["dq_results"] = upkeep.maintain_dq_results(mine, retention_hours, enforce_retention_duration=enforce)
        progress.advance(bar)
        progress.update(bar, description="bronze changelog")
        out["bronze"] = upkeep.prune_bronze(mine, retention_hours)
        progress.advance(bar)
        progress.update(bar, description="rebuild trash")
        out["trash"] = upkeep.remove_rebuild_trash(mine, trash_days)
        progress.advance(bar)
    if as_json:
        typer.echo(json.dumps(out, sort_keys=True, default=str))
        return
    for t in out["tables"]:
        c, v = t["compact"], t["vacuum"]
        typer.echo(f"{t['table']}: compact {json.dumps(c, sort_keys=True, default=str)}; "
                   f"vacuum {json.dumps(v, sort_keys=True, default=str)} ({t['seconds']}s)")
    bronze = out["bronze"]["changefeeds"].get(changefeed_id, {})
    typer.echo(f"bronze changelog: {json.dumps(bronze, sort_keys=True, default=str)}")
