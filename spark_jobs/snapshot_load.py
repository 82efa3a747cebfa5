"""Snapshot loads: tables' rows read from the upstream at a ts, kept as a bronze base, and put into Delta.

A changefeed's ``snapshot`` window (and ``initial-snapshot = true``) reloads tables at its checkpoint ``C``
in two phases (``args["phase"]``), run by the window's ``pull`` and ``apply`` steps:

``fetch``
    Read each table at ``C`` from the upstream (a snapshot read over the MySQL protocol, ``SET @@tidb_snapshot
    = C``, streamed) in parallel chunks and write the rows, typed with the silver schema, as the table's bronze
    **snapshot base** ``<changelog>/snapshot=<C>/<db>.<table>/`` (:mod:`cdc_core.codec.changelog`). The
    chunks are the table's regions (PD ScanRegions over the table span), their boundary keys decoded into
    handle ranges ``[lo, hi)`` and read with ``SELECT * FROM db.t WHERE <handle> >= lo AND <handle> < hi``;
    the chunk list is a DataFrame of one chunk per partition mapped with ``mapInArrow`` (so it also runs over
    Spark Connect), each task streaming its rows over its own MySQL connection. A table of one chunk, or of at
    most ``DRIVER_ROWS`` rows at ``C`` (its ``COUNT(*)``), is streamed on the driver into parquet with pyarrow
    instead: no Spark job. ``FETCH_THREADS`` tables are fetched at a time.
    A base already written for the same table id and schema version is kept (rows at a ts never change),
    so a re-run fetches nothing twice.
``load``
    Replace a Delta table's contents with a base in **one** commit that carries the app transaction
    ``("cdcflow/<changefeed>", version)`` and ``cdcflow.ts = version`` (the base's ts) like every cdcflow
    commit, plus ``cdcflow.load_id``: a load whose id is already in the table's recent history is skipped
    (idempotent retries). The base is streamed batch by batch into ``write_deltalake(mode="overwrite",
    schema_mode="overwrite")`` cast to ``TableInfo.arrow_schema()`` -- exactly the Arrow types ``apply``
    writes. A rebuild uses this phase alone, from the latest base of a table.

Run under spark-submit like the other jobs::

    spark-submit spark_jobs/snapshot_load.py --args args.json --result result.json
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdc_core.changefeed.job_args.snapshot_load import DEFAULT_MAX_CHUNKS, SnapshotJobArgs
from cdc_core.codec import changelog
from cdc_core.codec.sink_uri import app_id_for, table_path
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import TableInfo
from spark_jobs.job_io import args_file_main
from spark_jobs.load import silver_read
from spark_jobs.load.delta_writer import commit_metadata, create_silver_table
from spark_jobs.normalize import mapped_values
from spark_jobs.upstream_read import (
    LOAD_BATCH_ROWS,
    base_schema,
    batched,
    fetch_partition,
    plan_chunks,
    upstream_count,
    upstream_frame,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

FETCH_THREADS = 4  # tables whose bases one fetch job reads at once
# A table of at most this many rows at the ts is streamed on the driver, whatever its chunks: a Spark job's fixed cost
# is more than its parallel tasks save on such a table (tests/bench/test_snapshot_fetch_bench.py).
# $CDCFLOW_SNAPSHOT_DRIVER_ROWS sets it (0: only a table of one chunk is read on the driver).
DRIVER_ROWS = 100_000
ENV_DRIVER_ROWS = "CDCFLOW_SNAPSHOT_DRIVER_ROWS"
HISTORY_LOOKBACK = 50  # commits searched for a load id already committed


def driver_rows() -> int:
    """The largest table (rows at the snapshot ts) whose base is read on the driver: ``DRIVER_ROWS``, or
    ``$CDCFLOW_SNAPSHOT_DRIVER_ROWS``."""
    text = os.environ.get(ENV_DRIVER_ROWS)
    if text is None or not text.strip():
        return DRIVER_ROWS
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ChangefeedError(f"${ENV_DRIVER_ROWS} must be a row count (an integer >= 0), got {text!r}")
    return value


def remove_stale_temps(final: Path) -> None:
    """Remove the temporary directories a crashed fetch of ``final``'s table left (one window runs at a time). By
    exact name: ``.tmp-db.t-*`` also matches ``db.t-x``'s, which another fetch thread may be writing."""
    own = re.compile(rf"\.tmp-{re.escape(final.name)}-[0-9a-f]{{32}}")
    for stale in final.parent.glob(f".tmp-{final.name}-*"):
        if own.fullmatch(stale.name):
            shutil.rmtree(stale, ignore_errors=True)


def _written_base(final: Path, table: TableInfo) -> dict[str, Any] | None:
    """The meta of the base at ``final`` when one of the same table id and schema version is there already."""
    meta_path = final / changelog.TABLE_META
    if not meta_path.is_file():
        return None
    meta: dict[str, Any] = json.loads(meta_path.read_text())
    return meta if meta.get("table_id") == table.id and meta.get("schema_version") == table.schema_version else None


def fetch_table(
    spark: SparkSession, sink: str, changefeed_id: str, pd_addr: str, ts: int, table: TableInfo,
    *, max_chunks: int = DEFAULT_MAX_CHUNKS, tidb: str | None = None, max_driver_rows: int | None = None,
) -> dict[str, Any]:
    """Write the base of ``table`` at ``ts`` (kept when one for the same table id and schema version exists).
    ``max_driver_rows``: the largest table read on the driver (default :func:`driver_rows`)."""
    started = time.monotonic()
    final = changelog.snapshot_table_dir(sink, changefeed_id, ts, table.db_name, table.name)
    meta = _written_base(final, table)
    if meta is not None:
        return {"skipped": True, "reason": "base already written", "rows": meta.get("rows"),
                "chunks": meta.get("chunks"), "chunking": meta.get("chunking"), "path": str(final),
                "seconds": round(time.monotonic() - started, 3)}
    chunks, how = plan_chunks(pd_addr, table, max_chunks)
    fetch = functools.partial(fetch_partition, pd_addr, tidb, ts, table.to_json(), marked=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(final)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex}"
    # A table of several chunks is counted first (on TiDB a COUNT(*) pushed down to the coprocessors of its regions,
    # a fraction of the read that follows); not when no such table may be read on the driver.

    bound = driver_rows() if max_driver_rows is None else max_driver_rows
    on_driver = len(chunks) == 1 or (bound > 0 and upstream_count(pd_addr, tidb, ts, table) <= bound)
    if on_driver:
        # One chunk, or a small table, gains nothing from distribution: stream it here into parquet with the silver
        # schema (no Spark job, no Python worker), chunk after chunk, LOAD_BATCH_ROWS rows at a time.
        _write_arrow(tmp, table, fetch(iter(chunks)))
    else:
        frame = upstream_frame(spark, pd_addr, ts, table, tidb=tidb, chunks=chunks, marked=True)
        frame.write.mode("overwrite").parquet(str(tmp))
    rows = _count_rows(tmp)
    mapped = _count_mapped(tmp, table)
    if mapped:
        log.warning("snapshot base of %s at %d: values Delta cannot hold read as NULL, by column %s",
                    table.qualified_name, ts, mapped)
    meta = {"table_id": table.id, "qualified_name": table.qualified_name, "ts": ts, "rows": rows,
            "chunks": len(chunks), "chunking": how, "schema_version": table.schema_version,
            "table": table.to_dict(), "written_at": time.time(), "mapped": mapped}
    changelog.publish_snapshot_table(tmp, final, meta)
    log.info("snapshot base of %s at %d: %d rows in %d chunk(s), read %s", table.qualified_name, ts, rows,
             len(chunks), "on the driver" if on_driver else "by Spark tasks")
    return {"skipped": False, "reason": None, "rows": rows, "chunks": len(chunks), "chunking": how,
            "path": str(final), "seconds": round(time.monotonic() - started, 3), "mapped": mapped}


def fold_table(sink: str, changefeed_id: str, ts: int, table: TableInfo) -> dict[str, Any]:
    """Write the base of ``table`` at ``ts`` from its silver table as of ``ts`` (Delta time travel to the version
    the changefeed committed at or before ``ts``; no rows when the table had none): what the lake held at a
    checkpoint, whose windows were checked there. Streamed, ``LOAD_BATCH_ROWS`` rows at a time."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from spark_jobs.checks.data_quality import version_as_of

    started = time.monotonic()
    final = changelog.snapshot_table_dir(sink, changefeed_id, ts, table.db_name, table.name)
    written = _written_base(final, table)
    if written is not None:
        return {"skipped": True, "reason": "base already written", "rows": written.get("rows"), "path": str(final)}
    path = table_path(sink, table)
    version = version_as_of(path, ts) if DeltaTable.is_deltatable(path) else None
    schema = table.arrow_schema()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex}"
    tmp.mkdir()
    rows = 0
    with pq.ParquetWriter(tmp / "part-00000.parquet", schema) as writer:
        if version is not None:
            dt = DeltaTable(path, version=version)
            present = [n for n in schema.names if n in dt.schema().to_arrow().names]
            for b in silver_read.scan(dt, present, LOAD_BATCH_ROWS):
                writer.write_batch(silver_read.conform(b, schema))
                rows += b.num_rows
    meta = {"table_id": table.id, "qualified_name": table.qualified_name, "ts": ts, "rows": rows, "chunks": 1,
            "chunking": f"folded from the silver table at Delta version {version}", "source": "silver",
            "delta_version": version, "schema_version": table.schema_version, "table": table.to_dict(),
            "written_at": time.time()}
    changelog.publish_snapshot_table(tmp, final, meta)
    log.info("folded base of %s at %d: %d rows from Delta version %s", table.qualified_name, ts, rows, version)
    return {"skipped": False, "reason": None, "rows": rows, "delta_version": version, "path": str(final),
            "seconds": round(time.monotonic() - started, 3)}


def _write_arrow(d: Path, table: TableInfo, rows: Iterator[tuple[Any, ...]]) -> None:
    import pyarrow.parquet as pq

    d.mkdir(parents=True)
    schema = base_schema(table)
    with pq.ParquetWriter(d / "part-00000.parquet", schema) as writer:
        for batch in batched(rows, schema):
            writer.write_batch(batch)


def _count_rows(d: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in changelog.snapshot_part_files(d))


def _count_mapped(d: Path, table: TableInfo) -> dict[str, int]:
    """``{column: values}`` a base's rows hold as NULL because Delta cannot hold them (their markers, a file and a
    row group at a time: only that column is read)."""
    import pyarrow.parquet as pq

    total: dict[str, int] = {}
    if not mapped_values.can_map(table):
        return total
    for p in changelog.snapshot_part_files(d):
        f = pq.ParquetFile(p)
        if mapped_values.MAPPED_COL not in f.schema_arrow.names:
            continue
        for i in range(f.num_row_groups):
            marks = f.read_row_group(i, columns=[mapped_values.MAPPED_COL]).column(0)
            mapped_values.add_counts(total, mapped_values.count_arrow(marks, table))
    return total


# --- load ---------------------------------------------------------------------------------------


def _base_batches(files: list[Path], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    for f in files:
        for b in pq.ParquetFile(f).iter_batches(batch_size=LOAD_BATCH_ROWS):
            yield silver_read.conform(b, schema)


def _already_loaded(path: str, load_id: str) -> tuple[bool, int | None]:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return False, None
    dt = DeltaTable(path)
    done = any(c.get("cdcflow.load_id") == load_id for c in dt.history(HISTORY_LOOKBACK))
    return done, dt.version()


def load_base(
    sink: str, changefeed_id: str, base_dir: str | Path, table: TableInfo, *, version: int, load_id: str,
    change_data_feed: bool = False,
) -> dict[str, Any]:
    """Replace the silver table of ``table`` (its path by ``table``'s names) with the base at ``base_dir`` in
    one commit recording ``version``; skipped when ``load_id`` is already committed there. A table created here
    takes the change data feed when ``change_data_feed``: the base's rows are then its first inserts (the overwrite
    writes no change data; readers take its adds as inserts and its removes as deletes, PROTOCOL.md "Add CDC
    File")."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    started = time.monotonic()
    path = table_path(sink, table)
    done, version_now = _already_loaded(path, load_id)
    if done:
        return {"skipped": True, "reason": f"already loaded ({load_id})", "rows": None,
                "delta_version": version_now, "path": path, "seconds": round(time.monotonic() - started, 3)}
    base = Path(base_dir)
    if not (base / changelog.TABLE_META).is_file():
        raise ChangefeedError(f"no complete snapshot base at {base}")
    meta = json.loads((base / changelog.TABLE_META).read_text())
    if not DeltaTable.is_deltatable(path):
        create_silver_table(path, table, mode="ignore", change_data_feed=change_data_feed)
    schema = table.arrow_schema()
    props = CommitProperties(
        app_transactions=[Transaction(app_id=app_id_for(changefeed_id), version=version)],
        custom_metadata={**commit_metadata(table, version), "cdcflow.snapshot": str(meta.get("ts")),
                         "cdcflow.load_id": load_id},
    )
    reader = pa.RecordBatchReader.from_batches(schema, _base_batches(changelog.snapshot_part_files(base), schema))
    write_deltalake(path, reader, mode="overwrite", schema_mode="overwrite", commit_properties=props)
    dt = DeltaTable(path)
    log.info("loaded %s from the snapshot base %s as version %d", table.qualified_name, base, version)
    return {"skipped": False, "reason": None, "rows": meta.get("rows"), "delta_version": dt.version(),
            "applied_version": dt.transaction_version(app_id_for(changefeed_id)), "path": path,
            "seconds": round(time.monotonic() - started, 3), "mapped": meta.get("mapped") or {}}


# --- job entry points ---------------------------------------------------------------------------


def run_job(opts: SnapshotJobArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: ``SnapshotJobArgs`` in, JSON out.

    "fetch" returns ``{"tables": {"db.t": {"rows", "chunks", "chunking", "path", "skipped", "reason",
    "seconds"}}}``; "load" ``{"tables": {"db.t": {"rows", "delta_version", "applied_version", "skipped", "reason",
    "path"}}}``; "fold" (the bases at ``ts`` from the silver tables, :func:`fold_table`) ``{"tables": {"db.t":
    {"rows", "delta_version", "path", "skipped", "reason"}}}``; each with the ``phase``.
    """
    out: dict[str, dict[str, Any]] = {}
    if opts.phase == "fetch":
        from spark_jobs.session import get_spark

        spark = get_spark("cdcflow-snapshot-load")
        bound = driver_rows()  # a bad $CDCFLOW_SNAPSHOT_DRIVER_ROWS fails the job here, before any table
        assert opts.pd_addr is not None and opts.ts is not None
        pd_addr, ts = opts.pd_addr, opts.ts

        def fetch(t: TableInfo) -> tuple[str, dict[str, Any]]:
            return t.qualified_name, fetch_table(
                spark, opts.sink_uri, opts.changefeed_id, pd_addr, ts, t, max_chunks=opts.max_chunks,
                tidb=opts.tidb, max_driver_rows=bound,
            )

        # A small table's fetch is mostly fixed costs (PD's regions, a Spark job, a parquet commit): several at a
        # time overlap them with each other's reads.
        with ThreadPoolExecutor(max_workers=max(1, min(FETCH_THREADS, len(opts.tables))),
                                thread_name_prefix="snapshot-fetch") as pool:
            out.update(pool.map(fetch, opts.tables))
    elif opts.phase == "load":
        for item in opts.loads:
            out[item.table.qualified_name] = res = load_base(opts.sink_uri, opts.changefeed_id, item.base,
                                                             item.table, version=item.version, load_id=item.load_id,
                                                             change_data_feed=opts.change_data_feed)
            if item.history:  # the history table starts from the base: one open row per key at its ts
                from spark_jobs.load import history

                res["history"] = history.open_snapshot(opts.sink_uri, item.table, ts=item.version,
                                                       app_id=app_id_for(opts.changefeed_id), load_id=item.load_id)
    else:
        assert opts.ts is not None
        for t in opts.tables:
            out[t.qualified_name] = fold_table(opts.sink_uri, opts.changefeed_id, opts.ts, t)
    return {"phase": opts.phase, "tables": out}


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: ``--args FILE [--result FILE]``."""
    return args_file_main("spark_jobs.snapshot_load", "Snapshot bases: fetch or load.", run_job, SnapshotJobArgs,
                          argv)


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
