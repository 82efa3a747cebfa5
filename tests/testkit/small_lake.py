"""A sink of small Delta tables as cdcflow's windows leave them (every commit stamped with its ``cdcflow.ts``), for
the tests of their upkeep (``spark_jobs.maintain``, ``cdc_core.changefeed.upkeep``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa


def append(path: Path, rows: list[int], ts: int) -> None:
    """One window's commit of ``rows`` (an ``id`` column) at cdcflow ts ``ts``: a small file each."""
    from deltalake import CommitProperties, write_deltalake

    write_deltalake(str(path), pa.table({"id": rows}), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"cdcflow.ts": str(ts)}))


def version_as_of(path: Path, ts: int) -> int | None:
    """What spark_jobs.checks.data_quality.version_as_of computes (time travel by cdcflow ts)."""
    from deltalake import DeltaTable

    best = None
    for info in DeltaTable(str(path)).history():
        if int(info.get("cdcflow.ts") or 0) <= ts and (best is None or int(info["version"]) > best):
            best = int(info["version"])
    return best


def data_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.parquet")}


def make_lake(sink: Path) -> Path:
    """Silver tables shop.orders (5 small files, ts 100-104) and shop.items under ``sink``, a directory that is
    not a Delta table and an internal ``_cdcflow`` Delta table that upkeep must not take for a silver table."""
    from deltalake import write_deltalake

    for i in range(5):
        append(sink / "shop" / "orders", [i], 100 + i)
    append(sink / "shop" / "items", [1], 104)
    (sink / "shop" / "notes").mkdir()
    write_deltalake(str(sink / "_cdcflow" / "dq_results"), pa.table({"x": [1]}))
    return sink
