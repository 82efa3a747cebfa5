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
    """The finished DDL jobs at ``at_ts``: TiDB's history table, then done jobs not yet moved out of
    ``tidb_ddl_job`` (the ``job_meta`` of each, as TiDB writes it)."""
    rows = [r for name in (ddl_history.HISTORY_TABLE_NAME, ddl_history.JOB_TABLE_NAME)
            for r in client.query(f"SELECT job_meta FROM {ddl_history.DB_NAME}.{name}", at_ts=at_ts)]
    return ddl_history.jobs_from_sql(rows, at_ts)


def load_schema(client: UpstreamClient, at_ts: int) -> SchemaStorage:
    return SchemaStorage.from_jobs(load_schema_jobs(client, at_ts))
