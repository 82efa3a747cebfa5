"""Issue 6's apply benchmark: a window whose net change is ``NET`` rows (default 1,000,000) applied into a Delta
table of ``BASE`` rows (default 5,000,000), next to a bare delta-rs MERGE of the same net change set into an
identical copy of the table, in the same run; plus rows/s through mount + split + order (the Spark pipeline
alone, forced with Spark's ``noop`` sink).

The window: 60 % of the net change updates existing rows (value + old value), 20 % deletes existing rows,
20 % inserts new keys; a tenth of the updated keys is updated twice, so the window holds more events than its
net change and the net-effect step has work to do. Events are real bronze rows (row keys, values encoded by
column id), written as a bronze window and read back by :func:`spark_jobs.apply_window.apply_window`.

Run: ``.venv/bin/pytest tests/bench/test_apply_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_BASE_ROWS`` (5000000), ``CDCFLOW_BENCH_NET_ROWS`` (1000000).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.codec.changelog import SCHEMA as BRONZE_SCHEMA
from cdc_core.codec.key import row_key
from cdc_core.codec.row import encode_row
from cdc_core.schema.model import Column, Index, TableInfo

BASE = int(os.environ.get("CDCFLOW_BENCH_BASE_ROWS", "5000000"))
NET = int(os.environ.get("CDCFLOW_BENCH_NET_ROWS", "1000000"))
CF = "bench"
T0, T = 1_000, 2_000_000

TABLE = TableInfo(
    id=4321, db_name="bench", name="big",
    columns=(Column(1, "id", "bigint", nullable=False), Column(2, "k", "int"),
             Column(3, "c", "varchar", length=64), Column(4, "pad", "varchar", length=32)),
    indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),),
)  # fmt: skip


def _base_table(path: str, base: int = BASE) -> None:
    ids = np.arange(base, dtype=np.int64)
    chunk = 1_000_000
    for lo in range(0, base, chunk):
        part = ids[lo:lo + chunk]
        data = pa.table({
            "id": part,
            "k": (part % 1000).astype(np.int32),
            "c": pa.array([f"c-{i:012d}-base" for i in part.tolist()]),
            "pad": pa.array([f"pad-{i % 977}" for i in part.tolist()]),
        }, schema=TABLE.arrow_schema())
        write_deltalake(path, data, mode="append")


def _events(base: int = BASE, net_rows: int = NET) -> tuple[pa.Table, pa.Table]:
    """The bronze window and the net change set it amounts to (for the bare merge)."""
    rng = np.random.default_rng(7)
    n_upd, n_del = int(net_rows * 0.6), int(net_rows * 0.2)
    n_ins = net_rows - n_upd - n_del
    existing = rng.choice(base, size=n_upd + n_del, replace=False)
    upd, dele = existing[:n_upd].tolist(), existing[n_upd:].tolist()
    ins = list(range(base, base + n_ins))
    twice = set(upd[: n_upd // 10])
    rows: dict[str, list] = {f.name: [] for f in BRONZE_SCHEMA}

    def add(handle: int, op: str, ts: int, value: dict | None, old: dict | None) -> None:
        rows["region_id"].append(1)
        rows["table_id"].append(TABLE.id)
        rows["key"].append(row_key(TABLE.id, handle))
        rows["op"].append(op)
        rows["start_ts"].append(ts - 1)
        rows["commit_ts"].append(ts)
        rows["value"].append(None if value is None else encode_row(TABLE, value))
        rows["old_value"].append(None if old is None else encode_row(TABLE, old))

    def image(h: int, tag: str) -> dict[int, object]:
        return {1: h, 2: h % 1000, 3: f"c-{h:012d}-{tag}", 4: f"pad-{h % 977}"}

    ts = T0
    net: dict[str, list] = {"id": [], "k": [], "c": [], "pad": [], "_cdc_op": []}
    for h in upd:
        ts += 1
        add(h, "put", ts, image(h, "v1"), image(h, "base"))
    for h in twice:
        ts += 1
        add(h, "put", ts, image(h, "v2"), image(h, "v1"))
    for h in dele:
        ts += 1
        add(h, "delete", ts, None, image(h, "base"))
    for h in ins:
        ts += 1
        add(h, "put", ts, image(h, "new"), None)
    for h, tag, op in [*((h, "v2" if h in twice else "v1", "upsert") for h in upd),
                       *((h, "base", "delete") for h in dele), *((h, "new", "upsert") for h in ins)]:
        img = image(h, tag)
        for name, cid in (("id", 1), ("k", 2), ("c", 3), ("pad", 4)):
            net[name].append(img[cid])
        net["_cdc_op"].append(op)
    schema = pa.schema([*TABLE.arrow_schema(), pa.field("_cdc_op", pa.string())])
    return pa.table(rows, schema=BRONZE_SCHEMA), pa.table(net, schema=schema)


def _bare_merge(path: str, source: pa.Table) -> float:
    t0 = time.perf_counter()
    (DeltaTable(path).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_delete(predicate="s._cdc_op = 'delete'")
     .when_matched_update_all(predicate="s._cdc_op = 'upsert'", except_cols=["_cdc_op"])
     .when_not_matched_insert_all(predicate="s._cdc_op = 'upsert'", except_cols=["_cdc_op"])
     .execute())
    return time.perf_counter() - t0


@pytest.mark.spark
def test_bench_apply_window_vs_bare_delta_rs_merge(tmp_path: Path) -> None:
    from cdc_core.codec.sink_uri import table_path
    from spark_jobs.apply_window import apply_window
    from spark_jobs.load.delta_writer import DeltaRsWriter
    from spark_jobs.normalize.bronze import read_bronze, write_bronze
    from spark_jobs.normalize.mount import mount
    from spark_jobs.normalize.net_effect import dedupe, net_effect
    from spark_jobs.session import get_spark

    sink = f"file://{tmp_path / 'lake'}"
    path = table_path(sink, TABLE)
    t0 = time.perf_counter()
    _base_table(path)
    bare_path = str(tmp_path / "bare")
    shutil.copytree(path, bare_path)
    bronze, net = _events()
    write_bronze(sink, CF, T, bronze)
    print(f"\nset-up: {BASE:,}-row table, {bronze.num_rows:,} events ({NET:,} net) in {time.perf_counter() - t0:.1f}s")

    spark = get_spark()
    spark.range(100_000).selectExpr("sum(id)").collect()  # JVM warm-up, outside every figure

    t0 = time.perf_counter()
    res = apply_window(sink, CF, T, [TABLE], after_ts=0, spark=spark, writer=DeltaRsWriter())
    apply = time.perf_counter() - t0

    # Mount + split + order alone (the Spark pipeline; the noop sink evaluates every column).
    events = dedupe(read_bronze(spark, sink, CF, T, table_ids=[TABLE.id]))
    t0 = time.perf_counter()
    net_effect(mount(events, TABLE), TABLE, deduplicated=True).write.format("noop").mode("overwrite").save()
    pipeline = time.perf_counter() - t0
    stats = res[TABLE.qualified_name]
    assert stats["changes"] == NET and not stats["skipped"]

    bare = _bare_merge(bare_path, net)
    got = DeltaTable(path).to_pyarrow_table().sort_by("id")
    want = DeltaTable(bare_path).to_pyarrow_table().sort_by("id")
    assert got.num_rows == BASE - int(NET * 0.2) + (NET - int(NET * 0.6) - int(NET * 0.2))
    assert got.equals(want.select(got.column_names)), "apply_window and the bare merge disagree"

    print(f"apply_window ({NET:,} net change into {BASE:,} rows): {apply:6.1f}s")
    print(f"bare delta-rs MERGE of the same net change set:        {bare:6.1f}s   ratio {apply / bare:.2f}x")
    print(f"mount + split + order (Spark, noop sink): {bronze.num_rows / pipeline:,.0f} events/s "
          f"({pipeline:.1f}s for {bronze.num_rows:,} events; apply_window runs that pipeline once, collecting "
          f"its result to Arrow, then the MERGE)")


def _merge_on_read(path: str, source: pa.Table) -> float:
    from spark_jobs.load import merge_on_read

    t0 = time.perf_counter()
    merge_on_read.merge(DeltaTable(path), path, TABLE, source, app_id="bench", txn_version=int(time.time_ns()),
                        metadata={})
    return time.perf_counter() - t0


def _bare_spark_merge(spark, path: str, source: pa.Table) -> float:
    from delta.tables import DeltaTable as SparkDeltaTable

    df = spark.createDataFrame(source)
    t0 = time.perf_counter()
    (SparkDeltaTable.forPath(spark, path).alias("t").merge(df.alias("s"), "t.id = s.id")
     .whenMatchedDelete(condition="s._cdc_op = 'delete'")
     .whenMatchedUpdate(condition="s._cdc_op = 'upsert'", set={c: f"s.{c}" for c in ("id", "k", "c", "pad")})
     .whenNotMatchedInsert(condition="s._cdc_op = 'upsert'", values={c: f"s.{c}" for c in ("id", "k", "c", "pad")})
     .execute())
    return time.perf_counter() - t0


def _side_by_side(spark, tmp: Path, base_rows: int, net_rows: int) -> tuple[dict[str, float], int]:
    """Seconds of each writer's ``apply_window`` and of each engine's bare MERGE of the same window, on four
    identical copies of a ``base_rows`` table; and the window's events."""
    from cdc_core.codec.sink_uri import table_path
    from spark_jobs.apply_window import apply_window
    from spark_jobs.load.delta_writer import DeltaRsWriter, DeltaSparkWriter
    from spark_jobs.normalize.bronze import write_bronze

    base = str(tmp / "base")
    _base_table(base, base_rows)
    bronze, net = _events(base_rows, net_rows)
    figures: dict[str, float] = {}
    tables = {}
    for name, writer in (("delta-rs", DeltaRsWriter()), ("delta-spark", DeltaSparkWriter(spark))):
        sink = f"file://{tmp / name}"
        path = table_path(sink, TABLE)
        shutil.copytree(base, path)
        write_bronze(sink, CF, T, bronze)
        t0 = time.perf_counter()
        res = apply_window(sink, CF, T, [TABLE], after_ts=0, spark=spark, writer=writer)
        figures[name] = time.perf_counter() - t0
        assert res[TABLE.qualified_name]["changes"] == net_rows
        tables[name] = path
    shutil.copytree(base, tmp / "bare-rs")
    figures["bare delta-rs"] = _bare_merge(str(tmp / "bare-rs"), net)
    shutil.copytree(base, tmp / "bare-spark")
    figures["bare delta-spark"] = _bare_spark_merge(spark, str(tmp / "bare-spark"), net)
    want = DeltaTable(str(tmp / "bare-rs")).to_pyarrow_table().sort_by("id")
    for name, path in tables.items():
        got = DeltaTable(path).to_pyarrow_table().sort_by("id")
        assert got.equals(want.select(got.column_names)), f"{name} and the bare merge disagree"
    return figures, bronze.num_rows


@pytest.mark.spark
def test_bench_writers_side_by_side(tmp_path: Path) -> None:
    """Issue 19's P3: the same window through both writers, each next to a bare MERGE of its engine (delta-spark's
    on the same Spark), on identical copies of the base table; events/s of each ``apply_window``. A small round of
    the same first warms every path's JVM code (a changefeed's Spark is warm: the Spark Connect server, the
    embedded session of a long run), so no figure pays the JIT for the others."""
    from spark_jobs.session import get_spark

    spark = get_spark()
    _side_by_side(spark, tmp_path / "warm-up", 20_000, 4_000)
    figures, events = _side_by_side(spark, tmp_path / "run", BASE, NET)
    print(f"\nP3 ({NET:,} net change, {events:,} events, into {BASE:,} rows):")
    for name in ("delta-rs", "delta-spark"):
        print(f"  apply_window via {name:11s} {figures[name]:7.1f}s  {events / figures[name]:>9,.0f} events/s  "
              f"{figures[name] / figures['bare ' + name]:.2f}x its bare MERGE ({figures['bare ' + name]:.1f}s)")
    faster = min(("delta-rs", "delta-spark"), key=figures.__getitem__)
    print(f"  faster here: {faster}")


@pytest.mark.spark
def test_bench_small_window_per_writer(tmp_path: Path) -> None:
    """The other end of P3: windows of three rows, ten in a row per writer on a warm session (median seconds per
    MERGE); and delta-spark's with Delta's default 50 log-replay partitions next to cdcflow's 2
    (``spark_jobs.session``)."""
    import statistics

    from spark_jobs.load.delta_writer import DeltaRsWriter, DeltaSparkWriter
    from spark_jobs.session import get_spark

    spark = get_spark()
    schema = pa.schema([*TABLE.arrow_schema(), pa.field("_cdc_op", pa.string())])

    def median_merge(writer: Any, name: str) -> float:
        times = []
        for v in range(1, 12):
            rows = [{"id": v + i, "k": v, "c": f"c{v}", "pad": "p", "_cdc_op": "upsert"} for i in range(3)]
            ch = spark.createDataFrame(pa.Table.from_pylist(rows, schema=schema))
            t0 = time.perf_counter()
            writer.merge(str(tmp_path / name), TABLE, ch, app_id="bench", version=v)
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])  # the first creates the table

    rs = median_merge(DeltaRsWriter(), "rs")
    sp = median_merge(DeltaSparkWriter(spark), "sp")
    spark.conf.set("spark.databricks.delta.snapshotPartitions", "50")
    try:
        sp50 = median_merge(DeltaSparkWriter(spark), "sp50")
    finally:
        spark.conf.set("spark.databricks.delta.snapshotPartitions", "2")
    print(f"\nsmall window (3 rows), median per MERGE: delta-rs {rs:.2f}s, delta-spark {sp:.2f}s "
          f"(with Delta's default 50 log-replay partitions {sp50:.2f}s)")


SCATTERED = 1_000


def _scattered_updates(rows: int, seed: int) -> pa.Table:
    """``SCATTERED`` rows of a ``rows``-row base table updated at random keys, as a net change set."""
    ids = np.array(sorted(np.random.default_rng(seed).choice(rows, SCATTERED, replace=False)), dtype=np.int64)
    schema = pa.schema([*TABLE.arrow_schema(), pa.field("_cdc_op", pa.string())])
    return pa.table({"id": ids, "k": np.full(len(ids), -seed, dtype=np.int32),
                     "c": [f"c-{i:012d}-new" for i in ids.tolist()], "pad": ["pad-new"] * len(ids),
                     "_cdc_op": ["upsert"] * len(ids)}, schema=schema)


@pytest.mark.spark
def test_bench_scattered_changes_into_a_large_table(tmp_path: Path) -> None:
    """What a window of changes scattered over a large table costs each writer (issue 18's size independence):
    ``SCATTERED`` random updates merged into a 10,000-row table and into a ``BASE``-row one (median of three MERGEs
    each), by delta-rs (copy-on-write: every file a changed key lands in is rewritten), by the delta-rs writer with
    ``[sink] deletion-vectors`` (``spark_jobs.load.merge_on_read``: the touched files get a deletion vector, only the
    changed rows are written), by delta-spark copy-on-write, and by delta-spark with deletion vectors. The ratio
    large/small is what a window's apply pays for the table's size. Same Spark, same base rows, side by side."""
    import functools
    import statistics

    from spark_jobs.load.delta_writer import align_deletion_vectors
    from spark_jobs.session import get_spark

    spark = get_spark()
    figures: dict[str, dict[int, float]] = {}
    for rows in (10_000, BASE):
        base = str(tmp_path / f"base-{rows}")
        _base_table(base, rows)
        for name in ("delta-rs", "delta-rs + deletion vectors", "delta-spark", "delta-spark + deletion vectors"):
            path = str(tmp_path / f"{name}-{rows}".replace(" ", ""))
            shutil.copytree(base, path)
            if name == "delta-spark + deletion vectors":
                spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
            if name == "delta-rs + deletion vectors":
                align_deletion_vectors(DeltaTable(path), True)
            merge = (_bare_merge if name == "delta-rs" else _merge_on_read if name.startswith("delta-rs")
                     else functools.partial(_bare_spark_merge, spark))
            times = [merge(path, _scattered_updates(rows, seed)) for seed in (1, 2, 3, 4)]
            figures.setdefault(name, {})[rows] = statistics.median(times[1:])  # the first warms the engine's path
            if name.endswith("vectors"):
                assert DeltaTable(path).deletion_vectors().read_all().num_rows > 0, "the MERGE wrote no deletion vector"
            got = spark.read.format("delta").load(path).where("k = -4").count()
            assert got == SCATTERED, f"{name}: {got} rows carry the last MERGE's update, not {SCATTERED}"
        shutil.rmtree(tmp_path, ignore_errors=True)
        tmp_path.mkdir()
    print(f"\n{SCATTERED:,} scattered updates, median seconds per MERGE into 10,000 rows / {BASE:,} rows (ratio):")
    for name, t in figures.items():
        print(f"  {name:31s} {t[10_000]:6.2f}s / {t[BASE]:6.2f}s  ({t[BASE] / t[10_000]:.1f}x)")


def _clustered_changes(rows: int, seed: int) -> pa.Table:
    """``SCATTERED`` changes at the top of a ``rows``-row base table, as a window of an append-mostly table holds:
    updates of its ``SCATTERED // 2`` highest keys (those of the previous seed's inserts, from seed 2 on) and as many
    inserts above them."""
    half = SCATTERED // 2
    top = rows + (seed - 1) * half
    ids = np.arange(top - half, top + half, dtype=np.int64)
    schema = pa.schema([*TABLE.arrow_schema(), pa.field("_cdc_op", pa.string())])
    return pa.table({"id": ids, "k": np.full(len(ids), -seed, dtype=np.int32),
                     "c": [f"c-{i:012d}-new" for i in ids.tolist()], "pad": ["pad-new"] * len(ids),
                     "_cdc_op": ["upsert"] * len(ids)}, schema=schema)


def test_bench_clustered_changes_into_a_large_table(tmp_path: Path) -> None:
    """What the silver tables' MERGE (``DeltaRsWriter.merge``: the change set executed as a table, so that delta-rs
    derives its early pruning predicate from the changes' key range) costs when a window's changes cluster by key,
    against delta-rs's default (the change set streamed: no pruning, every file read), side by side on copies of the
    same base tables: ``SCATTERED`` changes at the top of a 10,000-row table and of a ``BASE``-row one (files of
    1,000,000 rows), median of three MERGEs after a warm-up one. The ratio large/small is what a window's apply pays
    for the table's size when its changes cluster."""
    import statistics

    from spark_jobs.load.delta_writer import DeltaRsWriter

    writer = DeltaRsWriter()

    def product(path: str, changes: pa.Table, version: int) -> float:
        t0 = time.perf_counter()
        writer.merge(path, TABLE, changes, app_id="bench", version=version)
        return time.perf_counter() - t0

    figures: dict[str, dict[int, float]] = {}
    for rows in (10_000, BASE):
        base = str(tmp_path / f"base-{rows}")
        _base_table(base, rows)
        for name in ("as a table (the writer's)", "streamed (delta-rs's default)"):
            path = str(tmp_path / f"{name.split()[0]}-{rows}")
            shutil.copytree(base, path)
            times = [product(path, _clustered_changes(rows, seed), seed) if name.startswith("as")
                     else _bare_merge(path, _clustered_changes(rows, seed)) for seed in (1, 2, 3, 4)]
            figures.setdefault(name, {})[rows] = statistics.median(times[1:])
            got = DeltaTable(path).to_pyarrow_table(columns=["id", "k"])
            assert got.num_rows == rows + 4 * (SCATTERED // 2), f"{name}: {got.num_rows} rows"
            last = got.filter(pa.compute.equal(got["k"], -4))
            assert last.num_rows == SCATTERED, f"{name}: {last.num_rows} rows carry the last MERGE's changes"
        shutil.rmtree(tmp_path, ignore_errors=True)
        tmp_path.mkdir()
    print(f"\n{SCATTERED:,} clustered changes, median seconds per MERGE into 10,000 rows / {BASE:,} rows (ratio):")
    for name, t in figures.items():
        print(f"  {name:31s} {t[10_000]:6.2f}s / {t[BASE]:6.2f}s  ({t[BASE] / t[10_000]:.1f}x)")
    table, streamed = figures["as a table (the writer's)"][BASE], figures["streamed (delta-rs's default)"][BASE]
    print(f"  into {BASE:,} rows, the writer's MERGE takes {table / streamed:.2f} of the streamed one's time")
