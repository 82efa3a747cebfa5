"""Builds a changefeed's schema storage from the upstream's DDL history at a ts.

The walking skeleton reads ``mysql.tidb_ddl_history`` through a snapshot read at the window end;
the DDL puller (which pulls the same table's span into the bronze window) takes over with the
changefeed-semantics issue.
"""

from __future__ import annotations

from cdc_core.client.upstream import UpstreamClient
from cdc_core.schema import ddl_history
from cdc_core.schema.ddl_history import DDLJob
from cdc_core.schema.storage import SchemaStorage


def load_schema(client: UpstreamClient, at_ts: int) -> SchemaStorage:
    rows = client.query(f"SELECT * FROM {ddl_history.DB_NAME}.{ddl_history.TABLE_NAME}", at_ts=at_ts)
    return SchemaStorage.from_jobs(DDLJob.from_row(r) for r in rows)
