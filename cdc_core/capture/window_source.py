"""Where a window's events come from: the capture's parts when a capture runs and covers the window, else the
per-window pull.

:func:`wait_for_capture` decides, and when the capture is the source, waits until its parts cover ``(checkpoint,
target]`` (polling the part directory, a listing per poll).

* **No capture** (no lease: never started, or stopped cleanly, which releases it): the window pulls itself.
* **A capture that died** (``kill -9``, OOM, a crashed host: its lease is still recorded but its process is gone or
  the lease expired): the window *waits* for a new capture rather than pulling at once, up to the changefeed's
  ``pull-timeout-s`` counted from the dead lease's last renewal. A restart policy (the DAG's ``ensure_running``,
  a compose restart, a person) brings one back; it resumes from its last durable part (as TiCDC's processor
  restarts from its checkpoint), and once its parts pass the target the window is sealed from them, with nothing
  lost and nothing twice. Pulling at once would open a second set of streams and re-scan every region for a gap
  the capture is about to fill.
* **A capture that is live but makes no progress** for ``pull-timeout-s``: the window pulls itself.

Each hand-back to the per-window pull says why in the log.
"""

from __future__ import annotations

import time

from cdc_core.capture import lease as capture_lease
from cdc_core.capture import parts
from cdc_core.changefeed.config import ChangefeedConfig
from cdc_core.log import get_logger

log = get_logger("cdcflow.changefeed")

POLL_S = 0.1


def wait_for_capture(cfg: ChangefeedConfig, checkpoint: int, target: int) -> bool:
    """True once the capture's parts cover ``(checkpoint, target]`` (read the window from them); False when the
    window must pull itself (no capture, parts that do not reach back to the checkpoint, a dead capture not
    replaced within ``pull-timeout-s`` of its last renewal, a live one stuck for ``pull-timeout-s``)."""
    cid, sink = cfg.changefeed_id, cfg.sink_uri
    timeout = cfg.puller.pull_timeout_s
    lease = capture_lease.holder(cid)
    if lease is None:
        log.info(f"no capture running for {cid}: pulling the window itself", changefeed_id=cid)
        return False
    seen, last_progress, waiting_on = None, time.monotonic(), None
    while True:
        covered = parts.covered_upto(sink, cid, checkpoint)
        if covered is None:
            log.warning(f"the capture of {cid} holds no parts from the checkpoint {checkpoint}: pulling the window "
                        "itself", changefeed_id=cid, capture_resolved_ts=parts.resolved_ts(sink, cid))
            return False
        if covered >= target:
            log.info("reading the window from the capture's parts", changefeed_id=cid, checkpoint_ts=checkpoint,
                     target_ts=target, capture_resolved_ts=covered)
            return True
        now = time.monotonic()
        if covered != seen:
            seen, last_progress = covered, now
        lease = capture_lease.holder(cid)
        if lease is None:
            log.info(f"the capture of {cid} stopped (its lease is released): pulling the window itself",
                     changefeed_id=cid, capture_resolved_ts=covered, target_ts=target)
            return False
        if lease.live():
            if waiting_on is not None:  # a new capture took over: its own progress counts from now
                log.info(f"a new capture of {cid} runs (pid {lease.pid}): waiting for its parts", changefeed_id=cid,
                         capture_resolved_ts=covered, target_ts=target)
                waiting_on, last_progress = None, now
            if now - last_progress >= timeout:
                log.warning(f"the capture of {cid} made no progress for {timeout:.0f}s: pulling the window itself",
                            changefeed_id=cid, capture_resolved_ts=covered, target_ts=target)
                return False
        else:
            down_for = time.time() - lease.renewed_at
            if waiting_on != lease.owner:
                waiting_on = lease.owner
                log.warning(f"the capture of {cid} (pid {lease.pid}) is down with its lease held, renewed "
                            f"{down_for:.1f}s ago: waiting up to {timeout:.0f}s from then for a new capture",
                            changefeed_id=cid, capture_resolved_ts=covered, target_ts=target)
            if down_for >= timeout:
                log.warning(f"the capture of {cid} is down and no new one took over within {timeout:.0f}s of its "
                            "last renewal: pulling the window itself", changefeed_id=cid,
                            capture_resolved_ts=covered, target_ts=target)
                return False
        time.sleep(POLL_S)
