"""Cost of the column DDLs on a silver table (not collected by pytest: run it by hand).

    .venv/bin/python tests/bench/ddl_rewrite_bench.py [--rows 1000000]

Builds a 6-column table (INT key, BIGINT, INT, DECIMAL(12,2), VARCHAR, DATETIME) with delta-rs, then
times each ALTER through ``spark_jobs.ddl_apply.apply_ddl`` and prints one line per job: seconds,
whether data files were rewritten, and the table size on disk after it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from cdc_core.codec.sink_uri import table_path
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.ddl_apply import apply_ddl

CF = "bench"


def _table() -> TableInfo:
    return TableInfo(
        id=1000, db_name="bench", name="t",
        columns=(Column(1, "id", "int", nullable=False), Column(2, "big", "bigint"), Column(3, "i", "int"),
                 Column(4, "d", "decimal", precision=12, scale=2), Column(5, "s", "varchar", length=32),
                 Column(6, "dt", "datetime", fsp=6)),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),), pk_is_handle=True, max_column_id=6,
    )  # fmt: skip


def _data(t: TableInfo, n: int) -> pa.Table:
    import pyarrow.compute as pc

    ids = pa.array(range(n), pa.int32())
    base = datetime(2024, 1, 1)
    return pa.Table.from_arrays(
        [
            ids,
            pc.multiply(ids.cast(pa.int64()), 1_000_003),
            pc.multiply(ids, 7),
            pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
            pa.array([f"row-{i:010d}" for i in range(n)], pa.string()),
            pa.array([base + timedelta(seconds=i) for i in range(n)], pa.timestamp("us")),
        ],
        schema=t.arrow_schema(),
    )


def _size(path: str) -> int:
    dt = DeltaTable(path)
    return sum(os.path.getsize(u.removeprefix("file://")) for u in dt.file_uris())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    n = p.parse_args().rows
    with tempfile.TemporaryDirectory() as sink:
        t = _table()
        path = table_path(sink, t)
        started = time.monotonic()
        write_deltalake(path, _data(t, n))
        print(f"seed {n} rows: {time.monotonic() - started:.2f}s, {_size(path) / 1e6:.1f} MB")
        steps: list[tuple[str, TableInfo]] = [
            ("add column (NULL default)", replace(t, columns=(*t.columns, Column(7, "n", "int")), max_column_id=7)),
        ]
        t1 = steps[-1][1]
        steps.append(("add column (DEFAULT 5)", replace(t1, columns=(*t1.columns, Column(8, "f", "int", default=5)),
                                                       max_column_id=8)))  # fmt: skip
        t2 = steps[-1][1]
        steps.append(("drop column", replace(t2, columns=tuple(c for c in t2.columns if c.name != "s"))))
        t3 = steps[-1][1]
        steps.append(("modify column (rename)", replace(t3, columns=tuple(replace(c, name="d2") if c.name == "d" else c
                                                                  for c in t3.columns))))  # fmt: skip
        t4 = steps[-1][1]
        steps.append(("modify column", replace(t4, columns=tuple(replace(c, type="bigint") if c.name == "i" else c
                                                                  for c in t4.columns))))  # fmt: skip
        before = t
        for ts, (kind, after) in enumerate(steps, start=100):
            job = DDLJob(job_id=ts, job_type=kind.split(" (")[0], schema_id=1, table_id=t.id, schema_name="bench",
                         table_name="t", query=kind, schema_version=ts, table_info=after, finished_ts=ts)  # fmt: skip
            files = set(DeltaTable(path).file_uris())
            started = time.monotonic()
            res = apply_ddl(sink, CF, job, before, after)
            secs = time.monotonic() - started
            rewritten = set(DeltaTable(path).file_uris()) != files
            print(f"{kind:28s} {secs:7.2f}s  rewritten={rewritten!s:5s}  size={_size(path) / 1e6:.1f} MB  "
                  f"({res['action']})")  # fmt: skip
            before = after
        assert DeltaTable(path).count() == n


if __name__ == "__main__":
    main()
