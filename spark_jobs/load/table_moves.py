"""Where a silver table went when a DDL moved it away: dropped copies and move records.

* DROP TABLE / DROP DATABASE do not delete data users trust: the table directory moves to
  ``<sink>/_cdcflow/dropped/<db>/<table>@<ts>`` (``ts`` = the DROP's commit ts). A maintenance job
  removes such copies after a retention period; until then a drop can be undone by moving the
  directory back.
* Every move away from ``<sink>/<db>/<table>`` (drop or rename) leaves a move record
  ``<sink>/_cdcflow/moved/<db>/<table>.json`` = ``{"ts", "to", "job_id", "table_id"}`` holding the
  latest such ts. ``apply_window`` consults it when a table's directory is missing: a DML step whose
  version is not above the move's ts belongs to before the move (a re-run after the DDL was applied)
  and is skipped instead of re-creating an empty table at the old path.

Moves are ``os.replace`` of a directory: Delta logs reference data files by relative paths, so a
moved table stays valid. That needs a local (``file://`` or bare path) sink. The names in these paths are the
path components ``sink_uri.name_component`` makes of them, as in ``<sink>/<db>/<table>``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cdc_core import durable
from cdc_core.codec.sink_uri import CDCFLOW_DIR, database_path, name_component, table_path_of
from cdc_core.errors import ChangefeedError

DROPPED_DIR = "dropped"
MOVED_DIR = "moved"


def local_root(sink: str) -> str:
    """The sink as a local directory; ``ChangefeedError`` for object stores (no atomic dir rename)."""
    if sink.startswith("file://"):
        return sink[len("file://") :]
    if "://" in sink:
        raise ChangefeedError(
            f"sink {sink!r}: moving a silver table (DROP/RENAME) needs a local sink; object stores have no "
            "atomic directory rename"
        )
    return sink


def silver_dir(sink: str, db: str, table: str) -> str:
    """``<sink>/<db>/<table>`` of a local sink (``ChangefeedError`` for another): the directory a move takes away."""
    local_root(sink)
    return table_path_of(sink, db, table)


def database_dir(sink: str, db: str) -> str:
    """``<sink>/<db>`` of a local sink: the directory of a database's silver tables."""
    local_root(sink)
    return database_path(sink, db)


def dropped_path(sink: str, db: str, table: str, ts: int) -> str:
    """``<sink>/_cdcflow/dropped/<db>/<table>@<ts>``."""
    return os.path.join(local_root(sink), CDCFLOW_DIR, DROPPED_DIR, name_component(db, database=True),
                        f"{name_component(table)}@{ts}")


def _record_path(sink: str, db: str, table: str) -> str:
    return os.path.join(local_root(sink), CDCFLOW_DIR, MOVED_DIR, name_component(db, database=True),
                        f"{name_component(table)}.json")


def read_move(sink: str, db: str, table: str) -> dict[str, Any] | None:
    """The move record of ``<db>/<table>`` (None: never moved, or not a local sink)."""
    try:
        path = _record_path(sink, db, table)
    except ChangefeedError:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            rec: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return None
    return rec


def record_move(sink: str, db: str, table: str, *, ts: int, to: str | None, job_id: int, table_id: int | None) -> None:
    """Record that ``<db>/<table>`` moved away at ``ts`` (kept when a later move is already recorded)."""
    old = read_move(sink, db, table)
    if old is not None and int(old["ts"]) >= ts:
        return
    path = _record_path(sink, db, table)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # a reader sees the old or the new record, also after a power loss
    durable.write_file(path, json.dumps({"ts": ts, "to": to, "job_id": job_id, "table_id": table_id}, sort_keys=True))


def move_dir(src: str, dst: str) -> None:
    """Move a table directory (``dst`` must not exist)."""
    if os.path.exists(dst):
        raise ChangefeedError(f"cannot move {src} to {dst}: the destination exists")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.replace(src, dst)
