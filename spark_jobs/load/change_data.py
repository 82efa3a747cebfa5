"""Delta's change data feed on silver tables: whether a table has it, turning it on, and the change data file a
hand-made commit (the deletion-vector MERGE, ``merge_on_read``) writes with its actions.

The facts are Delta's protocol (delta-io/delta ``PROTOCOL.md``, "Change Data Files", "Add CDC File" and "Writer
Requirements for AddCDCFile"):

- the feed binds a writer when ``delta.enableChangeDataFeed`` is true and the protocol has the feature: writer
  version 4 to 6, or 7 with ``changeDataFeed`` among its ``writerFeatures``;
- change data files live under ``_change_data/`` and hold the table's columns plus ``_change_type`` (``insert``,
  ``update_preimage``, ``update_postimage``, ``delete``); a ``cdc`` action (``dataChange`` false) names one;
- a reader of a version with ``cdc`` actions reads only them; of a version without, the rows of its ``add`` and
  ``remove`` actions as inserts and deletes. A deletion-vector commit re-adds a file it removes (same path, a new
  vector), so without change data a reader would see the whole file deleted and inserted again: such a commit must
  write one.

delta-rs (1.6.6: its MERGE, DELETE and UPDATE write ``_change_data/`` files when the feed is on, checked in the
tests) and delta-spark write their own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

PROPERTY = "delta.enableChangeDataFeed"
CHANGE_TYPE = "_change_type"
DIRECTORY = "_change_data"
INSERT, UPDATE_PREIMAGE, UPDATE_POSTIMAGE, DELETE = "insert", "update_preimage", "update_postimage", "delete"


def property_on(dt: DeltaTable) -> bool:
    return str((dt.metadata().configuration or {}).get(PROPERTY, "false")).strip().lower() == "true"


def enabled(dt: DeltaTable) -> bool:
    """Whether a data-changing commit to ``dt`` must write change data (the property on and the protocol naming the
    feature, as "Writer Requirements for AddCDCFile" says)."""
    if not property_on(dt):
        return False
    p = dt.protocol()
    if p.min_writer_version < 7:
        return p.min_writer_version >= 4
    return "changeDataFeed" in (p.writer_features or [])


def turn_on(dt: DeltaTable) -> bool:
    """Turn the feed on for ``dt`` (an existing table; a changefeed's ``[sink] change-data-feed = true``): its
    property set, which delta-rs's ``set_table_properties`` follows by raising the protocol to name the feature
    (writer version 4, or ``changeDataFeed`` added to a version 7 protocol; checked in the tests). The feed starts
    at that commit: readers of earlier versions get no change data for them (delta-spark refuses a range that starts
    before it; what the table held then is read by time travel). Never turned off here: ``false`` leaves a table's
    own setting to its owner. Returns whether the table was changed."""
    if enabled(dt):
        return False
    dt.alter.set_table_properties({PROPERTY: "true"})
    return True


def change_rows(schema: pa.Schema, old: pa.Table, old_ops: pa.Array, upserts: pa.Table, key: Sequence[str]
                ) -> pa.Table:
    """A window's change data: the net change set's effect per key as ``_change_type`` rows, the table's
    ``schema`` plus ``_change_type``.

    ``old`` holds the live rows the MERGE removes (every row at a changed key) and ``old_ops`` the change set's op
    at each of them (``upsert`` or ``delete``); ``upserts`` the rows it writes. A removed row whose key is
    deleted is a ``delete``; one whose key is upserted an ``update_preimage``, the upsert its ``update_postimage``;
    an upsert at a key no live row held an ``insert`` (a key-changing update reaches here split: a delete of the old
    key, an upsert of the new)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.load.silver_read import conform

    old = conform(old, schema)
    upserts = conform(upserts, schema)
    updated = pc.equal(old_ops, "upsert")
    pre = old.append_column(CHANGE_TYPE, pc.if_else(updated, UPDATE_PREIMAGE, DELETE).cast(pa.string()))
    # which upserts meet a removed row: their keys joined with those of the updated rows (the keys only, numbered,
    # so that the flags come back in the upserts' order whatever order the join gives)
    marker, at = "__cdcflow_matched", "__cdcflow_at"
    matched = old.filter(updated).select(list(key))
    matched = matched.append_column(marker, pa.array([True] * matched.num_rows, pa.bool_()))
    numbered = upserts.select(list(key)).append_column(at, pa.array(range(upserts.num_rows), pa.int64()))
    joined = numbered.join(matched, keys=list(key), join_type="left outer")
    if joined.num_rows != upserts.num_rows:
        raise ValueError(f"change data: {joined.num_rows} joined rows for {upserts.num_rows} upserts "
                         f"(a key live twice)")
    flags = pc.fill_null(joined.column(marker).take(pc.sort_indices(joined.column(at))), False)
    post = upserts.append_column(CHANGE_TYPE, pc.if_else(flags, UPDATE_POSTIMAGE, INSERT).cast(pa.string()))
    return pa.concat_tables([pre, post])


def write_file(table_dir: str, rows: pa.Table) -> dict[str, Any]:
    """Write ``rows`` (:func:`change_rows`) as a change data file of the table; its ``cdc`` action (the file fsynced
    first: a commit that names it is never written before it is complete). Named as delta-spark names them
    (``cdc-00000-<uuid>.c000.snappy.parquet``)."""
    import pyarrow.parquet as pq

    name = f"cdc-00000-{uuid.uuid4()}.c000.snappy.parquet"
    os.makedirs(os.path.join(table_dir, DIRECTORY), exist_ok=True)
    full = os.path.join(table_dir, DIRECTORY, name)
    with open(full, "xb") as f:
        pq.write_table(rows, f, compression="snappy")
        f.flush()
        os.fsync(f.fileno())
    return {"cdc": {"path": f"{DIRECTORY}/{name}", "partitionValues": {}, "size": os.path.getsize(full),
                    "dataChange": False}}
