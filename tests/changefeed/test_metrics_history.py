"""Per-changefeed metrics for the UI: the lag history appended at publish, and the puller's memory sampled from its
event-stream gauges during a pull (a fabricated stream, then a real pull from the session upstream)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cdc_core.changefeed import metrics_history as mh
from cdc_core.changefeed.window_plan import WindowPlan
from cdc_core.codec import tso


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    return tmp_path


def test_publish_appends_a_bounded_lag_history(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.changefeed.state import advance_checkpoint, create_state

    now = time.time()
    assert mh.lag_history("cf") == [] and mh.last_pull_memory("cf") is None
    create_state("cf", tso.compose(int((now - 100) * 1000)))
    p = mh.record_publish("cf", now=now)
    assert p.lag_s == pytest.approx(100, abs=0.01) and p.resolved_ts == p.checkpoint_ts
    monkeypatch.setattr(mh, "MAX_HISTORY", 3)
    for i in range(5):
        advance_checkpoint("cf", tso.compose(int((now - 50 + i) * 1000)))
        mh.record_publish("cf", now=now + i)
    hist = mh.lag_history("cf")
    assert len(hist) == 3 and [round(h.lag_s) for h in hist] == [50, 50, 50]
    assert [h.at for h in hist] == [round(now + i, 3) for i in (2, 3, 4)]
    assert mh.metrics_path("cf") == home / "state" / "cf" / "metrics.json"
    # the state file is untouched by the metrics (ChangefeedState rejects unknown keys)
    from cdc_core.changefeed.state import load_state

    assert load_state("cf").checkpoint_ts == hist[-1].checkpoint_ts


def test_lag_seconds() -> None:
    assert mh.lag_seconds(0) == 0.0
    assert mh.lag_seconds(tso.compose(1_000_000), now=1_060.5) == 60.5


def test_sampler_sees_the_peak_quota_and_pause_of_the_event_stream() -> None:
    from cdc_core.puller.event_stream import EventStream

    reg = CollectorRegistry()
    stream = EventStream(registry=reg)
    stream.add_area("default", 10_000)
    stream.add_path("default", "p")
    sampler = mh.PullMemorySampler(interval_s=0.005, registry=reg).start()
    for i in range(9):
        stream.push_entries("p", i, object(), 900)
    time.sleep(0.05)
    peak = stream.area("default").pending_bytes
    assert stream.is_paused("default")
    while stream.pop_batch("p"):
        stream.done("p")
    time.sleep(0.05)
    mem = sampler.stop()
    assert mem.peak_pending_bytes == peak >= 8100 and mem.max_pending_bytes == 10_000
    assert mem.paused and mem.samples >= 3 and mem.peak_ratio == peak / 10_000


def _plan(changefeed_id: str) -> WindowPlan:
    """The plan a pull step is called with: the decorators find the changefeed in it."""
    return WindowPlan(changefeed_id=changefeed_id, sink_uri="file:///lake", checkpoint_ts=1, target_ts=2)


def test_decorator_records_the_pull_even_when_it_fails() -> None:
    @mh.records_pull_memory
    def pull(p: WindowPlan, fail: bool = False) -> dict[str, Any]:
        from cdc_core.puller.event_stream import EventStream

        stream = EventStream()  # the default registry, as the puller's
        stream.add_area("default", 1 << 20)
        stream.add_path("default", "p")
        stream.push_entries("p", 1, object(), 4096)
        time.sleep(0.1)
        if fail:
            raise RuntimeError("boom")
        return {"events": 1}

    assert pull(_plan("ok")) == {"events": 1}
    mem = mh.last_pull_memory("ok")
    # >=: the default registry may still hold streams of earlier tests in the same session (1 GiB quotas).
    assert mem is not None and mem.max_pending_bytes >= 1 << 20 and mem.peak_pending_bytes >= 4096
    with pytest.raises(RuntimeError, match="boom"):
        pull(_plan("bad"), fail=True)
    assert mh.last_pull_memory("bad") is not None


def test_a_real_pull_reports_the_configured_quota(pd_addr: str, upstream_client: Any, fresh_db: str) -> None:
    from cdc_core.codec import key
    from cdc_core.puller.options import PullerOptions
    from cdc_core.puller.window_collector import collect_window

    upstream_client.execute(f"CREATE TABLE `{fresh_db}`.t (a INT PRIMARY KEY, b VARCHAR(64))")
    [entry] = upstream_client.list_tables(schema=fresh_db)
    start = upstream_client.get_ts()
    values = ", ".join(f"({i}, '{'x' * 60}')" for i in range(2000))
    upstream_client.execute(f"INSERT INTO `{fresh_db}`.t VALUES {values}")
    target = upstream_client.get_ts()
    opts = PullerOptions(max_pending_bytes=64 << 20)

    @mh.records_pull_memory
    def pull(p: WindowPlan) -> int:
        table, _ = asyncio.run(collect_window(pd_addr, {entry.table_id: key.table_span(entry.table_id)}, start,
                                              target, options=opts))
        return table.num_rows

    assert pull(_plan("real")) == 2000
    mem = mh.last_pull_memory("real")
    # The gauges are process-wide: an earlier test's stream (up to 1 GiB quota) may still be registered.
    assert mem is not None and mem.max_pending_bytes >= 64 << 20 and mem.samples >= 2
    assert 0 <= mem.peak_pending_bytes < 64 << 20
