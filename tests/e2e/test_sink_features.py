"""A silver table with a Delta feature the deletion-vector writer does not write (``[sink] deletion-vectors``, the
delta-rs writer): refused at ``changefeed create`` when the sink holds it already, and at the window that would
write to it when a user turned the feature on later -- the changefeed in error, its checkpoint where it was, no
commit made; with the feature off again it resumes and the table equals the upstream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from typer.testing import CliRunner

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import ChangefeedError
from testkit.e2e import cli as _cli
from testkit.e2e import cli_app, typed_rows_match


@pytest.fixture
def upstream(upstream_cluster: Any) -> Iterator[UpstreamClient]:
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        yield c


def test_a_feature_the_writer_does_not_write_is_refused_at_create_and_at_apply(
        cdc_home: Path, upstream: UpstreamClient) -> None:
    db, cid = "e2e_sink_features", "sinkfeatures"
    sink = cdc_home / "lake-features"
    upstream.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, v INT)")
    start = upstream.get_ts()
    upstream.execute(f"INSERT INTO {db}.t VALUES (1, 1), (2, 2)")
    silver = sink / db / "t"
    write_deltalake(str(silver), pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.int32())}),
                    configuration={"delta.appendOnly": "true"})
    cfg = cdc_home / f"{cid}.toml"
    cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                   f'[filter]\nrules = ["{db}.*"]\n[sink]\ndeletion-vectors = true\n')
    res = CliRunner().invoke(cli_app(), ["changefeed", "create", "--config", str(cfg)])
    assert res.exit_code != 0 and isinstance(res.exception, ChangefeedError), res.output
    assert f"silver table {silver} uses Delta table feature(s)" in str(res.exception)
    assert "appendOnly (delta.appendOnly = true: a MERGE removes rows)" in str(res.exception)
    assert not (cdc_home / "home" / "changefeeds" / f"{cid}.toml").exists()

    DeltaTable(str(silver)).alter.set_table_properties({"delta.appendOnly": "false"})
    _cli("changefeed", "create", "--config", str(cfg))
    t1 = upstream.get_ts()
    runner.run_until(cid, t1)
    typed_rows_match(upstream, sink, db, "t", t1)

    DeltaTable(str(silver)).alter.set_table_properties({"delta.appendOnly": "true"})  # a user's, between windows
    version = DeltaTable(str(silver)).version()
    upstream.execute(f"UPDATE {db}.t SET v = 20 WHERE id = 2; DELETE FROM {db}.t WHERE id = 1")
    t2 = upstream.get_ts()
    try:
        runner.run_until(cid, t2)
        raise AssertionError("a window wrote to an appendOnly table")
    except ChangefeedError as e:
        assert "appendOnly (delta.appendOnly = true: a MERGE removes rows)" in str(e)
    st = load_state(cid)
    assert st.state == "error" and st.checkpoint_ts == t1 and DeltaTable(str(silver)).version() == version

    DeltaTable(str(silver)).alter.set_table_properties({"delta.appendOnly": "false"})
    _cli("changefeed", "resume", cid)
    runner.run_until(cid, t2)
    assert load_state(cid).checkpoint_ts >= t2
    typed_rows_match(upstream, sink, db, "t", t2)
