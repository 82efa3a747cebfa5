"""A table's key changes while it is replicated (issue 52): on a NONCLUSTERED table the primary key is dropped (the
key becomes its NOT NULL unique key), then that unique index (the key becomes ``_tidb_rowid``, and the old key
repeats), then a primary key is added again. Each change re-keys the silver table at its barrier, with DML
before and after it in the same window, and after every window Delta equals the upstream -- duplicates of the old
key included -- under the window checks in checksum mode. A rebuild from the changelog replays the changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.schema.model import ROWID_COLUMN
from testkit.e2e import cli as _cli
from testkit.e2e import typed_rows_match

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

DB = "e2e_keys"


def _window(c: UpstreamClient, cid: str) -> int:
    t = c.get_ts()
    runner.run_until(cid, t)
    st = load_state(cid)
    assert (st.checkpoint_ts, st.state) == (t, "normal"), st.error
    return t


def _mapped(sink: Path, where: str) -> dict[str, int]:
    """``{column: count}`` of the ``values_mapped`` rows of the data-quality results recorded for ``where``."""
    from cdc_core.changefeed.dq_results import results_path

    out: dict[str, int] = {}
    for r in DeltaTable(results_path(f"file://{sink}")).to_pyarrow_table().to_pylist():
        if r["expectation"].startswith("values_mapped:") and r["where"].startswith(where):
            column = r["expectation"].split(":", 1)[1]
            out[column] = out.get(column, 0) + int(r["observed"])
    return out


def test_a_tables_key_changes_re_key_its_silver_table_at_the_barrier(cdc_home: Path, upstream_cluster: Any) -> None:
    sink = cdc_home / "lake"
    path = sink / DB / "t"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {DB}; USE {DB}; CREATE TABLE t (id INT, u INT NOT NULL, v VARCHAR(8), d DATE, "
                  "PRIMARY KEY (id) NONCLUSTERED, UNIQUE KEY uu (u))")
        # three zero dates (stored under a permissive sql_mode): NULL in Delta, and counted by the re-key's reload
        c.execute(f"SET sql_mode = ''; INSERT INTO {DB}.t VALUES " + ", ".join(
            f"({i}, {100 + i}, 'v{i}', '{'0000-00-00' if i % 10 == 7 else f'2024-01-{i % 28 + 1:02d}'}')"
            for i in range(1, 41)) + "; SET sql_mode = DEFAULT")
        cfg = cdc_home / "keys.toml"
        cfg.write_text(f'changefeed-id = "keys"\nsink-uri = "file://{sink}"\nstart-ts = {c.get_ts()}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{DB}.*"]\n[data-quality]\nmode = "checksum"\n')
        _cli("changefeed", "create", "--config", str(cfg))
        t0 = _window(c, "keys")
        typed_rows_match(c, sink, DB, "t", t0)

        # The primary key goes: the key is the NOT NULL unique key u; the old key may repeat from then on.
        c.execute(f"USE {DB}; UPDATE t SET v = 'before' WHERE id = 1; ALTER TABLE t DROP PRIMARY KEY; "
                  "INSERT INTO t VALUES (1, 201, 'dup-1', NULL), (2, 202, 'dup-2', '2025-02-02'); "
                  "UPDATE t SET v = 'after' WHERE u = 103")
        t1 = _window(c, "keys")
        assert typed_rows_match(c, sink, DB, "t", t1) == 42
        assert ROWID_COLUMN not in DeltaTable(str(path)).schema().to_arrow().names

        # The unique key goes too: nothing but _tidb_rowid tells rows apart; the silver table is reloaded with the
        # rows' handles at the barrier, and later changes merge by them.
        c.execute(f"USE {DB}; DELETE FROM t WHERE u = 140; ALTER TABLE t DROP INDEX uu; "
                  "INSERT INTO t VALUES (3, 103, 'dup-3', NULL), (3, 103, 'dup-3b', NULL); "
                  "UPDATE t SET v = 'x' WHERE id = 2; DELETE FROM t WHERE v = 'dup-3b'")
        t2 = _window(c, "keys")
        assert typed_rows_match(c, sink, DB, "t", t2) == 42
        lake = DeltaTable(str(path)).to_pyarrow_table()
        up = c.query(f"SELECT _tidb_rowid AS h FROM {DB}.t", at_ts=t2)
        assert ROWID_COLUMN in lake.schema.names
        assert sorted(lake.column(ROWID_COLUMN).to_pylist()) == sorted(r["h"] for r in up)
        assert _mapped(sink, "DDL drop index") == {"d": 4}  # the zero dates of ids 7, 17, 27 and 37

        # A primary key again (its duplicates removed first): the key is id, _tidb_rowid leaves the silver table.
        c.execute(f"USE {DB}; DELETE FROM t WHERE v LIKE 'dup%' OR v = 'x'; ALTER TABLE t ADD PRIMARY KEY (id); "
                  "UPDATE t SET v = 'pk' WHERE id = 4; INSERT INTO t VALUES (2, 302, 'back', NULL)")
        t3 = _window(c, "keys")
        assert typed_rows_match(c, sink, DB, "t", t3) == 39
        assert ROWID_COLUMN not in DeltaTable(str(path)).schema().to_arrow().names
        _cli("verify", "keys")
        assert _mapped(sink, "rebuild DDL") == {}

        # The whole history replayed from the bronze changelog (from the initial snapshot's base) ends the same.
        (rebuilt,) = runner.run_until("keys", t3, mode="rebuild", run_tag="keys-1")
        assert rebuilt["apply"]["rebuild"]["tables"][f"{DB}.t"]["windows"] >= 3
        assert typed_rows_match(c, sink, DB, "t", t3) == 39
        assert _mapped(sink, "rebuild DDL drop index") == {"d": 4}
