"""What the Changefeeds view shows, as JSON-ready dicts: one status per changefeed of ``$CDCFLOW_HOME``.

Sources, local reads but one: the configs (``changefeeds/*.toml``), the states (``state/<id>.json``: lifecycle,
checkpoint, resolved ts, last error, last checks), the recorded metrics (``state/<id>/metrics.json``: lag history,
the puller's memory in the last pull; see ``cdc_core.changefeed.metrics_history``) and, when the state holds no
check results, the newest check of the data-quality log (``<sink>/_cdcflow/dq_results``). The one remote read:
whether the changefeed's upstream answers (a 1 s ping, once per address and page), so that a stopped upstream —
the demo's, after ``make demo`` — shows as such instead of as a failure.

A broken config or state shows up as an error on its changefeed instead of failing the whole view.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from typing import Any

from cdc_core.codec import tso

# A changefeed id (as cdc_core.changefeed.config accepts it); nothing else names a file under $CDCFLOW_HOME.
_ID_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,127}$")
DQ_SOURCE_STATE = "state"
DQ_SOURCE_LOG = "dq_results"


def _time(ts: int) -> str | None:
    return tso.to_datetime(ts).isoformat() if ts > 0 else None


def dq_tables(reports: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-table results of one check (``{table: CheckReport dict}``), sorted by table name."""
    out = []
    for table, rep in sorted((reports or {}).items()):
        results = [r for r in (rep or {}).get("results", []) if isinstance(r, dict)]
        failed = [str(r.get("expectation")) for r in results if not r.get("success")]
        out.append({
            "table": table,
            "passed": bool((rep or {}).get("passed", not failed)),
            "passed_expectations": len(results) - len(failed),
            "failed_expectations": len(failed),
            "failed": failed,
            "expectations": [{"expectation": str(r.get("expectation")), "success": bool(r.get("success")),
                              "details": str(r.get("details") or "")} for r in results],
        })
    return out


def _dq_from_state(last_checks: dict[str, Any]) -> dict[str, Any] | None:
    if not last_checks or not last_checks.get("tables"):
        return None
    return {"source": DQ_SOURCE_STATE, "ts": last_checks.get("ts"), "mode": last_checks.get("mode"),
            "where": last_checks.get("where"), "tables": dq_tables(last_checks["tables"])}


def _dq_from_log(sink_uri: str, changefeed_id: str) -> dict[str, Any] | None:
    """The newest check of the changefeed in ``<sink>/_cdcflow/dq_results``, or None."""
    from deltalake import DeltaTable

    from cdc_core.changefeed.dq_results import results_path

    path = results_path(sink_uri)
    if not DeltaTable.is_deltatable(path):
        return None
    import pyarrow.compute as pc

    rows = DeltaTable(path).to_pyarrow_dataset().to_table(filter=pc.field("changefeed_id") == changefeed_id)
    if rows.num_rows == 0:
        return None
    last = pc.max(rows["ts"]).as_py()
    latest = rows.filter(pc.equal(rows["ts"], last)).to_pylist()
    reports: dict[str, Any] = {}
    for r in latest:
        rep = reports.setdefault(r["table"], {"passed": True, "results": []})
        rep["results"].append({"expectation": r["expectation"], "success": r["success"], "details": r["details"]})
        rep["passed"] = rep["passed"] and bool(r["success"])
    return {"source": DQ_SOURCE_LOG, "ts": last, "mode": latest[0]["mode"], "where": latest[0]["where"],
            "tables": dq_tables(reports)}


def _ping(addr: str) -> bool:
    from cdc_core.client.upstream import UpstreamClient

    with UpstreamClient(addr, timeout=1.0) as client:
        return client.ping()


def upstream_status(config_upstream: str | None, *, probes: dict[str, bool] | None = None,
                    ping: Callable[[str], bool] = _ping) -> dict[str, Any]:
    """Where a changefeed's upstream is, found as its tasks find it, and whether it answers.

    ``{"address", "source", "reachable", "detail"}``; the order: the config's ``upstream``, the Airflow connection
    ``cdcflow_upstream_default``, ``$CDCFLOW_UPSTREAM``, the embedded upstream of ``$CDCFLOW_HOME``
    (``upstream.json``). ``probes`` caches ping results by address across the changefeeds of one page."""
    import os

    from cdc_core.client.upstream import ENV_UPSTREAM
    from cdc_core.errors import CdcflowError
    from cdc_core.home import upstream_file
    from cdc_core.upstream_record import read_upstream_file

    out: dict[str, Any] = {"address": None, "source": None, "reachable": False, "detail": ""}
    addr, source = config_upstream, "config"
    if not addr:
        from cdcflow_airflow.hooks import DEFAULT_CONN_ID, upstream_addr_for

        try:
            addr, source = upstream_addr_for(), f"connection {DEFAULT_CONN_ID}"
        except Exception as exc:  # a broken connection fails the tasks too: say so here
            out.update(source=f"connection {DEFAULT_CONN_ID}", detail=f"connection unusable: {exc}")
            return out
    if not addr and os.environ.get(ENV_UPSTREAM):
        addr, source = os.environ[ENV_UPSTREAM], f"${ENV_UPSTREAM}"
    if not addr:
        try:
            data = read_upstream_file()
        except CdcflowError as exc:
            out["detail"] = str(exc)
            return out
        if not data or not data.get("pd_addr"):
            out["detail"] = f"no upstream running (no {upstream_file()}; the demo's stops with the demo)"
            return out
        addr, source = str(data["pd_addr"]), "embedded upstream"
    probes = {} if probes is None else probes
    if addr not in probes:
        try:
            probes[addr] = ping(addr)
        except Exception:
            probes[addr] = False
    out.update(address=addr, source=source, reachable=probes[addr],
               detail="answers" if probes[addr] else "not answering (stopped or unreachable)")
    return out


def capture_status(changefeed_id: str, config: Any | None) -> dict[str, Any] | None:
    """The changefeed's continuous capture (``cdcflow capture status``) with ``expected``: its config starts one
    (``[capture] auto-start``) or one has run. None when neither: its windows pull for themselves, as configured."""
    from cdc_core.capture import lease as capture_lease

    st = capture_lease.state(changefeed_id)
    ran = st.get("updated_at") is not None or st["pid"] is not None
    expected = bool(config is not None and config.capture_auto_start)
    if not (expected or ran):
        return None
    return {**st, "expected": expected}


def changefeed_status(changefeed_id: str, config: Any | None, config_error: str | None,
                      *, now: float | None = None, probes: dict[str, bool] | None = None) -> dict[str, Any]:
    """The status of one changefeed (``config`` a ``ChangefeedConfig``, or None when it could not be read)."""
    from cdc_core.changefeed import metrics_history
    from cdc_core.changefeed.state import load_state
    from cdc_core.errors import CdcflowError
    from cdcflow_airflow.dag_factory import redact_uri
    from cdcflow_airflow.names import dag_id_for

    now = time.time() if now is None else now
    out: dict[str, Any] = {
        "changefeed_id": changefeed_id,
        "dag_id": dag_id_for(changefeed_id),
        "sink_uri": redact_uri(config.sink_uri) if config else None,
        "schedule": config.schedule if config else None,
        "config_error": config_error,
        "state": None,
        "state_error": None,
        "checkpoint_ts": None,
        "checkpoint_time": None,
        "resolved_ts": None,
        "resolved_time": None,
        "lag_seconds": None,
        "updated_at": None,
        "error": None,
        "last_window": None,
        "data_quality": None,
        "puller_memory": None,
        "lag_history": [],
        "upstream": upstream_status(config.upstream, probes=probes) if config else None,
        "capture": capture_status(changefeed_id, config),
    }
    try:
        st = load_state(changefeed_id)
    except CdcflowError as exc:
        out["state_error"] = str(exc)
        return out
    out.update(
        state=st.state,
        checkpoint_ts=st.checkpoint_ts,
        checkpoint_time=_time(st.checkpoint_ts),
        resolved_ts=st.resolved_ts,
        resolved_time=_time(st.resolved_ts),
        lag_seconds=metrics_history.lag_seconds(st.checkpoint_ts, now),
        updated_at=st.updated_at or None,
        error=st.error,
        last_window={k: v for k, v in (st.last_window or {}).items() if k != "tables"} or None,
    )
    dq = _dq_from_state(st.last_checks)
    if dq is None and config is not None:
        with contextlib.suppress(Exception):  # the log is a fallback; an unreadable one shows as "no checks yet"
            dq = _dq_from_log(config.sink_uri, changefeed_id)
    out["data_quality"] = dq
    mem = metrics_history.last_pull_memory(changefeed_id)
    if mem is not None:
        out["puller_memory"] = {
            "peak_pending_bytes": mem.peak_pending_bytes, "max_pending_bytes": mem.max_pending_bytes,
            "peak_ratio": round(mem.peak_ratio, 4), "paused": mem.paused, "at": mem.at, "seconds": mem.seconds,
        }
    out["lag_history"] = [
        {"at": p.at, "checkpoint_ts": p.checkpoint_ts, "resolved_ts": p.resolved_ts, "lag_s": p.lag_s}
        for p in metrics_history.lag_history(changefeed_id)
    ]
    return out


def changefeed_statuses(*, now: float | None = None) -> list[dict[str, Any]]:
    """Every changefeed with a config or a state in ``$CDCFLOW_HOME``, sorted by id."""
    from cdc_core.changefeed.config import load_config_file
    from cdc_core.changefeed.state import list_states
    from cdc_core.errors import CdcflowError
    from cdc_core.home import changefeeds_dir, state_dir

    configs: dict[str, Any] = {}
    errors: dict[str, str] = {}
    d = changefeeds_dir()
    for p in sorted(d.glob("*.toml")) if d.is_dir() else []:
        try:
            cfg = load_config_file(p)
            configs[cfg.changefeed_id] = cfg
        except CdcflowError as exc:
            errors[p.stem] = str(exc)
    ids = set(configs) | set(errors) | {s.changefeed_id for s in list_states()}
    sd = state_dir()
    ids |= {p.stem for p in sd.glob("*.json")} if sd.is_dir() else set()  # corrupt states too
    probes: dict[str, bool] = {}
    return [changefeed_status(cid, configs.get(cid), errors.get(cid), now=now, probes=probes)
            for cid in sorted(ids)]


def find_status(changefeed_id: str, *, now: float | None = None) -> dict[str, Any] | None:
    """One changefeed's status, or None when it has neither a config nor a state (or the id is not valid)."""
    from cdc_core.changefeed.config import config_path, load_config_file
    from cdc_core.errors import CdcflowError
    from cdc_core.home import state_dir

    if not _ID_RE.match(changefeed_id):  # also keeps the id from naming a path outside $CDCFLOW_HOME
        return None
    path = config_path(changefeed_id)
    if not path.exists() and not (state_dir() / f"{changefeed_id}.json").exists():
        return None
    config, error = None, None
    if path.exists():
        try:
            config = load_config_file(path)
        except CdcflowError as exc:
            error = str(exc)
    return changefeed_status(changefeed_id, config, error, now=now)
