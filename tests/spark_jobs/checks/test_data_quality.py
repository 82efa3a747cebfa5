"""Checksums (Python vs Spark) and the GX data-quality checks on silver tables."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from cdc_core.changefeed.job_args.data_quality import ReconcileArgs
from cdc_core.codec.sink_uri import table_path
from cdc_core.errors import DataQualityError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.apply_window import apply_window
from spark_jobs.checks.data_quality import read_silver, run_checks, run_job, spark_checksum, table_checksum
from spark_jobs.normalize.bronze import write_bronze
from testkit.builders import Bronze, rowid_table, typed_table

pytestmark = pytest.mark.spark

T = typed_table()
JSON_ROWS = [  # as the upstream SQL front prints SELECT * rows
    {"id": 1, "i": 5, "bi": -(2**63), "s": "héllo", "d": "12.500", "dt": "2024-01-02 03:04:05",
     "tx": None, "def_i": 7, "def_d": "1.50", "def_dt": "2020-01-01 00:00:00", "def_s": "dflt"},
    {"id": 2, "i": None, "bi": 2**63 - 1, "s": "", "d": "-0.001", "dt": "2024-01-02 03:04:05.000001",
     "tx": "t", "def_i": None, "def_d": "0.00", "def_dt": None, "def_s": None},
    {"id": 3, "i": -1, "bi": 0, "s": "S1:x", "d": "0", "dt": "0999-12-31 23:59:59.5", "tx": "N",
     "def_i": 0, "def_d": "-0.00", "def_dt": "2020-01-01 00:00:00", "def_s": "a"},
]  # fmt: skip


def _typed(row):
    out = dict(row)
    for c in T.columns:
        out[c.name] = c.convert(row[c.name])
    return out


def test_checksum_order_and_type_independent():
    base = table_checksum(JSON_ROWS, T)
    assert len(base) == 16
    assert table_checksum(list(reversed(JSON_ROWS)), T) == base
    assert table_checksum([_typed(r) for r in JSON_ROWS[::-1]], T) == base  # Decimal/datetime objects
    assert table_checksum([{**JSON_ROWS[0], "d": "12.5"}, *JSON_ROWS[1:]], T) == base  # same DECIMAL(12,3)
    assert table_checksum([{**JSON_ROWS[0], "d": "12.501"}, *JSON_ROWS[1:]], T) != base
    assert table_checksum([{**JSON_ROWS[1], "s": None}, JSON_ROWS[0], JSON_ROWS[2]], T) != base  # '' vs NULL
    assert table_checksum([*JSON_ROWS, JSON_ROWS[0]], T) != base  # a duplicate row counts
    assert table_checksum([], T) == "0" * 16
    # Column names as SELECT * may case them.
    assert table_checksum([{k.upper(): v for k, v in r.items()} for r in JSON_ROWS], T) == base



def test_spark_checksum_matches_python(spark):
    from spark_jobs.checks.data_quality import spark_schema_ddl

    typed = [_typed(r) for r in JSON_ROWS]
    df = spark.createDataFrame(pa.Table.from_pylist(typed, schema=T.arrow_schema()), schema=spark_schema_ddl(T))
    assert spark_checksum(df, T) == table_checksum(JSON_ROWS, T)
    assert spark_checksum(df.orderBy("id", ascending=False).repartition(3), T) == table_checksum(JSON_ROWS, T)
    assert spark_checksum(df.where("id = 1"), T) == table_checksum(JSON_ROWS[:1], T)
    assert spark_checksum(df.where("id = 99"), T) == "0" * 16


def _apply_rows(spark, sink, table, rows, end_ts=100):
    b = Bronze()
    ids = {c.name: c.id for c in table.columns}
    handle_col = table.handle_column
    for n, r in enumerate(rows):
        handle = r[handle_col] if handle_col else n + 1
        b.put(table, handle, 10 + n, {ids[k]: v for k, v in r.items()})
    write_bronze(sink, "cf", end_ts, b.arrow())
    apply_window(sink, "cf", end_ts, [table], spark=spark)


@pytest.fixture
def sink(tmp_path):
    return f"file://{tmp_path}/lake"


def test_checks_pass_on_applied_table(spark, sink):
    _apply_rows(spark, sink, T, JSON_ROWS)
    rep = run_checks(sink, T, expected_rows=list(reversed(JSON_ROWS)), mode="checksum", ts=100, spark=spark)
    assert rep.passed, rep
    not_null = [f"not_null:{c.name}" for c in T.columns if not c.nullable]
    assert not_null  # the typed table has NOT NULL columns
    assert [r.expectation for r in rep.results] == [
        "delta_key_unique", "row_count_equals", "checksum_equals", "schema_equals", *not_null]
    assert rep.row_count == 3 and rep.delta_version is not None
    rep.raise_for_failure()
    json.dumps(rep.to_dict())
    count = run_checks(sink, T, expected_rows=JSON_ROWS, mode="count", ts=100, spark=spark)
    assert count.passed and len(count.results) == 3 + len(not_null)
    off = run_checks(sink, T, expected_rows=None, mode="off", ts=100, spark=spark)
    assert off.passed and off.results == []
    with pytest.raises(ValueError):
        run_checks(sink, T, expected_rows=None, mode="count", ts=100, spark=spark)


def test_wrong_count_and_changed_value_fail_with_sample_keys(spark, sink):
    _apply_rows(spark, sink, T, JSON_ROWS)
    rep = run_checks(sink, T, expected_rows=JSON_ROWS[:2], mode="checksum", ts=100, spark=spark)
    assert not rep.passed
    by = {r.expectation: r for r in rep.results}
    assert by["delta_key_unique"].success
    assert not by["row_count_equals"].success and by["row_count_equals"].observed == 3
    assert not by["checksum_equals"].success
    assert by["row_count_equals"].sample_keys == [{"id": "3", "_problem": "not upstream"}]
    changed = [JSON_ROWS[0], {**JSON_ROWS[1], "s": "changed"}, JSON_ROWS[2]]
    rep = run_checks(sink, T, expected_rows=changed, mode="checksum", ts=100, spark=spark)
    by = {r.expectation: r for r in rep.results}
    assert by["row_count_equals"].success and not by["checksum_equals"].success
    assert rep.sample_keys == [{"id": "2", "_problem": "differs"}]
    with pytest.raises(DataQualityError, match="checksum_equals"):
        rep.raise_for_failure()
    # Through the spark_engine entry point: the arguments' JSON in, JSON out.
    out = run_job(ReconcileArgs.from_dict({"sink_uri": sink, "table": T.to_json(), "mode": "count", "ts": 100,
                                           "expected_rows": [*JSON_ROWS, {**JSON_ROWS[0], "id": 9}]}))  # fmt: skip
    assert out["passed"] is False and json.loads(json.dumps(out)) == out
    assert out["results"][1]["sample_keys"] == [{"id": "9", "_problem": "missing in Delta"}]


def test_duplicate_key_fails_with_sample_keys(spark, sink):
    t = TableInfo(
        id=300, db_name="test", name="ck",
        columns=(Column(1, "a", "int", nullable=False), Column(2, "b", "varchar", nullable=False, length=5),
                 Column(3, "v", "int")),
        indexes=(Index("PRIMARY", ("a", "b"), unique=True, primary=True),),
    )  # fmt: skip
    rows = [{"a": 1, "b": "x", "v": 1}, {"a": 1, "b": "x", "v": 2}, {"a": 1, "b": "y", "v": 3}]
    write_deltalake(table_path(sink, t), pa.Table.from_pylist(rows, schema=t.arrow_schema()))
    rep = run_checks(sink, t, expected_rows=rows, mode="checksum", ts=5, spark=spark)
    by = {r.expectation: r for r in rep.results}
    assert not rep.passed and not by["delta_key_unique"].success
    assert by["delta_key_unique"].sample_keys == [{"a": 1, "b": "x"}]
    assert by["row_count_equals"].success and by["checksum_equals"].success
    # Single-column key too.
    r = rowid_table(301, "dup")
    upstream = [{"a": 1, "b": "p"}, {"a": 2, "b": "q"}]
    dup = [{**upstream[0], "_tidb_rowid": 4}, {**upstream[1], "_tidb_rowid": 4}]
    write_deltalake(table_path(sink, r), pa.Table.from_pylist(dup, schema=r.arrow_schema()))
    rep = run_checks(sink, r, expected_rows=upstream, mode="checksum", ts=5, spark=spark)
    assert not rep.passed and rep.results[0].sample_keys == [{"_tidb_rowid": 4}]
    assert rep.results[2].success  # the content itself matches upstream


def test_a_table_past_the_driver_bound_is_read_by_spark_alike(spark, sink, monkeypatch):
    """A table above DRIVER_READ_ROWS is read by Spark's Delta reader, not through the driver: the same rows, typed
    the same (every type of T), a column the Delta table lacks as NULL, the same checksum and report."""
    import spark_jobs.checks.data_quality as dq

    t = typed_table(9104, "big_read")
    typed = [_typed(r) for r in JSON_ROWS]
    data = pa.Table.from_pylist(typed, schema=t.arrow_schema())
    write_deltalake(table_path(sink, t), data.drop_columns(["def_s"]))  # e.g. added by a DDL not applied yet
    small, v_small = read_silver(spark, sink, t)
    monkeypatch.setattr(dq, "DRIVER_READ_ROWS", 2)
    big, v_big = read_silver(spark, sink, t)
    plan = {name: df._jdf.queryExecution().toString() for name, df in (("small", small), ("big", big))}
    assert "LocalRelation" in plan["small"]
    assert "LocalRelation" not in plan["big"] and "parquet" in plan["big"]  # the files, not rows from the driver
    assert big.schema == small.schema and v_big == v_small == 0
    assert sorted(big.collect()) == sorted(small.collect())
    assert {r["def_s"] for r in big.collect()} == {None}
    assert spark_checksum(big, t) == spark_checksum(small, t)
    rep = run_checks(sink, t, expected_rows=[{**r, "def_s": None} for r in JSON_ROWS], mode="checksum", ts=3,
                     spark=spark)
    by = {r.expectation: r for r in rep.results}
    assert by["row_count_equals"].success and by["checksum_equals"].success and by["delta_key_unique"].success


def test_missing_table_reads_empty(spark, sink):
    df, version = read_silver(spark, sink, T)
    assert df.count() == 0 and version is None
    rep = run_checks(sink, T, expected_rows=[], mode="checksum", ts=1, spark=spark)
    # The content checks pass on an empty read, but a missing Delta table is not the upstream's schema.
    failed = [r.expectation for r in rep.results if not r.success]
    assert failed == ["schema_equals"]
    rep = run_checks(sink, T, expected_rows=JSON_ROWS[:1], mode="checksum", ts=1, spark=spark)
    assert not rep.passed and rep.sample_keys == [{"id": "1", "_problem": "missing in Delta"}]
    assert datetime and Decimal  # imported for readers of JSON_ROWS


def test_not_null_and_schema_drift_fail_naming_column_and_keys(spark, sink):
    t = TableInfo(
        id=310, db_name="test", name="nn",
        columns=(Column(1, "a", "int", nullable=False), Column(2, "b", "varchar", nullable=False, length=5),
                 Column(3, "v", "int")),
        indexes=(Index("PRIMARY", ("a",), unique=True, primary=True),),
    )  # fmt: skip
    rows = [{"a": 1, "b": "x", "v": 1}, {"a": 2, "b": None, "v": 2}]
    write_deltalake(table_path(sink, t), pa.Table.from_pylist(rows, schema=t.arrow_schema()))
    rep = run_checks(sink, t, expected_rows=rows, mode="count", ts=7, spark=spark)
    by = {r.expectation: r for r in rep.results}
    assert not rep.passed and by["schema_equals"].success and by["not_null:a"].success
    assert not by["not_null:b"].success and by["not_null:b"].sample_keys == [{"a": 2}]
    with pytest.raises(DataQualityError, match="NOT NULL column 'b' holds 1 NULL"):
        rep.raise_for_failure()
    # The Delta table drifted: v is BIGINT there and an extra column exists.
    drifted = pa.schema([pa.field("a", pa.int32()), pa.field("b", pa.string()), pa.field("v", pa.int64()),
                         pa.field("extra", pa.string())])
    good = [{"a": 1, "b": "x", "v": 1, "extra": None}]
    write_deltalake(table_path(sink, t), pa.Table.from_pylist(good, schema=drifted), mode="overwrite",
                    schema_mode="overwrite")
    rep = run_checks(sink, t, expected_rows=[{"a": 1, "b": "x", "v": 1}], mode="checksum", ts=8, spark=spark)
    by = {r.expectation: r for r in rep.results}
    assert [r.expectation for r in rep.results if not r.success] == ["schema_equals"]
    assert "missing ['v int32']" in by["schema_equals"].details
    assert "unexpected ['v int64', 'extra string']" in by["schema_equals"].details


def _unique_keyed(table_id: int, name: str, id_type: str) -> TableInfo:
    """``id`` PRIMARY KEY, ``email`` UNIQUE and ``(a, b)`` UNIQUE, all but ``id`` nullable."""
    return TableInfo(
        id=table_id, db_name="test", name=name,
        columns=(Column(1, "id", id_type, nullable=False), Column(2, "email", "varchar", length=16),
                 Column(3, "a", "int"), Column(4, "b", "int")),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True), Index("uk_email", ("email",), unique=True),
                 Index("uk_ab", ("a", "b"), unique=True)),
    )  # fmt: skip


def test_unique_indexes_besides_the_key_are_checked_nulls_aside(spark, sink):
    t = _unique_keyed(320, "uk", "int")
    rows = [{"id": 1, "email": "x", "a": 1, "b": None}, {"id": 2, "email": None, "a": 1, "b": None},
            {"id": 3, "email": None, "a": 2, "b": 2}]  # fmt: skip
    write_deltalake(table_path(sink, t), pa.Table.from_pylist(rows, schema=t.arrow_schema()))
    rep = run_checks(sink, t, expected_rows=rows, mode="checksum", ts=9, spark=spark)
    by = {r.expectation: r for r in rep.results}
    assert rep.passed, rep  # NULLs never collide in a UNIQUE index
    assert by["unique:uk_email"].success and by["unique:uk_ab"].success
    dup = [*rows, {"id": 4, "email": "x", "a": 2, "b": 2}]
    write_deltalake(table_path(sink, t), pa.Table.from_pylist(dup, schema=t.arrow_schema()), mode="overwrite")
    rep = run_checks(sink, t, expected_rows=dup, mode="checksum", ts=10, spark=spark)
    by = {r.expectation: r for r in rep.results}
    assert [r.expectation for r in rep.results if not r.success] == ["unique:uk_email", "unique:uk_ab"]
    assert by["unique:uk_email"].sample_keys == [{"email": "x"}]
    assert by["unique:uk_ab"].sample_keys == [{"a": 2, "b": 2}]


def test_a_table_the_driver_read_is_validated_there_with_sparks_report(spark, sink, monkeypatch):
    """A table the driver read whole (``DRIVER_READ_ROWS`` at most) is validated by GX on a pandas frame, no Spark
    job: the same report as Spark's, unique indexes with NULLs included; a failing expectation is validated again in
    Spark, whose results name the keys."""
    import spark_jobs.checks.data_quality as dq

    t = _unique_keyed(321, "uk_driver", "bigint")
    rows = [{"id": 2**53, "email": "x", "a": 1, "b": None}, {"id": 2**53 + 1, "email": None, "a": 1, "b": None},
            {"id": 3, "email": None, "a": 2, "b": 2}]  # fmt: skip
    write_deltalake(table_path(sink, t), pa.Table.from_pylist(rows, schema=t.arrow_schema()))
    engines: list[str] = []
    validate = dq._validate
    monkeypatch.setattr(dq, "_validate", lambda df, ex: (engines.append(type(df).__module__.split(".")[0]),
                                                         validate(df, ex))[1])
    on_driver = run_checks(sink, t, expected_rows=rows, mode="checksum", ts=11, spark=spark).to_dict()
    assert engines == ["pandas", "pandas"] and on_driver["passed"]  # the table's expectations, then the checksum
    engines.clear()
    monkeypatch.setattr(dq, "DRIVER_READ_ROWS", 0)
    assert run_checks(sink, t, expected_rows=rows, mode="checksum", ts=11, spark=spark).to_dict() == on_driver
    assert engines == ["pyspark", "pandas"]
    engines.clear()
    monkeypatch.setattr(dq, "DRIVER_READ_ROWS", 100_000)
    dup = [*rows, {"id": 4, "email": "x", "a": 2, "b": 2}]
    write_deltalake(table_path(sink, t), pa.Table.from_pylist(dup, schema=t.arrow_schema()), mode="overwrite")
    rep = run_checks(sink, t, expected_rows=dup, mode="checksum", ts=12, spark=spark)
    assert engines == ["pandas", "pyspark", "pandas"]
    assert [(r.expectation, r.sample_keys) for r in rep.results if not r.success] == [
        ("unique:uk_email", [{"email": "x"}]), ("unique:uk_ab", [{"a": 2, "b": 2}])]


def test_pandas_runs_share_pooled_datasources_and_validate_the_frame_they_are_given():
    """A pandas frame's run takes a datasource of a pool and gives it back: a run after one over another frame
    reports its own frame (a failing one after a passing one, and again), and threads at once take distinct ones."""
    from concurrent.futures import ThreadPoolExecutor

    import great_expectations.expectations as gxe
    import pandas as pd

    from spark_jobs.checks import data_quality as dq

    expectations = [gxe.ExpectColumnValuesToBeUnique(column="k"), gxe.ExpectColumnValuesToNotBeNull(column="v")]
    good = pd.DataFrame({"k": [1, 2, 3], "v": [1, 2, 3]})
    bad = pd.DataFrame({"k": [1, 1, 3], "v": [1, None, 3]})
    before = {ds.name for ds in dq._gx_context().data_sources.all().values()}
    assert [[r.success for r in dq._validate(f, expectations)] for f in (good, bad, good, bad)] == [
        [True, True], [False, False], [True, True], [False, False]]
    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda f: [r.success for r in dq._validate(f, expectations)], [good, bad] * 8))
    assert runs == [[True, True], [False, False]] * 8
    made = {ds.name for ds in dq._gx_context().data_sources.all().values()} - before
    assert len(made) <= 4 and len(dq._GX_PANDAS_FREE) >= len(made)  # no more than ran at once, all given back
    for definition in dq._GX_PANDAS_FREE:  # a pooled datasource keeps no frame and no metric between runs
        engine = definition.data_asset.datasource.get_execution_engine()
        assert not engine._metric_cache and not engine.batch_manager.batch_data_cache


def test_columns_of_any_name_are_validated_in_spark_as_in_pandas(spark):
    """GX's Spark engine parses a column name (a dot reaches into a struct, a backtick quotes): the frame GX sees
    names such columns plainly, and the results, samples included, come back under the table's names."""
    import great_expectations.expectations as gxe

    from spark_jobs.checks import data_quality as dq

    a, b = "k`.ey", "v a.l"
    df = spark.createDataFrame([(1, 2), (1, None), (3, 4)], [a, b])
    expectations = [gxe.ExpectColumnValuesToBeUnique(column=a), gxe.ExpectColumnValuesToNotBeNull(column=b),
                    gxe.ExpectCompoundColumnsToBeUnique(column_list=[a, b]),
                    gxe.ExpectColumnValuesToNotBeNull(column=a)]
    spark_results = dq._validate(df, expectations)
    pandas_results = dq._validate(df.toPandas(), expectations)
    assert [r.success for r in spark_results] == [r.success for r in pandas_results] == [False, False, True, True]
    assert dq._unexpected_samples(spark_results[0], [a]) == [{a: 1}]
    dup = spark.createDataFrame([(1, 2), (1, 2)], [a, b])
    (compound,) = dq._validate(dup, [gxe.ExpectCompoundColumnsToBeUnique(column_list=[a, b])])
    assert not compound.success and dq._unexpected_samples(compound, [a, b]) == [{a: 1, b: 2}]


MAPPED = TableInfo(
    id=107, db_name="test", name="mapped",
    columns=(Column(1, "id", "int", nullable=False), Column(2, "v", "vector", length=2),
             Column(3, "w", "decimal", precision=65, scale=30), Column(4, "d", "date", nullable=False),
             Column(5, "t", "datetime", fsp=3)),
    indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True)  # fmt: skip
MAPPED_ROWS = [  # SELECT * of the upstream as cdcflow's client gives it (a zero date as PyMySQL returns it: text)
    {"id": 1, "v": "[1.5,-0]", "w": "-12345678901234567890123456789012345.123456789012345678901234567891",
     "d": "0000-00-00", "t": "2021-00-05 10:00:00.500"},
    {"id": 2, "v": "[0.1,3]", "w": "0.000000000000000000000000000000", "d": "2024-02-29", "t": None},
    {"id": 3, "v": None, "w": None, "d": "2021-02-30", "t": "0000-00-00 00:00:00.000"},
]  # fmt: skip


def test_the_checks_compare_vectors_wide_decimals_and_zero_dates_under_the_lakes_mapping(spark, sink):
    """The upstream's rows (vectors as text, zero and invalid dates) against the applied table, whose vectors are
    float32 lists, wide decimals text and those dates NULL: equal checksums in Python and Spark (a vector by its
    elements' bits, -0 apart from 0), so the checks pass; the NOT NULL date column is not checked for NULLs (its
    mapped values are); a real difference fails."""
    from cdc_core.codec.rowcodec import MySQLTime
    from cdc_core.schema import column_type as ct

    stored = [{c.name: c.convert(r[c.name], ct.STORED_DATES) for c in MAPPED.columns} for r in MAPPED_ROWS]
    assert stored[2]["d"] == MySQLTime(2021, 2, 30)
    _apply_rows(spark, sink, MAPPED, stored)
    rep = run_checks(sink, MAPPED, expected_rows=MAPPED_ROWS, mode="checksum", ts=100, spark=spark)
    assert rep.passed, rep
    assert "not_null:d" not in [r.expectation for r in rep.results]
    df, _ = read_silver(spark, sink, MAPPED)
    assert spark_checksum(df, MAPPED) == table_checksum(MAPPED_ROWS, MAPPED)
    assert table_checksum([{**MAPPED_ROWS[0], "v": "[1.5,0]"}, *MAPPED_ROWS[1:]], MAPPED) != \
        table_checksum(MAPPED_ROWS, MAPPED)  # -0 is not 0 in a vector, as TiDB prints it
    bad = run_checks(sink, MAPPED, expected_rows=[{**MAPPED_ROWS[1], "w": "1"}, MAPPED_ROWS[0], MAPPED_ROWS[2]],
                     mode="checksum", ts=100, spark=spark)
    assert not bad.passed and bad.sample_keys == [{"id": "2", "_problem": "differs"}]
