"""The five steps of one window — plan, pull, apply, check, publish — as plain functions.

Both ``cdcflow changefeed run`` and the Airflow DAG tasks call exactly these; their inputs and
outputs are JSON-serializable dicts so that they can travel through XCom. Any failure that is not
transient puts the changefeed in error, and the checkpoint only moves in ``publish``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec import changelog, key, tso
from cdc_core.errors import ChangefeedError, DataQualityError
from cdc_core.log import get_logger
from cdc_core.puller.window_collector import collect_window
from cdc_core.schema import ddl_history
from cdc_core.schema.model import TableInfo

from . import spark_engine
from .config import ChangefeedConfig, load_config
from .schema_loader import load_schema
from .state import advance_checkpoint, load_state, locked_state, set_error

log = get_logger("cdcflow.changefeed")

DEFAULT_PULL_TIMEOUT_S = 120.0


def _client(cfg: ChangefeedConfig) -> UpstreamClient:
    return UpstreamClient(resolve_pd_addr(cfg.upstream))


def plan(changefeed_id: str, *, interval_end_ts: int | None, target_ts: int | None = None) -> dict[str, Any]:
    """Fix the window ``(checkpoint, T]`` with ``T = min(interval end, changefeed target-ts, target_ts)``.

    With no bound at all, ``T`` is the upstream's current TSO ("now").
    """
    cfg = load_config(changefeed_id)
    st = load_state(changefeed_id)
    if st.state == "error":
        msg = (st.error or {}).get("message", "unknown error")
        raise ChangefeedError(
            f"changefeed {changefeed_id!r} is in error ({msg}); fix the cause and `cdcflow changefeed resume` it"
        )
    bounds = [b for b in (interval_end_ts, cfg.target_ts, target_ts) if b]
    if bounds:
        target = min(bounds)
    else:
        with _client(cfg) as c:
            target = c.get_ts()
    out: dict[str, Any] = {
        "changefeed_id": changefeed_id,
        "sink_uri": cfg.sink_uri,
        "checkpoint_ts": st.checkpoint_ts,
        "target_ts": target,
        "skip": False,
        "reason": "",
    }
    if st.state in ("paused", "finished", "removed"):
        out.update(skip=True, reason=f"changefeed is {st.state}")
    elif target <= st.checkpoint_ts:
        out.update(
            skip=True,
            reason=f"window already covered by checkpoint {st.checkpoint_ts} "
            f"({tso.to_datetime(st.checkpoint_ts).isoformat()}) >= target {target}",
        )
    log.info("planned window", **out)
    return out


def _replicated_tables(cfg: ChangefeedConfig, client: UpstreamClient, at_ts: int) -> list[TableInfo]:
    storage = load_schema(client, at_ts)
    flt = cfg.table_filter
    return [t for t in storage.tables_at(at_ts) if flt.match(t.db_name, t.name)]


def _guard(changefeed_id: str, step: str, fn: Any, *args: Any) -> Any:
    """Run a step; a non-transient failure puts the changefeed in error (the checkpoint stays)."""
    try:
        return fn(*args)
    except DataQualityError:
        raise  # check() records its own, richer error
    except ChangefeedError as exc:
        set_error(changefeed_id, f"{step}: {exc}", step=step)
        raise


def pull(p: dict[str, Any]) -> dict[str, Any]:
    """Pull every row change of the window into the bronze changelog (written whole, then renamed)."""
    if p["skip"]:
        log.info("pull skipped", reason=p["reason"])
        return {"skipped": True, "reason": p["reason"]}
    return _guard(p["changefeed_id"], "pull", _pull, p)  # type: ignore[no-any-return]


def _pull(p: dict[str, Any]) -> dict[str, Any]:
    cfg = load_config(p["changefeed_id"])
    checkpoint, target = p["checkpoint_ts"], p["target_ts"]
    pd_addr = resolve_pd_addr(cfg.upstream)
    with UpstreamClient(pd_addr) as c:
        tables = _replicated_tables(cfg, c, target)
    spans = {t.id: key.table_span(t.id) for t in tables}
    spans[ddl_history.TABLE_ID] = key.table_span(ddl_history.TABLE_ID)
    started = time.monotonic()
    events, resolved = asyncio.run(collect_window(pd_addr, spans, checkpoint, target, timeout_s=DEFAULT_PULL_TIMEOUT_S))
    path = changelog.write_window(cfg.sink_uri, cfg.changefeed_id, target, events)
    with locked_state(cfg.changefeed_id) as st:
        st.resolved_ts = max(st.resolved_ts, min(resolved.values()))
    out = {
        "skipped": False,
        "bronze_path": str(path),
        "events": events.num_rows,
        "tables": [t.qualified_name for t in tables],
        "seconds": round(time.monotonic() - started, 3),
    }
    log.info("pulled window", changefeed_id=cfg.changefeed_id, target_ts=target, **out)
    return out


def apply(p: dict[str, Any]) -> dict[str, Any]:
    """Apply the bronze window to the silver Delta tables (exactly once per table and window)."""
    if p["skip"]:
        log.info("apply skipped", reason=p["reason"])
        return {"skipped": True, "reason": p["reason"], "tables": {}}
    return _guard(p["changefeed_id"], "apply", _apply, p)  # type: ignore[no-any-return]


def _apply(p: dict[str, Any]) -> dict[str, Any]:
    cfg = load_config(p["changefeed_id"])
    with _client(cfg) as c:
        tables = _replicated_tables(cfg, c, p["target_ts"])
    result = spark_engine.run_job(
        "apply_window",
        {
            "sink_uri": cfg.sink_uri,
            "changefeed_id": cfg.changefeed_id,
            "window_end_ts": p["target_ts"],
            "checkpoint_ts": p["checkpoint_ts"],
            "tables": [t.to_json() for t in tables],
        },
    )
    log.info("applied window", changefeed_id=cfg.changefeed_id, target_ts=p["target_ts"], result=result)
    return {"skipped": False, **result}


def check(p: dict[str, Any]) -> dict[str, Any]:
    """Data-quality checks of every replicated table against the upstream snapshot at the window end."""
    if p["skip"]:
        log.info("check skipped", reason=p["reason"])
        return {"skipped": True, "reason": p["reason"], "passed": True, "tables": {}}
    return _guard(p["changefeed_id"], "check", _check, p)  # type: ignore[no-any-return]


def _check(p: dict[str, Any]) -> dict[str, Any]:
    cfg = load_config(p["changefeed_id"])
    ts = p["target_ts"]
    reports: dict[str, Any] = {}
    with _client(cfg) as c:
        tables = _replicated_tables(cfg, c, ts)
        for t in tables:
            expected = None
            if cfg.dq_mode != "off":
                expected = c.query(f"SELECT * FROM `{t.db_name}`.`{t.name}`", at_ts=ts)
            reports[t.qualified_name] = spark_engine.run_job(
                "data_quality",
                {"sink_uri": cfg.sink_uri, "table": t.to_json(), "expected_rows": expected, "mode": cfg.dq_mode,
                 "ts": ts},
            )
    failed = {name: r for name, r in reports.items() if not r["passed"]}
    with locked_state(cfg.changefeed_id) as st:
        st.last_checks = {"ts": ts, "mode": cfg.dq_mode, "tables": reports}
        if failed:
            st.state = "error"
            st.error = {"message": _dq_message(failed, ts), "step": "check", "at": time.time(), "ts": ts}
    if failed:
        raise DataQualityError(_dq_message(failed, ts))
    return {"skipped": False, "passed": True, "tables": reports}


def _dq_message(failed: dict[str, Any], ts: int) -> str:
    parts = []
    for name, r in failed.items():
        for e in r.get("results", []):
            if not e.get("success", True):
                sample = e.get("sample_keys") or []
                parts.append(f"{name} at ts {ts}: {e.get('expectation')} failed {e.get('details', '')}"
                             + (f" (sample keys: {sample[:5]})" if sample else ""))
    return "data-quality check failed: " + "; ".join(parts or [f"{n} at ts {ts}" for n in failed])


def publish(p: dict[str, Any], applied: dict[str, Any], checked: dict[str, Any]) -> dict[str, Any]:
    """Advance the checkpoint to the window end and record the window's outcome."""
    if p["skip"]:
        log.info("publish skipped", reason=p["reason"])
        return {"skipped": True, "reason": p["reason"], "checkpoint_ts": p["checkpoint_ts"]}
    if not checked.get("passed"):
        raise ChangefeedError("refusing to publish a window whose checks did not pass")
    cid = p["changefeed_id"]
    advance_checkpoint(cid, p["target_ts"])
    with locked_state(cid) as st:
        st.last_window = {
            "checkpoint_ts": p["checkpoint_ts"],
            "target_ts": p["target_ts"],
            "tables": applied.get("tables", {}),
            "published_at": time.time(),
        }
        if load_config(cid).target_ts and st.checkpoint_ts >= (load_config(cid).target_ts or 0):
            st.state = "finished"
    log.info("published window", changefeed_id=cid, checkpoint_ts=p["target_ts"])
    return {"skipped": False, "checkpoint_ts": p["target_ts"], "tables": applied.get("tables", {})}
