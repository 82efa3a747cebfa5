"""TiDB's model.Job / model.TableInfo JSON: golden documents as TiDB marshals them, and round trips."""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
import sqlglot

from cdc_core.codec import mysql_type as mt
from cdc_core.codec.row import encode_row
from cdc_core.schema import ddl_history, tidb_json
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Index, SchemaError, TableInfo
from cdc_core.upstream.sql.ddl.catalog import DatabaseInfo
from cdc_core.upstream.sql.ddl.executor import table_info_from_create


def _col(cid: int, name: str, tp: int, flag: int, flen: int, decimal: int, charset: str = "binary",
         *, offset: int, state: int = 5, default: Any = None, origin: Any = None,
         elems: list[str] | None = None) -> dict[str, Any]:
    """One ``model.ColumnInfo`` with every field ``encoding/json`` writes for it (TiDB v7/v8)."""
    collate = "binary" if charset == "binary" else "utf8mb4_bin"
    return {"id": cid, "name": {"O": name, "L": name.lower()}, "offset": offset, "origin_default": origin,
            "origin_default_bit": None, "default": default, "default_bit": None, "default_is_expr": False,
            "generated_expr_string": "", "generated_stored": False, "dependences": None,
            "type": {"Tp": tp, "Flag": flag, "Flen": flen, "Decimal": decimal, "Charset": charset,
                     "Collate": collate, "Elems": elems, "ElemsIsBinaryLit": None, "Array": False},
            "state": state, "comment": "", "hidden": False, "change_state_info": None, "version": 2}


# `CREATE TABLE test01 (col01 INT PRIMARY KEY, col02 INT)` as TiDB stores it: a clustered INT key is no index
# (index_info null), its column has NotNull|PriKey|NoDefaultValue (4099); INTs have the binary charset.
GOLDEN_CLUSTERED = {
    "id": 80, "name": {"O": "test01", "L": "test01"}, "charset": "utf8mb4", "collate": "utf8mb4_bin",
    "cols": [_col(1, "col01", 3, 4099, 11, 0, offset=0), _col(2, "col02", 3, 0, 11, 0, offset=1)],
    "index_info": None, "constraint_info": None, "fk_info": None, "state": 5, "pk_is_handle": True,
    "is_common_handle": False, "common_handle_version": 0, "comment": "", "auto_inc_id": 0, "auto_id_cache": 0,
    "auto_rand_id": 0, "max_col_id": 2, "max_idx_id": 0, "update_timestamp": 444198845243195478, "partition": None,
    "version": 5,
}

# A TPC-C `customer`-like table with a NONCLUSTERED composite primary key (index 1), a secondary index, a
# CHAR/VARCHAR/DATETIME/DECIMAL mix, a column added later with an origin default, and one still being added
# (state 2, write only), which readers must not see.
GOLDEN_NONCLUSTERED = {
    "id": 4970, "name": {"O": "customer", "L": "customer"}, "charset": "utf8mb4", "collate": "utf8mb4_bin",
    "cols": [
        _col(1, "c_id", 3, 4099, 11, 0, offset=0),
        _col(2, "c_d_id", 3, 4099, 11, 0, offset=1),
        _col(3, "c_w_id", 3, 4107, 11, 0, offset=2),
        _col(4, "c_first", 15, 0, 16, 0, "utf8mb4", offset=3),
        _col(5, "c_middle", 254, 0, 2, 0, "utf8mb4", offset=4),
        _col(13, "c_since", 12, 128, 19, 0, offset=5),
        _col(15, "c_credit_lim", 246, 0, 12, 2, offset=6),
        _col(48, "cct_2", 3, 0, 11, 0, offset=7, default="7", origin="5"),
        _col(47, "adc_25", 12, 8320, 19, 0, offset=8, state=2, default="CURRENT_TIMESTAMP",
             origin="2023-09-12 10:01:13"),
    ],
    "index_info": [
        {"id": 1, "idx_name": {"O": "PRIMARY", "L": "primary"}, "tbl_name": {"O": "", "L": ""},
         "idx_cols": [{"name": {"O": "c_w_id", "L": "c_w_id"}, "offset": 2, "length": -1},
                      {"name": {"O": "c_d_id", "L": "c_d_id"}, "offset": 1, "length": -1},
                      {"name": {"O": "c_id", "L": "c_id"}, "offset": 0, "length": -1}],
         "state": 5, "backfill_state": 0, "comment": "", "index_type": 1, "is_unique": True, "is_primary": True,
         "is_invisible": False, "is_global": False, "mv_index": False},
        {"id": 2, "idx_name": {"O": "idx_customer", "L": "idx_customer"}, "tbl_name": {"O": "", "L": ""},
         "idx_cols": [{"name": {"O": "c_w_id", "L": "c_w_id"}, "offset": 2, "length": -1},
                      {"name": {"O": "c_first", "L": "c_first"}, "offset": 3, "length": -1}],
         "state": 5, "backfill_state": 0, "comment": "", "index_type": 1, "is_unique": False, "is_primary": False,
         "is_invisible": False, "is_global": False, "mv_index": False},
    ],
    "constraint_info": None, "fk_info": [], "state": 5, "pk_is_handle": False, "is_common_handle": False,
    "common_handle_version": 0, "comment": "", "auto_inc_id": 30207016, "max_col_id": 48, "max_idx_id": 2,
    "partition": None, "version": 5,
}


def test_golden_clustered_table_decodes_with_the_handle_as_primary_key() -> None:
    t = tidb_json.table_from_tidb(json.loads(json.dumps(GOLDEN_CLUSTERED)), db_name="test", db_id=2,
                                  schema_version=9)
    assert (t.id, t.db_name, t.name, t.db_id, t.schema_version) == (80, "test", "test01", 2, 9)
    assert t.pk_is_handle and t.handle_column == "col01" and t.primary_key == ("col01",)
    assert [(c.id, c.name, c.type, c.nullable) for c in t.columns] == [(1, "col01", "int", False),
                                                                       (2, "col02", "int", True)]
    assert t.indexes == (Index("PRIMARY", ("col01",), unique=True, primary=True, id=0),)


def test_golden_nonclustered_table_decodes_types_defaults_and_indexes() -> None:
    t = tidb_json.table_from_tidb(GOLDEN_NONCLUSTERED, db_name="tpcc", db_id=3)
    assert not t.pk_is_handle and t.delta_key() == ("c_w_id", "c_d_id", "c_id")
    assert [c.name for c in t.columns] == ["c_id", "c_d_id", "c_w_id", "c_first", "c_middle", "c_since",
                                           "c_credit_lim", "cct_2"]  # adc_25 is write-only: not yet visible
    by = {c.name: c for c in t.columns}
    assert (by["c_first"].type, by["c_first"].length) == ("varchar", 16)
    assert (by["c_middle"].type, by["c_middle"].length) == ("char", 2)
    assert (by["c_since"].type, by["c_since"].fsp) == ("datetime", 0)
    assert (by["c_credit_lim"].type, by["c_credit_lim"].precision, by["c_credit_lim"].scale) == ("decimal", 12, 2)
    assert (by["cct_2"].default, by["cct_2"].origin_default) == (7, 5)  # rows before the ADD COLUMN read 5
    assert [(ix.name, ix.columns, ix.unique, ix.primary, ix.id) for ix in t.indexes] == [
        ("PRIMARY", ("c_w_id", "c_d_id", "c_id"), True, True, 1),
        ("idx_customer", ("c_w_id", "c_first"), False, False, 2)]
    assert t.max_column_id == 48
    # Its field types are the ones the row codec decodes by: TiDB's own.
    assert by["c_since"].field_type().tp == mt.TypeDatetime and by["c_credit_lim"].field_type().decimal == 2


ALL_TYPES = """CREATE TABLE ty (id INT PRIMARY KEY AUTO_INCREMENT, ti TINYINT UNSIGNED DEFAULT 7,
    bu BIGINT UNSIGNED NOT NULL, f FLOAT DEFAULT 1.5, d DOUBLE DEFAULT -2.25e-10, dc DECIMAL(20,4) DEFAULT '1.5',
    dt DATE DEFAULT '2024-02-29', dtm DATETIME(6) DEFAULT '2024-01-01 00:00:00.123456',
    ts TIMESTAMP(3) NULL DEFAULT '2030-01-01 00:00:00.5', tm TIME(2) DEFAULT '-01:02:03.25', y YEAR DEFAULT 1999,
    c CHAR(4) DEFAULT 'ab', b BINARY(3) DEFAULT 'xy', vb VARBINARY(8), bl BLOB, tx MEDIUMTEXT,
    e ENUM('x','y') DEFAULT 'y', s SET('a','b','c') DEFAULT 'a,c', bt BIT(10) DEFAULT b'101', j JSON,
    UNIQUE KEY uk (bu), KEY k2 (c, y))"""


def _all_types() -> TableInfo:
    node = sqlglot.parse_one(ALL_TYPES, read="mysql")
    assert isinstance(node, sqlglot.exp.Create)
    return table_info_from_create(node, table_id=100, db=DatabaseInfo(2, "my"), schema_version=7, clustered=None)


def test_every_type_round_trips_through_tidb_json() -> None:
    t = _all_types()
    d = json.loads(json.dumps(tidb_json.table_to_tidb(t)))
    assert tidb_json.table_from_tidb(d, db_name="my", db_id=2, schema_version=7) == t
    cols = {c["name"]["O"]: c for c in d["cols"]}
    # What TiDB writes for these: flags, type codes, defaults as strings, BIT's default as base64 bytes.
    assert cols["id"]["type"]["Flag"] == mt.NotNullFlag | mt.PriKeyFlag | mt.AutoIncrementFlag
    assert cols["bu"]["type"]["Flag"] == mt.NotNullFlag | mt.UnsignedFlag | mt.UniqueKeyFlag | mt.NoDefaultValueFlag
    assert cols["c"]["type"]["Flag"] == mt.MultipleKeyFlag
    assert (cols["ti"]["type"]["Tp"], cols["ti"]["default"]) == (mt.TypeTiny, "7")
    assert (cols["dc"]["type"]["Flen"], cols["dc"]["type"]["Decimal"], cols["dc"]["default"]) == (20, 4, "1.5000")
    assert cols["dtm"]["default"] == "2024-01-01 00:00:00.123456" and cols["ts"]["default"] == "2030-01-01 00:00:00.500"
    assert cols["tm"]["default"] == "-01:02:03.25" and cols["y"]["default"] == "1999"
    assert (cols["e"]["type"]["Elems"], cols["s"]["default"]) == (["x", "y"], "a,c")
    assert base64.b64decode(cols["bt"]["default_bit"]) == b"\x00\x05"
    assert (cols["bl"]["type"]["Tp"], cols["bl"]["type"]["Charset"]) == (mt.TypeBlob, "binary")
    assert (cols["tx"]["type"]["Tp"], cols["tx"]["type"]["Collate"]) == (mt.TypeMediumBlob, "utf8mb4_bin")
    assert d["index_info"][0]["idx_name"]["O"] == "uk" and d["index_info"][0]["id"] == 1  # no PRIMARY entry
    assert d["pk_is_handle"] is True and d["max_idx_id"] == 2 and d["max_col_id"] == 20
    by = {c.name: c for c in t.columns}
    assert by["tm"].default == -dt.timedelta(hours=1, minutes=2, seconds=3, microseconds=250000)
    assert by["dc"].default == Decimal("1.5")


def test_vector_wide_decimal_and_zero_date_columns_are_tidbs_json() -> None:
    """VECTOR(3) / VECTOR as TiDB v8.5 writes them (Tp 225, Flen the dimension or -1, Decimal 0, the binary charset
    and BinaryFlag), DECIMAL(65,30), and a zero-date default (what a table created under sql_mode '' keeps: its
    text ``0000-00-00``), both ways."""
    from cdc_core.codec.rowcodec import ZERO_TIME, MySQLTime
    from cdc_core.schema.model import Column

    t = TableInfo(id=9, db_name="o", name="emb", columns=(
        Column(1, "id", "int", nullable=False), Column(2, "v", "vector", length=3), Column(3, "w", "vector"),
        Column(4, "d", "decimal", precision=65, scale=30), Column(5, "z", "date", default=ZERO_TIME),
        Column(6, "zt", "datetime", fsp=2, default=MySQLTime(2021, 0, 1, 10))),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True, max_column_id=6)
    d = json.loads(json.dumps(tidb_json.table_to_tidb(t)))
    cols = {c["name"]["O"]: c for c in d["cols"]}
    assert {k: cols["v"]["type"][k] for k in ("Tp", "Flag", "Flen", "Decimal", "Charset", "Collate")} == {
        "Tp": 225, "Flag": mt.BinaryFlag, "Flen": 3, "Decimal": 0, "Charset": "binary", "Collate": "binary"}
    assert cols["w"]["type"]["Flen"] == -1 and (cols["d"]["type"]["Flen"], cols["d"]["type"]["Decimal"]) == (65, 30)
    assert (cols["z"]["default"], cols["zt"]["default"]) == ("0000-00-00", "2021-00-01 10:00:00.00")
    assert tidb_json.table_from_tidb(d, db_name="o", db_id=1) == replace(t, db_id=1)


def test_a_case_insensitive_collation_is_kept_on_the_column_and_refused_for_partitioning() -> None:
    """A cluster's column of utf8mb4_general_ci (or MySQL 8's utf8mb4_0900_ai_ci) compares 'a' and 'A ' as equal:
    the column keeps its collation (the stored schema and the TiDB JSON carry it), a bytes-ordered one reads as
    none, and a partitioning over it is refused rather than evaluated by bytes (a TRUNCATE PARTITION would delete
    the wrong rows)."""
    from cdc_core.schema.partition import RANGE, PartitionDef, PartitionError, PartitionInfo
    from cdc_core.schema.partition_rule import rule_of

    d = json.loads(json.dumps(GOLDEN_NONCLUSTERED))
    cols = {c["name"]["O"]: c for c in d["cols"]}
    cols["c_first"]["type"]["Collate"] = "utf8mb4_general_ci"
    cols["c_middle"]["type"]["Collate"] = "utf8_bin"
    t = tidb_json.table_from_tidb(d, db_name="tpcc", db_id=3)
    by = {c.name: c for c in t.columns}
    assert (by["c_first"].collate, by["c_middle"].collate, by["c_id"].collate) == ("utf8mb4_general_ci", "", "")
    assert (by["c_first"].field_type().charset, by["c_first"].field_type().collate) == ("utf8mb4",
                                                                                        "utf8mb4_general_ci")
    assert TableInfo.from_json(t.to_json()) == t
    assert "collate" in t.to_dict()["columns"][3] and "collate" not in t.to_dict()["columns"][4]
    back = {c["name"]["O"]: c for c in tidb_json.table_to_tidb(t)["cols"]}
    assert back["c_first"]["type"]["Collate"] == "utf8mb4_general_ci"
    assert back["c_middle"]["type"]["Collate"] == "utf8mb4_bin"
    by_first = PartitionInfo(RANGE, ("c_first",), (PartitionDef(1, "p0", ("'m'",)),
                                                   PartitionDef(2, "p1", ("MAXVALUE",))), by_columns=True)
    with pytest.raises(PartitionError, match="'c_first' has the collation utf8mb4_general_ci"):
        rule_of(by_first, t.columns)
    rule_of(replace(by_first, columns=("c_middle",)), t.columns)  # bytes-ordered: evaluated


def test_bad_table_json_is_an_error_naming_the_column() -> None:
    bad = json.loads(json.dumps(GOLDEN_CLUSTERED))
    bad["cols"][1]["type"]["Tp"] = 255  # TypeGeometry
    with pytest.raises(SchemaError, match=r"table info test\.test01 column 'col02': unsupported column type"):
        tidb_json.table_from_tidb(bad, db_name="test", db_id=2)
    bad = json.loads(json.dumps(GOLDEN_NONCLUSTERED))
    bad["cols"][7]["default"] = "seven"
    with pytest.raises(SchemaError, match=r"column 'cct_2': default 'seven'"):
        tidb_json.table_from_tidb(bad, db_name="tpcc", db_id=3)
    with pytest.raises(SchemaError, match="is_common_handle but no primary index"):
        tidb_json.table_from_tidb({**GOLDEN_CLUSTERED, "pk_is_handle": False, "is_common_handle": True},
                                  db_name="test", db_id=2)


def _meta(**kw: Any) -> dict[str, Any]:
    """A finished ``model.Job`` as TiDB writes it to ``mysql.tidb_ddl_job`` (state done; FinishedTS not set)."""
    base = {"id": 90, "type": 3, "schema_id": 2, "table_id": 80, "schema_name": "test", "table_name": "test01",
            "state": ddl_history.JOB_STATE_DONE, "warning": None, "err": None, "err_count": 0, "row_count": 0,
            "raw_args": None, "schema_state": 5, "snapshot_ver": 0, "real_start_ts": 0, "start_ts": 0,
            "dependency_id": 0, "query": "CREATE TABLE test01 (col01 INT PRIMARY KEY, col02 INT)",
            "binlog": {"SchemaVersion": 57, "DBInfo": None, "TableInfo": GOLDEN_CLUSTERED, "FinishedTS": 0,
                       "MultipleTableInfos": None},
            "version": 1, "reorg_meta": None, "multi_schema_info": None, "priority": 0, "seq_num": 12}
    base.update(kw)
    return base


def test_tidb_jobs_decode_as_ticdc_reads_them() -> None:
    create = tidb_json.job_from_tidb(_meta())
    assert (create.job_id, create.job_type, create.table_id, create.schema_version) == (90, "create table", 80, 57)
    assert create.table_info is not None and create.table_info.qualified_name == "test.test01"
    # TRUNCATE: the job's table_id is the old table, its TableInfo the new one.
    trunc = tidb_json.job_from_tidb(_meta(type=11, table_id=77, binlog={"SchemaVersion": 58,
                                                                        "TableInfo": GOLDEN_CLUSTERED}))
    assert (trunc.job_type, trunc.old_table_id, trunc.table_id) == ("truncate table", 77, 80)
    # RENAME TABLE: table_name is the old name, the args (version 1 and 2) the old schema.
    renamed = {**GOLDEN_CLUSTERED, "name": {"O": "t2", "L": "t2"}}
    v1 = _meta(type=14, schema_id=5, schema_name="db2", table_name="test01",
               raw_args=[2, {"O": "t2", "L": "t2"}, {"O": "test", "L": "test"}],
               binlog={"SchemaVersion": 59, "TableInfo": renamed})
    v2 = {**v1, "version": 2, "raw_args": [{"old_schema_id": 2, "old_schema_name": {"O": "test", "L": "test"},
                                            "new_table_name": {"O": "t2", "L": "t2"}}]}
    for meta in (v1, v2):
        job = tidb_json.job_from_tidb(meta)
        assert (job.schema_name, job.table_name, job.old_schema_name, job.old_table_name, job.old_schema_id) == (
            "db2", "t2", "test", "test01", 2)
        assert job.table_info is not None and job.table_info.qualified_name == "db2.t2"
    # DROP TABLE carries the dropped table; cdcflow's job has no table after it.
    dropped = tidb_json.job_from_tidb(_meta(type=4, schema_state=0))
    assert (dropped.job_type, dropped.table_id, dropped.table_name, dropped.table_info) == (
        "drop table", 80, "test01", None)
    schema = tidb_json.job_from_tidb(_meta(type=1, table_id=0, table_name="", binlog={
        "SchemaVersion": 3, "DBInfo": {"id": 2, "db_name": {"O": "Test", "L": "test"}}}))
    assert (schema.job_type, schema.schema_id, schema.schema_name, schema.table_id) == ("create schema", 2, "test",
                                                                                         None)
    # RENAME COLUMN is a MODIFY COLUMN job; other actions keep TiDB's names (not on cdcflow's whitelist).
    assert tidb_json.job_from_tidb(_meta(type=12)).job_type == "modify column"
    assert tidb_json.job_from_tidb(_meta(type=19, binlog={})).job_type == "add partition"
    assert tidb_json.job_from_tidb(_meta(type=200, binlog={})).job_type == "action type 200"


def test_job_rows_follow_ticdc_rules() -> None:
    meta = json.dumps(_meta()).encode()
    # A done row in tidb_ddl_job: the DDL, finished at the row's commit ts.
    value = encode_row(ddl_history.JOB_TABLE_INFO, {1: 90, 5: meta, 6: 3})
    [job] = ddl_history.jobs_from_value(ddl_history.JOB_TABLE_ID, value, 4242)
    assert (job.job_id, job.finished_ts) == (90, 4242)
    running = json.dumps(_meta(state=1)).encode()  # model.JobStateRunning
    assert ddl_history.jobs_from_value(ddl_history.JOB_TABLE_ID, encode_row(ddl_history.JOB_TABLE_INFO,
                                                                            {1: 90, 5: running}), 4242) == []
    # The history row of the same job is synced, with FinishedTS; the puller does not take it (the job row did).
    synced = json.dumps(_meta(state=ddl_history.JOB_STATE_SYNCED, binlog={
        **_meta()["binlog"], "FinishedTS": 4242})).encode()
    hist = encode_row(ddl_history.HISTORY_TABLE_INFO, {1: 90, 2: synced, 3: "test", 4: "test01"})
    assert ddl_history.jobs_from_value(ddl_history.HISTORY_TABLE_ID, hist, 4300) == []
    [from_snapshot] = ddl_history.history_from_value(ddl_history.HISTORY_TABLE_ID, hist)
    assert from_snapshot.finished_ts == 4242
    with pytest.raises(SchemaError, match="job_meta is not JSON"):
        ddl_history.jobs_from_meta(b"{not json")


def test_cdcflow_jobs_written_as_tidb_jobs_read_back_the_same() -> None:
    t = _all_types()
    jobs = [
        DDLJob(1, "create table", 2, 100, "my", "ty", "CREATE TABLE ty (...)", 7, t, 500),
        DDLJob(2, "truncate table", 2, 101, "my", "ty", "TRUNCATE TABLE ty", 8,
               TableInfo(**{**t.__dict__, "id": 101, "schema_version": 8}), 510, old_table_id=100),
        DDLJob(3, "rename table", 3, 101, "other", "ty2", "RENAME TABLE my.ty TO other.ty2", 9,
               TableInfo(**{**t.__dict__, "id": 101, "name": "ty2", "db_name": "other", "db_id": 3,
                            "schema_version": 9}), 520,
               old_table_id=101, old_schema_name="my", old_table_name="ty", old_schema_id=2),
        DDLJob(4, "drop table", 3, 101, "other", "ty2", "DROP TABLE other.ty2", 10, None, 530),
        DDLJob(5, "create schema", 6, None, "fresh", None, "CREATE DATABASE fresh", 11, None, 540),
    ]
    for job in jobs:
        meta = ddl_history.job_meta((job,), ddl_history.JOB_STATE_SYNCED)
        assert ddl_history.jobs_from_meta(meta) == [job], job.job_type
        done = json.loads(ddl_history.job_meta((job,), ddl_history.JOB_STATE_DONE))
        assert done["binlog"]["FinishedTS"] == 0 and done["type"] == tidb_json.ACTION_TYPES[job.job_type]
        value = ddl_history.job_table_value((job,))
        assert ddl_history.jobs_from_value(ddl_history.JOB_TABLE_ID, value, job.finished_ts) == [job]


def test_job_json_is_written_as_go_writes_it() -> None:
    """Go's json.Marshal of struct{Query string `json:"query"`} with this value (encoding/json, escapeHTML):
    raw UTF-8, and <, >, &, U+2028 and U+2029 escaped."""
    assert tidb_json.go_json({"query": "a<b && c>d, caf\u00e9 \u2028\u2029 \"q\"\\"}) == (
        b'{"query":"a\\u003cb \\u0026\\u0026 c\\u003ed, caf\xc3\xa9 \\u2028\\u2029 \\"q\\"\\\\"}')
    # Bytes that are not UTF-8 (a BINARY value carried as surrogate escapes): Go writes \ufffd for each.
    assert tidb_json.go_json({"d": b"?<\xa6\xb4".decode("utf-8", "surrogateescape")}) == (
        b'{"d":"?\\u003c\\ufffd\\ufffd"}')
    job = DDLJob(7, "create schema", 6, None, "caf\u00e9", None, "CREATE DATABASE `caf\u00e9` /* a<b */", 11, None, 540)
    meta = ddl_history.job_meta((job,), ddl_history.JOB_STATE_SYNCED)
    assert b"caf\xc3\xa9" in meta and b"a\\u003cb" in meta and b"\\u00e9" not in meta
    assert ddl_history.jobs_from_meta(meta) == [job]


def test_create_tables_and_rename_tables_split_into_a_job_per_table() -> None:
    second = {**GOLDEN_CLUSTERED, "id": 81, "name": {"O": "test02", "L": "test02"}}
    # ActionCreateTables (tidb_enable_fast_create_table merging two CREATE TABLEs): one job, two tables.
    create = _meta(type=60, table_id=81, table_name="", raw_args=[None, False],
                   query="CREATE TABLE test01 (col01 INT PRIMARY KEY, col02 INT); CREATE TABLE test02 (...)",
                   binlog={"SchemaVersion": 60, "TableInfo": second,
                           "MultipleTableInfos": [GOLDEN_CLUSTERED, second]})
    parts = tidb_json.jobs_from_tidb(create)
    assert [(p.job_type, p.sub_index, p.table_id, p.table_name, p.schema_name) for p in parts] == [
        ("create table", 0, 80, "test01", "test"), ("create table", 1, 81, "test02", "test")]
    assert all(p.table_info is not None and p.table_info.db_id == 2 for p in parts)
    # ActionRenameTables: test.test01 -> db2.t1 and test.test02 -> test.t2, version 1 args (TiDB v8.5: six lists)
    # and version 2 args; the new schema's name comes from involving_schema_info.
    t1, t2 = {**GOLDEN_CLUSTERED, "name": {"O": "t1", "L": "t1"}}, {**second, "name": {"O": "t2", "L": "t2"}}
    cistr = tidb_json._cistr
    v1 = _meta(type=47, schema_id=5, table_id=80, table_name="", binlog={
        "SchemaVersion": 61, "TableInfo": t2, "MultipleTableInfos": [t1, t2]},
        raw_args=[[2, 2], [5, 2], [cistr("t1"), cistr("t2")], [80, 81], [cistr("test"), cistr("test")],
                  [cistr("test01"), cistr("test02")]],
        involving_schema_info=[{"database": "test", "table": "test01"}, {"database": "db2", "table": "t1"},
                               {"database": "test", "table": "test02"}, {"database": "test", "table": "t2"}])
    v2 = {**v1, "version": 2, "raw_args": [{"rename_table_infos": [
        {"old_schema_id": 2, "new_schema_id": 5, "new_table_name": cistr("t1"), "table_id": 80,
         "old_schema_name": cistr("test"), "old_table_name": cistr("test01")},
        {"old_schema_id": 2, "new_schema_id": 2, "new_table_name": cistr("t2"), "table_id": 81,
         "old_schema_name": cistr("test"), "old_table_name": cistr("test02")}]}]}
    older = {**v1, "raw_args": v1["raw_args"][:5]}  # before v8.2 no old names: involving_schema_info has them
    for meta in (v1, v2, older):
        parts = tidb_json.jobs_from_tidb(meta)
        assert [(p.sub_index, p.table_id, p.old_schema_name, p.old_table_name, p.schema_id, p.schema_name,
                 p.table_name) for p in parts] == [(0, 80, "test", "test01", 5, "db2", "t1"),
                                                   (1, 81, "test", "test02", 2, "test", "t2")]
        assert [p.table_info.qualified_name for p in parts if p.table_info] == ["db2.t1", "test.t2"]
    with pytest.raises(SchemaError, match=r"DDL job 90 \(rename tables\): args do not name 2 tables"):
        tidb_json.jobs_from_tidb({**v1, "raw_args": [[2], [5], [cistr("t1")], [80], [cistr("test")]]})
    # cdcflow's parts written as one TiDB job read back the same.
    written = [DDLJob(7, "rename table", p.schema_id, p.table_id, p.schema_name, p.table_name, "RENAME TABLE ...",
                      61, p.table_info, 900, old_table_id=p.table_id, old_schema_name=p.old_schema_name,
                      old_table_name=p.old_table_name, old_schema_id=2, sub_index=i)
               for i, p in enumerate(tidb_json.jobs_from_tidb(v1))]
    meta_bytes = ddl_history.job_meta(written, ddl_history.JOB_STATE_SYNCED)
    assert json.loads(meta_bytes)["type"] == 47 and ddl_history.jobs_from_meta(meta_bytes) == written


def _partitioned(ids: list[int], table_id: int = 80) -> dict[str, Any]:
    """GOLDEN_CLUSTERED as a RANGE-partitioned table (col01 < 10, < MAXVALUE) with partition ids ``ids``."""
    defs = [{"id": ids[0], "name": {"O": "p0", "L": "p0"}, "less_than": ["10"]},
            {"id": ids[1], "name": {"O": "p1", "L": "p1"}, "less_than": ["MAXVALUE"]}]
    return {**GOLDEN_CLUSTERED, "id": table_id, "partition": {
        "type": 1, "expr": "`col01`", "columns": None, "enable": True, "num": 2, "definitions": defs}}


def test_exchange_partition_jobs_name_the_normal_table_and_carry_the_partitioned_one() -> None:
    # As TiDB writes it (pkg/ddl/executor.go ExchangeTablePartition): the job is the normal table's (schema 5,
    # table 77), the args [partition id, pt schema id, pt id, partition name, with validation] name the partitioned
    # table, whose TableInfo after the swap (partition p0 now under id 77) is the binlog's.
    v1 = _meta(type=42, schema_id=5, table_id=77, schema_name="stage", table_name="nt",
               raw_args=[81, 2, 80, "p0", True], query="ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE stage.nt",
               binlog={"SchemaVersion": 60, "TableInfo": _partitioned([77, 82])})
    v2 = {**v1, "version": 2, "raw_args": [{"partition_id": 81, "pt_schema_id": 2, "pt_table_id": 80,
                                            "partition_name": "p0", "with_validation": True}]}
    for meta in (v1, v2):
        job = tidb_json.job_from_tidb(meta)
        assert (job.job_type, job.table_id, job.schema_id, job.partition_id, job.partition_name) == (
            "exchange partition", 80, 2, 81, "p0")
        assert (job.old_table_id, job.old_schema_id, job.old_schema_name, job.old_table_name) == (77, 5, "stage", "nt")
        assert job.with_validation and job.table_info is not None and job.table_info.physical_ids == (77, 82)
        # Written back as TiDB writes it, and read back the same.
        back = json.loads(ddl_history.job_meta((job,), ddl_history.JOB_STATE_SYNCED))
        assert (back["type"], back["schema_id"], back["table_id"], back["schema_name"], back["table_name"],
                back["raw_args"]) == (42, 5, 77, "stage", "nt", [81, 2, 80, "p0", True])
        assert ddl_history.jobs_from_meta(ddl_history.job_meta((job,), ddl_history.JOB_STATE_SYNCED)) == [
            replace(job, finished_ts=0)]
    # Args it cannot read (TiCDC does not read them either): the schema storage finds the partition from the ids.
    blind = tidb_json.job_from_tidb({**v1, "raw_args": [81]})
    assert (blind.table_id, blind.old_table_id, blind.partition_id, blind.schema_id) == (80, 77, None, None)
    with pytest.raises(SchemaError, match="TableInfo is not the partitioned table 99 of the args"):
        tidb_json.job_from_tidb({**v1, "raw_args": [81, 2, 99, "p0", True]})
