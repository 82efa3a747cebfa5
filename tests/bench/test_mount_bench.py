"""Issue 17's mount benchmark: mount + decode of ``ROWS`` (default 1,000,000) 10-column rows of mixed types in the
Spark job -- rowcodec v2 values decoded batch-wise in ``mapInArrow`` (:func:`spark_jobs.normalize.mount.mount`) -- next
to the JSON mount it replaced (values ``{"<column id>": value}`` parsed by ``from_json`` into ``map<string,string>``
and cast; kept below as the baseline), over the same events, in the same run, alternating, best of ``REPEAT``.
Goal: ratio >= 1.0 (no slower than what it replaces).

Both sides read the same bronze parquet file (one with v2 values, one with JSON values) and end in Spark's
``noop`` sink, which evaluates every column. Values: 100,000 distinct rows encoded once, repeated under distinct
keys (the decode cost is per row, not per distinct row).

Run: ``.venv/bin/pytest tests/bench/test_mount_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_MOUNT_ROWS`` (1000000), ``CDCFLOW_BENCH_REPEAT`` (2).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_core.codec.changelog import SCHEMA as BRONZE_SCHEMA
from cdc_core.codec.key import row_key
from cdc_core.codec.row import encode_row
from cdc_core.codec.value_text import json_value
from cdc_core.schema.model import Column, Index, TableInfo

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

ROWS = int(os.environ.get("CDCFLOW_BENCH_MOUNT_ROWS", "1000000"))
REPEAT = int(os.environ.get("CDCFLOW_BENCH_REPEAT", "2"))
DISTINCT = min(ROWS, 100_000)

TABLE = TableInfo(
    id=4400, db_name="bench", name="mixed",
    columns=(Column(1, "id", "bigint", nullable=False), Column(2, "k", "int"), Column(3, "n", "int"),
             Column(4, "big", "bigint"), Column(5, "price", "decimal", precision=12, scale=2),
             Column(6, "ratio", "decimal", precision=24, scale=6), Column(7, "name", "varchar", length=64),
             Column(8, "code", "varchar", length=16), Column(9, "at", "datetime", fsp=6), Column(10, "note", "text")),
    indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True,
)  # fmt: skip


def _values(i: int) -> dict[int, Any]:
    return {
        1: i, 2: i % 1000, 3: None if i % 7 == 0 else -i, 4: i * 1_000_003, 5: Decimal(i % 100_000) / 100,
        6: Decimal(i) / 1_000_000 - 50, 7: f"name-{i:08d}", 8: f"c{i % 97}",
        9: datetime(2024, 1, 1) + timedelta(seconds=i * 37, microseconds=i % 1000), 10: "lorem ipsum " * (i % 5),
    }  # fmt: skip


def _json(values: dict[int, Any]) -> bytes:
    return json.dumps({str(k): json_value(v) for k, v in values.items()}, separators=(",", ":")).encode()


def _bronze(path: Path, encode: Any) -> None:
    distinct = [encode(_values(i)) for i in range(DISTINCT)]
    writer = pq.ParquetWriter(path, BRONZE_SCHEMA)
    for lo in range(0, ROWS, 200_000):
        n = min(200_000, ROWS - lo)
        handles = np.arange(lo, lo + n)
        writer.write_table(pa.table({
            "region_id": pa.array(np.ones(n, dtype=np.int64)),
            "table_id": pa.array(np.full(n, TABLE.id, dtype=np.int64)),
            "key": pa.array([row_key(TABLE.id, int(h)) for h in handles], pa.binary()),
            "op": pa.array(["put"] * n), "start_ts": pa.array(handles + 99), "commit_ts": pa.array(handles + 100),
            "value": pa.array([distinct[h % DISTINCT] for h in handles], pa.binary()),
            "old_value": pa.nulls(n, pa.binary()),
        }, schema=BRONZE_SCHEMA))
    writer.close()


# --- the baseline: the JSON mount this issue replaced (spark_jobs/normalize/mount.py before rowcodec v2) ------


def _json_image(map_col: str, table: TableInfo) -> SparkColumn:
    from pyspark.sql import functions as F

    from spark_jobs.normalize.mount import HANDLE

    m = F.col(map_col)
    fields = []
    for c in table.columns:
        if c.name == table.handle_column:
            v = F.col(HANDLE).cast(c.spark_type())
        else:
            cid = F.lit(str(c.id))
            v = F.when(F.map_contains_key(m, cid), m[cid].cast(c.spark_type())).otherwise(
                F.lit(None).cast(c.spark_type()))
        fields.append(v.alias(c.name))
    return F.when(m.isNull(), F.lit(None)).otherwise(F.struct(*fields))


def _json_mount(events: DataFrame, table: TableInfo) -> DataFrame:
    from pyspark.sql import functions as F

    from spark_jobs.normalize.mount import HANDLE, NEW, OLD, handle_expr

    mtype, opts = "map<string,string>", {"mode": "FAILFAST"}
    return (
        events.where(F.col("table_id") == F.lit(table.id))
        .withColumn(HANDLE, handle_expr("key"))
        .withColumn("_vm", F.when((F.col("op") == "put") & F.col("value").isNotNull(),
                                  F.from_json(F.col("value").cast("string"), mtype, opts)))
        .withColumn("_om", F.from_json(F.col("old_value").cast("string"), mtype, opts))
        .withColumn(NEW, _json_image("_vm", table)).withColumn(OLD, _json_image("_om", table))
        .select("table_id", "key", "op", "start_ts", "commit_ts", HANDLE, NEW, OLD)
    )


@pytest.mark.spark
def test_bench_mount_rowcodec_v2_vs_json(tmp_path: Path) -> None:
    from spark_jobs.normalize.bronze import BRONZE_SPARK_DDL
    from spark_jobs.normalize.mount import mount
    from spark_jobs.session import get_spark

    t0 = time.perf_counter()
    v2_path, json_path = tmp_path / "v2.parquet", tmp_path / "json.parquet"
    _bronze(v2_path, lambda v: encode_row(TABLE, v))
    _bronze(json_path, _json)
    print(f"\nset-up: {ROWS:,} events of {len(TABLE.columns)} columns, twice, in {time.perf_counter() - t0:.1f}s "
          f"(v2 values {pq.read_metadata(v2_path).num_rows:,} rows, {v2_path.stat().st_size / 1e6:.0f} MB parquet; "
          f"JSON {json_path.stat().st_size / 1e6:.0f} MB)")

    spark = get_spark()
    spark.range(100_000).selectExpr("sum(id)").collect()  # JVM warm-up, outside every figure
    v2 = spark.read.schema(BRONZE_SPARK_DDL).parquet(str(v2_path))
    js = spark.read.schema(BRONZE_SPARK_DDL).parquet(str(json_path))
    # Both decode the same values: compare a sample before timing anything.
    want = [r.asDict(recursive=True) for r in _json_mount(js, TABLE).orderBy("commit_ts").limit(500).collect()]
    got = [r.asDict(recursive=True) for r in mount(v2, TABLE).orderBy("commit_ts").limit(500).collect()]
    assert got == want

    def run(df: DataFrame) -> float:
        t = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t

    v2_s, json_s = [], []
    for _ in range(REPEAT):
        json_s.append(run(_json_mount(js, TABLE)))
        v2_s.append(run(mount(v2, TABLE)))
    best_v2, best_json = min(v2_s), min(json_s)
    print(f"JSON mount (from_json + casts):       {ROWS / best_json:>12,.0f} rows/s  (runs {json_s})")
    print(f"rowcodec v2 mount (mapInArrow+numpy): {ROWS / best_v2:>12,.0f} rows/s  (runs {v2_s})")
    print(f"ratio v2/JSON: {best_json / best_v2:.2f}x (goal >= 1.0)")
