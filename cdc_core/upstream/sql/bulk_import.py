"""``IMPORT INTO t [(cols)] FROM 'path' [FORMAT 'csv'|'parquet'] [WITH opt[=v], ...]``: TiDB's physical import.

As TiDB runs it (docs.pingcap.com ``sql-statement-import-into``; TiDB Lightning's physical import mode): into an
existing, empty table, outside any explicit transaction, from files on the TiDB node (an absolute path or a
``file://`` URI, ``*`` allowed in the file name). The rows are encoded as an INSERT encodes them (``TableWriter``:
the same handles, unique-index entries, NOT NULL and duplicate checks, auto-increment rebased past the imported
values) but written straight into the MVCC store as versions at one commit ts (``MvccStore.ingest``), the way
Lightning ingests sorted SST files: no prewrite, no locks, and so no change events. TiCDC does not replicate
an import either (TiDB's docs list IMPORT INTO as incompatible with TiCDC replication); a changefeed created
after it reads the rows by its initial snapshot. Like Lightning, the import splits the table's regions so that
none holds more than ``region_keys`` keys.

Options: ``SKIP_ROWS=n`` (CSV header lines), ``FIELDS_TERMINATED_BY='c'``; in CSV ``\\N`` is NULL (TiDB's default
``FIELDS_DEFINED_NULL_BY``). The result is TiDB's row (``Job_ID``, ``Target_Table``, ``Status``, ``Imported_Rows``,
...). It is the bulk-load path of the workload's ``prepare`` and of the benchmarks: one ``pyarrow`` batch at a time,
the event loop given back between batches, nothing held but the batch.
"""

from __future__ import annotations

import asyncio
import glob
import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cdc_core.codec import key as keycodec
from cdc_core.log import get_logger
from cdc_core.schema.model import SchemaError, TableInfo
from cdc_core.upstream.pd.regions import RegionManager
from cdc_core.upstream.pd.tso import TsoAllocator
from cdc_core.upstream.sql.ddl.catalog import Catalog
from cdc_core.upstream.sql.errors import ErrorKind, SqlError
from cdc_core.upstream.sql.table_writer import AUTO_INCREMENT_KEY, TableWriter
from cdc_core.upstream.sql.txn import Transaction
from cdc_core.upstream.store.mvcc import MvccError, MvccStore

log = get_logger("cdcflow.upstream.import")

IMPORT_RE = re.compile(
    r"^\s*IMPORT\s+INTO\s+(`[^`]+`(?:\.`[^`]+`)?|[\w$.]+)\s*(?:\(([^)]*)\))?\s+FROM\s+'([^']+)'"
    r"(?:\s+FORMAT\s+'(\w+)')?(?:\s+WITH\s+(.+))?\s*$", re.IGNORECASE | re.DOTALL)
BATCH_ROWS = 8192  # rows encoded and ingested per step of the event loop
DEFAULT_REGION_KEYS = 960_000  # TiKV's region-split-keys default
NULL_TEXT = "\\N"
_SCHEDULING_OPTIONS = ("DETACHED", "THREAD", "DISK_QUOTA", "MAX_WRITE_SPEED", "CHECKSUM_TABLE",
                       "DISABLE_TIKV_IMPORT_MODE", "CLOUD_STORAGE_URI", "DISABLE_PRECHECK")
_JOB_IDS = itertools.count(1)  # TiDB numbers import jobs from 1 (mysql.tidb_import_jobs' auto id)
_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
RESULT_COLUMNS = ["Job_ID", "Data_Source", "Target_Table", "Table_ID", "Phase", "Status", "Source_File_Size",
                  "Imported_Rows", "Result_Message", "Create_Time", "Start_Time", "End_Time", "Created_By"]


@dataclass(frozen=True)
class ImportStatement:
    table: str  # as written: name, db.name or with backquotes
    columns: list[str] | None
    path: str
    format: str  # csv | parquet
    skip_rows: int = 0
    delimiter: str = ","


def parse(text: str) -> ImportStatement:
    m = IMPORT_RE.match(text)
    if m is None:
        raise SqlError("expected `IMPORT INTO t [(c1, ...)] FROM '/absolute/path' [FORMAT 'csv'|'parquet'] "
                       "[WITH option = value, ...]` (IMPORT INTO ... FROM SELECT is not supported)")
    cols = [c.strip().strip("`") for c in m.group(2).split(",")] if m.group(2) else None
    fmt = (m.group(4) or "csv").lower()
    if fmt not in ("csv", "parquet"):
        raise SqlError(f"IMPORT INTO: unsupported FORMAT '{fmt}' (csv or parquet)")
    skip, delimiter = 0, ","
    for opt in _options(m.group(5) or ""):
        name, _, value = opt.partition("=")
        name, value = name.strip().upper(), value.strip().strip("'\"")
        if name == "SKIP_ROWS":
            if not value.isdigit():
                raise SqlError(f"IMPORT INTO: SKIP_ROWS must be a number, got {value!r}")
            skip = int(value)
        elif name == "FIELDS_TERMINATED_BY":
            if len(value) != 1:
                raise SqlError(f"IMPORT INTO: FIELDS_TERMINATED_BY must be one character, got {value!r}")
            delimiter = value
        elif name in _SCHEDULING_OPTIONS:
            continue  # scheduling and resource options: nothing to do in one process
        else:
            raise SqlError(f"IMPORT INTO: unsupported option {name}")
    path = m.group(3)
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif "://" in path:
        raise SqlError(f"IMPORT INTO: only files on the TiDB node are supported here, not {m.group(3)!r}")
    if not os.path.isabs(path):
        raise SqlError(f"IMPORT INTO: the file path must be absolute, got {m.group(3)!r}")
    return ImportStatement(m.group(1), cols, path, fmt, skip, delimiter)


def _options(text: str) -> list[str]:
    return [o for o in (p.strip() for p in re.split(r",(?=(?:[^']*'[^']*')*[^']*$)", text)) if o]


class _IngestTxn(Transaction):
    """What ``TableWriter`` writes through during an import: a batch of puts, reads of the batch and of what the
    import ingested before it (at its commit ts), so that duplicates in the data are found as an INSERT finds them."""

    def __init__(self, store: MvccStore, tso: TsoAllocator, commit_ts: int) -> None:
        super().__init__(store, tso, start_ts=commit_ts)
        self.batch: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        v = self.batch.get(key)
        return v if v is not None else self.store.get(key, self.start_ts)

    def put(self, key: bytes, value: bytes) -> None:
        self.batch[key] = value

    def delete(self, key: bytes) -> None:
        raise SqlError("IMPORT INTO writes rows only")


def human_size(n: float) -> str:
    """A byte count as TiDB prints ``Source_File_Size`` (docker/go-units ``BytesSize``: ``%.4g`` of the binary
    unit, e.g. ``16B``, ``11.83MiB``)."""
    unit = 0
    while n >= 1024 and unit < len(_SIZE_UNITS) - 1:
        n /= 1024
        unit += 1
    return f"{n:.4g}{_SIZE_UNITS[unit]}"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _files(pattern: str) -> list[str]:
    files = sorted(glob.glob(pattern)) if any(ch in pattern for ch in "*?[") else [pattern]
    files = [f for f in files if os.path.isfile(f)]
    if not files:
        raise SqlError(f"IMPORT INTO: no file matches {pattern!r}", ErrorKind.NOT_FOUND)
    return files


def _batches(st: ImportStatement, files: list[str], names: list[str]) -> Iterator[list[dict[str, Any]]]:
    """Rows as ``{column: raw value}``, a batch of at most ``BATCH_ROWS`` at a time."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    for f in files:
        try:
            if st.format == "parquet":
                pf = pq.ParquetFile(f)
                missing = [n for n in names if n not in pf.schema_arrow.names]
                if missing:
                    raise SqlError(f"IMPORT INTO: {f} has no column {missing[0]!r}")
                for rb in pf.iter_batches(batch_size=BATCH_ROWS, columns=names):
                    yield rb.to_pylist()
                continue
            reader = pacsv.open_csv(
                f, read_options=pacsv.ReadOptions(column_names=names, skip_rows=st.skip_rows,
                                                  block_size=1 << 22),
                parse_options=pacsv.ParseOptions(delimiter=st.delimiter),
                convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                     null_values=[NULL_TEXT], strings_can_be_null=True,
                                                     quoted_strings_can_be_null=False))
            for rb in reader:
                for lo in range(0, rb.num_rows, BATCH_ROWS):
                    yield rb.slice(lo, BATCH_ROWS).to_pylist()
        except pa.ArrowInvalid as exc:
            raise SqlError(f"IMPORT INTO: cannot read {f}: {exc}") from exc


async def run_import(st: ImportStatement, info: TableInfo, *, store: MvccStore, tso: TsoAllocator, catalog: Catalog,
                     regions: RegionManager, region_keys: int = DEFAULT_REGION_KEYS) -> dict[str, Any]:
    """Import the files into ``info`` (which must be empty); returns TiDB's result row."""
    spans = [keycodec.table_span(pid) for pid in info.physical_ids]
    now = tso.next()
    if any(store.scan(s, e, now, limit=1) for s, e in spans):
        raise SqlError(f"IMPORT INTO: the target table {info.qualified_name} is not empty", ErrorKind.CONSTRAINT)
    names = [info.column(c).name for c in st.columns] if st.columns else [c.name for c in info.columns]
    files = _files(st.path)
    size = sum(os.path.getsize(f) for f in files)
    started = _now()
    commit_ts = tso.next()
    txn = _IngestTxn(store, tso, commit_ts)
    writer = TableWriter(txn, info, catalog)
    auto_inc = info.extra.get(AUTO_INCREMENT_KEY)
    for c in info.columns:
        if c.name not in names and c.default is None and not c.nullable and c.name != auto_inc:
            raise SqlError(f"IMPORT INTO: field '{c.name}' doesn't have a default value", ErrorKind.CONSTRAINT)
    defaults = {c.name: c.default for c in info.columns if c.name not in names}
    rows = 0
    for batch in _batches(st, files, names):
        for raw in batch:
            rows += 1
            try:
                values = dict(defaults)
                for name in names:
                    values[name] = info.column(name).convert(raw[name])
                writer.insert(values)
            except (SchemaError, ValueError) as exc:
                raise SqlError(f"IMPORT INTO {info.qualified_name}: row {rows}: {exc}") from exc
            except SqlError as exc:
                raise SqlError(f"IMPORT INTO {info.qualified_name}: row {rows}: {exc}", exc.kind) from exc
        try:
            store.ingest(txn.batch.items(), commit_ts)
        except MvccError as exc:
            raise SqlError(f"IMPORT INTO {info.qualified_name}: {exc} (the table was written during the import)",
                           ErrorKind.CONFLICT) from exc
        txn.batch = {}
        await asyncio.sleep(0)  # PD, the TSO and the change feed keep being served
    split = [k for s, e in spans for k in store.split_points(s, e, region_keys)]
    if split:
        regions.split(split)
    log.info("import into", table=info.qualified_name, rows=rows, files=len(files), bytes=size,
             commit_ts=commit_ts, regions_split=len(split), seconds=round((_now() - started).total_seconds(), 2))
    return {"Job_ID": next(_JOB_IDS), "Data_Source": st.path, "Target_Table": f"`{info.db_name}`.`{info.name}`",
            "Table_ID": info.id, "Phase": "", "Status": "finished", "Source_File_Size": human_size(size),
            "Imported_Rows": rows,
            "Result_Message": "", "Create_Time": started, "Start_Time": started, "End_Time": _now(),
            "Created_By": "root@%"}
