"""``cdcflow snapshot ID --at-ts TS [--json]``: each table's Delta version holding the changefeed at a TSO.

It reads the versions table (:mod:`cdc_core.changefeed.versions`): the rows of the greatest published checkpoint
``C <= TS``, with ``exact`` saying whether ``(C, TS]`` held no change (else the versions hold the tables at ``C``).
Every table read at its version -- ``VERSION AS OF`` in Spark SQL, ``DeltaTable(path, version=...)`` in delta-rs --
is then one consistent cut of the upstream (docs/operations.md). The command reads the lake only; it needs neither
the upstream nor Spark. (The name is the architecture's CLI block's: a cut of every table at a ts, as TiDB's
``tidb_snapshot`` reads one; the ``snapshot`` window mode of ``changefeed run`` reloads tables, and is not a
command.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from cdc_core.changefeed import versions
from cdc_core.changefeed.config import load_config
from cdc_core.codec import tso
from cdc_core.codec.sink_uri import local_path
from cdc_core.errors import ConfigError


def snapshot(
    changefeed_id: str,
    at_ts: Annotated[str, typer.Option("--at-ts", help="TSO or ISO datetime (UTC when it names no zone)")],
    as_json: Annotated[bool, typer.Option("--json", help="print the answer as JSON")] = False,
) -> None:
    """Name, for every table, the Delta version that holds the changes with commit ts <= TS."""
    try:
        ts = tso.parse_ts_or_datetime(at_ts)
    except ValueError as exc:
        raise ConfigError(f"--at-ts: {exc}") from exc
    cfg = load_config(changefeed_id)
    found = versions.at(cfg.sink_uri, changefeed_id, ts)
    out: dict[str, Any] = found.to_json()
    sink = local_path(cfg.sink_uri)
    out["at_datetime"] = tso.to_datetime(ts).isoformat()
    out["checkpoint_datetime"] = tso.to_datetime(found.checkpoint_ts).isoformat()
    for t in out["tables"].values():
        t["path"] = str(Path(sink) / t["path"])
    if as_json:
        typer.echo(json.dumps(out, sort_keys=True))
        return
    how = ("exact: no change committed between them" if found.exact
           else "not exact: changes committed after the checkpoint are not in these versions")
    typer.echo(f"{changefeed_id} at {ts} ({out['at_datetime']}): checkpoint {found.checkpoint_ts} "
               f"({out['checkpoint_datetime']}), {how}")
    for name, t in sorted(out["tables"].items()):
        typer.echo(f"  {name}  version {t['version']}  {t['path']}" + ("" if t["exact"] else "  (not exact)"))
