"""Where a changefeed's schema storage starts: TiDB's meta snapshot at a ts (the databases and tables TiDB's meta
keys hold there), as TiCDC's schema store starts from it (``logservice/schemastore/persist_storage.go``
``initialize`` → ``persistSchemaSnapshot`` at the start ts). ``cdcflow changefeed create``, a changefeed's first
window (``tasks._schema_log``) and ``cdcflow verify`` read it.

The cost is O(tables): the DDL history is not read, so neither its length nor an old job cdcflow cannot decode
matters. Only the tables the changefeed's filter matches are decoded (``meta_snapshot``: names first); the
system schemas are skipped as TiCDC skips them (``pkg/filter`` ``IsSysSchema``).

The snapshot becomes a ``SchemaStorage`` as synthetic finished jobs at the ts, the form ``SchemaLog.gc`` collapses
history into: a ``create schema`` per database and a ``create table`` per table, all parts of one job (id 0,
``sub_index`` numbering them, TiDB's ids being positive) so that their keys never meet a real job's. After the
ts, the DDL puller (``ddl_puller``) advances the storage from the job rows pulled into each bronze window.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

from cdc_core.client.kv_snapshot import KvSnapshot
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import ChangefeedError
from cdc_core.filter.table_filter import SYSTEM_SCHEMAS, TableFilter
from cdc_core.log import get_logger
from cdc_core.puller.pd_client import PDClient
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.meta_snapshot import MetaSnapshot
from cdc_core.schema.model import SchemaError
from cdc_core.schema.storage import SchemaStorage

log = get_logger("cdcflow.changefeed.schema")
T = TypeVar("T")

SNAPSHOT_JOB_ID = 0  # the synthetic job of a meta snapshot (TiDB's job ids start at 1)
_SYSTEM = SYSTEM_SCHEMAS | {"sys"}


def _matcher(table_filter: TableFilter | None) -> Any:
    if table_filter is None:
        return lambda db, table: db.lower() not in _SYSTEM
    return table_filter.match


async def read_schema_jobs(pd_addr: str, at_ts: int, table_filter: TableFilter | None = None) -> list[DDLJob]:
    """The schema at ``at_ts`` as synthetic jobs (module docstring): the databases, then the tables
    ``table_filter`` matches (every user table when None). ``ChangefeedError`` names a wanted table whose TableInfo
    cannot be read, and a snapshot lost by GC."""
    want = _matcher(table_filter)
    pd = PDClient(pd_addr)
    jobs: list[DDLJob] = []
    try:
        async with KvSnapshot(pd, at_ts) as snap:
            meta = MetaSnapshot(snap)
            version = await meta.schema_version()
            dbs = [db async for db in meta.databases() if db.name.lower() not in _SYSTEM]
            for db in dbs:
                jobs.append(_job("create schema", at_ts, version, len(jobs), schema_id=db.id, schema_name=db.name))
            for db in dbs:
                if table_filter is not None and not table_filter.match_schema(db.name):
                    continue
                async for info in meta.tables(db, want, schema_version=version):
                    jobs.append(_job("create table", at_ts, version, len(jobs), schema_id=db.id,
                                     schema_name=db.name, table_id=info.id, table_name=info.name, table_info=info))
            tables = len(jobs) - len(dbs)
            log.info("schema read from TiDB's meta snapshot", ts=at_ts, schema_version=version, databases=len(dbs),
                     tables=tables, not_replicated_not_decoded=meta.skipped, kv_retries=snap.retries)
    except SchemaError as exc:
        raise ChangefeedError(f"the schema at ts {at_ts}: {exc}") from exc
    finally:
        await pd.close()
    return jobs


def _job(job_type: str, ts: int, version: int, sub_index: int, **kw: Any) -> DDLJob:
    return DDLJob(job_id=SNAPSHOT_JOB_ID, job_type=job_type, query="", schema_version=version, finished_ts=ts,
                  sub_index=sub_index, **{"table_id": None, "table_name": None, "table_info": None, **kw})


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` to its end from synchronous code, on a thread of its own when this one already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def load_schema_jobs(client: UpstreamClient, at_ts: int, table_filter: TableFilter | None = None) -> list[DDLJob]:
    """:func:`read_schema_jobs` through ``client``'s PD."""
    return _run(read_schema_jobs(client.pd_addr, at_ts, table_filter))


def load_schema(client: UpstreamClient, at_ts: int, table_filter: TableFilter | None = None) -> SchemaStorage:
    return SchemaStorage.from_jobs(load_schema_jobs(client, at_ts, table_filter))
