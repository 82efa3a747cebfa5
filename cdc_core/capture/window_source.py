"""Where a window's events come from: the capture's parts when a capture runs and covers the window, else the
per-window pull.

:func:`wait_for_capture` decides, and when the capture is the source, waits until its parts cover ``(checkpoint,
target]`` (polling the part directory, a listing per poll). A capture that is down, or makes no progress, for the
changefeed's ``pull-timeout-s`` hands the window back to the per-window pull, which says so in the log.
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
    window must pull itself (no capture, parts that do not reach back to the checkpoint, a capture down or stuck
    for ``pull-timeout-s``)."""
    cid, sink = cfg.changefeed_id, cfg.sink_uri
    if capture_lease.live_holder(cid) is None:
        log.info(f"no capture running for {cid}: pulling the window itself", changefeed_id=cid)
        return False
    timeout = cfg.puller.pull_timeout_s
    seen, last_progress, down_since = None, time.monotonic(), None
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
        live = capture_lease.live_holder(cid) is not None
        down_since = None if live else (down_since or now)
        if down_since is not None and now - down_since >= timeout:
            log.warning(f"the capture of {cid} is down for {timeout:.0f}s: pulling the window itself",
                        changefeed_id=cid, capture_resolved_ts=covered, target_ts=target)
            return False
        if now - last_progress >= timeout:
            log.warning(f"the capture of {cid} made no progress for {timeout:.0f}s: pulling the window itself",
                        changefeed_id=cid, capture_resolved_ts=covered, target_ts=target)
            return False
        time.sleep(POLL_S)
