"""A store that refuses the client for good (TiKV's compatibility and cluster-id errors) puts the changefeed in
error with the store's reason, and the checkpoint stays where it was."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("fault", ["compatibility", "cluster_id_mismatch"])
def test_a_store_refusing_the_client_fails_the_window_and_holds_the_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    from typer.testing import CliRunner

    from cdc_core.changefeed import tasks
    from cdc_core.changefeed.state import load_state
    from cdc_core.cli.main import build_app
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.errors import ChangefeedError
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    with EmbeddedCluster(ClusterConfig(min_ts_interval_ms=50)) as ec, UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE p; CREATE TABLE p.t (a INT PRIMARY KEY, b INT)")
        start = c.get_ts()
        cfg = tmp_path / "proto.toml"
        cfg.write_text(f'changefeed-id = "proto"\nsink-uri = "file://{tmp_path}/lake"\nstart-ts = {start}\n'
                       f'upstream = "{ec.pd_addr}"\n[filter]\nrules = ["p.*"]\n[puller]\npull-timeout-s = 20\n')
        assert CliRunner().invoke(build_app(), ["changefeed", "create", "--config", str(cfg)]).exit_code == 0
        c.execute("INSERT INTO p.t VALUES (1, 1)")
        real = ec.cluster.cluster_id
        if fault == "compatibility":
            ec.faults.require_client_version(1, "99.0.0")
            said = r"requires version 99\.0\.0"
        else:
            ec.faults.store_cluster_id(1, real + 1)
            said = rf"belongs to cluster {real + 1}, but PD's cluster is {real}"
        plan = tasks.plan("proto", interval_end_ts=None, target_ts=c.get_ts())
        with pytest.raises(ChangefeedError, match=said):
            tasks.pull(plan)
        st = load_state("proto")
        assert st.state == "error" and st.checkpoint_ts == start
