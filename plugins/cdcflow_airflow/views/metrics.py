"""Prometheus metrics of every changefeed of ``$CDCFLOW_HOME``, served by the Airflow API server.

A window's tasks are short-lived processes on whichever worker runs them, so nothing they register in memory would
still be there when Prometheus scrapes. What a scraper needs is on disk, durably, after every step: the state (the
lifecycle, checkpoint and resolved ts, the last window's rows per table, the last checks), the recorded metrics
(``cdc_core.changefeed.metrics_history``: each step's last duration, the puller's memory in the last pull) and the
bronze changelog. :class:`ChangefeedCollector` reads them at every scrape (``prometheus_client``'s custom
collector), plus one remote read per upstream: PD's GC safe point, for the margin the checkpoint keeps above it.

``GET /cdcflow-metrics/metrics`` serves them in Prometheus' text format. Prometheus cannot log in to Airflow (its
tokens expire), so the endpoint wants ``Authorization: Bearer <token>`` with the token in ``$CDCFLOW_METRICS_TOKEN``
(or the file ``$CDCFLOW_METRICS_TOKEN_FILE`` names) of the API server; without one configured it answers 503 and
serves nothing. Why a scrape and not a Pushgateway: the endpoint always shows the current state (a crashed task
pushes nothing, and a pushed gauge stays after its changefeed is gone), and the API server already runs everywhere
Airflow does. Alert rules for these metrics ship in ``deploy/prometheus/cdcflow-alerts.yml``.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

URL_PREFIX = "/cdcflow-metrics"
METRICS_PATH = "/metrics"
TOKEN_ENV = "CDCFLOW_METRICS_TOKEN"
TOKEN_FILE_ENV = "CDCFLOW_METRICS_TOKEN_FILE"
STATES = ("normal", "paused", "error", "finished")
STEPS = ("pull", "apply", "check", "publish")
GC_TIMEOUT_S = 2.0


def _dir_bytes(root: Path) -> int:
    total = 0
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
            elif e.is_file(follow_symlinks=False):
                try:
                    total += e.stat(follow_symlinks=False).st_size
                except OSError:
                    pass
    return total


def _gc_safe_point(pd_addr: str) -> int | None:
    import asyncio

    from cdc_core.changefeed.gc_safepoint import agc_safe_point

    try:
        return asyncio.run(agc_safe_point(pd_addr, timeout_s=GC_TIMEOUT_S))
    except Exception:
        return None


class ChangefeedCollector(Collector):
    """The metrics of every changefeed, read from ``$CDCFLOW_HOME`` at each scrape."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from cdc_core.changefeed import metrics_history
        from cdc_core.changefeed.state import load_state
        from cdc_core.codec import changelog, tso
        from cdcflow_airflow.views.status import changefeed_statuses

        now = time.time()
        g = {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc, labels in (
            ("cdcflow_changefeed_state", "1 for the changefeed's lifecycle state, 0 for the others",
             ["changefeed", "state"]),
            ("cdcflow_changefeed_config_error", "1 when the changefeed's config does not load (its DAG is an import "
             "error)", ["changefeed"]),
            ("cdcflow_changefeed_checkpoint_ts", "The checkpoint: every change up to this TSO is in Delta",
             ["changefeed"]),
            ("cdcflow_changefeed_checkpoint_lag_seconds", "Wall clock minus the checkpoint's physical time",
             ["changefeed"]),
            ("cdcflow_changefeed_resolved_ts_lag_seconds", "Wall clock minus the last resolved ts's physical time",
             ["changefeed"]),
            ("cdcflow_changefeed_last_window_published_timestamp_seconds", "When the last window was published",
             ["changefeed"]),
            ("cdcflow_changefeed_last_window_rows", "Rows the last window upserted or deleted, per table",
             ["changefeed", "table", "op"]),
            ("cdcflow_changefeed_step_seconds", "How long the last run of each window step took",
             ["changefeed", "step"]),
            ("cdcflow_changefeed_step_succeeded", "1 when the last run of the step succeeded", ["changefeed", "step"]),
            ("cdcflow_changefeed_check_success", "The last checks, per table and expectation (1 passed, 0 failed)",
             ["changefeed", "table", "expectation"]),
            ("cdcflow_changefeed_checks_failed", "Expectations the last checks failed", ["changefeed"]),
            ("cdcflow_changefeed_bronze_bytes", "Bytes of the changefeed's bronze changelog", ["changefeed"]),
            ("cdcflow_changefeed_puller_peak_pending_bytes", "Peak bytes the puller held in the last pull",
             ["changefeed"]),
            ("cdcflow_changefeed_puller_max_pending_bytes", "The puller's memory quota in the last pull",
             ["changefeed"]),
            ("cdcflow_changefeed_puller_paused", "1 when the last pull reached its memory pause threshold",
             ["changefeed"]),
            ("cdcflow_changefeed_upstream_up", "1 when the changefeed's upstream answers", ["changefeed"]),
            ("cdcflow_capture_up", "1 while the changefeed's capture holds its lease; only for a changefeed that "
             "starts one ([capture] auto-start) or ran one", ["changefeed"]),
            ("cdcflow_capture_resolved_ts_lag_seconds", "Wall clock minus the capture's published resolved ts",
             ["changefeed"]),
            ("cdcflow_capture_regions", "Regions the capture is subscribed to", ["changefeed"]),
            ("cdcflow_capture_incremental_scans", "Region requests (each an incremental scan on TiKV) since the "
             "capture started", ["changefeed"]),
            ("cdcflow_capture_pending_bytes", "Bytes of changes the capture holds, not yet in a part",
             ["changefeed"]),
            ("cdcflow_changefeed_gc_safe_point_margin_seconds", "The checkpoint's physical time minus PD's GC safe "
             "point's: at 0, GC may remove what the next window reads", ["changefeed"]),
        )}
        safe_points: dict[str, int | None] = {}
        for st in changefeed_statuses(now=now):
            cf = st["changefeed_id"]
            g["cdcflow_changefeed_config_error"].add_metric([cf], 1.0 if st["config_error"] else 0.0)
            upstream = st.get("upstream") or {}
            g["cdcflow_changefeed_upstream_up"].add_metric([cf], 1.0 if upstream.get("reachable") else 0.0)
            cap = st.get("capture")
            if cap:
                g["cdcflow_capture_up"].add_metric([cf], 1.0 if cap["state"] == "up" else 0.0)
                if cap.get("resolved_lag_s") is not None:
                    g["cdcflow_capture_resolved_ts_lag_seconds"].add_metric([cf], float(cap["resolved_lag_s"]))
                if cap["state"] == "up":
                    for name, k in (("regions", "regions"), ("incremental_scans", "incremental_scans"),
                                    ("pending_bytes", "pending_bytes")):
                        g[f"cdcflow_capture_{name}"].add_metric([cf], float(cap.get(k) or 0))
            if st["state"] is None:
                continue
            for state in STATES:
                g["cdcflow_changefeed_state"].add_metric([cf, state], 1.0 if st["state"] == state else 0.0)
            checkpoint = int(st["checkpoint_ts"] or 0)
            g["cdcflow_changefeed_checkpoint_ts"].add_metric([cf], float(checkpoint))
            g["cdcflow_changefeed_checkpoint_lag_seconds"].add_metric([cf], float(st["lag_seconds"] or 0.0))
            g["cdcflow_changefeed_resolved_ts_lag_seconds"].add_metric(
                [cf], metrics_history.lag_seconds(int(st["resolved_ts"] or 0), now))
            last = load_state(cf).last_window or {}
            if last.get("published_at"):
                g["cdcflow_changefeed_last_window_published_timestamp_seconds"].add_metric(
                    [cf], float(last["published_at"]))
            for table, applied in sorted((last.get("tables") or {}).items()):
                for op, key in (("upsert", "rows_upserted"), ("delete", "rows_deleted")):
                    g["cdcflow_changefeed_last_window_rows"].add_metric(
                        [cf, table, op], float((applied or {}).get(key) or 0))
            for step, took in sorted(metrics_history.task_seconds(cf).items()):
                g["cdcflow_changefeed_step_seconds"].add_metric([cf, step], float(took.get("seconds") or 0.0))
                g["cdcflow_changefeed_step_succeeded"].add_metric([cf, step], 1.0 if took.get("ok") else 0.0)
            failed = 0
            for table in (st.get("data_quality") or {}).get("tables", []):
                for e in table["expectations"]:
                    g["cdcflow_changefeed_check_success"].add_metric(
                        [cf, table["table"], e["expectation"]], 1.0 if e["success"] else 0.0)
                    failed += 0 if e["success"] else 1
            g["cdcflow_changefeed_checks_failed"].add_metric([cf], float(failed))
            if st.get("sink_uri"):
                from cdc_core.changefeed.config import load_config

                try:
                    root = changelog.changelog_root(load_config(cf).sink_uri, cf)
                    g["cdcflow_changefeed_bronze_bytes"].add_metric([cf], float(_dir_bytes(root)))
                except Exception:  # a sink that is not a local path has no bronze here
                    pass
            mem = st.get("puller_memory")
            if mem:
                g["cdcflow_changefeed_puller_peak_pending_bytes"].add_metric([cf], float(mem["peak_pending_bytes"]))
                g["cdcflow_changefeed_puller_max_pending_bytes"].add_metric([cf], float(mem["max_pending_bytes"]))
                g["cdcflow_changefeed_puller_paused"].add_metric([cf], 1.0 if mem["paused"] else 0.0)
            addr = upstream.get("address")
            if addr and upstream.get("reachable") and checkpoint > 0:
                if addr not in safe_points:
                    safe_points[addr] = _gc_safe_point(addr)
                sp = safe_points[addr]
                if sp is not None:
                    margin = (tso.physical_ms(checkpoint) - tso.physical_ms(sp)) / 1000.0
                    g["cdcflow_changefeed_gc_safe_point_margin_seconds"].add_metric([cf], margin)
        yield from g.values()


def registry() -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ChangefeedCollector())
    return reg


def configured_token() -> str | None:
    """The bearer token scrapers must send (``$CDCFLOW_METRICS_TOKEN``, else the file of
    ``$CDCFLOW_METRICS_TOKEN_FILE``), or None when none is configured."""
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    path = os.environ.get(TOKEN_FILE_ENV)
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError:
            return None
    return None


def create_app() -> Any:
    from fastapi import FastAPI, Header, HTTPException, status
    from fastapi.responses import Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    app = FastAPI(title="cdcflow metrics", docs_url=None, redoc_url=None, openapi_url=None)
    reg = registry()

    @app.get(METRICS_PATH, summary="Every changefeed's metrics, in Prometheus' text format")
    def metrics(authorization: str | None = Header(default=None)) -> Response:
        token = configured_token()
        if token is None:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"metrics are off: set {TOKEN_ENV} (or {TOKEN_FILE_ENV}) for the API server")
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a bearer token is required",
                                headers={"WWW-Authenticate": "Bearer"})
        return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})

    return app


@cache
def app() -> Any:
    return create_app()


def fastapi_app_spec() -> dict[str, Any]:
    """The plugin's ``fastapi_apps`` entry of the metrics endpoint."""
    return {"app": app(), "url_prefix": URL_PREFIX, "name": "cdcflow metrics"}
