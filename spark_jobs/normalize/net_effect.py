"""Dedupe, update split, order and net effect of one table's mounted events (seed 002).

1. Exact duplicates (a reconnect replays events; after a region split the replay may even come
   from another region id) are removed by ``(table_id, key, commit_ts, op)`` -- one key has at
   most one version per commit ts.
2. An update (a PUT with an old value) whose Delta key or any non-null unique key value changes
   becomes DELETE(old image) + INSERT(new image). That is the non-clustered case of a PK/UK change;
   a clustered PK change already arrives as DELETE(old key) + PUT(new key).
3. Events are ordered by ``(commit_ts, deletes before inserts)``: inside one transaction all
   deletes come first, so a key swap cannot lose a row.
4. The net effect per Delta key is the last event by that order: one row per key with
   ``_cdc_op`` = ``'delete'`` or ``'upsert'``.

All of it is DataFrame operations (window functions); no Python runs per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_core.codec.sql_ident import quote_ident
from cdc_core.schema.model import TableInfo
from spark_jobs.normalize.mapped_values import MAPPED_COL, NEW_MAPPED
from spark_jobs.normalize.mount import NEW, OLD, image_columns, key_only_image

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

OP_COL = "_cdc_op"
COMMIT_TS_COL = "_cdc_commit_ts"
KIND_DELETE = 0  # sorts before
KIND_INSERT = 1
DEDUPE_COLUMNS = ["table_id", "key", "commit_ts", "op"]
_TS, _KIND, _KEY, _RN = "__cdc_ts", "__cdc_kind", "__cdc_key", "__cdc_rn"


def dedupe(events: DataFrame) -> DataFrame:
    """Remove exact duplicate events (same table, key, commit ts and op)."""
    return events.dropDuplicates(DEDUPE_COLUMNS)


def _keys_changed(table: TableInfo) -> SparkColumn:
    """True when the Delta key or any unique key differs between ``_old`` and ``_new`` (null-safe)."""
    from pyspark.sql import functions as F

    cols: list[str] = []
    for k in [table.delta_key(), *table.unique_keys()]:
        cols.extend(c for c in k if c not in cols)
    if not cols:
        return F.lit(False)
    diffs = [~F.col(OLD).getField(c).eqNullSafe(F.col(NEW).getField(c)) for c in cols]  # getField: the name as is
    out = diffs[0]
    for d in diffs[1:]:
        out = out | d
    return out


def split_and_order(mounted: DataFrame, table: TableInfo) -> DataFrame:
    """One row per logical change: ``commit_ts, _kind (0 delete / 1 insert), key, _img``.

    A delete takes the old image (or, without one, the image the row key alone gives; a delete
    that cannot be placed by Delta key -- no old value, non-clustered table keyed by PK/UK -- is
    a delete of a key that had no previous version and is dropped). A PUT gives an insert of the
    new image, preceded by a delete of the old image when a key changed.
    """
    from pyspark.sql import functions as F

    is_put = F.col("op") == "put"
    is_del = F.col("op") == "delete"
    has_old = F.col(OLD).isNotNull()
    key_img = key_only_image(table)
    old_or_key = F.coalesce(F.col(OLD), key_img) if key_img is not None else F.col(OLD)

    def change(kind: int, img: SparkColumn, mapped: SparkColumn) -> SparkColumn:
        return F.struct(F.lit(kind).alias("_kind"), img.alias("_img"), mapped.alias("_mapped"))

    no_marks = F.lit(None).cast("array<int>")  # an upsert carries its image's mapped values (mapped_values)
    delete_part = F.when(is_del, change(KIND_DELETE, old_or_key, no_marks)).when(
        is_put & has_old & _keys_changed(table), change(KIND_DELETE, F.col(OLD), no_marks)
    )
    insert_part = F.when(is_put & F.col(NEW).isNotNull(), change(KIND_INSERT, F.col(NEW), F.col(NEW_MAPPED)))
    parts = F.filter(F.array(delete_part, insert_part), lambda x: x.isNotNull() & x["_img"].isNotNull())
    return mounted.select("commit_ts", "key", F.explode(parts).alias("_c")).select(
        "commit_ts", "key", F.col("_c._kind").alias("_kind"), F.col("_c._img").alias("_img"),
        F.col("_c._mapped").alias(MAPPED_COL)
    )


def net_effect(mounted: DataFrame, table: TableInfo, *, deduplicated: bool = False) -> DataFrame:
    """The net change set of a window for ``table``: one row per Delta key.

    Columns: the image columns (:func:`spark_jobs.normalize.mount.image_columns`), ``_cdc_op``
    ('delete' | 'upsert'), ``_cdc_commit_ts`` (commit ts of the winning event) and ``_cdc_mapped`` (an upsert's
    mapped values, :mod:`spark_jobs.normalize.mapped_values`).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = mounted if deduplicated else dedupe(mounted)
    changes = split_and_order(events, table)
    # The event's fields get internal names next to the flattened image: a user column may well be
    # called ``key`` or ``commit_ts``.
    flat = changes.select(
        F.col("commit_ts").alias(_TS), F.col("_kind").alias(_KIND), F.col("key").alias(_KEY),
        *[F.col("_img").getField(n).alias(n) for n, _ in image_columns(table)], F.col(MAPPED_COL),
    )  # fmt: skip
    # A change whose Delta key is NULL cannot be placed; only deletes can lack it (see above).
    key_names = list(table.delta_key())
    flat = flat.where(_all_not_null(key_names))
    w = Window.partitionBy(*[F.col(quote_ident(k)) for k in key_names]).orderBy(
        F.col(_TS).desc(), F.col(_KIND).desc(), F.col(_KEY).desc())
    last = flat.withColumn(_RN, F.row_number().over(w)).where(F.col(_RN) == 1)
    return last.select(
        *[F.col(quote_ident(n)) for n, _ in image_columns(table)],
        F.when(F.col(_KIND) == KIND_DELETE, F.lit("delete")).otherwise(F.lit("upsert")).alias(OP_COL),
        F.col(_TS).alias(COMMIT_TS_COL), F.col(MAPPED_COL),
    )


def _all_not_null(cols: list[str]) -> SparkColumn:
    from pyspark.sql import functions as F

    cond = F.col(quote_ident(cols[0])).isNotNull()
    for c in cols[1:]:
        cond = cond & F.col(quote_ident(c)).isNotNull()
    return cond
