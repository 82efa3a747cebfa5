"""The changefeed's service GC safe point against the session upstream: visible in PD, holding the GC safe point
the GC worker computes at or below the checkpoint, moved by a refresh, dropped by a removal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc_core.changefeed import gc_safepoint
from cdc_core.changefeed.gc_safepoint import ServiceSafePoint
from cdc_core.codec import tso
from cdc_core.errors import UpstreamError


def _live(ec: Any) -> dict[str, int]:
    return ec.call(lambda: ec.cluster.gc_safe_points.live())  # type: ignore[no-any-return]


def _gc_safe_point(ec: Any) -> int:
    """The safe point the GC worker would use now (computed, no GC pass: the session cluster is shared)."""
    return ec.call(lambda: ec.cluster.gc.compute_safe_point())  # type: ignore[no-any-return]


def test_refresh_holds_gc_at_the_checkpoint_and_remove_releases_it(upstream_cluster: Any, pd_addr: str,
                                                                   upstream_client: Any) -> None:
    ec = upstream_cluster
    sid = "cdcflow-gc-test"
    now_ms = tso.physical_ms(upstream_client.get_ts())
    # An hour ago: older than the cluster's GC life time (10 min), so this changefeed is what holds GC back. The
    # session cluster is shared: a new service may not start below the live services' minimum (PD refuses it), and
    # a GC pass of an earlier test may have moved the store's safe point, so the checkpoint is at least both.
    others = [v for k, v in _live(ec).items() if k != sid]
    floor = max(ec.call(lambda: ec.cluster.gc.store.safe_point), min(others, default=0))
    checkpoint = max(tso.compose(now_ms - 3_600_000), floor)
    sp = gc_safepoint.refresh_service_safe_point(pd_addr, "gc-test", checkpoint, ttl_s=120)
    try:
        assert (sp.service_id, sp.safe_point, sp.ttl_s) == (sid, checkpoint, 120)
        assert sp.in_force and sp.min_safe_point <= checkpoint
        assert _live(ec)[sid] == checkpoint
        assert _gc_safe_point(ec) <= checkpoint  # GC does not pass the checkpoint
        # the next publish moves it forward (a registered service may move its own point either way)
        later = checkpoint + tso.compose(60_000)
        assert gc_safepoint.refresh_service_safe_point(pd_addr, "gc-test", later, ttl_s=120).in_force
        assert _live(ec)[sid] == later
    finally:
        removed = gc_safepoint.remove_service_safe_point(pd_addr, "gc-test")
    assert not removed.in_force and sid not in _live(ec)
    if not others:
        assert _gc_safe_point(ec) > checkpoint  # released: GC may pass it again


def test_by_changefeed_id_uses_the_config_and_never_fails_the_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     upstream_cluster: Any, pd_addr: str) -> None:
    from cdc_core.changefeed.config import ChangefeedConfig, save_config
    from cdc_core.changefeed.state import create_state

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    save_config(ChangefeedConfig(changefeed_id="byid", sink_uri=f"file://{tmp_path}/lake", start_ts=1,
                                 upstream=pd_addr))
    # a minute ago, or the shared upstream's lowest service safe point when others' are younger: PD takes no service
    # safe point below its minimum (the changefeeds of earlier tests in the session hold theirs)
    ts = max(tso.compose(tso.now_physical_ms() - 60_000), min(_live(upstream_cluster).values(), default=0))
    create_state("byid", ts)
    sp = gc_safepoint.refresh_for_changefeed("byid")  # the state's checkpoint
    assert sp is not None and sp.safe_point == ts and _live(upstream_cluster)["cdcflow-byid"] == ts
    assert gc_safepoint.remove_for_changefeed("byid") is not None
    assert "cdcflow-byid" not in _live(upstream_cluster)
    # an unreachable upstream: logged, None, no exception (publish and maintenance go on)
    save_config(ChangefeedConfig(changefeed_id="gone", sink_uri=f"file://{tmp_path}/lake", start_ts=1,
                                 upstream="127.0.0.1:1"))
    assert gc_safepoint.refresh_for_changefeed("gone", ts) is None
    assert gc_safepoint.remove_for_changefeed("gone") is None
    with pytest.raises(UpstreamError, match=r"cannot reach the upstream at 127\.0\.0\.1:1"):
        gc_safepoint.refresh_service_safe_point("127.0.0.1:1", "gone", ts, timeout_s=2)


def test_in_force() -> None:
    assert ServiceSafePoint("s", 100, 60, 100).in_force
    assert ServiceSafePoint("s", 100, 60, 90).in_force
    assert not ServiceSafePoint("s", 100, 60, 120).in_force  # PD refused a new service below its minimum
    assert not ServiceSafePoint("s", 0, 0, 0).in_force  # removed
    with pytest.raises(ValueError, match="ttl_s must be > 0"):
        gc_safepoint.refresh_service_safe_point("127.0.0.1:1", "x", 1, ttl_s=0)


def test_create_registers_start_ts_and_a_window_below_the_gc_safe_point_fails_naming_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TiCDC's rules: the service safe point exists from `changefeed create` on (at start-ts), a start-ts GC has
    passed is refused, and a checkpoint GC has passed fails the window (ErrSnapshotLostByGC), checkpoint unmoved."""
    from typer.testing import CliRunner

    from cdc_core.changefeed import tasks
    from cdc_core.changefeed.state import load_state
    from cdc_core.cli.main import build_app
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.errors import ChangefeedError
    from cdc_core.upstream.cluster import ClusterConfig
    from cdc_core.upstream.embedded import EmbeddedCluster

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    app = build_app()
    with EmbeddedCluster(ClusterConfig(min_ts_interval_ms=50, gc_life_time_s=0)) as ec, \
            UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE g; CREATE TABLE g.t (a INT PRIMARY KEY, b INT)")
        start = c.get_ts()

        def create(cid: str, start_ts: int) -> Any:
            cfg = tmp_path / f"{cid}.toml"
            cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{tmp_path}/lake"\nstart-ts = {start_ts}\n'
                           f'upstream = "{ec.pd_addr}"\n[filter]\nrules = ["g.*"]\n')
            return CliRunner().invoke(app, ["changefeed", "create", "--config", str(cfg)])

        assert create("early", start).exit_code == 0
        assert _live(ec)["cdcflow-early"] == start  # registered at creation, before any window
        c.execute("INSERT INTO g.t VALUES (1, 1)")
        gc_sp = ec.faults.gc().safe_point
        assert gc_sp == start, "the registered service holds GC at start-ts"
        # Another changefeed from before the safe point: refused at creation, naming both ts.
        res = create("late", start - 1)
        said = f"{res.output}{res.exception or ''}"  # build_app() raises; the cdcflow command prints it
        assert res.exit_code != 0 and isinstance(res.exception, ChangefeedError)
        assert f"start-ts {start - 1}" in said and f"GC safe point {start}" in said
        assert not (tmp_path / "changefeeds" / "late.toml").exists()
        # GC passes the early changefeed's checkpoint (its safe point gone): its next window fails.
        assert gc_safepoint.remove_service_safe_point(ec.pd_addr, "early").ttl_s == 0
        c.execute("UPDATE g.t SET b = 2")
        passed = ec.faults.gc().safe_point
        assert passed > start
        target = c.get_ts()
        plan = tasks.plan("early", interval_end_ts=None, target_ts=target)
        with pytest.raises(ChangefeedError, match=rf"checkpoint-ts {start} .* earlier than PD's GC safe point "
                                                  rf"{passed}"):
            tasks.pull(plan)
        st = load_state("early")
        assert st.state == "error" and st.checkpoint_ts == start
        assert "snapshot lost by GC" in st.error["message"]
