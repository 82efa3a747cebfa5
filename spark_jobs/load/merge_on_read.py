"""A window's MERGE into a silver table that has deletion vectors on: the rows it replaces or deletes are marked
deleted in the files that hold them, the rows it writes go to one new file, all in one commit with the app
transaction. What it costs is reading the key columns of the files whose statistics admit the changed keys and
writing the changes: never rewriting a file (delta-rs's MERGE copies every file a change lands in, so a window of
random keys rewrote the whole table; delta-io/delta-rs#4512).

The change set is the net effect of a window (one row per key, ``_cdc_op`` upsert or delete), so the MERGE's
semantics are: every live row whose key is in the change set is deleted, every upsert is written. Files are found by
the first key column's min/max statistics; each candidate's key columns are read and joined with the changed keys,
positions its deletion vector already holds left out. Local tables only: the commit is put-if-absent on the local
file system (``delta_log.commit``); sinks are local (``sink_uri.local_path``).
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from cdc_core.changefeed import sink_features
from spark_jobs.load import change_data, deletion_vector, delta_log, file_pruning, silver_read
from spark_jobs.normalize.net_effect import OP_COL

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

    from cdc_core.schema.model import TableInfo

# delta-rs's default (``delta.dataSkippingNumIndexedCols``): statistics of the first 32 columns.
STATS_COLUMNS = 32
# Longer strings get no min/max statistics: exact bounds of long values would bloat the log, truncated ones need
# care to stay bounds; a reader without them reads the file.
STATS_STRING_CHARS = 64
# A decimal's min and max are JSON numbers, which readers parse as doubles: only decimals of at most 15 digits, which
# a double round-trips exactly, get them (a rounded bound would let delta-spark's data skipping skip a file).
DECIMAL_STATS_DIGITS = 15
CHECKPOINT_INTERVAL = 100  # Delta's default ``delta.checkpointInterval``
# Each window adds one small file to each table it changed. Once WINDOW_FILES_TO_COMPACT files under
# WINDOW_FILE_BYTES have piled up, the files under COMPACT_TARGET_BYTES are bin-packed (delta-rs's
# optimize.compact, which applies their deletion vectors): a bounded rewrite of the recent changes, never of the
# table's large files. The maintenance DAG's daily compaction does the rest.
WINDOW_FILE_BYTES = 1 << 20
WINDOW_FILES_TO_COMPACT = 32
COMPACT_TARGET_BYTES = 8 << 20
# A file whose deletion vector removes at least this share of its rows is rewritten without them by the maintenance
# DAG's compaction (purge_deleted_rows).
PURGE_DELETED_FRACTION = 0.2


def enabled(dt: DeltaTable) -> bool:
    """Whether the table takes deletion vectors (the feature on, ``delta.enableDeletionVectors`` true)."""
    conf = dt.metadata().configuration or {}
    return "deletionVectors" in (dt.protocol().reader_features or []) and \
        str(conf.get("delta.enableDeletionVectors", "false")).lower() == "true"


@dataclass(frozen=True)
class MergeResult:
    upserted: int
    deleted: int
    version: int
    files_read: int  # candidate files whose key columns were read
    files_marked: int  # files given a new deletion vector


def merge(dt: DeltaTable, path: str, table: TableInfo, source: pa.Table, *, app_id: str, txn_version: int,
          metadata: dict[str, str]) -> MergeResult:
    """Apply the change set ``source`` (the table's columns plus ``_cdc_op``) to ``dt`` at ``path`` in one commit
    that also records the app transaction ``(app_id, txn_version)``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sink_features.check_writable(dt, path)
    read_version = dt.version()
    key = list(table.delta_key())
    changed = source.select([*key, OP_COL])
    live = delta_log.live_adds(path, read_version)
    marks: list[tuple[dict[str, Any], Any]] = []
    feed = change_data.enabled(dt)
    removed: list[tuple[pa.Table, pa.Array]] = []  # with the feed on: the rows marked deleted, and their ops
    deleted = files_read = 0
    for add in live.values():
        if not file_pruning.may_hold(add, changed, key[0]):
            continue
        files_read += 1
        found = _matched(path, add, changed, key)
        if found is None:
            continue
        rows, hit = found
        ops = hit.column(OP_COL)
        deleted += int(pc.sum(pc.equal(ops, "delete")).as_py() or 0)
        marks.append((add, rows))
        if feed:
            order = pc.sort_indices(hit.column("_pos"))
            hit = hit.take(order)
            old = silver_read.rows_at_positions(path, add, hit.column("_pos").to_numpy(), table.arrow_schema().names)
            removed.append((old, hit.column(OP_COL)))
    upserts = source.filter(pc.equal(source.column(OP_COL), "upsert")).drop_columns([OP_COL])
    upserts = upserts.select([n for n in pa.schema(dt.schema().to_arrow()).names if n in upserts.column_names])
    actions: list[dict[str, Any]] = [
        delta_log.commit_info("MERGE", read_version, {"operationParameters": {"mode": "deletion vectors"},
                                                      **metadata}),
        {"txn": {"appId": app_id, "version": txn_version, "lastUpdated": int(time.time() * 1000)}},
    ]
    now = int(time.time() * 1000)
    if marks:
        descriptors = deletion_vector.write_file(path, [rows for _, rows in marks])
        for (add, _), dv in zip(marks, descriptors, strict=True):
            actions.append({"remove": _remove_of(add, now)})
            stats = json.loads(add["stats"]) if add.get("stats") else {}
            stats["tightBounds"] = False  # bounds of the rows before some were deleted
            actions.append({"add": {**add, "stats": json.dumps(stats, separators=(",", ":")),
                                    "deletionVector": dv.to_json(), "modificationTime": now,
                                    "dataChange": True}})
    if upserts.num_rows:
        actions.append({"add": _write_file(path, upserts, now)})
    if feed and (marks or upserts.num_rows):
        # The feed reads this version from its change data only (PROTOCOL.md, "Add CDC File"): without it a reader
        # would take every re-added file (a new vector, same path) for all its rows deleted and inserted again.
        schema = table.arrow_schema()
        old_rows = pa.concat_tables([silver_read.conform(o, schema) for o, _ in removed]) if removed else \
            schema.empty_table()
        old_ops = pa.chunked_array([o for _, o in removed], pa.string()) if removed else pa.array([], pa.string())
        actions.append(change_data.write_file(path, change_data.change_rows(schema, old_rows, old_ops, upserts, key)))
    version = read_version + 1
    delta_log.commit(path, version, actions)
    if version % CHECKPOINT_INTERVAL == 0:
        from deltalake import DeltaTable as _DeltaTable

        _DeltaTable(path).create_checkpoint()
    return MergeResult(upserts.num_rows, deleted, version, files_read, len(marks))


def compact_window_files(path: str, metadata: dict[str, str]) -> dict[str, Any] | None:
    """Bin-pack the table's small files once :data:`WINDOW_FILES_TO_COMPACT` window files have piled up (None:
    not yet); the commit carries ``metadata`` (the cdcflow ts of the window just merged: same rows, same ts)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import CommitProperties
    from deltalake import DeltaTable as _DeltaTable

    dt = _DeltaTable(path)
    sizes = pa.table(dt.get_add_actions(flatten=True)).column("size_bytes")
    if int(pc.sum(pc.less(sizes, WINDOW_FILE_BYTES)).as_py() or 0) < WINDOW_FILES_TO_COMPACT:
        return None
    metrics: dict[str, Any] = dt.optimize.compact(target_size=COMPACT_TARGET_BYTES,
                                                  commit_properties=CommitProperties(custom_metadata=metadata))
    return metrics


def purge_deleted_rows(path: str, metadata: dict[str, str], min_fraction: float = PURGE_DELETED_FRACTION
                       ) -> dict[str, int]:
    """Rewrite the files whose deletion vector removes at least ``min_fraction`` of their rows without those rows
    (Delta's ``REORG TABLE ... APPLY (PURGE)``): delta-rs's compaction leaves files above its target size as they
    are, vectors and all, so a large file's dead rows would otherwise stay forever. A file is streamed a row group
    at a time; all rewrites go in one commit carrying ``metadata`` (the table's cdcflow ts: same rows)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable as _DeltaTable

    dt = _DeltaTable(path)
    sink_features.check_writable(dt, path, "the purge of deleted rows", data_change=False)
    read_version = dt.version()
    actions: list[dict[str, Any]] = []
    now = int(time.time() * 1000)
    rows_dropped = 0
    for add in delta_log.live_adds(path, read_version).values():
        dv, stats = add.get("deletionVector"), json.loads(add["stats"]) if add.get("stats") else {}
        if not dv or not stats.get("numRecords") or dv["cardinality"] < min_fraction * stats["numRecords"]:
            continue
        deleted = deletion_vector.read(path, deletion_vector.Descriptor.from_json(dv))
        dead = deletion_vector.positions(deleted)
        pf = pq.ParquetFile(os.path.join(path, unquote(add["path"])))
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        full = os.path.join(path, name)
        kept: list[pa.Table] = []  # a row group's survivors at a time, for the statistics of the new file
        at = 0
        with open(full, "xb") as f, pq.ParquetWriter(f, pf.schema_arrow, compression="snappy") as out:
            for g in range(pf.num_row_groups):
                rows = pf.read_row_group(g)
                gone = dead[(dead >= at) & (dead < at + rows.num_rows)] - at
                keep = np.ones(rows.num_rows, dtype=bool)
                keep[gone] = False
                survivors = rows.filter(pa.array(keep))
                out.write_table(survivors)
                kept.append(file_stats(survivors))
                at += rows.num_rows
            f.flush()
            os.fsync(f.fileno())
        rows_dropped += len(deleted)
        actions.append({"remove": _remove_of(add, now)})
        merged = _merge_stats(kept)
        actions.append({"add": {"path": name, "partitionValues": add.get("partitionValues") or {},
                                "size": os.path.getsize(full), "modificationTime": now, "dataChange": False,
                                "stats": json.dumps(merged, separators=(",", ":"))}})
    if not actions:
        return {"files_purged": 0, "rows_dropped": 0}
    for a in actions:
        if "remove" in a:
            a["remove"]["dataChange"] = False  # the same rows: a reader of changes has nothing to read here
    delta_log.commit(path, read_version + 1, [
        delta_log.commit_info("REORG", read_version, {"operationParameters": {"purge": "deletion vectors"},
                                                      **metadata}), *actions])
    return {"files_purged": len(actions) // 2, "rows_dropped": rows_dropped}


def _merge_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The statistics of a file from those of its row groups (a column's bound only when every group has one)."""
    out: dict[str, Any] = {"numRecords": sum(p["numRecords"] for p in parts), "minValues": {}, "maxValues": {},
                           "nullCount": {}, "tightBounds": True}
    nonempty = [p for p in parts if p["numRecords"]]
    for name in parts[0]["nullCount"] if parts else []:
        out["nullCount"][name] = sum(p["nullCount"].get(name, 0) for p in parts)
        los = [p["minValues"][name] for p in nonempty if name in p["minValues"]]
        his = [p["maxValues"][name] for p in nonempty if name in p["maxValues"]]
        all_null = [p for p in nonempty if p["nullCount"].get(name, 0) == p["numRecords"]]
        if los and len(los) + len(all_null) == len(nonempty):
            out["minValues"][name], out["maxValues"][name] = min(los), max(his)
    return out


def unreferenced_vector_files(path: str, retention_hours: float, now: float | None = None) -> list[str]:
    """The deletion-vector files of the table that no version inside the retention names, to delete: ``vacuum``
    (delta-rs's) leaves them, not knowing them. A vector stays while a live file names it or a tombstone
    (``remove``) younger than ``retention_hours`` does -- the versions before that remove, which time travel and
    RESTORE within the retention reach, read it -- whatever its file's age. A vector file the log does not name at
    all (its tombstone expired, or a writer died before its commit) goes once its file is older than the retention,
    as Delta's vacuum treats untracked files (delta-spark ``VacuumCommand``: valid files are those of the snapshot's
    adds and unexpired tombstones, their deletion vectors included)."""
    from deltalake import DeltaTable as _DeltaTable

    dt = _DeltaTable(path)
    cutoff_ms = ((time.time() if now is None else now) - retention_hours * 3600) * 1000
    live, removed = delta_log.replay(path, dt.version())
    named: set[str] = set()
    for action in [*live.values(), *(r for r in removed.values() if r.get("deletionTimestamp", 0) >= cutoff_ms)]:
        dv = action.get("deletionVector")
        if dv:
            d = deletion_vector.Descriptor.from_json(dv)
            if d.storage_type != "i":  # an inline vector has no file
                named.add(d.file_path(path))
    out = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name.startswith("deletion_vector_") and name.endswith(".bin") and full not in named \
                and os.path.getmtime(full) * 1000 < cutoff_ms:
            out.append(full)
    return out


def _matched(path: str, add: dict[str, Any], changed: pa.Table, key: list[str]) -> tuple[Any, pa.Array] | None:
    """The file's deletion vector with the live rows at changed keys added, and those rows' keys, ops (``_cdc_op``)
    and positions (``_pos``) (None: no live row of the file is at a changed key)."""
    from pyroaring import BitMap64

    from spark_jobs.load.silver_read import live_matches

    found = live_matches(path, add, changed, key)
    if found is None:
        return None
    hit, old = found
    return old | BitMap64(hit.column("_pos").to_numpy().tolist()), hit


def _remove_of(add: dict[str, Any], now: int) -> dict[str, Any]:
    remove = {"path": add["path"], "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
              "partitionValues": add.get("partitionValues") or {}, "size": add["size"]}
    if add.get("deletionVector"):
        remove["deletionVector"] = add["deletionVector"]
    if add.get("stats"):
        remove["stats"] = add["stats"]
    return remove


def _write_file(path: str, rows: pa.Table, now: int) -> dict[str, Any]:
    """Write ``rows`` as a new data file of the table; its ``add`` action (the file fsynced first)."""
    import pyarrow.parquet as pq

    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    full = os.path.join(path, name)
    with open(full, "xb") as f:
        pq.write_table(rows, f, compression="snappy")
        f.flush()
        os.fsync(f.fileno())
    return {"path": name, "partitionValues": {}, "size": os.path.getsize(full), "modificationTime": now,
            "dataChange": True, "stats": json.dumps(file_stats(rows), separators=(",", ":"))}


def file_stats(rows: pa.Table) -> dict[str, Any]:
    """Delta's per-file statistics of ``rows``: the count, null counts and the min/max of the first
    :data:`STATS_COLUMNS` columns whose JSON form is unambiguous (integers, short strings, booleans, dates, decimals
    a double holds exactly)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lo: dict[str, Any] = {}
    hi: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in rows.column_names[:STATS_COLUMNS]:
        col = rows.column(name)
        nulls[name] = col.null_count
        if col.null_count == len(col):
            continue
        t = col.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if (pc.max(pc.utf8_length(col)).as_py() or 0) > STATS_STRING_CHARS:
                continue
        elif pa.types.is_decimal(t):
            if t.precision > DECIMAL_STATS_DIGITS:
                continue
        elif not (pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_date32(t)):
            continue
        mm = pc.min_max(col).as_py()
        lo[name], hi[name] = (_json_value(mm["min"]), _json_value(mm["max"]))
    return {"numRecords": rows.num_rows, "minValues": lo, "maxValues": hi, "nullCount": nulls, "tightBounds": True}


def _json_value(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return float(v)  # exact: at most DECIMAL_STATS_DIGITS digits, whose shortest double form is the decimal's
    return v.isoformat() if isinstance(v, datetime.date) else v
