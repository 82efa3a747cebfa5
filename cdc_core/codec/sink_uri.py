"""Sink URIs and the sink's layout: where a changefeed's sink (silver tables, bronze changelog) lives, the path of
an upstream table's silver table in it and the Delta application-transaction id a changefeed commits under.

Kept apart from ``changelog`` (which needs pyarrow) so that loading a changefeed config stays cheap: every
Airflow task, DAG parse and CLI call loads one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdc_core.schema.model import TableInfo

APP_ID_PREFIX = "cdcflow/"


def app_id_for(changefeed_id: str) -> str:
    """The Delta application-transaction id of a changefeed (the ``txn`` action's ``appId`` its commits carry)."""
    return f"{APP_ID_PREFIX}{changefeed_id}"


def at_barrier_app_id_for(changefeed_id: str) -> str:
    """The app-transaction id under which a changefeed records the DML committed at a DDL's commit ts, applied
    just before that DDL (``cdc_core.changefeed.barriers``): its version is the DDL's ts, which the main app id
    records only once the DDL itself is applied. A prefix of its own, so that no changefeed id can collide."""
    return f"cdcflow-at-ddl/{changefeed_id}"


def table_path(sink: str, table: TableInfo) -> str:
    """``<sink>/<db>/<table>``: the silver table of an upstream table.

    ``file://`` sinks become local paths; other URIs (``s3://``...) are passed to delta-rs as is.
    """
    if sink.startswith("file://"):
        return os.path.join(sink[len("file://") :], table.db_name, table.name)
    if "://" in sink:
        return f"{sink.rstrip('/')}/{table.db_name}/{table.name}"
    return os.path.join(sink, table.db_name, table.name)


def local_path(sink_uri: str) -> Path:
    """The local directory of a ``file://`` sink URI (or a bare path)."""
    if sink_uri.startswith("file://"):
        return Path(sink_uri[len("file://") :])
    if "://" in sink_uri:
        raise ValueError(f"sink-uri {sink_uri!r}: only file:// sinks are supported by the embedded engine")
    return Path(sink_uri)
