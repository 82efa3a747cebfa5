"""apply_window end to end on local Delta tables: seed 002 cases, exactly once, barriers, CLI. Every case runs
twice: with the events on the driver (reduced in Arrow, the delta-rs writer's way) and with a driver budget of 0
events, which sends every table through Spark."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from cdc_core.changefeed.job_args.apply_window import ApplyArgs
from cdc_core.codec.sink_uri import app_id_for, at_barrier_app_id_for, table_path
from cdc_core.errors import ChangefeedError
from spark_jobs import apply_window as apply_window_module
from spark_jobs.apply_window import apply_window, main, run_job
from spark_jobs.load.delta_writer import applied_version
from spark_jobs.normalize.bronze import write_bronze
from testkit.builders import Bronze, clustered_table, nonclustered_table, rowid_table, typed_table

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("driver_or_spark")]
CF = "cf1"


def _apply(spark, sink, end_ts, b: Bronze, tables, **kw):
    write_bronze(sink, CF, end_ts, b.arrow())
    return apply_window(sink, CF, end_ts, tables, spark=spark, **kw)


def _rows(sink, table, key=None):
    rows = DeltaTable(table_path(sink, table)).to_pyarrow_table().to_pylist()
    key = key or table.delta_key()
    return sorted(rows, key=lambda r: tuple(r[k] for k in key))


def _version(sink, table):
    return DeltaTable(table_path(sink, table)).version()


@pytest.fixture
def sink(tmp_path):
    return f"file://{tmp_path}/lake"


def test_tables_past_the_driver_budget_go_through_spark(spark, sink, monkeypatch, caplog, driver_or_spark):
    c, nc = clustered_table(), nonclustered_table()
    b = Bronze()
    for i in range(1, 6):
        b.put(c, i, 10 + i, {1: i, 2: i})
    b.put(nc, 100, 10, {1: 1, 2: "x", 3: 1}).put(nc, 100, 12, {1: 2, 2: "x", 3: 1}, old={1: 1, 2: "x", 3: 1})
    if driver_or_spark == "driver":
        monkeypatch.setattr(apply_window_module, "DRIVER_EVENTS", 4)  # nc's 2 events fit, c's 5 do not
    with caplog.at_level("INFO", logger="spark_jobs.apply_window"):
        res = _apply(spark, sink, 20, b, [c, nc])
    assert f"{1 if driver_or_spark == 'driver' else 0} table(s) of window 20 on the driver, " \
           f"{1 if driver_or_spark == 'driver' else 2} in Spark" in caplog.text
    assert _rows(sink, c) == [{"a": i, "b": i} for i in range(1, 6)]
    assert _rows(sink, nc) == [{"a": 2, "u": "x", "b": 1}]
    assert res["test.nc"]["rows_upserted"] == 1 and res["test.nc"]["rows_deleted"] == 0


def test_seed002_single_pk_update_clustered_and_nonclustered(spark, sink):
    c, nc = clustered_table(), nonclustered_table()
    b1 = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(nc, 100, 10, {1: 1, 2: "x", 3: 1})
    _apply(spark, sink, 15, b1, [c, nc])
    # UPDATE t SET a = 2 WHERE a = 1: clustered -> DELETE(key 1) + PUT(key 2); non-clustered -> one
    # PUT of the same _tidb_rowid with the old value.
    b2 = Bronze().delete(c, 1, 20, {1: 1, 2: 1}).put(c, 2, 20, {1: 2, 2: 1})
    b2.put(nc, 100, 20, {1: 2, 2: "x", 3: 1}, old={1: 1, 2: "x", 3: 1})
    res = _apply(spark, sink, 25, b2, [c, nc])
    assert _rows(sink, c) == [{"a": 2, "b": 1}]
    assert _rows(sink, nc) == [{"a": 2, "u": "x", "b": 1}]
    assert res["test.c"]["rows_deleted"] == 1 and res["test.c"]["rows_upserted"] == 1
    assert res["test.nc"]["rows_deleted"] == 1 and res["test.nc"]["rows_upserted"] == 1


def test_seed002_three_update_swap_in_one_transaction(spark, sink):
    c, nc = clustered_table(), nonclustered_table()
    b1 = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 2, 10, {1: 2, 2: 2})
    b1.put(nc, 100, 10, {1: 1, 2: "x", 3: 1}).put(nc, 101, 10, {1: 2, 2: "y", 3: 2})
    _apply(spark, sink, 15, b1, [c, nc])
    # BEGIN; UPDATE a=3 WHERE a=1; UPDATE a=1 WHERE a=2; UPDATE a=2 WHERE a=3; COMMIT (ts 30).
    # Clustered: per-key mutations -- key 1 and key 2 rewritten, key 3 put and deleted (a delete
    # without an old value), events in an unhelpful order.
    b2 = Bronze().put(c, 2, 30, {1: 2, 2: 1}, old={1: 2, 2: 2}).delete(c, 3, 30, None)
    b2.put(c, 1, 30, {1: 1, 2: 2}, old={1: 1, 2: 1})
    # Non-clustered: the rows keep their _tidb_rowid; the PK moves -> split into 2 deletes + 2 inserts.
    b2.put(nc, 101, 30, {1: 1, 2: "y", 3: 2}, old={1: 2, 2: "y", 3: 2})
    b2.put(nc, 100, 30, {1: 2, 2: "x", 3: 1}, old={1: 1, 2: "x", 3: 1})
    _apply(spark, sink, 35, b2, [c, nc])
    assert _rows(sink, c) == [{"a": 1, "b": 2}, {"a": 2, "b": 1}]
    assert _rows(sink, nc) == [{"a": 1, "u": "y", "b": 2}, {"a": 2, "u": "x", "b": 1}]
    # A UNIQUE-key swap in one transaction (PK unchanged): UK values move between rows.
    b3 = Bronze().put(nc, 100, 40, {1: 2, 2: "y", 3: 1}, old={1: 2, 2: "x", 3: 1})
    b3.put(nc, 101, 40, {1: 1, 2: "x", 3: 2}, old={1: 1, 2: "y", 3: 2})
    _apply(spark, sink, 45, b3, [nc])
    assert _rows(sink, nc) == [{"a": 1, "u": "x", "b": 2}, {"a": 2, "u": "y", "b": 1}]


def test_exactly_once_and_lower_window_skipped(spark, sink):
    c = clustered_table()
    _apply(spark, sink, 100, Bronze().put(c, 1, 50, {1: 1, 2: 1}).put(c, 2, 60, {1: 2, 2: 2}), [c])
    v = _version(sink, c)
    assert applied_version(table_path(sink, c), app_id_for(CF)) == 100
    again = apply_window(sink, CF, 100, [c], spark=spark)  # a retried task
    assert again["test.c"]["skipped"] is True and again["test.c"]["delta_version"] == v
    assert again["test.c"]["applied_version"] == 100
    assert _version(sink, c) == v
    # An older window (e.g. a stale backfill) that would resurrect a deleted row is skipped too.
    res = _apply(spark, sink, 90, Bronze().put(c, 3, 80, {1: 3, 2: 3}), [c])
    assert res["test.c"]["skipped"] is True and _version(sink, c) == v
    assert _rows(sink, c) == [{"a": 1, "b": 1}, {"a": 2, "b": 2}]
    # Another changefeed has its own app id.
    write_bronze(sink, "cf2", 90, Bronze().put(c, 3, 80, {1: 3, 2: 3}).arrow())
    assert apply_window(sink, "cf2", 90, [c], spark=spark)["test.c"]["skipped"] is False
    assert applied_version(table_path(sink, c), app_id_for("cf2")) == 90


def test_noop_window_still_records_the_window(spark, sink):
    c, r = clustered_table(), rowid_table()
    # Only a delete of a key Delta never had (merge changes no file) for c; nothing at all for r.
    res = _apply(spark, sink, 100, Bronze().delete(c, 9, 50, {1: 9, 2: 9}), [c, r])
    # c had an event: its window is recorded even though no row changed.
    assert res["test.c"]["skipped"] is False and res["test.c"]["rows_upserted"] == res["test.c"]["rows_deleted"] == 0
    assert applied_version(table_path(sink, c), app_id_for(CF)) == 100
    # r had none: no Spark work and no commit, but its (empty) table exists.
    assert res["test.r"]["skipped"] is True and "no row events" in res["test.r"]["reason"]
    assert applied_version(table_path(sink, r), app_id_for(CF)) is None
    for t in (c, r):
        assert _rows(sink, t) == []
    again = apply_window(sink, CF, 100, [c, r], spark=spark)
    assert all(s["skipped"] for s in again.values())
    assert "already applied" in again["test.c"]["reason"] and "no row events" in again["test.r"]["reason"]


def test_missing_window_is_an_error(spark, sink):
    with pytest.raises(ChangefeedError, match="pull it first"):
        apply_window(sink, CF, 123, [clustered_table()], spark=spark)


def test_multi_window_sequence_and_types(spark, sink):
    t, r = typed_table(), rowid_table()
    model: dict[int, dict] = {}
    defaults = {"def_i": 7, "def_d": Decimal("1.50"), "def_dt": datetime(2020, 1, 1), "def_s": "dflt"}

    def full(i, x):
        return {"id": i, "i": x, "bi": x * 10**12, "s": f"s{x}", "d": Decimal(f"{x}.125"),
                "dt": datetime(2024, 1, 1, 0, 0, x % 60, 5), "tx": None, **defaults}  # fmt: skip

    def enc(row):
        ids = {"id": 1, "i": 2, "bi": 3, "s": 4, "d": 5, "dt": 6, "tx": 7}
        return {ids[k]: v for k, v in row.items() if k in ids}

    ts = 1000
    end = 0
    for w in range(3):
        b = Bronze()
        for i in range(w * 3, w * 3 + 6):  # overlaps the previous window: inserts and updates
            ts += 1
            old = model.get(i)
            model[i] = full(i, i + w)
            b.put(t, i, ts, enc(model[i]), old=None if old is None else enc(old))
        victim = w * 3
        ts += 1
        b.delete(t, victim, ts, enc(model.pop(victim)))
        b.put(r, w, ts, {1: w, 2: f"r{w}"})
        end = ts + 5
        res = _apply(spark, sink, end, b, [t, r])
        assert res["test.typed"]["skipped"] is False
        assert _rows(sink, t) == sorted(model.values(), key=lambda x: x["id"])
    assert DeltaTable(table_path(sink, t)).schema().to_arrow() is not None
    schema = pa.schema(DeltaTable(table_path(sink, t)).schema().to_arrow())
    assert schema.types == t.arrow_schema().types
    assert _rows(sink, r) == [{"a": w, "b": f"r{w}", "_tidb_rowid": w} for w in range(3)]
    assert applied_version(table_path(sink, r), app_id_for(CF)) == end


def test_barrier_steps_versions(spark, sink):
    """Window (0, 40] with a DDL at 20: DML < 20 as version 19, (the DDL as 20), DML <= 40 as 40."""
    c = clustered_table()
    b = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 2, 19, {1: 2, 2: 2}).put(c, 1, 30, {1: 1, 2: 3}, old={1: 1, 2: 1})
    write_bronze(sink, CF, 40, b.arrow())
    res = apply_window(sink, CF, 40, [c], after_ts=0, upto_ts=19, version=19, spark=spark)
    assert res["test.c"]["applied_version"] == 19 and res["test.c"]["skipped"] is False
    assert _rows(sink, c) == [{"a": 1, "b": 1}, {"a": 2, "b": 2}]
    v19 = _version(sink, c)
    # Re-running the step is a no-op; so is a step that is not above the recorded version.
    for kw in ({"after_ts": 0, "upto_ts": 19, "version": 19}, {"after_ts": 0, "upto_ts": 10, "version": 10}):
        again = apply_window(sink, CF, 40, [c], spark=spark, **kw)
        assert again["test.c"]["skipped"] is True and _version(sink, c) == v19
    # (The DDL at 20 would record 20 here.) Then the rest of the window under the new schema.
    res = apply_window(sink, CF, 40, [c], after_ts=19, upto_ts=40, spark=spark)
    assert res["test.c"]["applied_version"] == 40
    assert _rows(sink, c) == [{"a": 1, "b": 3}, {"a": 2, "b": 2}]
    assert apply_window(sink, CF, 40, [c], after_ts=19, spark=spark)["test.c"]["skipped"] is True
    with pytest.raises(ValueError, match="after the window end"):
        apply_window(sink, CF, 40, [c], upto_ts=41, spark=spark)
    with pytest.raises(ValueError, match="below the upto ts"):
        apply_window(sink, CF, 40, [c], upto_ts=30, version=29, spark=spark)
    with pytest.raises(ValueError, match="above the upto ts"):
        apply_window(sink, CF, 40, [c], after_ts=31, upto_ts=30, spark=spark)


def test_dml_at_a_ddls_commit_ts_is_recorded_under_its_own_app_id(spark, sink):
    """Rows committed at the DDL's ts 20 (async commit / 1PC): the at-barrier step (19, 20] records 20 under the
    at-barrier app id, since 20 under the changefeed's says the DDL is applied; a re-run before or after the DDL
    skips it. (Recording 19 again would be skipped by Delta: the step before recorded 19.)"""
    c = clustered_table()
    b = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 2, 20, {1: 2, 2: 2}).put(c, 1, 20, {1: 1, 2: 5}, old={1: 1, 2: 1})
    write_bronze(sink, CF, 40, b.arrow())
    apply_window(sink, CF, 40, [c], after_ts=0, upto_ts=19, version=19, spark=spark)
    at_barrier = {"after_ts": 19, "upto_ts": 20, "version": 20, "at_barrier": True}
    res = apply_window(sink, CF, 40, [c], spark=spark, **at_barrier)
    assert res["test.c"]["skipped"] is False and _rows(sink, c) == [{"a": 1, "b": 5}, {"a": 2, "b": 2}]
    dt = DeltaTable(table_path(sink, c))
    assert (dt.transaction_version(app_id_for(CF)), dt.transaction_version(at_barrier_app_id_for(CF))) == (19, 20)
    v = _version(sink, c)
    again = apply_window(sink, CF, 40, [c], spark=spark, **at_barrier)  # a resume before the DDL landed
    assert again["test.c"]["skipped"] is True and _version(sink, c) == v
    # the DDL's commit records 20 under the changefeed's app id; the step stays done
    write_deltalake(dt, pa.schema(dt.schema().to_arrow()).empty_table(), mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction(app_id_for(CF), 20)]))
    assert apply_window(sink, CF, 40, [c], spark=spark, **at_barrier)["test.c"]["skipped"] is True
    with pytest.raises(ValueError, match="records that ts, not 21"):
        apply_window(sink, CF, 40, [c], after_ts=19, upto_ts=20, version=21, at_barrier=True, spark=spark)


def test_bounds_are_exclusive_below_inclusive_above(spark, sink):
    c = clustered_table()
    b = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 2, 11, {1: 2, 2: 2}).put(c, 3, 12, {1: 3, 2: 3})
    write_bronze(sink, CF, 20, b.arrow())
    apply_window(sink, CF, 20, [c], after_ts=10, upto_ts=11, spark=spark)
    assert _rows(sink, c) == [{"a": 2, "b": 2}]


def test_schema_mismatch_is_a_clear_error(spark, sink):
    c = clustered_table()
    _apply(spark, sink, 10, Bronze().put(c, 1, 5, {1: 1, 2: 1}), [c])
    from dataclasses import replace

    from cdc_core.schema.model import Column

    c2 = replace(c, columns=(*c.columns, Column(3, "z", "int")), schema_version=2)
    with pytest.raises(ChangefeedError, match="apply the pending DDL first"):
        _apply(spark, sink, 20, Bronze().put(c, 1, 15, {1: 1, 2: 2}), [c2])


def test_run_job_and_main(spark, sink, tmp_path, capsys):
    c = clustered_table()
    write_bronze(sink, CF, 10, Bronze().put(c, 1, 5, {1: 1, 2: 1}).arrow())
    out = run_job(ApplyArgs.from_dict({"sink_uri": sink, "changefeed_id": CF, "window_end_ts": 10,
                                       "checkpoint_ts": 0, "tables": [c.to_json()]}))  # fmt: skip
    assert out["tables"]["test.c"]["rows_upserted"] == 1
    assert (out["after_ts"], out["upto_ts"], out["version"]) == (0, 10, 10)
    json.dumps(out)
    write_bronze(sink, CF, 20, Bronze().put(c, 2, 15, {1: 2, 2: 2}).arrow())
    args, result = tmp_path / "args.json", tmp_path / "result.json"
    args.write_text(json.dumps({"sink_uri": sink, "changefeed_id": CF, "window_end_ts": 20,
                                "tables": [c.to_dict()]}))  # fmt: skip
    assert main(["--args", str(args), "--result", str(result)]) == 0
    assert json.loads(result.read_text())["tables"]["test.c"]["applied_version"] == 20
    assert main(["--sink", sink, "--changefeed", CF, "--window-end-ts", "20",
                 "--tables", json.dumps([c.to_dict()])]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["tables"]["test.c"]["skipped"] is True
    # The step arguments, with a table entry carrying (empty) event filters.
    write_bronze(sink, CF, 40, Bronze().put(c, 3, 25, {1: 3, 2: 3}).put(c, 4, 35, {1: 4, 2: 4}).arrow())
    out = run_job(ApplyArgs.from_dict({"sink_uri": sink, "changefeed_id": CF, "window_end_ts": 40, "after_ts": 20,
                                       "upto_ts": 29, "version": 29,
                                       "tables": [{"table": c.to_json(), "event_filters": []}]}))  # fmt: skip
    assert out["version"] == 29 and out["tables"]["test.c"]["applied_version"] == 29
    assert [r["a"] for r in _rows(sink, c)] == [1, 2, 3]
    assert main(["--sink", sink, "--changefeed", CF, "--window-end-ts", "40", "--after-ts", "29",
                 "--tables", json.dumps([c.to_dict()])]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["tables"]["test.c"]["applied_version"] == 40


def test_a_value_that_does_not_decode_stops_the_apply_naming_table_and_commit_ts(spark, sink):
    c = clustered_table()
    b = Bronze().put(c, 1, 10, {1: 1, 2: 1}).put(c, 2, 11, {1: 2, 2: 2})
    b.rows[1]["value"] = b"\x80\x00\x05"  # a rowcodec v2 header cut short
    with pytest.raises(ChangefeedError, match=r"cannot decode a row value: table test\.c .* at commit ts 11"):
        _apply(spark, sink, 15, b, [c])
    assert not DeltaTable.is_deltatable(table_path(sink, c)) or _rows(sink, c) == []  # nothing of the window lands


def test_spark_starts_only_for_a_window_that_needs_it(no_session_yet, sink, driver_or_spark):
    """A window the driver applies in Arrow with delta-rs starts no Spark session (in a fresh process the JVM's
    start is most of the step: tests/bench/test_cold_apply_bench.py); one past the driver's budget starts it."""
    c = clustered_table()
    write_bronze(sink, CF, 10, Bronze().put(c, 1, 5, {1: 1, 2: 1}).put(c, 2, 6, {1: 2, 2: 2}).arrow())
    out = run_job(ApplyArgs(sink_uri=sink, changefeed_id=CF, window_end_ts=10, after_ts=0, tables=(c,)))
    assert out["tables"]["test.c"]["rows_upserted"] == 2
    assert [r["a"] for r in _rows(sink, c)] == [1, 2]
    assert no_session_yet == ([] if driver_or_spark == "driver" else ["cdcflow"])



def _mapped_table():
    """``CREATE TABLE mapped (id INT PRIMARY KEY, v VECTOR(3), w DECIMAL(65,30), d DATE NOT NULL, t DATETIME(3),
    ts TIMESTAMP)``: the types Delta holds by a documented mapping."""
    from cdc_core.schema.model import Column, Index, TableInfo

    return TableInfo(
        id=106, db_name="test", name="mapped",
        columns=(Column(1, "id", "int", nullable=False), Column(2, "v", "vector", length=3),
                 Column(3, "w", "decimal", precision=65, scale=30), Column(4, "d", "date", nullable=False),
                 Column(5, "t", "datetime", fsp=3), Column(6, "ts", "timestamp")),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True)  # fmt: skip


@pytest.mark.parametrize("writer_kind", ["delta-rs", "delta-spark"])
def test_vectors_wide_decimals_and_zero_dates_are_applied_by_their_mapping_and_counted(spark, sink, driver_or_spark,
                                                                                       writer_kind):
    """VECTOR as array<float>, DECIMAL(65,30) as its text, dates Delta cannot hold as NULL; the result counts, per
    column, the values the rows written hold as NULL (a row updated within the window counts once, a deleted one
    not at all), with either writer and either engine."""
    from cdc_core.codec.rowcodec import ZERO_TIME, MySQLTime
    from spark_jobs.load.delta_writer import DeltaRsWriter, DeltaSparkWriter

    t = _mapped_table()
    wide = "-12345678901234567890123456789012345.123456789012345678901234567891"
    b = (Bronze()
         .put(t, 1, 10, {1: 1, 2: "[1.5,2,3]", 3: wide, 4: ZERO_TIME, 5: "2021-00-05 10:11:12.5", 6: ZERO_TIME})
         .put(t, 2, 10, {1: 2, 2: "[0,0,0]", 3: "1", 4: "2024-02-29", 5: MySQLTime(2021, 2, 30), 6: None})
         .put(t, 3, 11, {1: 3, 4: ZERO_TIME}).put(t, 3, 12, {1: 3, 4: "2000-01-01"}, {1: 3, 4: ZERO_TIME})
         .put(t, 4, 11, {1: 4, 4: ZERO_TIME}).delete(t, 4, 12, {1: 4, 4: ZERO_TIME}))
    writer = DeltaRsWriter() if writer_kind == "delta-rs" else DeltaSparkWriter(spark)
    res = _apply(spark, sink, 20, b, [t], writer=writer)
    assert res["test.mapped"]["mapped"] == {"d": 1, "t": 2, "ts": 1}
    rows = _rows(sink, t)
    assert [(r["id"], r["v"], r["w"], r["d"], r["t"], r["ts"]) for r in rows] == [
        (1, [1.5, 2.0, 3.0], wide, None, None, None),
        (2, [0.0, 0.0, 0.0], "1." + "0" * 30, datetime(2024, 2, 29).date(), None, None),
        (3, None, None, datetime(2000, 1, 1).date(), None, None)]
    schema = pa.schema(DeltaTable(table_path(sink, t)).schema().to_arrow())
    assert [str(schema.field(n).type) for n in ("v", "w", "d")] == ["list<element: float>", "string", "date32[day]"]
    again = _apply(spark, sink, 20, b, [t], writer=writer)  # a re-run applies, and counts, nothing
    assert again["test.mapped"]["skipped"] and not again["test.mapped"].get("mapped")
