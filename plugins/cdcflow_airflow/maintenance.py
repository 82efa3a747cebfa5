"""Daily upkeep of what cdcflow leaves behind (the work of DAG ``cdcflow__maintenance``):

* **silver tables** ``<sink>/<db>/<table>``: compact small files (delta-rs ``optimize.compact()``), then vacuum
  the files no version inside the retention still references (``vacuum(retention_hours=...)``). Both commits
  carry the table's last ``cdcflow.ts`` in their metadata: they do not change the data, and time travel by
  cdcflow ts (``spark_jobs.checks.data_quality.version_as_of``, ``cdcflow verify --at-ts``) must keep finding the
  version of each window. Vacuuming drops time travel to versions older than the retention. A table is
  maintained under the window lease of its changefeeds, so a compaction never races a window's MERGE.
* **data-quality result log** ``<sink>/_cdcflow/dq_results``: compacted, checkpointed and vacuumed like a silver
  table (every barrier appends a small commit to it); its rows, the checks' history, are kept.
* **bronze changelog**: windows older than ``checkpoint - retention`` that no rebuild can need go
  (``cdc_core.changefeed.retention.prune_changelog``); the silver tables rebuilds moved aside go after some days
  (``retention.remove_trash``). Both are skipped, and say so, where that module is not installed.
* **full reconciliation**: every table of a running changefeed compared whole with the upstream at its checkpoint,
  once per ``reconcile_interval_hours`` (weekly by default; the window checks cost only what each window changed,
  so a difference nothing changed since is found here). A difference puts the changefeed in error.
* **GC safe points**: refreshed for every changefeed that may still need its checkpoint's snapshot (normal,
  paused, in error: a changefeed that does not publish - paused, or its DAG paused - would otherwise lose its
  hold after the TTL), removed for finished ones. Running changefeeds also refresh theirs at each publish.

Every function returns a JSON-ready summary and logs what it did. Module import is cheap (the DAG file imports
it at parse time): deltalake and gRPC are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("cdcflow.airflow.maintenance")

DEFAULT_RETENTION_HOURS = 168
RECONCILE_INTERVAL_VARIABLE = "cdcflow_reconcile_interval_hours"  # Airflow Variable overriding the interval
RETENTION_VARIABLE = "cdcflow_retention_hours"  # Airflow Variable overriding the default retention
DEFAULT_GC_TTL_HOURS = 48  # > the daily schedule, so one late run does not drop a paused changefeed's hold
GC_REFRESH_STATES = ("normal", "paused", "error")
GC_REMOVE_STATES = ("finished",)
SILVER_SKIP_PREFIX = "_"  # <sink>/_cdcflow (changelog, dq results): no database's directory starts so (sink_uri)
TS_KEY = "cdcflow.ts"
RETENTION_MODULE = "cdc_core.changefeed.retention"  # prune_changelog, remove_trash
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


# --- silver tables: compact + vacuum ---------------------------------------------------------------------


def last_cdcflow_ts(path: str) -> str | None:
    """The newest ``cdcflow.ts`` of the table's commits (None for a table no window has written yet)."""
    from deltalake import DeltaTable

    from spark_jobs.load.delta_writer import (
        commit_ts,  # delta-rs's commits hold it as is, delta-spark's in userMetadata
    )

    dt = DeltaTable(path)
    for limit in (100, None):  # windows (and maintenance) stamp every commit: the newest few suffice
        found = [ts for ts in map(commit_ts, dt.history(limit)) if ts]
        if found:
            return str(max(found))
    return None


def _commit_properties(path: str) -> Any:
    from deltalake import CommitProperties

    ts = last_cdcflow_ts(path)
    return CommitProperties(custom_metadata={TS_KEY: ts} if ts is not None else {})


def _file_count(path: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(path).file_uris())


def compact_table(path: str) -> dict[str, Any]:
    """Bin-pack the table's small files (``optimize.compact``); the commit keeps the table's cdcflow ts. A table
    with deletion vectors first has its files that they hollowed out rewritten without their dead rows
    (``merge_on_read.purge_deleted_rows``: the compaction leaves large files as they are)."""
    from deltalake import DeltaTable

    from spark_jobs.load import merge_on_read, silver_read

    before = _file_count(path)
    purged = None
    if silver_read.has_deletion_vectors(DeltaTable(path)):
        ts = last_cdcflow_ts(path)
        purged = merge_on_read.purge_deleted_rows(path, {TS_KEY: ts} if ts is not None else {})
    metrics = DeltaTable(path).optimize.compact(commit_properties=_commit_properties(path))
    out: dict[str, Any] = {
        "files_before": before, "files_after": _file_count(path), "files_added": int(metrics.get("numFilesAdded", 0)),
        "files_removed": int(metrics.get("numFilesRemoved", 0))}
    if purged is not None:
        out["purged"] = purged
    log.info("compacted %s: %s", path, out)
    return out


def vacuum_table(path: str, retention_hours: int, *, enforce_retention_duration: bool = True) -> dict[str, Any]:
    """Delete the files no version of the last ``retention_hours`` references (``dry_run=False``)."""
    from deltalake import DeltaTable

    deleted = DeltaTable(path).vacuum(retention_hours=retention_hours, dry_run=False,
                                      enforce_retention_duration=enforce_retention_duration,
                                      commit_properties=_commit_properties(path))
    # delta-rs's vacuum does not know deletion-vector files: those no live file names go the same way.
    from spark_jobs.load import merge_on_read, silver_read

    vectors = []
    if silver_read.has_deletion_vectors(DeltaTable(path)):
        vectors = merge_on_read.unreferenced_vector_files(path, retention_hours)
        for f in vectors:
            os.unlink(f)
    out = {"retention_hours": retention_hours, "enforce_retention_duration": enforce_retention_duration,
           "files_deleted": len(deleted) + len(vectors),
           "deleted": sorted([*deleted, *(os.path.basename(f) for f in vectors)])[:20]}
    log.info("vacuumed %s: %d file(s) deleted (retention %d h)", path, out["files_deleted"], retention_hours)
    return out


@contextlib.contextmanager
def window_leases(changefeed_ids: Iterable[str], *, wait_s: float = LEASE_WAIT_S) -> Iterator[list[str]]:
    """Hold the window lease (``cdc_core.changefeed.lease``) of every changefeed writing to a table while it is
    compacted: a window's MERGE and a compaction that commit at once make one of them fail on a conflict.
    Waits up to ``wait_s`` behind running (and queued) windows; raises ``LeaseBusy`` after that."""
    from cdc_core.changefeed import lease

    owner = f"maintenance:{socket.gethostname()}:{os.getpid()}"
    held: list[str] = []
    try:
        for cid in sorted(set(changefeed_ids)):  # one order for every maintainer
            def on_wait(holder: lease.Lease, c: str = cid) -> None:
                log.info("waiting for %s's window lease (%s)", c, holder.describe())

            lease.wait_acquire(cid, owner, timeout_s=wait_s, ttl_s=LEASE_TTL_S, on_wait=on_wait)
            held.append(cid)
        yield held
    finally:
        for cid in held:
            lease.release(cid, owner)


def maintain_table(table: Mapping[str, Any], retention_hours: int, *,
                   enforce_retention_duration: bool = True) -> dict[str, Any]:
    """Compact, then vacuum, one silver table (``table`` as :func:`find_silver_tables` gives it), holding the
    window leases of its changefeeds."""
    started = time.monotonic()
    path = str(table["path"])
    with window_leases(table.get("changefeed_ids") or []) as held:
        out = {
            "table": table.get("name"), "path": path, "leases": held,
            "compact": compact_table(path),
            "vacuum": vacuum_table(path, retention_hours, enforce_retention_duration=enforce_retention_duration),
        }
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


# --- the data-quality result log --------------------------------------------------------------------------


def maintain_dq_results(changefeeds: Iterable[Mapping[str, Any]], retention_hours: int, *,
                        enforce_retention_duration: bool = True) -> dict[str, Any]:
    """Per sink, the data-quality result log ``<sink>/_cdcflow/dq_results`` (a commit of a few rows at every
    barrier of every changefeed on the sink): compacted, checkpointed (a reader replays one checkpoint and the
    commits after it, not every commit since the first) and vacuumed, holding the window leases of the sink's
    changefeeds (their checks append to it). No result row is deleted: the log is the checks' history."""
    from deltalake import DeltaTable

    from cdc_core.changefeed.dq_results import results_path

    by_sink: dict[str, list[str]] = {}
    for cf in changefeeds:
        by_sink.setdefault(str(cf["sink_uri"]), []).append(str(cf["changefeed_id"]))
    done: dict[str, Any] = {}
    for sink, ids in sorted(by_sink.items()):
        path = results_path(sink)
        if not DeltaTable.is_deltatable(path):
            done[sink] = {"skipped": True, "reason": "no data-quality results yet"}
            continue
        started = time.monotonic()
        with window_leases(ids) as held:
            out: dict[str, Any] = {"path": path, "leases": held, "compact": compact_table(path)}
            DeltaTable(path).create_checkpoint()
            out["checkpoint_version"] = DeltaTable(path).version()
            out["vacuum"] = vacuum_table(path, retention_hours, enforce_retention_duration=enforce_retention_duration)
        out["seconds"] = round(time.monotonic() - started, 3)
        done[sink] = out
    return {"sinks": done}


# --- bronze changelog retention ---------------------------------------------------------------------------


def keep_after_ts(checkpoint_ts: int, retention_hours: int) -> int | None:
    """``checkpoint - retention`` as a TSO (None when the checkpoint is unset or younger than the retention)."""
    from cdc_core.codec import tso

    if checkpoint_ts <= 0:
        return None
    ms = tso.physical_ms(checkpoint_ts) - retention_hours * 3_600_000
    return tso.compose(ms, 0) if ms > 0 else None


def _retention(name: str) -> Callable[..., Any] | None:
    """``cdc_core.changefeed.retention.<name>``, or None while that module does not exist."""
    try:
        module = importlib.import_module(RETENTION_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != RETENTION_MODULE:
            raise
        return None
    return getattr(module, name)  # type: ignore[no-any-return]


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
    prune, fold = _retention("prune_changelog"), _retention("fold_changelog")
    if prune is None or fold is None:
        log.warning("bronze retention skipped: %s is not available", RETENTION_MODULE)
        return {"skipped": True, "reason": f"{RETENTION_MODULE} is not available", "changefeeds": {}}
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
                folded = fold(cid, keep)
        result = prune(cf["sink_uri"], cid, keep)
        done[cid] = {"keep_after_ts": keep, "fold": _jsonable(folded), "result": _jsonable(result)}
        log.info("bronze changelog of %s pruned up to ts %d: %s", cid, keep, result)
    return {"skipped": False, "retention_hours": retention_hours, "changefeeds": done}


def remove_rebuild_trash(changefeeds: Iterable[Mapping[str, Any]], older_than_days: float) -> dict[str, Any]:
    """Delete the silver tables rebuilds moved aside (``<sink>/_cdcflow/trash``) more than ``older_than_days``
    days ago, once per sink."""
    remove = _retention("remove_trash")
    if remove is None:
        log.warning("rebuild trash cleanup skipped: %s is not available", RETENTION_MODULE)
        return {"skipped": True, "reason": f"{RETENTION_MODULE} is not available", "sinks": {}}
    done: dict[str, Any] = {}
    for sink in sorted({cf["sink_uri"] for cf in changefeeds}):
        removed = remove(sink, older_than_days)
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

FOLD_STATES = ("normal", "paused")
RECONCILE_STATES = ("normal",)  # paused / finished changefeeds do not move; one in error waits for the operator


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


# --- parameters -------------------------------------------------------------------------------------------


def retention_hours(value: Any) -> int:
    """The vacuum / bronze retention: ``value`` (a DAG param) if set, else the Airflow Variable
    ``cdcflow_retention_hours``, else :data:`DEFAULT_RETENTION_HOURS`."""
    if value is None or value == "":
        from airflow.sdk import Variable

        value = Variable.get(RETENTION_VARIABLE, default=None)
    if value is None or value == "":
        return DEFAULT_RETENTION_HOURS
    hours = int(value)
    if hours < 0:
        raise ValueError(f"retention must be >= 0 hours, got {hours}")
    return hours


def reconcile_interval_hours(value: Any) -> float:
    """The reconciliation interval: ``value`` (a DAG param) if set, else the Airflow Variable
    ``cdcflow_reconcile_interval_hours``, else ``reconcile.DEFAULT_INTERVAL_HOURS``."""
    if value is None or value == "":
        from airflow.sdk import Variable

        value = Variable.get(RECONCILE_INTERVAL_VARIABLE, default=None)
    if value is None or value == "":
        from cdc_core.changefeed.reconcile import DEFAULT_INTERVAL_HOURS

        return float(DEFAULT_INTERVAL_HOURS)
    hours = float(value)
    if hours < 0:
        raise ValueError(f"the reconciliation interval must be >= 0 hours, got {hours:g}")
    return hours
