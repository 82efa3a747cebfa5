"""The chunked checksums: the upstream's SQL aggregate and Spark's computation agree row for row on every type
they cover (the same CRC32 of the same text), a difference is found in its chunk and bisected down to a piece of
at most ROW_DIFF_ROWS rows, and tables with a type they do not cover are left to the row-reading comparison."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from cdc_core.client.upstream import UpstreamClient
from spark_jobs.checks import chunk_checksum as cc
from spark_jobs.checks import data_quality as dq
from spark_jobs.upstream_read import Chunk, upstream_frame

ALL_TYPES = (
    "id BIGINT PRIMARY KEY, u BIGINT UNSIGNED, t TINYINT, d DECIMAL(20,10), m DECIMAL(8,2), dt DATE, "
    "ts DATETIME(6), ts0 DATETIME, tsz TIMESTAMP(3), y YEAR, s VARCHAR(40), c CHAR(5), b VARBINARY(8), "
    "bb BLOB, e ENUM('a','b c'), st SET('x','y','z'), bits BIT(10)")
ROWS = [
    "(1, 18446744073709551615, -128, 0.0000000001, -12.50, '2024-02-29', '2024-01-02 03:04:05.000060', "
    "'1999-12-31 23:59:59', '2020-06-01 12:00:00.5', 2024, 'héllo, wörld', 'ab', X'00ff10', X'', 'b c', 'x,z', "
    "b'1000000001')",
    "(2, 0, 0, 0, 0.00, '1000-01-01', '2000-01-01 00:00:00', '2000-01-01 00:00:00', '1970-01-01 00:00:01', 1901, "
    "'', '', X'00', X'61', 'a', '', b'0')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(-4, 7, 127, -99999.9999999999, 999999.99, '9999-12-31', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07', "
    "'2038-01-19 03:14:07.999', 2155, 'a,b', 'xyz', X'ffffffffffffffff', X'0a0d', 'b c', 'x,y,z', b'1111111111')",
]


def _table(upstream_cluster: Any, db: str, name: str) -> Any:
    return upstream_cluster.cluster.catalog.table(db, name)


def test_upstream_sql_and_spark_compute_the_same_crc_of_every_row(
        spark: Any, upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t ({ALL_TYPES}); INSERT INTO t VALUES {', '.join(ROWS)}")
    table = _table(upstream_cluster, fresh_db, "t")
    assert cc.pushdown_columns(table) is not None
    ts = upstream_client.get_ts()
    # row by row: the upstream's CRC32 of its text against Spark's over the rows as the lake holds them
    texts = [f"`{c.name}`" if cc._sql_text(c) is None else cc._sql_text(c) for c in table.columns]
    nulls = ", ".join(f"ISNULL(`{c.name}`)" for c in table.columns)
    up = {r["id"]: int(r["crc"]) for r in upstream_client.query(
        f"SELECT id, CRC32(CONCAT_WS(',', {', '.join(texts)}, CONCAT({nulls}))) AS crc FROM {fresh_db}.t", at_ts=ts)}
    frame = upstream_frame(spark, upstream_cluster.pd_addr, ts, table, chunks=[Chunk(None, None)])
    got = {r["id"]: int(r["crc"]) for r in frame.select("id", cc._row_crc(table).alias("crc")).collect()}
    assert got == up and len(got) == 4
    # and the text is the MySQL text a reader can check by hand for the plain row
    (row,) = upstream_client.query(f"SELECT CONCAT_WS(',', {', '.join(texts)}, CONCAT({nulls})) AS x "
                                   f"FROM {fresh_db}.t WHERE id = 2", at_ts=ts)
    assert row["x"] == ("2,0,0,0.0000000000,0.00,1000-01-01,2000-01-01 00:00:00.000000,2000-01-01 00:00:00.000000,"
                        "1970-01-01 00:00:01.000000,1901,,,00,61,a,,0,00000000000000000")
    assert up[2] == zlib.crc32(row["x"].encode())
    # per chunk: count and BIT_XOR of the CRCs, both sides
    chunks = [Chunk(None, 2), Chunk(2, None)]
    with UpstreamClient(upstream_cluster.pd_addr) as client:
        ups = cc.upstream_sums(client, ts, table, chunks)
    assert [u.count for u in ups] == [2, 2]
    assert ups[0].checksum == up[-4] ^ up[1] and ups[1].checksum == up[2] ^ up[3]
    assert [(g.count, g.checksum) for g in cc.delta_sums(frame, table, chunks)] == [(u.count, u.checksum) for u in ups]


def test_a_difference_is_bisected_to_a_small_piece_and_named_by_key(
        spark: Any, upstream_cluster: Any, upstream_client: Any, fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import functions as F

    monkeypatch.setattr(cc, "ROW_DIFF_ROWS", 500)
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(20), n INT)")
    for lo in range(0, 20_000, 5_000):
        upstream_client.execute(f"INSERT INTO {fresh_db}.t VALUES " + ", ".join(
            f"({i}, 'v{i}', {i % 7})" for i in range(lo, lo + 5_000)))
    table = _table(upstream_cluster, fresh_db, "t")
    ts = upstream_client.get_ts()
    lake = upstream_frame(spark, upstream_cluster.pd_addr, ts, table).cache()
    wrong = lake.withColumn("n", F.when(F.col("id") == 12_345, F.lit(-1)).otherwise(F.col("n"))).where("id != 777")
    pushed = dq.PushedDown.read(upstream_cluster.pd_addr, None, ts, table)
    assert pushed.compare(lake).success and not pushed.pieces
    pushed = dq.PushedDown.read(upstream_cluster.pd_addr, None, ts, table)
    result = pushed.compare(wrong)
    assert not result.success and "differ" in result.details
    # two rows differ: each is found in a piece of at most ROW_DIFF_ROWS rows
    assert len(pushed.pieces) == 2
    for p in pushed.pieces:
        assert p.lo is not None and p.hi is not None and p.hi - p.lo <= 2 * 500
    assert any(p.lo <= 777 < p.hi for p in pushed.pieces) and any(p.lo <= 12_345 < p.hi for p in pushed.pieces)
    samples = dq._diff_keys(spark, wrong, dq.Upstream(pushed=pushed), table)
    assert sorted((int(s["id"]), s["_problem"]) for s in samples) == [(777, "missing in Delta"), (12_345, "differs")]
    lake.unpersist()


def test_tables_with_floats_time_or_json_are_read_not_pushed_down(upstream_cluster: Any, upstream_client: Any,
                                                                  fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE f (id INT PRIMARY KEY, x DOUBLE);"
                            "CREATE TABLE tm (id INT PRIMARY KEY, x TIME);"
                            "CREATE TABLE j (id INT PRIMARY KEY, x JSON);"
                            "CREATE TABLE ok (id INT PRIMARY KEY, x DECIMAL(5,2))")
    assert [cc.pushdown_columns(_table(upstream_cluster, fresh_db, n)) is None for n in ("f", "tm", "j", "ok")] == \
        [True, True, True, False]


def test_dates_the_lake_holds_as_null_and_wide_decimals_are_pushed_down_alike(
        spark: Any, upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    """A zero date and a zero month are NULL in the lake and TiDB's DATE_FORMAT is NULL for them (InvalidZero):
    both sides give the same CRCs with the NULL flag of the text; a DECIMAL(65,30) is its text on both. A year-0
    date and Feb 30 (ALLOW_INVALID_DATES) print upstream but are NULL in the lake: their chunks differ, the rows of
    the differing pieces compare equal under the mapping and the check passes; a real difference still fails. A
    VECTOR table is left to the row comparison."""
    from pyspark.sql import functions as F

    upstream_client.execute(
        f"USE {fresh_db}; CREATE TABLE z (id BIGINT PRIMARY KEY, d DATE NOT NULL, t DATETIME(3), s TIMESTAMP, "
        "w DECIMAL(65,30)); SET sql_mode = '';"
        "INSERT INTO z VALUES (1, '0000-00-00', '2021-00-05 10:00:00.5', '0000-00-00 00:00:00', "
        "-12345678901234567890123456789012345.123456789012345678901234567891), "
        "(2, '2024-02-29', '0000-00-00 00:00:00', '2024-01-01 00:00:00', 0), (3, '2021-05-00', NULL, NULL, NULL);"
        "SET sql_mode = DEFAULT; CREATE TABLE v (id INT PRIMARY KEY, x VECTOR(2))")
    table = _table(upstream_cluster, fresh_db, "z")
    assert cc.pushdown_columns(table) is not None and cc.pushdown_columns(_table(upstream_cluster, fresh_db, "v")) \
        is None
    ts = upstream_client.get_ts()
    lake = upstream_frame(spark, upstream_cluster.pd_addr, ts, table).cache()
    assert lake.where("d IS NULL").count() == 2 and lake.where("t IS NULL").count() == 3
    pushed = dq.PushedDown.read(upstream_cluster.pd_addr, None, ts, table)
    assert pushed.compare(lake).success and not pushed.pieces  # equal chunk for chunk
    wrong = lake.withColumn("w", F.when(F.col("id") == 2, F.lit("1." + "0" * 30)).otherwise(F.col("w")))
    assert not dq.PushedDown.read(upstream_cluster.pd_addr, None, ts, table).compare(wrong).success
    lake.unpersist()

    upstream_client.execute(f"USE {fresh_db}; SET sql_mode = 'ALLOW_INVALID_DATES'; INSERT INTO z (id, d) VALUES "
                            "(4, '2021-02-30'), (5, '0000-01-01'); SET sql_mode = DEFAULT")
    ts = upstream_client.get_ts()
    lake = upstream_frame(spark, upstream_cluster.pd_addr, ts, table).cache()
    assert lake.where("d IS NULL").count() == 4
    pushed = dq.PushedDown.read(upstream_cluster.pd_addr, None, ts, table)
    result = pushed.compare(lake)
    assert result.success and "only by values the lake holds as NULL" in result.details and pushed.pieces
    wrong = lake.withColumn("t", F.when(F.col("id") == 2, F.current_timestamp().cast("timestamp_ntz"))
                            .otherwise(F.col("t")))
    assert not dq.PushedDown.read(upstream_cluster.pd_addr, None, ts, table).compare(wrong).success
    lake.unpersist()
