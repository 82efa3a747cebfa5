"""Server-side HTML of the Changefeeds view: a self-contained page (inline CSS and SVG; no script, no external
asset), because Airflow shows it in a sandboxed iframe and the machine may be offline.

Every value is HTML-escaped. Stable hooks for browser tests:

================================== ============================================================================
``data-testid``                    element
================================== ============================================================================
``changefeeds-table``              the summary table
``changefeed-row-<id>``            a changefeed's row (``data-changefeed-id``, ``data-state``); its cells:
                                   ``changefeed-id``, ``state``, ``checkpoint-ts``, ``checkpoint-time``,
                                   ``resolved-ts``, ``lag-seconds`` (``data-value`` = seconds),
                                   ``puller-memory`` (``data-peak-bytes``, ``data-max-bytes``),
                                   ``dq-summary`` (``data-passed``), ``upstream`` (``data-reachable``),
                                   ``capture`` (``data-state`` up|down|"", ``data-lag``, ``data-regions``,
                                   ``data-scans``, ``data-pending-bytes``), ``last-error``
``changefeed-detail-<id>``         a changefeed's section; inside it ``dq-<db.table>`` per checked table
                                   (``data-passed``, ``data-passed-count``, ``data-failed-count``) and
                                   ``lag-chart`` (the SVG, ``data-points``)
``no-changefeeds``                 the message shown when there is none
================================== ============================================================================
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

CHART_W, CHART_H = 640, 180
PAD_L, PAD_R, PAD_T, PAD_B = 56, 12, 12, 28

STYLE = """
:root { color-scheme: light dark; --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --ok: #1a7f37; --bad: #cf222e;
        --warn: #9a6700; --accent: #0969da; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #9198a1; --line: #3d444d; --ok: #3fb950;
        --bad: #f85149; --warn: #d29922; --accent: #4493f8; } }
body { font: 14px/1.45 system-ui, sans-serif; color: var(--fg); margin: 16px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; } h3 { font-size: 14px; }
.muted { color: var(--muted); }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: 6px 8px; text-align: left; vertical-align: top; }
td.num { font-variant-numeric: tabular-nums; font-family: ui-monospace, monospace; }
.state { font-weight: 600; } .state-normal, .state-finished { color: var(--ok); }
.state-error { color: var(--bad); } .state-paused { color: var(--warn); }
.pass { color: var(--ok); } .fail { color: var(--bad); } .warn { color: var(--warn); }
.error { color: var(--bad); white-space: pre-wrap; max-width: 40em; }
section { border-top: 1px solid var(--line); margin-top: 16px; }
ul.dq { padding-left: 18px; } svg.chart { border: 1px solid var(--line); max-width: 100%; height: auto; }
svg.chart text { fill: var(--muted); font-size: 11px; } svg.chart .grid { stroke: var(--line); }
svg.chart .series { fill: none; stroke: var(--accent); stroke-width: 2; } svg.chart circle { fill: var(--accent); }
"""


def _e(v: Any) -> str:
    return escape("" if v is None else str(v), quote=True)


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(abs(seconds))
    sign = "-" if seconds < 0 else ""
    if s < 60:
        return f"{sign}{abs(seconds):.1f} s"
    if s < 3600:
        return f"{sign}{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{sign}{s // 3600} h {s % 3600 // 60} min"
    return f"{sign}{s // 86400} d {s % 86400 // 3600} h"


def fmt_axis(seconds: float) -> str:
    """A compact duration for chart labels: ``45s``, ``4m24s``, ``2h05m``, ``3d04h``."""
    s = round(seconds)
    if abs(s) < 60:
        return f"{s}s"
    if abs(s) < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if abs(s) < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M")


def lag_chart_svg(changefeed_id: str, history: list[dict[str, Any]]) -> str:
    """The lag history (``lag_s`` over ``at``) as an inline SVG line chart."""
    pts = [(float(p["at"]), float(p["lag_s"])) for p in history]
    head = (f'<svg class="chart" data-testid="lag-chart" id="lag-chart-{_e(changefeed_id)}" data-points="{len(pts)}" '
            f'viewBox="0 0 {CHART_W} {CHART_H}" width="{CHART_W}" height="{CHART_H}" role="img" '
            f'aria-label="checkpoint lag of {_e(changefeed_id)} over time" xmlns="http://www.w3.org/2000/svg">')
    if not pts:
        return (f'{head}<text x="{CHART_W / 2}" y="{CHART_H / 2}" text-anchor="middle">'
                "no window published yet</text></svg>")
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(max(p[1] for p in pts), 1.0) * 1.1
    y0 = min(0.0, min(p[1] for p in pts))
    plot_w, plot_h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B

    def sx(x: float) -> float:
        return PAD_L + (plot_w * (x - x0) / (x1 - x0) if x1 > x0 else plot_w / 2)

    def sy(y: float) -> float:
        return PAD_T + plot_h * (1 - (y - y0) / (y1 - y0))

    parts = [head, f"<title>checkpoint lag (s) of {_e(changefeed_id)}, {len(pts)} windows</title>"]
    for frac in (0.0, 0.5, 1.0):
        yv = y0 + (y1 - y0) * frac
        parts.append(f'<line class="grid" x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}"/>')
        parts.append(f'<text x="{PAD_L - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end">{_e(fmt_axis(yv))}</text>')
    parts.append(f'<text x="{PAD_L}" y="{CHART_H - 8}">{_e(_utc(x0))}</text>')
    if x1 > x0:
        parts.append(f'<text x="{CHART_W - PAD_R}" y="{CHART_H - 8}" text-anchor="end">{_e(_utc(x1))} UTC</text>')
    coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
    if len(pts) > 1:
        parts.append(f'<polyline class="series" points="{coords}"/>')
    lx, ly = pts[-1]
    parts.append(f'<circle cx="{sx(lx):.1f}" cy="{sy(ly):.1f}" r="3"><title>{_e(_utc(lx))} UTC: lag '
                 f"{_e(fmt_duration(ly))}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def _dq_summary(dq: dict[str, Any] | None) -> tuple[str, str]:
    if not dq or not dq.get("tables"):
        return "", "no checks yet"
    tables = dq["tables"]
    ok = sum(1 for t in tables if t["passed"])
    return ("true" if ok == len(tables) else "false"), f"{ok}/{len(tables)} tables passed"


def _memory_cell(mem: dict[str, Any] | None) -> str:
    if not mem:
        return '<td data-testid="puller-memory" class="num">—</td>'
    text = f"{fmt_bytes(mem['peak_pending_bytes'])} / {fmt_bytes(mem['max_pending_bytes'])}"
    text += f" ({mem['peak_ratio'] * 100:.1f} %)" + (", paused" if mem.get("paused") else "")
    return (f'<td data-testid="puller-memory" class="num" data-peak-bytes="{_e(mem["peak_pending_bytes"])}" '
            f'data-max-bytes="{_e(mem["max_pending_bytes"])}" title="peak pending bytes of the last pull / '
            f'max-pending-bytes">{_e(text)}</td>')


def _upstream_cell(up: dict[str, Any] | None) -> str:
    if not up:
        return '<td data-testid="upstream" data-reachable="" class="muted">—</td>'
    reachable = bool(up.get("reachable"))
    text = f"{up.get('address')}: {up.get('detail')}" if up.get("address") else str(up.get("detail") or "—")
    return (f'<td data-testid="upstream" data-reachable="{str(reachable).lower()}" '
            f'class="{"pass" if reachable else "warn"}" title="{_e(up.get("source") or "")}">{_e(text)}</td>')


def _capture_cell(cap: dict[str, Any] | None) -> str:
    if not cap:
        return '<td data-testid="capture" data-state="" class="muted" title="no capture: windows pull">—</td>'
    up = cap["state"] == "up"
    lag = cap.get("resolved_lag_s")
    text = cap["state"] + ("" if lag is None else f" · lag {lag:.1f} s")
    if up:
        text += (f" · {cap.get('regions') or 0} regions · {cap.get('incremental_scans') or 0} scans · "
                 f"{fmt_bytes(cap.get('pending_bytes') or 0)} pending")
    attrs = " ".join(f'data-{k}="{_e(cap.get(v))}"' for k, v in (
        ("lag", "resolved_lag_s"), ("regions", "regions"), ("scans", "incremental_scans"),
        ("pending-bytes", "pending_bytes")))
    return (f'<td data-testid="capture" data-state="{_e(cap["state"])}" {attrs} '
            f'class="{"pass" if up else "warn"}" title="cdcflow capture status {_e(cap["changefeed_id"])}">'
            f"{_e(text)}</td>")


def _row(cf: dict[str, Any]) -> str:
    cid = cf["changefeed_id"]
    state = cf["state"] or "unknown"
    err = (cf.get("error") or {}).get("message") or cf.get("state_error") or cf.get("config_error")
    passed, dq_text = _dq_summary(cf.get("data_quality"))
    dq_class = {"true": "pass", "false": "fail"}.get(passed, "muted")
    lag = cf.get("lag_seconds")
    return "".join([
        f'<tr id="changefeed-row-{_e(cid)}" data-testid="changefeed-row-{_e(cid)}" data-changefeed-id="{_e(cid)}" '
        f'data-state="{_e(state)}">',
        f'<td data-testid="changefeed-id"><a href="#changefeed-{_e(cid)}">{_e(cid)}</a></td>',
        f'<td data-testid="state"><span class="state state-{_e(state)}">{_e(state)}</span></td>',
        f'<td data-testid="checkpoint-ts" class="num">{_e(cf.get("checkpoint_ts"))}</td>',
        f'<td data-testid="checkpoint-time" class="num">{_e(cf.get("checkpoint_time") or "—")}</td>',
        f'<td data-testid="resolved-ts" class="num">{_e(cf.get("resolved_ts"))}</td>',
        f'<td data-testid="lag-seconds" class="num" data-value="{_e(lag)}" title="{_e(fmt_duration(lag))}">'
        f"{_e('—' if lag is None else f'{lag:.1f}')}</td>",
        _memory_cell(cf.get("puller_memory")),
        f'<td data-testid="dq-summary" data-passed="{passed}" class="{dq_class}">{_e(dq_text)}</td>',
        _upstream_cell(cf.get("upstream")),
        _capture_cell(cf.get("capture")),
        f'<td data-testid="last-error" class="{"error" if err else "muted"}">{_e(err or "—")}</td>',
        "</tr>",
    ])


def _detail(cf: dict[str, Any]) -> str:
    cid = cf["changefeed_id"]
    parts = [f'<section id="changefeed-{_e(cid)}" data-testid="changefeed-detail-{_e(cid)}">',
             f"<h2>{_e(cid)}</h2>",
             f'<p class="muted">DAG <code>{_e(cf.get("dag_id"))}</code> · sink <code>{_e(cf.get("sink_uri"))}</code>'
             f' · schedule <code>{_e(cf.get("schedule"))}</code></p>']
    dq = cf.get("data_quality")
    if dq and dq.get("tables"):
        parts.append(f'<h3>Data quality <span class="muted">at ts {_e(dq.get("ts"))} ({_e(dq.get("where"))}, mode '
                     f'{_e(dq.get("mode"))})</span></h3><ul class="dq">')
        for t in dq["tables"]:
            cls = "pass" if t["passed"] else "fail"
            failed = f" — failed: {', '.join(t['failed'])}" if t["failed"] else ""
            parts.append(
                f'<li data-testid="dq-{_e(t["table"])}" data-passed="{str(t["passed"]).lower()}" '
                f'data-passed-count="{t["passed_expectations"]}" data-failed-count="{t["failed_expectations"]}">'
                f'<code>{_e(t["table"])}</code>: <span class="{cls}">{"passed" if t["passed"] else "FAILED"}</span> '
                f'({t["passed_expectations"]} passed, {t["failed_expectations"]} failed){_e(failed)}</li>')
        parts.append("</ul>")
    else:
        parts.append('<h3>Data quality</h3><p class="muted">no checks yet</p>')
    parts.append("<h3>Checkpoint lag per published window</h3>")
    parts.append(lag_chart_svg(cid, cf.get("lag_history") or []))
    parts.append("</section>")
    return "".join(parts)


def render_page(changefeeds: list[dict[str, Any]], generated_at: float) -> str:
    head = ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>cdcflow changefeeds</title><style>{STYLE}</style></head><body>"
            "<h1>Changefeeds</h1>"
            f'<p class="muted" data-testid="generated-at">as of {_e(_utc(generated_at))} UTC · '
            "lag = now - checkpoint · reload the page to refresh</p>")
    if not changefeeds:
        return head + '<p data-testid="no-changefeeds">No changefeed yet: create one with ' \
                      "<code>cdcflow changefeed create --config FILE</code>.</p></body></html>"
    rows = "".join(_row(cf) for cf in changefeeds)
    table = ('<table data-testid="changefeeds-table" id="changefeeds"><thead><tr><th>Changefeed</th><th>State</th>'
             "<th>Checkpoint ts</th><th>Checkpoint time (UTC)</th><th>Resolved ts</th><th>Lag (s)</th>"
             "<th>Puller memory (peak / max)</th><th>Data quality</th><th>Upstream</th><th>Capture</th>"
             "<th>Last error</th></tr></thead>"
             f"<tbody>{rows}</tbody></table>")
    return head + table + "".join(_detail(cf) for cf in changefeeds) + "</body></html>"
