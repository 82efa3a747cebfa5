"""A changefeed configured with several PD members (`pd = [...]`) follows PD's leader: while no member leads the
window's pull fails with the members named and the checkpoint held (a transient error: the changefeed is not
put in error, the retry pulls); once one leads, wherever it is, the same window pulls every change."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_window_pulls_through_a_pd_leader_election(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cdc_core.changefeed import tasks
    from cdc_core.changefeed.config import load_config
    from cdc_core.changefeed.state import load_state
    from cdc_core.cli.main import build_app
    from cdc_core.client import pd_protocol
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.errors import UpstreamError
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    monkeypatch.setattr(pd_protocol, "LEADER_BACKOFF_S", (0.05,))
    with EmbeddedCluster(ClusterConfig(min_ts_interval_ms=50, pd_members=2)) as ec:
        leader, follower = ec.cluster.pd_member_addrs
        with UpstreamClient(follower) as c:
            c.execute("CREATE DATABASE l; CREATE TABLE l.t (a INT PRIMARY KEY, b INT)")
            start = c.get_ts()
        cfg = tmp_path / "lead.toml"
        cfg.write_text(f'changefeed-id = "lead"\nsink-uri = "file://{tmp_path}/lake"\nstart-ts = {start}\n'
                       f'pd = ["http://{follower}", "{leader}"]\n[filter]\nrules = ["l.*"]\n'
                       '[puller]\npull-timeout-s = 20\n')
        created = CliRunner().invoke(build_app(), ["changefeed", "create", "--config", str(cfg)])
        assert created.exit_code == 0, created.output
        assert load_config("lead").upstream == f"{follower},{leader}"
        with UpstreamClient(leader) as c:
            c.execute("INSERT INTO l.t VALUES " + ", ".join(f"({i}, {i})" for i in range(500)))
            c.execute("UPDATE l.t SET b = b + 1 WHERE a < 100")
            target = c.get_ts()
        plan = tasks.plan("lead", interval_end_ts=None, target_ts=target)

        ec.faults.transfer_pd_leader(0)  # an election: every member refuses, none is named
        with pytest.raises(UpstreamError) as ei:
            tasks.pull(plan)
        said = str(ei.value)
        assert f"PD {follower},{leader}: no leader found" in said
        assert f"{follower}: no leader (an election may be under way)" in said and f"{leader}: no leader" in said
        st = load_state("lead")
        assert st.state != "error" and st.checkpoint_ts == start

        ec.faults.transfer_pd_leader(2)  # the member listed first wins the election
        pulled = tasks.pull(plan)
        assert pulled["tables"] == ["l.t"] and pulled["events"] >= 600  # 500 inserts + 100 updates (+ DDL)
        assert load_state("lead").checkpoint_ts == start  # only publish moves it
