"""The bronze changelog: every pulled row event, undecoded, as Parquet, one directory per window.

Layout: ``<sink>/_cdcflow/changelog/changefeed=<id>/window=<end_ts:020d>/part-*.parquet``. A
window directory holds every row event with ``checkpoint_ts < commit_ts <= end_ts`` of the
changefeed's tables and of the DDL history table; it is written completely (to a temporary name,
then renamed) before anything is applied, so a directory that exists is whole. It is the replay
source for rebuilds and backfills and the audit trail.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        pa.field("region_id", pa.int64(), nullable=False),
        pa.field("table_id", pa.int64(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("op", pa.string(), nullable=False),  # "put" | "delete"
        pa.field("start_ts", pa.int64(), nullable=False),
        pa.field("commit_ts", pa.int64(), nullable=False),
        pa.field("value", pa.binary(), nullable=True),
        pa.field("old_value", pa.binary(), nullable=True),
    ]
)

OP_PUT = "put"
OP_DELETE = "delete"
_WINDOW_RE = re.compile(r"^window=(\d{20})$")


def local_path(sink_uri: str) -> Path:
    """The local directory of a ``file://`` sink URI (or a bare path)."""
    if sink_uri.startswith("file://"):
        return Path(sink_uri[len("file://") :])
    if "://" in sink_uri:
        raise ValueError(f"sink-uri {sink_uri!r}: only file:// sinks are supported by the embedded engine")
    return Path(sink_uri)


def changelog_root(sink_uri: str, changefeed_id: str) -> Path:
    return local_path(sink_uri) / "_cdcflow" / "changelog" / f"changefeed={changefeed_id}"


def window_dir(sink_uri: str, changefeed_id: str, end_ts: int) -> Path:
    return changelog_root(sink_uri, changefeed_id) / f"window={end_ts:020d}"


def write_window(sink_uri: str, changefeed_id: str, end_ts: int, table: pa.Table) -> Path:
    """Write one window atomically; an existing window directory is replaced whole."""
    table = table.cast(SCHEMA)
    final = window_dir(sink_uri, changefeed_id, end_ts)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex}"
    tmp.mkdir()
    pq.write_table(table, tmp / "part-00000.parquet", compression="zstd")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def read_window(sink_uri: str, changefeed_id: str, end_ts: int) -> pa.Table:
    d = window_dir(sink_uri, changefeed_id, end_ts)
    if not d.is_dir():
        raise FileNotFoundError(f"no bronze window at {d}")
    files = sorted(d.glob("*.parquet"))
    if not files:
        return SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(f, schema=SCHEMA) for f in files])


def list_windows(sink_uri: str, changefeed_id: str) -> list[int]:
    """End ts of every complete window, ascending."""
    root = changelog_root(sink_uri, changefeed_id)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _WINDOW_RE.match(p.name)
        if m and p.is_dir():
            out.append(int(m.group(1)))
    return sorted(out)
