"""Daily upkeep of what changefeeds leave behind, the engine's side (the maintenance DAG schedules it through
``cdcflow_airflow.maintenance``; the Delta tables' own work is the ``maintain`` Spark job, ``spark_jobs.maintain``):

* **silver tables** ``<sink>/<db>/<table>``: each compacted and vacuumed by the ``maintain`` job under the window
  lease of its changefeeds, so a compaction never races a window's MERGE (:func:`maintain_table`).
* **data-quality result log** ``<sink>/_cdcflow/dq_results``: compacted, checkpointed and vacuumed the same way,
  per sink, under the leases of the sink's changefeeds; its rows, the checks' history, are kept.
* **bronze changelog**: windows older than ``checkpoint - retention`` that no rebuild can need go
  (``retention.prune_changelog``, after ``retention.fold_changelog`` folded them into a snapshot); the silver
  tables rebuilds moved aside go after some days (``retention.remove_trash``).
* **full reconciliation**: every table of a running changefeed compared whole with the upstream at its checkpoint,
  once per interval (``reconcile``); a difference puts the changefeed in error.
* **GC safe points**: refreshed for every changefeed that may still need its checkpoint's snapshot (normal,
  paused, in error: one that does not publish would otherwise lose its hold after the TTL), removed for finished
  ones.

Every function returns a JSON-ready summary and logs what it did. Importing this module is cheap (the maintenance
DAG's file imports it through the plugin when it is parsed): what the functions need is imported inside them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("cdcflow.upkeep")

DEFAULT_RETENTION_HOURS = 168
DEFAULT_GC_TTL_HOURS = 48  # > the daily schedule, so one late run does not drop a paused changefeed's hold
GC_REFRESH_STATES = ("normal", "paused", "error")
GC_REMOVE_STATES = ("finished",)
FOLD_STATES = ("normal", "paused")  # one in error is not folded until the operator has resolved it
RECONCILE_STATES = ("normal",)  # paused / finished changefeeds do not move; one in error waits for the operator
SILVER_SKIP_PREFIX = "_"  # <sink>/_cdcflow (changelog, dq results): no database's directory starts so (sink_uri)
DEFAULT_TRASH_RETENTION_DAYS = 7
LEASE_WAIT_S = 15 * 60.0  # how long a table's compaction waits behind its changefeeds' windows
LEASE_TTL_S = 30 * 60.0  # a maintenance task that dies holds the windows back at most this long


# --- what to maintain -----------------------------------------------------------------------------------


def list_changefeeds() -> list[dict[str, Any]]:
    """Every changefeed with a readable config: ``{changefeed_id, sink_uri, state, checkpoint_ts}``."""
    from cdc_core.changefeed.config import load_config_file
    from cdc_core.changefeed.state import load_state
    from cdc_core.errors import CdcflowError
    from cdc_core.home import changefeeds_dir

    out = []
    d = changefeeds_dir()
    for p in sorted(d.glob("*.toml")) if d.is_dir() else []:
        try:
            cfg = load_config_file(p)
        except CdcflowError as exc:
            log.warning("skipping changefeed config %s: %s", p, exc)
            continue
        try:
            st = load_state(cfg.changefeed_id)
            state, checkpoint = st.state, st.checkpoint_ts
        except CdcflowError:
            state, checkpoint = None, 0
        out.append({"changefeed_id": cfg.changefeed_id, "sink_uri": cfg.sink_uri, "state": state,
                    "checkpoint_ts": checkpoint})
    log.info("changefeeds: %s", [(c["changefeed_id"], c["state"]) for c in out])
    return out


def silver_table_paths(sink_uri: str) -> list[Path]:
    """The Delta tables ``<sink>/<db>/<table>`` (a ``_delta_log`` directory inside), internal ``_*`` dirs skipped."""
    from cdc_core.codec.sink_uri import local_path

    root = local_path(sink_uri)
    if not root.is_dir():
        return []
    return sorted(
        t for db in root.iterdir() if db.is_dir() and not db.name.startswith(SILVER_SKIP_PREFIX)
        for t in db.iterdir() if (t / "_delta_log").is_dir()
    )


def find_silver_tables(changefeeds: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The silver tables of the changefeeds' sinks, each once: ``{path, name, changefeed_ids}``."""
    from cdc_core.codec.sink_uri import qualified_name_of  # the directories hold the names encoded

    tables: dict[str, dict[str, Any]] = {}
    for cf in changefeeds:
        for path in silver_table_paths(cf["sink_uri"]):
            name = qualified_name_of(path.parent.name, path.name)
            t = tables.setdefault(str(path), {"path": str(path), "name": name, "changefeed_ids": []})
            t["changefeed_ids"].append(cf["changefeed_id"])
    log.info("silver tables: %s", sorted(tables))
    return [tables[k] for k in sorted(tables)]


# --- Delta tables: the maintain job under the window leases -----------------------------------------------


@contextlib.contextmanager
def window_leases(changefeed_ids: Iterable[str], *, wait_s: float | None = None) -> Iterator[list[str]]:
    """Hold the window lease (``cdc_core.changefeed.lease``) of every changefeed writing to a table while it is
    compacted: a window's MERGE and a compaction that commit at once make one of them fail on a conflict.
    Waits up to ``wait_s`` (default ``LEASE_WAIT_S``) behind running (and queued) windows; raises ``LeaseBusy``
    after that."""
    from cdc_core.changefeed import lease

    owner = f"maintenance:{socket.gethostname()}:{os.getpid()}"
    held: list[str] = []
    try:
        for cid in sorted(set(changefeed_ids)):  # one order for every maintainer
            def on_wait(holder: lease.Lease, c: str = cid) -> None:
                log.info("waiting for %s's window lease (%s)", c, holder.describe())

            lease.wait_acquire(cid, owner, timeout_s=LEASE_WAIT_S if wait_s is None else wait_s, ttl_s=LEASE_TTL_S,
                               on_wait=on_wait)
            held.append(cid)
        yield held
    finally:
        for cid in held:
            lease.release(cid, owner)


def _maintain(path: str, retention_hours: int, enforce_retention_duration: bool, *,
              checkpoint: bool = False) -> dict[str, Any]:
    """The ``maintain`` job of the Delta table at ``path``: its ``compact``, ``vacuum`` (and
    ``checkpoint_version``)."""
    from cdc_core.changefeed import spark_engine
    from cdc_core.changefeed.job_args.maintain import MaintainArgs

    return spark_engine.run_job(MaintainArgs(path=path, retention_hours=retention_hours,
                                             enforce_retention_duration=enforce_retention_duration,
                                             checkpoint=checkpoint))


def maintain_table(table: Mapping[str, Any], retention_hours: int, *,
                   enforce_retention_duration: bool = True) -> dict[str, Any]:
    """Compact, then vacuum, one silver table (``table`` as :func:`find_silver_tables` gives it), holding the
    window leases of its changefeeds."""
    started = time.monotonic()
    path = str(table["path"])
    with window_leases(table.get("changefeed_ids") or []) as held:
        done = _maintain(path, retention_hours, enforce_retention_duration)
    out = {"table": table.get("name"), "path": path, "leases": held, "compact": done["compact"],
           "vacuum": done["vacuum"], "seconds": round(time.monotonic() - started, 3)}
    return out


def maintain_dq_results(changefeeds: Iterable[Mapping[str, Any]], retention_hours: int, *,
                        enforce_retention_duration: bool = True) -> dict[str, Any]:
    """Per sink, the data-quality result log ``<sink>/_cdcflow/dq_results`` (a commit of a few rows at every
    barrier of every changefeed on the sink): compacted, checkpointed (a reader replays one checkpoint and the
    commits after it, not every commit since the first) and vacuumed, holding the window leases of the sink's
    changefeeds (their checks append to it). No result row is deleted: the log is the checks' history."""
    from cdc_core.changefeed import dq_results, spark_engine

    by_sink: dict[str, list[str]] = {}
    for cf in changefeeds:
        by_sink.setdefault(str(cf["sink_uri"]), []).append(str(cf["changefeed_id"]))
    done: dict[str, Any] = {}
    with spark_engine.one_application():  # under spark-submit: one application for every sink's log
        for sink, ids in sorted(by_sink.items()):
            if not dq_results.exists(sink):
                done[sink] = {"skipped": True, "reason": "no data-quality results yet"}
                continue
            started = time.monotonic()
            path = dq_results.results_path(sink)
            with window_leases(ids) as held:
                job = _maintain(path, retention_hours, enforce_retention_duration, checkpoint=True)
            done[sink] = {"path": path, "leases": held, "compact": job["compact"],
                          "checkpoint_version": job["checkpoint_version"], "vacuum": job["vacuum"],
                          "seconds": round(time.monotonic() - started, 3)}
    return {"sinks": done}


# --- bronze changelog retention ---------------------------------------------------------------------------


def keep_after_ts(checkpoint_ts: int, retention_hours: int) -> int | None:
    """``checkpoint - retention`` as a TSO (None when the checkpoint is unset or younger than the retention)."""
    from cdc_core.codec import tso

    if checkpoint_ts <= 0:
        return None
    ms = tso.physical_ms(checkpoint_ts) - retention_hours * 3_600_000
    return tso.compose(ms, 0) if ms > 0 else None


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set):
        return [_jsonable(x) for x in v]
    return str(v)


def prune_bronze(changefeeds: Iterable[Mapping[str, Any]], retention_hours: int) -> dict[str, Any]:
    """Drop each changefeed's bronze changelog windows older than ``checkpoint - retention_hours``, after folding
    them into a snapshot (under the window lease) when the newest complete snapshot is older than that, so that
    the changelog stays bounded with the default settings."""
    from cdc_core.changefeed import retention

    done: dict[str, Any] = {}
    for cf in changefeeds:
        cid = cf["changefeed_id"]
        keep = keep_after_ts(int(cf.get("checkpoint_ts") or 0), retention_hours)
        if keep is None:
            done[cid] = {"skipped": True, "reason": "checkpoint unset or younger than the retention"}
            continue
        folded = None
        # The lake up to the checkpoint passed every window's checks, unless the changefeed is in error (a failed
        # reconciliation): that one is not folded until the operator has resolved it.
        if cf.get("state") in FOLD_STATES:
            with window_leases([cid]):
                folded = retention.fold_changelog(cid, keep)
        result = retention.prune_changelog(cf["sink_uri"], cid, keep)
        done[cid] = {"keep_after_ts": keep, "fold": _jsonable(folded), "result": _jsonable(result)}
        log.info("bronze changelog of %s pruned up to ts %d: %s", cid, keep, result)
    return {"skipped": False, "retention_hours": retention_hours, "changefeeds": done}


def remove_rebuild_trash(changefeeds: Iterable[Mapping[str, Any]], older_than_days: float) -> dict[str, Any]:
    """Delete the silver tables rebuilds moved aside (``<sink>/_cdcflow/trash``) more than ``older_than_days``
    days ago, once per sink."""
    from cdc_core.changefeed import retention

    done: dict[str, Any] = {}
    for sink in sorted({cf["sink_uri"] for cf in changefeeds}):
        removed = retention.remove_trash(sink, older_than_days)
        done[sink] = [_jsonable(e.to_dict() if hasattr(e, "to_dict") else e) for e in removed]
        log.info("rebuild trash of %s: %d director(ies) removed", sink, len(removed))
    return {"skipped": False, "older_than_days": older_than_days, "sinks": done}


# --- GC safe points ---------------------------------------------------------------------------------------


def refresh_gc_safe_points(changefeeds: Iterable[Mapping[str, Any]], ttl_hours: int) -> dict[str, Any]:
    """Refresh the service GC safe point of every changefeed in :data:`GC_REFRESH_STATES` at its checkpoint;
    remove those of changefeeds in :data:`GC_REMOVE_STATES`. An unreachable upstream is reported, not raised."""
    from cdc_core.changefeed import gc_safepoint

    done: dict[str, Any] = {}
    for cf in changefeeds:
        cid, state = cf["changefeed_id"], cf.get("state")
        if state in GC_REFRESH_STATES and int(cf.get("checkpoint_ts") or 0) > 0:
            sp = gc_safepoint.refresh_for_changefeed(cid, int(cf["checkpoint_ts"]), ttl_s=ttl_hours * 3600)
            done[cid] = {"action": "refresh", "state": state, "ok": sp is not None,
                         **(sp.to_dict() if sp is not None else {})}
        elif state in GC_REMOVE_STATES:
            sp = gc_safepoint.remove_for_changefeed(cid)
            done[cid] = {"action": "remove", "state": state, "ok": sp is not None}
        else:
            done[cid] = {"action": "none", "state": state}
        log.info("gc safe point of %s: %s", cid, done[cid])
    return {"ttl_hours": ttl_hours, "changefeeds": done}


# --- the full reconciliation ------------------------------------------------------------------------------


def reconcile_changefeeds(changefeeds: Iterable[Mapping[str, Any]], interval_hours: float, *,
                          force: bool = False) -> dict[str, Any]:
    """The full reconciliation (``cdc_core.changefeed.reconcile``) of each running changefeed whose last one is
    older than ``interval_hours`` (every one with ``force``), at its checkpoint under its window lease. A
    difference puts that changefeed in error; the task then fails naming them, after trying the others."""
    from cdc_core.changefeed import reconcile
    from cdc_core.errors import DataQualityError

    done: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for cf in changefeeds:
        cid = str(cf["changefeed_id"])
        if cf.get("state") not in RECONCILE_STATES:
            done[cid] = {"skipped": True, "reason": f"changefeed is {cf.get('state')}"}
        elif not force and not reconcile.due(cid, interval_hours):
            done[cid] = {"skipped": True, "reason": f"reconciled less than {interval_hours:g} h ago"}
        else:
            with window_leases([cid]):
                try:
                    done[cid] = reconcile.reconcile_and_record(cid)
                except DataQualityError as exc:
                    failed[cid] = str(exc)
                    done[cid] = {"failed": str(exc)}
    if failed:
        raise DataQualityError("; ".join(f"changefeed {c}: {m}" for c, m in sorted(failed.items())))
    return {"interval_hours": interval_hours, "changefeeds": done}
