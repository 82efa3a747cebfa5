"""Helpers of the end-to-end tests: Delta vs upstream rows, the CLI in-process, and the artifacts folder."""

from __future__ import annotations

import bisect
import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from deltalake import DeltaTable
from typer.testing import CliRunner

from cdc_core import failpoint
from cdc_core.cli import main as cli_main
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec.sink_uri import table_path_of
from cdc_core.codec.sql_ident import quote_table
from cdc_core.codec.value_text import json_value
from spark_jobs.load.silver_read import read_table

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def failpoint_armed(monkeypatch: pytest.MonkeyPatch, spec: str) -> Iterator[None]:
    """Failpoints ``spec`` (``CDCFLOW_FAILPOINTS``) armed in this process, in raise mode, for the block."""
    monkeypatch.setenv(failpoint.ENV, spec)
    monkeypatch.setenv(failpoint.ACTION_ENV, "raise")
    failpoint.reset()
    try:
        yield
    finally:
        monkeypatch.delenv(failpoint.ENV)
        failpoint.reset()


def mark_index(marks: list[int], ts: int | None) -> int | None:
    """The index ``i`` of the mark whose interval ``(marks[i - 1], marks[i]]`` holds the commit ts ``ts`` (None
    stays None): a test's commits named by the ts it took after each, as a history table's ``__START_AT`` /
    ``__END_AT`` are compared with the versions it wrote."""
    if ts is None:
        return None
    i = bisect.bisect_left(marks, ts)
    assert i < len(marks), (ts, marks)
    return i


def artifacts_dir(name: str) -> Path:
    """``.artifacts/<name>/`` (``CDCFLOW_ARTIFACTS`` overrides ``.artifacts``): what a test keeps for people to read
    (screenshots, transcripts, timings)."""
    d = Path(os.environ.get("CDCFLOW_ARTIFACTS") or ROOT / ".artifacts") / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def delta_rows(sink: Path, db: str, table: str, key: str) -> list[dict[str, Any]]:
    dt = DeltaTable(table_path_of(str(sink), db, table))
    rows = [{k: json_value(v) for k, v in r.items() if k != "_tidb_rowid"} for r in read_table(dt).to_pylist()]
    return sorted(rows, key=lambda r: r[key])


def delta_rows_at(sink: Path, db: str, table: str, key: str, ts: int) -> list[dict[str, Any]]:
    """The Delta table as of upstream ts ``ts``: its newest version whose commit carries a cdcflow ts ``<= ts``
    (either writer's, :func:`spark_jobs.checks.data_quality.version_as_of`)."""
    from spark_jobs.checks.data_quality import version_as_of

    path = table_path_of(str(sink), db, table)
    dt = DeltaTable(path)
    version = version_as_of(path, ts)
    assert version is not None, f"{db}.{table} has no commit at or below ts {ts}"
    dt.load_as_version(version)
    rows = [{k: json_value(v) for k, v in r.items() if k != "_tidb_rowid"} for r in read_table(dt).to_pylist()]
    return sorted(rows, key=lambda r: r[key])


def upstream_rows(client: UpstreamClient, db: str, table: str, key: str, ts: int) -> list[dict[str, Any]]:
    return sorted(client.query(f"SELECT * FROM {quote_table(db, table)}", at_ts=ts), key=lambda r: r[key])


def typed_rows_match(client: UpstreamClient, sink: Path, db: str, table: str, ts: int) -> int:
    """Assert that the Delta table ``db.table`` equals the upstream's rows at ``ts`` value by value, each compared
    in its canonical form under the table's schema at ``ts`` (so a TIME stored as nanoseconds in Delta meets the
    upstream's ``HH:MM:SS``, a BIGINT UNSIGNED decimal its integer); returns the row count. The first differing
    row's differing columns are in the failure message."""
    from cdc_core.changefeed.schema_loader import load_schema
    from spark_jobs.checks.data_quality import canonical_value

    found = [t for t in load_schema(client, ts).tables_at(ts) if (t.db_name, t.name) == (db, table)]
    assert len(found) == 1, f"{db}.{table} at {ts}: {len(found)} tables"
    cols = found[0].columns

    def canon(row: dict[str, Any], read: Any) -> tuple[str | None, ...]:
        return tuple(canonical_value(c, read(c, row[c.name])) for c in cols)

    up = sorted(canon(r, lambda c, v: v) for r in client.query(f"SELECT * FROM {quote_table(db, table)}", at_ts=ts))
    lake = sorted(canon(r, lambda c, v: c.from_arrow(v))
                  for r in read_table(DeltaTable(table_path_of(str(sink), db, table))).to_pylist())
    assert len(lake) == len(up), f"{db}.{table} at {ts}: {len(lake)} rows in Delta, {len(up)} upstream"
    for a, b in zip(lake, up, strict=True):
        assert a == b, (f"{db}.{table} at {ts}: "
                        f"{[(c.name, x, y) for c, x, y in zip(cols, a, b, strict=True) if x != y]}")
    return len(up)


@functools.cache
def cli_app() -> typer.Typer:
    """``cdcflow`` with every command group registered, for invoking commands in this process."""
    return cli_main.build_app()


def cli(*args: str) -> str:
    """Run `cdcflow ARGS` in this process; fails the test on a non-zero exit."""
    res = CliRunner().invoke(cli_app(), list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output
