"""A snapshot read of the upstream's DDL history at a ts: where a changefeed's schema storage starts
(like TiCDC reading the schema snapshot at start-ts), and what `cdcflow verify` uses on its own.

After the start, the DDL puller (``ddl_puller``) advances the storage from the history rows
pulled into each bronze window.
"""

from __future__ import annotations

from cdc_core.client.upstream import UpstreamClient
from cdc_core.schema import ddl_history
from cdc_core.schema.ddl_history import DDLJob
from cdc_core.schema.storage import SchemaStorage


def load_schema_jobs(client: UpstreamClient, at_ts: int) -> list[DDLJob]:
    rows = client.query(f"SELECT * FROM {ddl_history.DB_NAME}.{ddl_history.TABLE_NAME}", at_ts=at_ts)
    return sorted((DDLJob.from_row(r) for r in rows), key=lambda j: (j.finished_ts, j.job_id))


def load_schema(client: UpstreamClient, at_ts: int) -> SchemaStorage:
    return SchemaStorage.from_jobs(load_schema_jobs(client, at_ts))
