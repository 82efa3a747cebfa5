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
    # an hour ago: older than the cluster's GC life time (10 min), so this changefeed is what holds GC back
    # (a new service may not start below another service's point, hence the min)
    others = [v for k, v in _live(ec).items() if k != sid]
    checkpoint = min([tso.compose(now_ms - 3_600_000), *others])
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
    ts = tso.compose(tso.now_physical_ms() - 60_000)
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
