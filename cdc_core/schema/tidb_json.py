"""TiDB's schema JSON: ``model.Job``, ``model.TableInfo`` and ``model.DBInfo`` as TiDB marshals them, to and
from cdcflow's ``DDLJob`` / ``TableInfo``.

The facts, from ``pkg/meta/model`` (``job.go``, ``table.go``, ``column.go``, ``index.go``, ``db.go``) and
``pkg/parser/types/field_type.go``:

- A job is ``{"id", "type" (ActionType), "schema_id", "table_id", "schema_name", "table_name", "state",
  "schema_state", "raw_args", "query", "binlog": {"SchemaVersion", "DBInfo", "TableInfo", "FinishedTS",
  "MultipleTableInfos"}, "version", ...}``. ``binlog`` is ``HistoryInfo``, whose fields carry no JSON tags.
- A table is ``{"id", "name": {"O", "L"}, "charset", "collate", "cols", "index_info", "pk_is_handle",
  "is_common_handle", "max_col_id", "max_idx_id", "state", "version", ...}``; a column ``{"id", "name",
  "offset", "origin_default", "origin_default_bit", "default", "default_bit", "type": {"Tp", "Flag", "Flen",
  "Decimal", "Charset", "Collate", "Elems"}, "state", "version"}``; an index ``{"id", "idx_name", "tbl_name",
  "idx_cols": [{"name", "offset", "length"}], "state", "index_type", "is_unique", "is_primary"}``.
- A clustered integer primary key (``pk_is_handle``) is no index: its column carries ``PriKeyFlag`` and the
  other indexes number from 1. Defaults are strings as MySQL prints them (TIMESTAMP's in UTC, column
  version 1+); a BIT default is its bytes in ``default_bit`` (base64, Go's ``[]byte``).
- CREATE TABLES (ActionCreateTables: ``tidb_enable_fast_create_table`` merging CREATE TABLEs, BR restores) and
  RENAME TABLES (ActionRenameTables) carry every table in ``binlog.MultipleTableInfos``; RENAME TABLES' version 1
  args are ``[old schema ids, new schema ids, new names, table ids, old schema names, old names]`` and its
  ``involving_schema_info`` names each old and new ``{database, table}`` (lower case). cdcflow, like TiCDC,
  reads them as one job per table at the same finished ts (``DDLJob.sub_index``).
- The jobs cdcflow reads: a TRUNCATE job's ``table_id`` is the old table, its ``TableInfo`` the new one; a
  RENAME TABLE job's ``table_name`` is the old name and its args (job version 1: ``[old schema id, new name,
  old schema name]``; version 2: one object) name the old schema; RENAME COLUMN is a MODIFY COLUMN job
  (``pkg/ddl/executor.go``); DROP jobs carry the dropped table, which cdcflow's job holds as "no table after".
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from cdc_core.codec import mysql_type as mt
from cdc_core.codec import rowcodec
from cdc_core.codec.value_text import format_datetime, format_duration, format_mysql_time
from cdc_core.schema import column_type as ct
from cdc_core.schema.ddl_job import MULTI_SCHEMA_CHANGE, REPARTITION_JOB_TYPES, DDLJob
from cdc_core.schema.model import Column, Index, SchemaError, TableInfo
from cdc_core.schema.partition import PartitionError, PartitionInfo

# model.ActionType (pkg/meta/model/job.go) of cdcflow's job types; RENAME COLUMN runs as ActionModifyColumn.
ACTION_TYPES: dict[str, int] = {
    "create schema": 1,
    "drop schema": 2,
    "create table": 3,
    "drop table": 4,
    "add column": 5,
    "drop column": 6,
    "add index": 7,
    "drop index": 8,
    "truncate table": 11,
    "modify column": 12,
    "rename table": 14,
    "add partition": 19,  # ActionAddTablePartition
    "drop partition": 20,  # ActionDropTablePartition
    "truncate partition": 23,  # ActionTruncateTablePartition
    "exchange partition": 42,  # ActionExchangeTablePartition
    "alter table reorganize partition": 64,  # ActionReorganizePartition
    "alter table partition by": 71,  # ActionAlterTablePartitioning
    "alter table remove partitioning": 72,  # ActionRemovePartitioning
    "add primary key": 32,  # ActionAddPrimaryKey (a non-clustered table's: the Delta key changes)
    "drop primary key": 33,  # ActionDropPrimaryKey
    MULTI_SCHEMA_CHANGE: 61,
}
# TiDB's names (``actionMap``) of the action types cdcflow does not replicate, for errors and logs.
OTHER_ACTIONS: dict[int, str] = {
    9: "add foreign key", 10: "drop foreign key", 13: "rebase auto_increment ID", 15: "set default value",
    16: "shard row ID", 17: "modify table comment", 18: "rename index",
    21: "create view", 22: "modify table charset and collate",
    24: "drop view", 25: "recover table", 26: "modify schema charset and collate", 27: "lock table",
    28: "unlock table", 29: "repair table", 30: "set tiflash replica", 31: "update tiflash replica status",
    34: "create sequence", 35: "alter sequence",
    36: "drop sequence", 37: "add multi-columns", 38: "drop multi-columns", 39: "modify auto id cache",
    40: "rebase auto_random ID", 41: "alter index visibility",
    43: "add check constraint", 44: "drop check constraint", 45: "alter check constraint",
    47: "rename tables", 48: "drop multi-indexes", 49: "alter table attributes",
    50: "alter table partition attributes", 51: "create placement policy", 52: "alter placement policy",
    53: "drop placement policy", 54: "alter table partition placement", 55: "modify schema default placement",
    56: "alter table placement", 57: "alter table cache", 58: "alter table statistics options",
    59: "alter table nocache", 60: "create tables", 62: "flashback cluster", 63: "flashback schema",
    65: "alter table ttl", 67: "alter table no_ttl",
    68: "create resource group", 69: "alter resource group", 70: "drop resource group",
    # v8.4+: ActionAddVectorIndex (v8.5's name; ActionAddColumnarIndex later), then newer actions
    73: "add vector index", 74: "modify engine attribute", 75: "alter table mode", 76: "refresh meta",
    77: "modify schema read only",
}
_JOB_TYPE_OF = {v: k for k, v in ACTION_TYPES.items()}
# Jobs of several tables, which TiCDC splits into one DDL event per table: cdcflow's job type of each part.
ACTION_RENAME_TABLES, ACTION_CREATE_TABLES = 47, 60
MULTI_TABLE_ACTIONS = {ACTION_RENAME_TABLES: "rename table", ACTION_CREATE_TABLES: "create table"}

STATE_NONE, STATE_PUBLIC = 0, 5  # model.SchemaState
JOB_VERSION = 1  # model.JobVersion1: positional args
TABLE_INFO_VERSION = 5  # model.TableInfoVersion5
COLUMN_INFO_VERSION = 2  # model.ColumnInfoVersion2
COMMON_HANDLE_VERSION = 1  # model.CurrentCommonHandleVersion
INDEX_TYPE_BTREE = 1  # ast.IndexTypeBtree
_DROPS = ("drop table", "drop schema")
_REPARTITION_ACTIONS = REPARTITION_JOB_TYPES | {"alter table reorganize partition"}
_UTF8 = ("utf8mb4", "utf8mb4_bin")
# TiDB's own type name of each TEXT/BLOB code, by whether the column holds bytes.
_NAME_OF: dict[tuple[int, bool], str] = {(f.tp, f.binary): name for name, f in ct.TYPES.items()}


# Go's encoding/json escapes these inside strings (HTML safety, and JavaScript's line separators); everything
# else non-ASCII it writes as raw UTF-8 (encode.go, encodeState.string with escapeHTML).
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_GO_ESCAPE_TABLE = str.maketrans(_GO_ESCAPES)
_SURROGATE = re.compile("[\ud800-\udfff]")


def go_json(value: Any) -> bytes:
    """``value`` as Go's ``json.Marshal`` writes it, byte for byte for the JSON TiDB stores (objects in the order
    given, no spaces, UTF-8 unescaped but for ``<``, ``>``, ``&``, U+2028 and U+2029). The escaped characters
    can only occur inside strings, so translating the whole text is exact."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False).translate(_GO_ESCAPE_TABLE)
    # Bytes that are not UTF-8 (a BINARY default, carried as surrogate escapes): Go writes each as \ufffd.
    return _SURROGATE.sub(r"\\ufffd", text).encode()


def _cistr(name: str) -> dict[str, str]:
    return {"O": name, "L": name.lower()}


def _name(d: Any, where: str) -> str:
    if isinstance(d, dict) and isinstance(d.get("O"), str):
        return d["O"]
    if isinstance(d, str):  # a CIStr marshalled by older code as a plain string
        return d
    raise SchemaError(f"{where}: expected a name {{\"O\", \"L\"}}, got {d!r}")


# --- defaults ------------------------------------------------------------------------------------------------


def default_text(col: Column, value: Any) -> str | None:
    """A converted default as TiDB stores it in ``ColumnInfo.DefaultValue``: the string MySQL prints."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "surrogateescape")
    if isinstance(value, dt.datetime):
        return format_datetime(value, col.fsp or 0)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return format_duration(value, col.fsp or 0)
    if isinstance(value, rowcodec.MySQLTime):  # a zero or invalid date default, as Time.String prints it
        return format_mysql_time(value, date_only=col.kind == ct.DATE, fsp=col.fsp or 0)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _default_from(col: Column, text: Any, bits: Any, where: str) -> Any:
    if col.kind == ct.BIT and bits:
        value: Any = base64.b64decode(bits)
    elif text is None:
        return None
    elif col.kind in (ct.BINARY, ct.BIT) and isinstance(text, str):
        value = text.encode("utf-8", "surrogateescape")
    else:
        value = text
    try:
        return col.convert(value, ct.STORED_DATES)  # what TiDB kept (a zero date under a permissive sql_mode)
    except SchemaError as exc:
        raise SchemaError(f"{where}: default {text!r}: {exc}") from None


# --- tables --------------------------------------------------------------------------------------------------


def table_to_tidb(info: TableInfo) -> dict[str, Any]:
    """``model.TableInfo`` JSON of ``info``."""
    offsets = {c.name.lower(): i for i, c in enumerate(info.columns)}
    # Key flags as TiDB sets them (pkg/ddl/create_table.go setColumnFlagWithConstraint): every PK column
    # PriKeyFlag; a one-column UNIQUE UniqueKeyFlag; the first column of any other index MultipleKeyFlag.
    key_flags: dict[str, int] = {}
    for ix in info.indexes:
        if ix.primary:
            marks = [(col_name, mt.PriKeyFlag) for col_name in ix.columns]
        elif ix.unique and len(ix.columns) == 1:
            marks = [(ix.columns[0], mt.UniqueKeyFlag)]
        else:
            marks = [(ix.columns[0], mt.MultipleKeyFlag)]
        for col_name, f in marks:
            key_flags[col_name.lower()] = key_flags.get(col_name.lower(), 0) | f
    auto_inc = str(info.extra.get("auto_increment") or "").lower()
    cols = []
    for i, c in enumerate(info.columns):
        ft = c.field_type()
        name = c.name.lower()
        flag = ft.flag | key_flags.get(name, 0)
        if name == auto_inc:
            flag |= mt.AutoIncrementFlag
        if c.default is None and not c.nullable and name != auto_inc:
            flag |= mt.NoDefaultValueFlag
        # Numbers and times have the binary charset in TiDB's FieldType (types.SetBinChsClnFlag).
        charset, collate = (ft.charset, ft.collate) if ft.charset else ("binary", "binary")
        bit = c.kind == ct.BIT
        cols.append({
            "id": c.id, "name": _cistr(c.name), "offset": i,
            "origin_default": default_text(c, c.origin_default),
            "origin_default_bit": base64.b64encode(c.origin_default).decode() if bit and c.origin_default else None,
            "default": default_text(c, c.default),
            "default_bit": base64.b64encode(c.default).decode() if bit and c.default else None,
            "default_is_expr": False, "generated_expr_string": "", "generated_stored": False,
            "dependences": None,
            "type": {"Tp": ft.tp, "Flag": flag, "Flen": ft.flen, "Decimal": ft.decimal, "Charset": charset,
                     "Collate": collate, "Elems": list(ft.elems) or None, "ElemsIsBinaryLit": None,
                     "Array": False},
            "state": STATE_PUBLIC, "comment": "", "hidden": False, "change_state_info": None,
            "version": COLUMN_INFO_VERSION,
        })
    indexes = [
        {"id": ix.id, "idx_name": _cistr(ix.name), "tbl_name": _cistr(""),
         "idx_cols": [{"name": _cistr(info.column(c).name), "offset": offsets[c.lower()], "length": -1}
                      for c in ix.columns],
         "state": STATE_PUBLIC, "backfill_state": 0, "comment": "", "index_type": INDEX_TYPE_BTREE,
         "is_unique": ix.unique or ix.primary, "is_primary": ix.primary, "is_invisible": False,
         "is_global": False, "mv_index": False}
        for ix in info.indexes
        if not (ix.primary and info.pk_is_handle)  # the handle column is the key, not an index
    ]
    return {
        "id": info.id, "name": _cistr(info.name), "charset": _UTF8[0], "collate": _UTF8[1], "cols": cols,
        "index_info": indexes, "constraint_info": None, "fk_info": None, "state": STATE_PUBLIC,
        "pk_is_handle": info.pk_is_handle, "is_common_handle": info.is_common_handle,
        "common_handle_version": COMMON_HANDLE_VERSION if info.is_common_handle else 0,
        "comment": "", "auto_inc_id": 0, "auto_id_cache": 0, "auto_rand_id": 0,
        "max_col_id": max(info.max_column_id, max((c.id for c in info.columns), default=0)),
        "max_idx_id": max((ix.id for ix in info.indexes), default=0), "max_fk_id": 0, "max_cst_id": 0,
        "update_timestamp": 0, "ShardRowIDBits": 0, "max_shard_row_id_bits": 0, "auto_random_bits": 0,
        "auto_random_range_bits": 0, "pre_split_regions": 0,
        "partition": info.partition.to_tidb() if info.partition is not None else None, "compression": "",
        "view": None, "sequence": None, "Lock": None, "version": TABLE_INFO_VERSION, "tiflash_replica": None,
        "is_columnar": False, "temp_table_type": 0, "cache_table_status": 0, "policy_ref_info": None,
        "stats_options": None, "exchange_partition_info": None, "ttl_info": None, "revision": 0,
    }


def _column_from_tidb(d: dict[str, Any], where: str) -> tuple[Column, int]:
    name = _name(d.get("name"), where)
    where = f"{where} column {name!r}"
    t = d.get("type")
    if not isinstance(t, dict) or not isinstance(t.get("Tp"), int):
        raise SchemaError(f"{where}: no field type {{\"Tp\", \"Flag\", ...}}")
    tp, flag = t["Tp"], int(t.get("Flag") or 0)
    flen, decimal = int(t.get("Flen", mt.UnspecifiedLength)), int(t.get("Decimal", mt.UnspecifiedLength))
    binary = mt.FieldType(tp, flag, charset=t.get("Charset") or "", collate=t.get("Collate") or "").binary
    type_name = _NAME_OF.get((tp, binary)) or _NAME_OF.get((tp, False)) or _NAME_OF.get((tp, True))
    if type_name is None:
        raise SchemaError(f"{where}: unsupported column type {mt.type_name(tp)} (Tp {tp})")
    kind = ct.TYPES[type_name].kind
    kw: dict[str, Any] = {}
    if kind in (ct.INT, ct.FLOAT, ct.DECIMAL):
        kw["unsigned"] = bool(flag & mt.UnsignedFlag)
    if type_name in ("char", "varchar", "binary", "varbinary", "bit"):
        kw["length"] = flen
    elif kind == ct.VECTOR:  # Flen: the dimension, -1 (UnspecifiedLength) for VECTOR of any
        kw["length"] = flen if flen >= 0 else None
    elif kind == ct.DECIMAL:
        kw["precision"], kw["scale"] = flen, max(decimal, 0)
    elif kind in (ct.DATETIME, ct.TIMESTAMP, ct.TIME):
        kw["fsp"] = max(decimal, 0)
    elif kind in (ct.ENUM, ct.SET):
        kw["elems"] = tuple(t.get("Elems") or ())
    collate = str(t.get("Collate") or "")
    if kind in (ct.TEXT, ct.ENUM, ct.SET) and collate not in ct.BIN_COLLATIONS:
        kw["collate"] = collate
    try:
        col = Column(int(d["id"]), name, type_name, nullable=not flag & mt.NotNullFlag, **kw)
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"{where}: {exc}") from None
    default = _default_from(col, d.get("default"), d.get("default_bit"), where)
    if "origin_default" in d or "origin_default_bit" in d:
        origin = _default_from(col, d.get("origin_default"), d.get("origin_default_bit"), where)
    else:
        origin = default
    return Column(col.id, col.name, col.type, nullable=col.nullable, default=default, origin_default=origin,
                  **kw), flag


def table_from_tidb(d: dict[str, Any], *, db_name: str, db_id: int, schema_version: int = 0) -> TableInfo:
    """The ``TableInfo`` of ``model.TableInfo`` JSON (TiDB's tables keep no database; the job names it)."""
    if not isinstance(d, dict):
        raise SchemaError(f"table info is not a JSON object: {d!r}")
    name = _name(d.get("name"), "table info")
    where = f"table info {db_name}.{name}"
    columns: list[Column] = []
    auto_inc = None
    handle: str | None = None
    for cd in sorted(d.get("cols") or (), key=lambda c: c.get("offset", 0)):
        if cd.get("state", STATE_PUBLIC) != STATE_PUBLIC or cd.get("hidden"):
            continue  # a column being added or dropped: rows carry it, readers do not see it
        col, flag = _column_from_tidb(cd, where)
        columns.append(col)
        if flag & mt.AutoIncrementFlag:
            auto_inc = col.name
        if flag & mt.PriKeyFlag and d.get("pk_is_handle"):
            handle = col.name
    if not columns:
        raise SchemaError(f"{where}: no columns")
    indexes: list[Index] = []
    if d.get("pk_is_handle"):
        if handle is None:
            raise SchemaError(f"{where}: pk_is_handle but no column has PriKeyFlag")
        indexes.append(Index("PRIMARY", (handle,), unique=True, primary=True, id=0))
    for ix in d.get("index_info") or ():
        if ix.get("state", STATE_PUBLIC) != STATE_PUBLIC:
            continue
        cols = tuple(_name(c.get("name"), where) for c in ix.get("idx_cols") or ())
        indexes.append(Index(_name(ix.get("idx_name"), where), cols, unique=bool(ix.get("is_unique")),
                             primary=bool(ix.get("is_primary")), id=int(ix.get("id", 0))))
    if d.get("is_common_handle") and not any(ix.primary for ix in indexes):
        raise SchemaError(f"{where}: is_common_handle but no primary index in index_info")
    try:
        return TableInfo(
            id=int(d["id"]), db_name=db_name, name=name, columns=tuple(columns), indexes=tuple(indexes),
            pk_is_handle=bool(d.get("pk_is_handle")), is_common_handle=bool(d.get("is_common_handle")),
            schema_version=schema_version, db_id=db_id,
            max_column_id=int(d.get("max_col_id") or max(c.id for c in columns)),
            extra={"auto_increment": auto_inc} if auto_inc else {},
            partition=PartitionInfo.from_tidb(d["partition"], where) if d.get("partition") else None,
        )
    except PartitionError as exc:
        raise SchemaError(str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"{where}: {exc}") from None


def db_to_tidb(db_id: int, name: str) -> dict[str, Any]:
    """``model.DBInfo`` JSON."""
    return {"id": db_id, "db_name": _cistr(name), "charset": _UTF8[0], "collate": _UTF8[1],
            "state": STATE_PUBLIC, "policy_ref_info": None}


# --- jobs ----------------------------------------------------------------------------------------------------


def job_to_tidb(job: DDLJob, *, finished: bool = True) -> dict[str, Any]:
    """``model.Job`` JSON of a ``DDLJob`` (state left to the caller). ``finished``: whether ``binlog.FinishedTS``
    is set (TiDB sets it when the job is moved to the history table, not in the done row)."""
    table_id, table_name = job.table_id, job.table_name
    schema_id, schema_name = job.schema_id, job.schema_name
    args: list[Any] = []
    if job.job_type == "exchange partition":
        # TiDB's job is the normal table's; the partitioned table is in the args (ExchangeTablePartitionArgs,
        # positional in JobVersion1) and its TableInfo after the swap is the binlog's.
        schema_id, table_id, schema_name = job.old_schema_id, job.old_table_id, job.old_schema_name
        table_name = job.old_table_name
        args = [job.partition_id, job.schema_id, job.table_id, job.partition_name, job.with_validation]
    elif job.job_type in _REPARTITION_ACTIONS:
        # TablePartitionArgs as a finished job carries them (JobVersion1): the old physical tables, for delete-range.
        table_id = job.old_table_id if job.old_table_id is not None else job.table_id
        args = [list(job.old_physical_ids)]
    elif job.job_type == "truncate table":
        table_id = job.old_table_id if job.old_table_id is not None else job.table_id
        args = [None, []]  # GetTruncateTableArgsAfterRun: [start key, old partition ids]
    elif job.job_type == "rename table":
        table_name = job.old_table_name or job.table_name
        old_schema_id = job.old_schema_id if job.old_schema_id is not None else job.schema_id
        args = [old_schema_id, _cistr(job.table_name or ""), _cistr(job.old_schema_name or job.schema_name or "")]
    binlog: dict[str, Any] = {"SchemaVersion": job.schema_version, "DBInfo": None, "TableInfo": None,
                              "FinishedTS": job.finished_ts if finished else 0, "MultipleTableInfos": None}
    if job.job_type in ("create schema", "drop schema"):
        binlog["DBInfo"] = db_to_tidb(job.schema_id or 0, job.schema_name or "")
    elif job.table_info is not None:
        binlog["TableInfo"] = table_to_tidb(job.table_info)
    action = ACTION_TYPES.get(job.job_type)
    if action is None:
        raise SchemaError(f"job {job.job_id}: no TiDB action type for {job.job_type!r}")
    return {
        "id": job.job_id, "type": action, "schema_id": schema_id or 0, "table_id": table_id or 0,
        "schema_name": schema_name or "", "table_name": table_name or "", "state": 0, "warning": None,
        "err": None, "err_count": 0, "row_count": 0, "raw_args": args,
        "schema_state": STATE_NONE if job.job_type in _DROPS else STATE_PUBLIC, "snapshot_ver": 0,
        "real_start_ts": 0, "start_ts": 0, "dependency_id": 0, "query": job.query, "binlog": binlog,
        "version": JOB_VERSION, "reorg_meta": None, "multi_schema_info": _multi_schema_info(job), "priority": 0,
        "seq_num": 0,
        "charset": _UTF8[0], "collate": _UTF8[1],
    }


def _multi_schema_info(job: DDLJob) -> dict[str, Any] | None:
    """``MultiSchemaInfo`` of a finished multi-schema change: a finished sub-job per change, in order."""
    if not job.sub_job_types:
        return None
    subs = [{"type": ACTION_TYPES[t], "raw_args": None, "schema_state": STATE_NONE if t.startswith("drop")
             else STATE_PUBLIC, "snapshot_ver": 0, "real_start_ts": 0, "revertible": False, "state": 4,
             "row_count": 0, "warning": None, "schema_version": job.schema_version, "reorg_tp": 0,
             "use_cloud": False} for t in job.sub_job_types]
    return {"sub_jobs": subs, "revertible": False, "seq": 0}


def _rename_args(raw: Any) -> tuple[int | None, str | None]:
    """(old schema id, old schema name) of a RENAME TABLE job's ``raw_args``, job version 1 or 2."""
    if isinstance(raw, list) and raw and isinstance(raw[0], dict) and "old_schema_id" in raw[0]:
        arg = raw[0]  # JobVersion2: the args struct itself
        name = arg.get("old_schema_name")
        return arg.get("old_schema_id"), _name(name, "rename args") if name else None
    if isinstance(raw, list) and len(raw) >= 3:
        return raw[0], _name(raw[2], "rename args") if raw[2] else None
    return None, None


def job_type_name(action: int) -> str:
    """cdcflow's job type of a TiDB action type, else TiDB's own name of it."""
    return _JOB_TYPE_OF.get(action) or OTHER_ACTIONS.get(action) or f"action type {action}"


def job_from_tidb(d: dict[str, Any]) -> DDLJob:
    """The ``DDLJob`` of ``model.Job`` JSON (``finished_ts`` from ``binlog.FinishedTS``, 0 when unset)."""
    try:
        job_id, action = int(d["id"]), int(d["type"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"job JSON without an id and type: {exc}") from None
    where = f"DDL job {job_id}"
    job_type = job_type_name(action)
    binlog = d.get("binlog") or {}
    schema_name = d.get("schema_name") or None
    schema_id = d.get("schema_id") or None
    dbi = binlog.get("DBInfo")
    if dbi:
        schema_name = schema_name or _name(dbi.get("db_name"), where)
        schema_id = schema_id or dbi.get("id")
    version = int(binlog.get("SchemaVersion") or 0)
    table_info = None
    ti = binlog.get("TableInfo")
    is_exchange = job_type == "exchange partition"
    exchange = _exchange_args(d.get("raw_args")) if is_exchange else None
    # Every job of a table carries the table after it, whatever its type (TiDB's finishing step sets it): the
    # schema storage follows each, applied or not. Views and sequences are kept in TiDB's meta as tables too: they
    # hold no rows and are no table here.
    if ti and job_type not in _DROPS and not (isinstance(ti, dict) and (ti.get("view") or ti.get("sequence"))):
        # An exchange's TableInfo is the partitioned table's, whose database the job does not name (its names
        # are the normal table's): schema storage gives it the name it has (as TiCDC does, tidb#43819).
        db_name, db_id = (("", exchange[1] if exchange else 0) if is_exchange
                          else (schema_name or "", int(schema_id or 0)))
        try:
            table_info = table_from_tidb(ti, db_name=db_name, db_id=db_id, schema_version=version)
        except SchemaError as exc:
            raise SchemaError(f"{where} ({job_type}): {exc}") from None
    table_id = d.get("table_id") or None
    table_name = d.get("table_name") or None
    old_table_id = old_schema_id = old_schema_name = old_table_name = None
    old_physical_ids: tuple[int, ...] = ()
    if job_type == "truncate table" and table_info is not None:
        old_table_id, table_id = table_id, table_info.id
    elif job_type in _REPARTITION_ACTIONS and table_info is not None:
        old_physical_ids = _old_physical_ids(d.get("raw_args"), where)
        if table_info.id != table_id:  # PARTITION BY / REMOVE PARTITIONING: a new table id (NewTableID)
            old_table_id, table_id = table_id, table_info.id
    elif job_type == "rename table" and table_info is not None:
        old_schema_id, old_schema_name = _rename_args(d.get("raw_args"))
        old_table_id, old_table_name, table_name = table_id, table_name, table_info.name
    elif is_exchange:
        if table_info is None or table_info.partition is None or (exchange and table_info.id != exchange[2]):
            raise SchemaError(f"{where} (exchange partition): the binlog's TableInfo is not the partitioned table"
                              + (f" {exchange[2]} of the args" if exchange else ""))
        old_schema_id, old_table_id, old_schema_name, old_table_name = schema_id, table_id, schema_name, table_name
        schema_id, table_id, schema_name = exchange[1] if exchange else None, table_info.id, None
    if table_info is not None:
        table_name = table_info.name
    msi = d.get("multi_schema_info") or {}
    sub_job_types = tuple(job_type_name(int(sj.get("type", -1))) for sj in msi.get("sub_jobs") or ())
    return DDLJob(
        sub_job_types=sub_job_types if action == ACTION_TYPES[MULTI_SCHEMA_CHANGE] else (),
        job_id=job_id, job_type=job_type, schema_id=schema_id, table_id=table_id, schema_name=schema_name,
        table_name=table_name, query=str(d.get("query") or ""), schema_version=version, table_info=table_info,
        finished_ts=int(binlog.get("FinishedTS") or 0), old_table_id=old_table_id,
        old_schema_name=old_schema_name, old_table_name=old_table_name, old_schema_id=old_schema_id,
        partition_id=exchange[0] if exchange else None, partition_name=exchange[3] if exchange else None,
        with_validation=exchange[4] if exchange else True, old_physical_ids=old_physical_ids,
    )


def _old_physical_ids(raw: Any, where: str) -> tuple[int, ...]:
    """``OldPhysicalTblIDs`` of a finished partition-reorganizing job's ``raw_args`` (JobVersion1 ``[ids]``,
    JobVersion2 ``[{"old_physical_tbl_ids": ids}]``); () when TiDB wrote none."""
    try:
        if isinstance(raw, list) and raw and isinstance(raw[0], dict):
            return tuple(int(i) for i in raw[0].get("old_physical_tbl_ids") or ())
        if isinstance(raw, list) and raw and isinstance(raw[0], list):
            return tuple(int(i) for i in raw[0])
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{where}: bad finished args {raw!r}: {exc}") from None
    return ()


def _exchange_args(raw: Any) -> tuple[int, int, int, str, bool] | None:
    """(partition id, partitioned table's schema id, its table id, partition name, with validation) of an
    EXCHANGE PARTITION job's ``raw_args``: JobVersion1's positional list or JobVersion2's struct
    (``ExchangeTablePartitionArgs``, pkg/meta/model/job_args.go). None when they are not readable so: TiCDC does
    not read them either, and the schema storage finds the partition from the ids the job swapped."""
    try:
        if isinstance(raw, list) and raw and isinstance(raw[0], dict):
            a = raw[0]
            return (int(a["partition_id"]), int(a["pt_schema_id"]), int(a["pt_table_id"]),
                    str(a.get("partition_name") or ""), bool(a.get("with_validation", False)))
        if isinstance(raw, list) and len(raw) >= 4:
            name = raw[3]
            text = name.get("O") if isinstance(name, dict) else name
            return int(raw[0]), int(raw[1]), int(raw[2]), str(text), bool(raw[4]) if len(raw) > 4 else False
    except (KeyError, TypeError, ValueError):
        pass
    return None


# --- jobs of several tables -------------------------------------------------------------------------------------


def jobs_to_tidb(parts: Sequence[DDLJob], *, finished: bool = True) -> dict[str, Any]:
    """``model.Job`` JSON of a job: one ``DDLJob``, or the parts of a CREATE TABLES / RENAME TABLES."""
    if len(parts) == 1:
        return job_to_tidb(parts[0], finished=finished)
    kinds = {p.job_type for p in parts}
    action = next((a for a, k in MULTI_TABLE_ACTIONS.items() if {k} == kinds), None)
    tables = [p.table_info for p in parts if p.table_info is not None]
    if action is None or len(tables) != len(parts):
        raise SchemaError(f"job {parts[0].job_id}: parts {sorted(kinds)} are not one CREATE TABLES / RENAME TABLES")
    first = parts[0]
    d = job_to_tidb(first, finished=finished)
    d.update(type=action, table_name="", query=first.query)
    d["binlog"]["TableInfo"] = table_to_tidb(tables[-1])
    d["binlog"]["MultipleTableInfos"] = [table_to_tidb(t) for t in tables]
    if action == ACTION_RENAME_TABLES:
        d["raw_args"] = [
            [p.old_schema_id if p.old_schema_id is not None else p.schema_id for p in parts],
            [p.schema_id for p in parts],
            [_cistr(p.table_name or "") for p in parts],
            [p.table_id for p in parts],
            [_cistr(p.old_schema_name or "") for p in parts],
            [_cistr(p.old_table_name or "") for p in parts],
        ]
        d["involving_schema_info"] = [
            {"database": (db or "").lower(), "table": (t or "").lower()}
            for p in parts for db, t in ((p.old_schema_name, p.old_table_name), (p.schema_name, p.table_name))
        ]
    else:
        d["raw_args"] = [None, False]  # [table infos (dropped once finished), foreign key checks]
    return d


def jobs_from_tidb(d: dict[str, Any]) -> list[DDLJob]:
    """The ``DDLJob``s of ``model.Job`` JSON: one, or one per table of a CREATE TABLES / RENAME TABLES (as TiCDC
    splits them), numbered by ``sub_index``."""
    try:
        action = int(d.get("type", -1))
    except (TypeError, ValueError):
        action = -1
    if action not in MULTI_TABLE_ACTIONS:
        return [job_from_tidb(d)]
    from dataclasses import replace

    binlog = d.get("binlog") or {}
    infos = binlog.get("MultipleTableInfos") or []
    base = job_from_tidb({**d, "type": ACTION_TYPES[MULTI_TABLE_ACTIONS[action]], "binlog": {**binlog,
                                                                                          "TableInfo": None}})
    where = f"DDL job {base.job_id} ({OTHER_ACTIONS[action]})"
    if not infos:
        raise SchemaError(f"{where}: no binlog.MultipleTableInfos")
    if action == ACTION_CREATE_TABLES:
        return [replace(base, table_id=t.id, table_name=t.name, table_info=t, sub_index=i)
                for i, t in enumerate(_tables(infos, base, where, [base.schema_name] * len(infos),
                                              [base.schema_id] * len(infos)))]
    old_ids, new_ids, _names, table_ids, old_dbs, old_names = _rename_tables_args(d, len(infos), where)
    involving = d.get("involving_schema_info") or []
    new_dbs = []
    for i, new_id in enumerate(new_ids):
        name = next((old_dbs[j] for j, o in enumerate(old_ids) if o == new_id and old_dbs[j]), None)
        if name is None and len(involving) == 2 * len(infos):
            name = involving[2 * i + 1].get("database")
        if name is None and new_id == base.schema_id:
            name = base.schema_name
        if name is None:
            raise SchemaError(f"{where}: no name for the new schema {new_id} of table {table_ids[i]}")
        new_dbs.append(name)
        if old_names[i] is None and len(involving) == 2 * len(infos):  # RENAME TABLES args before TiDB v8.2
            old_names[i] = involving[2 * i].get("table")
    tables = _tables(infos, base, where, new_dbs, new_ids)
    return [replace(base, schema_id=new_ids[i], schema_name=new_dbs[i], table_id=t.id, table_name=t.name,
                    table_info=t, old_table_id=t.id, old_schema_id=old_ids[i], old_schema_name=old_dbs[i],
                    old_table_name=old_names[i], sub_index=i)
            for i, t in enumerate(tables)]


def _tables(infos: list[Any], base: DDLJob, where: str, dbs: list[str | None],
            db_ids: list[int | None]) -> list[TableInfo]:
    try:
        return [table_from_tidb(t, db_name=db or "", db_id=int(db_id or 0), schema_version=base.schema_version)
                for t, db, db_id in zip(infos, dbs, db_ids, strict=True)]
    except SchemaError as exc:
        raise SchemaError(f"{where}: {exc}") from None


def _rename_tables_args(d: dict[str, Any], n: int, where: str) -> tuple[list[Any], ...]:
    """``(old schema ids, new schema ids, new names, table ids, old schema names, old names)`` of RENAME TABLES,
    job version 1 (positional lists) or 2 (``[{"rename_table_infos": [RenameTableArgs...]}]``)."""
    raw = d.get("raw_args")
    if isinstance(raw, list) and raw and isinstance(raw[0], dict):
        infos = raw[0].get("rename_table_infos") or []
        cols: tuple[list[Any], ...] = (
            [a.get("old_schema_id") for a in infos], [a.get("new_schema_id") for a in infos],
            [a.get("new_table_name") for a in infos], [a.get("table_id") for a in infos],
            [a.get("old_schema_name") for a in infos], [a.get("old_table_name") for a in infos])
    elif isinstance(raw, list) and len(raw) >= 5:
        cols = (*raw[:5], raw[5] if len(raw) > 5 else [None] * n)
    else:
        raise SchemaError(f"{where}: args {raw!r} are not RENAME TABLES' args")
    if any(not isinstance(c, list) or len(c) != n for c in cols):
        raise SchemaError(f"{where}: args do not name {n} tables: {raw!r}")
    old_ids, new_ids, names, table_ids, old_dbs, old_names = cols
    return (old_ids, new_ids, [_name(x, where) if x else None for x in names], table_ids,
            [_name(x, where) if x else None for x in old_dbs], [_name(x, where) if x else None for x in old_names])


def job_concerns(d: dict[str, Any]) -> tuple[list[tuple[str, str]], list[int]]:
    """The ``(database, table)`` names and the table ids a ``model.Job`` JSON concerns, read without decoding any
    ``TableInfo`` (its name and id only): the job's own names, the table's name after it (RENAME TABLE's job names
    the old one), each table of a CREATE / RENAME TABLES (``involving_schema_info``), and the partitioned table of
    an EXCHANGE PARTITION (by id: the job names only the normal table). The DDL puller filters jobs by these first,
    so that a job it cannot decode stops only the changefeeds that replicate its tables."""
    names: list[tuple[str, str]] = []
    ids: list[int] = []
    schema = str(d.get("schema_name") or "")
    if d.get("table_name"):
        names.append((schema, str(d["table_name"])))
    if isinstance(d.get("table_id"), int) and d["table_id"]:
        ids.append(d["table_id"])
    binlog = d.get("binlog") or {}
    for ti in [binlog.get("TableInfo"), *(binlog.get("MultipleTableInfos") or [])]:
        if isinstance(ti, dict):
            name = ti.get("name")
            text = name.get("O") if isinstance(name, dict) else name
            if isinstance(text, str) and text:
                names.append((schema, text))
            if isinstance(ti.get("id"), int):
                ids.append(ti["id"])
    for inv in d.get("involving_schema_info") or ():
        if isinstance(inv, dict) and inv.get("table"):
            names.append((str(inv.get("database") or schema), str(inv["table"])))
    exchange = _exchange_args(d.get("raw_args")) if d.get("type") == ACTION_TYPES["exchange partition"] else None
    if exchange is not None:
        ids.append(exchange[2])
    return names, ids
