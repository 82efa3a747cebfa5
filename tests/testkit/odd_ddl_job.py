"""An old DDL job cdcflow cannot decode, in ``mysql.tidb_ddl_history`` of an embedded upstream: a synced CREATE
TABLE whose TableInfo has a column of a type no TiDB release has (code ``FUTURE_TP``), as a cluster's history holds
the jobs of types newer than its readers. Written straight into the store, as TiDB's DDL owner writes the row."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from cdc_core.codec import key as keycodec
from cdc_core.codec.row import encode_row
from cdc_core.schema import ddl_history
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column, TableInfo
from cdc_core.upstream.sql.txn import Transaction

FUTURE_TP = 199
# Below the first id the catalog hands out (100): an old job, and no real job's row is overwritten.
ODD_JOB_ID = 42


def undecodable_job_meta(db: str, table: str, *, job_id: int = ODD_JOB_ID) -> bytes:
    """The ``job_meta`` of a synced CREATE TABLE ``db.table`` whose column ``embedding`` has type ``FUTURE_TP``."""
    info = TableInfo(id=job_id + 1, db_name=db, name=table, columns=(
        Column(1, "id", "bigint", nullable=False), Column(2, "embedding", "bigint")), max_column_id=2)
    job = DDLJob(job_id=job_id, job_type="create table", schema_id=job_id - 1, table_id=info.id, schema_name=db,
                 table_name=table, query=f"CREATE TABLE {table} (id BIGINT, embedding VECTOR_OF_NEXT_YEAR)",
                 schema_version=1, table_info=info, finished_ts=1)
    d = json.loads(ddl_history.job_meta((job,), ddl_history.JOB_STATE_SYNCED))
    d["binlog"]["TableInfo"]["cols"][1]["type"]["Tp"] = FUTURE_TP
    return json.dumps(d).encode()


def _row_key(job_id: int) -> bytes:
    return keycodec.row_key(ddl_history.HISTORY_TABLE_ID, job_id)


def write(ec: Any, db: str, table: str, *, job_id: int = ODD_JOB_ID) -> int:
    """Put the odd job's history row into the cluster ``ec`` (an ``EmbeddedCluster``); its commit ts."""
    row = {1: job_id, 2: undecodable_job_meta(db, table, job_id=job_id), 3: db, 4: table, 5: str(job_id - 1),
           6: str(job_id + 1), 7: datetime(2020, 1, 1)}

    def put() -> int:
        txn = Transaction(ec.cluster.store, ec.cluster.tso)
        txn.put(_row_key(job_id), encode_row(ddl_history.HISTORY_TABLE_INFO, row))
        return txn.commit_now()

    return ec.call(put)  # type: ignore[no-any-return]


def remove(ec: Any, *, job_id: int = ODD_JOB_ID) -> None:
    """Delete the odd row again (later readers of a shared upstream's history are not this test's)."""
    def delete() -> None:
        txn = Transaction(ec.cluster.store, ec.cluster.tso)
        txn.delete(_row_key(job_id))
        txn.commit_now()

    ec.call(delete)


def _job_row_key(job_id: int) -> bytes:
    return keycodec.row_key(ddl_history.JOB_TABLE_ID, job_id)


def write_done(ec: Any, db: str, table: str, *, job_id: int = ODD_JOB_ID) -> int:
    """Put the odd job into ``mysql.tidb_ddl_job`` in state done, as a DDL's last transaction writes its row: a
    running changefeed's DDL puller meets it in its next window (at this commit ts, which it returns)."""
    d = json.loads(undecodable_job_meta(db, table, job_id=job_id))
    d["state"] = ddl_history.JOB_STATE_DONE
    d["binlog"]["FinishedTS"] = 0  # TiDB sets it once synced; the puller takes the row's commit ts
    meta = json.dumps(d).encode()
    row = {1: job_id, 2: 0, 3: str(job_id - 1), 4: str(job_id + 1), 5: meta, 6: d["type"], 7: 0}

    def put() -> int:
        txn = Transaction(ec.cluster.store, ec.cluster.tso)
        txn.put(_job_row_key(job_id), encode_row(ddl_history.JOB_TABLE_INFO, row))
        return txn.commit_now()

    return ec.call(put)  # type: ignore[no-any-return]


def remove_done(ec: Any, *, job_id: int = ODD_JOB_ID) -> None:
    """Delete the odd ``tidb_ddl_job`` row again (as TiDB does once the job is synced)."""
    def delete() -> None:
        txn = Transaction(ec.cluster.store, ec.cluster.tso)
        txn.delete(_job_row_key(job_id))
        txn.commit_now()

    ec.call(delete)
