"""The rows of dropped or truncated partitions, removed from a silver table by the partitioning rule itself.

DROP / TRUNCATE PARTITION take a partition's rows away upstream without a row event (TiDB deletes its key range),
so the barrier deletes them by the rule of the table before the job (``cdc_core.schema.partition_rule``). Most
rules have a SQL predicate that delta-rs deletes by; KEY partitioning (a CRC-32 over the columns' hash keys, which
DataFusion has no function for) and HASH over a BIGINT UNSIGNED column (a DECIMAL in the silver table) do not, and
are evaluated here in Python: the partitioning columns are read batch by batch to find whether any row is in a
removed partition, and if one is, the table is streamed through the rule and overwritten with the rows that stay,
in one commit with the caller's app transaction. Memory stays at one batch; the cost is a read of the partitioning
columns, and when rows go a read and write of the table -- what delta-rs's own DELETE costs for HASH/KEY anyway,
whose partitions spread over every file.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_jobs.load import silver_read

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from cdc_core.schema.partition import PartitionDef
    from cdc_core.schema.partition_rule import PartitionRule

BATCH_ROWS = 65_536


def _gone(rule: PartitionRule, gone: Sequence[PartitionDef]) -> set[int]:
    ids = {d.id for d in gone}
    return {i for i, d in enumerate(rule.part.definitions) if d.id in ids}


def _in_gone(batch: pa.RecordBatch, rule: PartitionRule, gone: set[int]) -> pa.Array:
    """Per row of ``batch``: whether a partition of ``gone`` (their positions) holds it."""
    import pyarrow.compute as pc

    return pc.is_in(pa.array(rule.batch_indexes(batch), pa.int64()), value_set=pa.array(sorted(gone), pa.int64()))


def _kept(batch: pa.RecordBatch, rule: PartitionRule, gone: set[int]) -> pa.RecordBatch:
    import pyarrow.compute as pc

    return batch.filter(pc.invert(_in_gone(batch, rule, gone)))


def holds_rows(dt: DeltaTable, rule: PartitionRule, gone: Sequence[PartitionDef]) -> bool:
    """Whether any live row of the table is in one of the partitions ``gone`` (reads the partitioning columns)."""
    positions = _gone(rule, gone)
    for batch in silver_read.scan(dt, [c.name for c in rule.columns], BATCH_ROWS):
        if _in_gone(batch, rule, positions).true_count:
            return True
    return False


def remove_rows(dt: DeltaTable, rule: PartitionRule, gone: Sequence[PartitionDef], commit_properties: Any) -> bool:
    """Overwrite the table with the rows no partition in ``gone`` holds, in one commit (``commit_properties``: the
    caller's app transaction); False, and no commit, when no row is in them."""
    if not holds_rows(dt, rule, gone):
        return False
    from deltalake import write_deltalake

    positions = _gone(rule, gone)
    schema = pa.schema(dt.schema().to_arrow())

    def kept(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            # DataFusion's scan reads strings as string views, which pyarrow cannot filter: the table's own types
            yield _kept(silver_read.conform(b, schema), rule, positions)

    if not silver_read.has_deletion_vectors(dt):
        # Opened before write_deltalake runs: delta-rs cannot start a nested runtime inside the reader it consumes.
        ds = dt.to_pyarrow_dataset()
        reader = pa.RecordBatchReader.from_batches(schema, kept(iter(ds.to_batches(batch_size=BATCH_ROWS))))
        write_deltalake(dt, reader, mode="overwrite", commit_properties=commit_properties)
        return True
    # Deletion vectors: only delta-rs's DataFusion scan applies them, and it cannot feed its own writer, so the rows
    # that stay are spooled to a Parquet file beside the table first, batch by batch.
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    spool = os.path.join(silver_read.table_dir(dt), f"_cdcflow_partition-{uuid.uuid4().hex}.parquet")
    try:
        with pq.ParquetWriter(spool, schema) as out:
            for b in kept(iter(silver_read.scan(dt))):
                out.write_batch(b)
        spooled = pads.dataset(spool, schema=schema)
        reader = pa.RecordBatchReader.from_batches(schema, iter(spooled.to_batches(batch_size=BATCH_ROWS)))
        write_deltalake(dt, reader, mode="overwrite", commit_properties=commit_properties)
    finally:
        if os.path.exists(spool):
            os.unlink(spool)
    return True
