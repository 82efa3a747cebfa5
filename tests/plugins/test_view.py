"""The Changefeeds view as Airflow serves it: the real API server app (``airflow.api_fastapi.app.create_app``) with
the plugin mounted under ``/cdcflow``, behind Airflow's authentication (SimpleAuthManager, JWTs it signs)."""

from __future__ import annotations

import os
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

API = "/cdcflow/api/changefeeds"
PAGE = "/cdcflow/changefeeds"


def _token(**kwargs: Any) -> str:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer1", role="viewer"), **kwargs)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Elements(HTMLParser):
    """Elements with a ``data-testid``: their attributes and text; also checks every tag is closed."""

    VOID = {"meta", "br", "line", "polyline"}

    def __init__(self, html: str) -> None:
        super().__init__()
        self.by_id: dict[str, list[dict[str, Any]]] = {}
        self.stack: list[tuple[str, dict[str, Any] | None]] = []
        self.feed(html)
        self.close()
        assert [t for t, _ in self.stack] == [], f"unclosed tags: {self.stack}"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        a = dict(attrs)
        rec = {"tag": tag, "attrs": a, "text": ""} if "data-testid" in a else None
        if rec is not None:
            self.by_id.setdefault(str(a["data-testid"]), []).append(rec)
        self.stack.append((tag, rec))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1][0] == tag, f"</{tag}> closes {self.stack[-1:] or 'nothing'}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for _, rec in self.stack:
            if rec is not None:
                rec["text"] += data

    def one(self, testid: str) -> dict[str, Any]:
        found = self.by_id.get(testid, [])
        assert len(found) == 1, f"{testid}: {len(found)} elements"
        return found[0]


# --- authentication ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [API, f"{API}/orders"])
def test_no_token_is_401(client: Any, path: str, fabricated_changefeed: dict) -> None:
    r = client.get(path)
    assert r.status_code == 401 and r.json() == {"detail": "Not authenticated"}


def test_the_page_sends_a_browser_without_a_session_to_the_login(client: Any, cdcflow_home: Path) -> None:
    r = client.get(PAGE, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/auth/login?next=http%3A%2F%2Ftestserver%2Fcdcflow%2Fchangefeeds"


def test_bad_tokens_are_rejected(client: Any, cdcflow_home: Path) -> None:
    import jwt

    assert client.get(API, headers=_bearer("garbage")).status_code == 403
    forged = jwt.encode({"sub": "admin", "role": "admin", "exp": int(time.time()) + 600}, "not-the-secret",
                        algorithm="HS512")
    assert client.get(API, headers=_bearer(forged)).status_code == 403
    r = client.get(API, headers=_bearer(_token(expiration_time_in_seconds=-3600)))
    assert r.status_code == 401 and r.json() == {"detail": "Token Expired"}
    assert client.get(API, cookies={"_token": "garbage"}).status_code == 403
    assert client.get(PAGE, cookies={"_token": "garbage"}, follow_redirects=False).status_code == 403


def test_a_valid_token_in_the_header_or_the_ui_cookie_is_accepted(client: Any, fabricated_changefeed: dict) -> None:
    assert client.get(API, headers=_bearer(_token())).status_code == 200
    r = client.get(PAGE, cookies={"_token": _token()})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-store"


# --- content ----------------------------------------------------------------------------------------------


def test_json_reports_state_checkpoint_lag_error_dq_memory_and_history(client: Any,
                                                                       fabricated_changefeed: dict) -> None:
    from cdc_core.codec import tso

    cps = fabricated_changefeed["checkpoints"]
    body = client.get(API, headers=_bearer(_token())).json()
    assert abs(body["generated_at"] - time.time()) < 60
    [cf] = body["changefeeds"]
    assert cf["changefeed_id"] == "orders" and cf["dag_id"] == "cdcflow__orders"
    assert cf["state"] == "error"
    assert cf["checkpoint_ts"] == cps[-1] and cf["resolved_ts"] == cps[-1] + 5
    assert cf["checkpoint_time"] == tso.to_datetime(cps[-1]).isoformat()
    assert 41 <= cf["lag_seconds"] < 42 + 60
    assert cf["error"]["message"].startswith("data-quality check failed") and cf["error"]["step"] == "check"
    dq = cf["data_quality"]
    assert (dq["source"], dq["ts"], dq["where"], dq["mode"]) == ("state", cps[-1], "window end", "checksum")
    assert [(t["table"], t["passed"], t["passed_expectations"], t["failed_expectations"], t["failed"])
            for t in dq["tables"]] == [("shop.items", False, 1, 1, ["expect_row_count_to_equal"]),
                                       ("shop.orders", True, 3, 0, [])]
    assert cf["puller_memory"]["peak_pending_bytes"] == 3 << 20
    assert cf["puller_memory"]["max_pending_bytes"] == 1 << 30
    assert cf["puller_memory"]["peak_ratio"] == round(3 / 1024, 4)
    assert [p["checkpoint_ts"] for p in cf["lag_history"]] == cps
    assert [p["lag_s"] for p in cf["lag_history"]][:2] == pytest.approx([300, 300], abs=1)
    one = client.get(f"{API}/orders", headers=_bearer(_token())).json()
    volatile = ("generated_at", "lag_seconds")
    assert {k: v for k, v in one.items() if k not in volatile} == {k: v for k, v in cf.items() if k not in volatile}


def test_html_carries_the_figures_the_chart_and_stable_test_ids(client: Any, fabricated_changefeed: dict) -> None:
    cps = fabricated_changefeed["checkpoints"]
    html = client.get(PAGE, cookies={"_token": _token()}).text
    el = Elements(html)
    row = el.one("changefeed-row-orders")
    assert row["tag"] == "tr" and row["attrs"]["data-state"] == "error"
    assert el.one("checkpoint-ts")["text"] == str(cps[-1])
    assert el.one("resolved-ts")["text"] == str(cps[-1] + 5)
    lag = el.one("lag-seconds")
    assert 41 <= float(lag["attrs"]["data-value"]) < 102 and float(lag["text"]) == pytest.approx(
        float(lag["attrs"]["data-value"]), abs=0.06)
    assert el.one("state")["text"] == "error"
    mem = el.one("puller-memory")
    assert (mem["attrs"]["data-peak-bytes"], mem["attrs"]["data-max-bytes"]) == (str(3 << 20), str(1 << 30))
    assert mem["text"] == "3.0 MiB / 1.0 GiB (0.3 %)"
    assert el.one("dq-summary")["attrs"]["data-passed"] == "false" and el.one("dq-summary")["text"] == \
        "1/2 tables passed"
    items, orders = el.one("dq-shop.items"), el.one("dq-shop.orders")
    assert (items["attrs"]["data-passed"], items["attrs"]["data-failed-count"]) == ("false", "1")
    assert "expect_row_count_to_equal" in items["text"]
    assert (orders["attrs"]["data-passed"], orders["attrs"]["data-passed-count"]) == ("true", "3")
    chart = el.one("lag-chart")
    assert chart["tag"] == "svg" and chart["attrs"]["data-points"] == "3" and chart["attrs"]["id"] == \
        "lag-chart-orders"
    assert "<polyline" in html and 'class="series"' in html
    assert el.one("changefeed-detail-orders")["tag"] == "section"
    # the error message is escaped, never markup
    assert el.one("last-error")["text"] == "data-quality check failed: shop.items <b>count</b> mismatch"
    assert "&lt;b&gt;count&lt;/b&gt;" in html and "<b>count</b>" not in html
    # self-contained: nothing loaded from elsewhere, no script (the UI's iframe sandbox allows none)
    assert "<script" not in html and "src=" not in html and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")


def test_unknown_or_invalid_changefeed_is_404(client: Any, fabricated_changefeed: dict) -> None:
    for cid in ("nope", "..%2F..%2Fetc", "a.b"):
        assert client.get(f"{API}/{cid}", headers=_bearer(_token())).status_code == 404


def test_an_empty_home(client: Any, cdcflow_home: Path) -> None:
    assert client.get(API, headers=_bearer(_token())).json()["changefeeds"] == []
    el = Elements(client.get(PAGE, cookies={"_token": _token()}).text)
    assert "No changefeed yet" in el.one("no-changefeeds")["text"]


def test_a_broken_config_and_state_show_as_errors(client: Any, cdcflow_home: Path) -> None:
    (cdcflow_home / "changefeeds" / "bad.toml").write_text("changefeed-id = \n")
    (cdcflow_home / "state").mkdir()
    (cdcflow_home / "state" / "torn.json").write_text("{")
    cfs = {cf["changefeed_id"]: cf for cf in client.get(API, headers=_bearer(_token())).json()["changefeeds"]}
    assert set(cfs) == {"bad", "torn"}
    assert cfs["bad"]["config_error"] and cfs["bad"]["state_error"]
    assert "corrupt" in cfs["torn"]["state_error"]
    html = client.get(PAGE, cookies={"_token": _token()}).text
    assert Elements(html).one("changefeed-row-torn")["attrs"]["data-state"] == "unknown"


def test_dq_falls_back_to_the_dq_results_log(client: Any, fabricated_changefeed: dict) -> None:
    from cdc_core.changefeed import dq_results
    from cdc_core.changefeed.state import locked_state

    with locked_state("orders") as st:
        st.last_checks = {}
    sink = f"file://{fabricated_changefeed['sink']}"
    dq_results.append(sink, "orders", 100, "window end", "count", {
        "d.t": {"passed": True, "results": [{"expectation": "expect_row_count_to_equal", "success": True}]}})
    dq_results.append(sink, "orders", 200, "barrier 201", "count", {
        "d.t": {"passed": False, "results": [{"expectation": "expect_row_count_to_equal", "success": False},
                                             {"expectation": "expect_primary_key_unique", "success": True}]}})
    dq_results.append(sink, "other", 300, "window end", "count", {
        "x.y": {"passed": True, "results": [{"expectation": "e", "success": True}]}})
    dq = client.get(f"{API}/orders", headers=_bearer(_token())).json()["data_quality"]
    assert (dq["source"], dq["ts"], dq["where"]) == ("dq_results", 200, "barrier 201")
    assert [(t["table"], t["passed"], t["failed"]) for t in dq["tables"]] == [
        ("d.t", False, ["expect_row_count_to_equal"])]


# --- the chart alone --------------------------------------------------------------------------------------


def test_lag_chart_with_no_one_and_many_points() -> None:
    from cdcflow_airflow.views.html import lag_chart_svg

    assert 'data-points="0"' in lag_chart_svg("a", []) and "no window published yet" in lag_chart_svg("a", [])
    one = lag_chart_svg("a", [{"at": 1000.0, "lag_s": 5.0}])
    assert "<circle" in one and "<polyline" not in one
    many = lag_chart_svg("a", [{"at": 1000.0 + 60 * i, "lag_s": float(i % 7)} for i in range(500)])
    pts = many.split('class="series" points="')[1].split('"')[0].split()
    assert len(pts) == 500
    xs = [float(p.split(",")[0]) for p in pts]
    ys = [float(p.split(",")[1]) for p in pts]
    assert xs == sorted(xs) and min(xs) >= 0 and max(xs) <= 640 and min(ys) >= 0 and max(ys) <= 180


def test_the_upstream_shows_as_answering_stopped_or_absent(client: Any, fabricated_changefeed: dict, pd_addr: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """After `make demo` the demo's upstream is gone: the page says so (and still shows everything else)."""
    import socket

    monkeypatch.delenv("CDCFLOW_UPSTREAM", raising=False)
    up = client.get(f"{API}/orders", headers=_bearer(_token())).json()["upstream"]
    assert (up["address"], up["reachable"]) == (None, False)
    assert up["detail"].startswith("no upstream running (no ") and "upstream.json" in up["detail"]
    el = Elements(client.get(PAGE, cookies={"_token": _token()}).text)
    assert el.one("upstream")["attrs"]["data-reachable"] == "false"
    assert el.one("upstream")["text"].startswith("no upstream running")
    assert el.one("checkpoint-ts")["text"] == str(fabricated_changefeed["checkpoints"][-1])

    with socket.socket() as s:  # a port nobody listens on: a stopped upstream
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("CDCFLOW_UPSTREAM", closed)
    t0 = time.monotonic()
    up = client.get(f"{API}/orders", headers=_bearer(_token())).json()["upstream"]
    assert time.monotonic() - t0 < 5
    assert up == {"address": closed, "source": "$CDCFLOW_UPSTREAM", "reachable": False,
                  "detail": "not answering (stopped or unreachable)"}

    monkeypatch.setenv("CDCFLOW_UPSTREAM", pd_addr)
    up = client.get(f"{API}/orders", headers=_bearer(_token())).json()["upstream"]
    assert (up["address"], up["reachable"], up["detail"]) == (pd_addr, True, "answers")
    el = Elements(client.get(PAGE, cookies={"_token": _token()}).text)
    assert el.one("upstream")["attrs"]["data-reachable"] == "true" and pd_addr in el.one("upstream")["text"]


def test_the_capture_shows_as_up_with_its_figures_or_down(client: Any, fabricated_changefeed: dict) -> None:
    """The Capture cell: down (auto-start is on, none runs), then up with its lag, regions, scans and pending
    bytes while a capture holds the lease and publishes its status."""
    from cdc_core.capture import lease as capture_lease
    from cdc_core.codec import tso

    cf = fabricated_changefeed["changefeed_id"]
    el = Elements(client.get(PAGE, cookies={"_token": _token()}).text)
    assert el.one("capture")["attrs"]["data-state"] == "down"
    held = capture_lease.acquire(cf)
    try:
        capture_lease.write_status(cf, {"resolved_ts": tso.compose(tso.now_physical_ms() - 2_000, 0),
                                        "regions": 12, "incremental_scans": 13, "pending_bytes": 2048})
        cap = client.get(f"{API}/{cf}", headers=_bearer(_token())).json()["capture"]
        el = Elements(client.get(PAGE, cookies={"_token": _token()}).text)
    finally:
        capture_lease.release(cf, held)
    assert cap["state"] == "up" and cap["expected"] and cap["pid"] == os.getpid()
    cell = el.one("capture")
    assert cell["attrs"]["data-state"] == "up"
    assert (cell["attrs"]["data-regions"], cell["attrs"]["data-scans"], cell["attrs"]["data-pending-bytes"]) == (
        "12", "13", "2048")
    assert 2 <= float(cell["attrs"]["data-lag"]) < 60
    assert "12 regions · 13 scans · 2.0 KiB pending" in cell["text"]
