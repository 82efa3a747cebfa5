"""The ``maintain`` job: the upkeep of one Delta table that cdcflow writes (a silver table, a sink's data-quality
result log), done with delta-rs on the driver (no Spark session starts).

Compact its small files (``optimize.compact()``; a table with deletion vectors first has the files they hollowed
out rewritten without their dead rows), optionally write a checkpoint of its log, then vacuum the files no version
inside the retention still references (``vacuum(retention_hours=...)``) and the deletion-vector files no live file
names. Every commit carries the table's last ``cdcflow.ts`` in its metadata: they do not change the data, and time
travel by cdcflow ts (``spark_jobs.checks.data_quality.version_as_of``, ``cdcflow verify --at-ts``) must keep
finding the version of each window. Vacuuming drops time travel to versions older than the retention.

``cdc_core.changefeed.upkeep`` runs it (through ``spark_engine``) under the window leases of the table's
changefeeds; by hand: ``spark-submit spark_jobs/maintain.py --args args.json [--result result.json]``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from cdc_core.changefeed.job_args.maintain import MaintainArgs
from cdc_core.changefeed.versions import commit_ts
from spark_jobs.job_io import args_file_main
from spark_jobs.load import merge_on_read, silver_read

log = logging.getLogger(__name__)

TS_KEY = "cdcflow.ts"


def last_cdcflow_ts(path: str) -> str | None:
    """The newest ``cdcflow.ts`` of the table's commits (None for a table no window has written yet)."""
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    for limit in (100, None):  # windows (and maintenance) stamp every commit: the newest few suffice
        found = [ts for ts in map(commit_ts, dt.history(limit)) if ts]
        if found:
            return str(max(found))
    return None


def _ts_metadata(path: str) -> dict[str, str]:
    ts = last_cdcflow_ts(path)
    return {TS_KEY: ts} if ts is not None else {}


def _commit_properties(path: str) -> Any:
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata=_ts_metadata(path))


def _file_count(path: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(path).file_uris())


def compact_table(path: str) -> dict[str, Any]:
    """Bin-pack the table's small files (``optimize.compact``); the commit keeps the table's cdcflow ts. A table
    with deletion vectors first has its files that they hollowed out rewritten without their dead rows
    (``merge_on_read.purge_deleted_rows``: the compaction leaves large files as they are)."""
    from deltalake import DeltaTable

    before = _file_count(path)
    purged = None
    if silver_read.has_deletion_vectors(DeltaTable(path)):
        purged = merge_on_read.purge_deleted_rows(path, _ts_metadata(path))
    metrics = DeltaTable(path).optimize.compact(commit_properties=_commit_properties(path))
    out: dict[str, Any] = {
        "files_before": before, "files_after": _file_count(path), "files_added": int(metrics.get("numFilesAdded", 0)),
        "files_removed": int(metrics.get("numFilesRemoved", 0))}
    if purged is not None:
        out["purged"] = purged
    log.info("compacted %s: %s", path, out)
    return out


def vacuum_table(path: str, retention_hours: int, *, enforce_retention_duration: bool = True) -> dict[str, Any]:
    """Delete the files no version of the last ``retention_hours`` references (``dry_run=False``)."""
    from deltalake import DeltaTable

    deleted = DeltaTable(path).vacuum(retention_hours=retention_hours, dry_run=False,
                                      enforce_retention_duration=enforce_retention_duration,
                                      commit_properties=_commit_properties(path))
    # delta-rs's vacuum does not know deletion-vector files: those no live file names go the same way.
    vectors = []
    if silver_read.has_deletion_vectors(DeltaTable(path)):
        vectors = merge_on_read.unreferenced_vector_files(path, retention_hours)
        for f in vectors:
            os.unlink(f)
    out = {"retention_hours": retention_hours, "enforce_retention_duration": enforce_retention_duration,
           "files_deleted": len(deleted) + len(vectors),
           "deleted": sorted([*deleted, *(os.path.basename(f) for f in vectors)])[:20]}
    log.info("vacuumed %s: %d file(s) deleted (retention %d h)", path, out["files_deleted"], retention_hours)
    return out


def run_job(args: MaintainArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: ``MaintainArgs`` in; returns ``{"compact": ...,
    "vacuum": ...}`` (:func:`compact_table`, :func:`vacuum_table`), with ``"checkpoint_version"`` when a
    checkpoint was written (after the compaction, before the vacuum)."""
    from deltalake import DeltaTable

    out: dict[str, Any] = {"compact": compact_table(args.path)}
    if args.checkpoint:
        DeltaTable(args.path).create_checkpoint()
        out["checkpoint_version"] = DeltaTable(args.path).version()
    out["vacuum"] = vacuum_table(args.path, args.retention_hours,
                                 enforce_retention_duration=args.enforce_retention_duration)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: ``--args FILE [--result FILE]``."""
    return args_file_main("spark_jobs.maintain", "Compact and vacuum one Delta table.", run_job, MaintainArgs, argv)


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
