"""The metrics endpoint as a scraper meets it: a bearer token or nothing, and every changefeed's figures in
Prometheus' text format, parsed back with prometheus_client's parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

URL = "/cdcflow-metrics/metrics"
TOKEN = "scrape-me"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_without_a_configured_token_nothing_is_served(client: Any, cdcflow_home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCFLOW_METRICS_TOKEN", raising=False)
    monkeypatch.delenv("CDCFLOW_METRICS_TOKEN_FILE", raising=False)
    r = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 503 and "CDCFLOW_METRICS_TOKEN" in r.text


def test_a_wrong_or_missing_token_is_401(client: Any, cdcflow_home: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    monkeypatch.setenv("CDCFLOW_METRICS_TOKEN_FILE", str(token_file))
    assert client.get(URL).status_code == 401
    assert client.get(URL, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_every_figure_of_a_changefeed(client: Any, fabricated_changefeed: dict, pd_addr: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.changefeed import metrics_history
    from cdc_core.changefeed.state import locked_state

    cf = fabricated_changefeed["changefeed_id"]
    monkeypatch.setenv("CDCFLOW_METRICS_TOKEN", TOKEN)
    monkeypatch.setenv("CDCFLOW_UPSTREAM", pd_addr)  # the session's upstream: its GC safe point is read
    with locked_state(cf) as st:
        st.last_window = {"checkpoint_ts": 1, "target_ts": 2, "published_at": 1700000000.5,
                          "tables": {"shop.orders": {"rows_upserted": 7, "rows_deleted": 2}}}
    bronze = fabricated_changefeed["sink"] / "_cdcflow" / "changelog" / f"changefeed={cf}" / "window=1"
    bronze.mkdir(parents=True)
    (bronze / "part-0.parquet").write_bytes(b"x" * 1234)

    from cdc_core.changefeed.window_plan import WindowPlan

    @metrics_history.records_duration("apply")
    def apply(p: WindowPlan) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        apply(WindowPlan(changefeed_id=cf, sink_uri="file:///lake", checkpoint_ts=1, target_ts=2))
    r = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    got = _samples(r.text)

    def one(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted({"changefeed": cf, **labels}.items())))]

    assert one("cdcflow_changefeed_state", state="error") == 1
    assert one("cdcflow_changefeed_state", state="normal") == 0
    # (a float64, as every Prometheus value: a TSO to 16 digits)
    assert one("cdcflow_changefeed_checkpoint_ts") == pytest.approx(fabricated_changefeed["checkpoints"][-1], rel=1e-15)
    assert 40 <= one("cdcflow_changefeed_checkpoint_lag_seconds") < 100
    assert 40 <= one("cdcflow_changefeed_resolved_ts_lag_seconds") < 100
    assert one("cdcflow_changefeed_last_window_rows", table="shop.orders", op="upsert") == 7
    assert one("cdcflow_changefeed_last_window_rows", table="shop.orders", op="delete") == 2
    assert one("cdcflow_changefeed_last_window_published_timestamp_seconds") == 1700000000.5
    assert one("cdcflow_changefeed_step_succeeded", step="apply") == 0
    assert one("cdcflow_changefeed_step_seconds", step="apply") >= 0
    assert one("cdcflow_changefeed_check_success", table="shop.items", expectation="expect_row_count_to_equal") == 0
    assert one("cdcflow_changefeed_check_success", table="shop.orders", expectation="expect_checksum_to_equal") == 1
    assert one("cdcflow_changefeed_checks_failed") == 1
    assert one("cdcflow_changefeed_bronze_bytes") == 1234
    assert one("cdcflow_changefeed_puller_peak_pending_bytes") == 3 << 20
    assert one("cdcflow_changefeed_puller_paused") == 0
    assert one("cdcflow_changefeed_upstream_up") == 1 and one("cdcflow_changefeed_config_error") == 0
    # The session upstream's GC safe point is far below a checkpoint of a minute ago.
    assert one("cdcflow_changefeed_gc_safe_point_margin_seconds") > 0
    # [capture] auto-start (the default) and none runs: down, which CdcflowCaptureDown alerts on
    assert one("cdcflow_capture_up") == 0
    assert ("cdcflow_capture_regions", (("changefeed", cf),)) not in got


def test_a_running_capture_s_figures(client: Any, fabricated_changefeed: dict,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What the capture publishes (``capture_lease.write_status``) while it holds the lease; its lag as of the
    scrape, not of the status, so a capture that stopped publishing shows a growing lag."""
    from cdc_core.capture import lease as capture_lease
    from cdc_core.codec import tso

    cf = fabricated_changefeed["changefeed_id"]
    monkeypatch.setenv("CDCFLOW_METRICS_TOKEN", TOKEN)
    held = capture_lease.acquire(cf)
    try:
        capture_lease.write_status(cf, {"resolved_ts": tso.compose(tso.now_physical_ms() - 30_000, 0),
                                        "regions": 40, "incremental_scans": 41, "pending_bytes": 5000})
        got = _samples(client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"}).text)
    finally:
        capture_lease.release(cf, held)

    def one(name: str) -> float:
        return got[(name, (("changefeed", cf),))]

    assert one("cdcflow_capture_up") == 1
    assert 30 <= one("cdcflow_capture_resolved_ts_lag_seconds") < 90
    assert (one("cdcflow_capture_regions"), one("cdcflow_capture_incremental_scans"),
            one("cdcflow_capture_pending_bytes")) == (40, 41, 5000)


def test_a_broken_config_is_a_figure_not_a_failed_scrape(client: Any, cdcflow_home: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCFLOW_METRICS_TOKEN", TOKEN)
    (cdcflow_home / "changefeeds" / "bad.toml").write_text('changefeed-id = "bad"\n')
    r = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    assert _samples(r.text)[("cdcflow_changefeed_config_error", (("changefeed", "bad"),))] == 1
