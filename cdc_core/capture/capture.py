"""The capture: a changefeed's long-lived subscriptions, sealed into durable parts every flush interval.

After TiCDC's processor and log puller (``logservice/logpuller/subscription_client.go``, ``logservice/
schemastore``): the spans are subscribed once, at start (and re-requested only after region errors, inside the
:class:`~cdc_core.puller.subscription_client.SubscriptionClient`), never per window, so TiKV scans each region once.

* **Start.** Take the capture lease (:mod:`cdc_core.capture.lease`). Resume ts ``R = max(last part's to_ts,
  checkpoint)``: nothing at or below it is needed again, nothing above it was sealed, so a restart has no gap.
  The spans: the DDL job table's and every physical id of the tables the changefeed replicates at ``R`` (the
  changefeed's schema log, advanced in memory by the jobs in the parts it does not know yet; windows own the log
  on disk).
* **Buffer.** Arriving Arrow batches are kept as they come (a cheap callback on the event loop).
* **Seal** (every ``flush_interval_s``, or at once when :data:`~cdc_core.codec.changelog.PART_ROWS` events are
  buffered): ``r = min over spans of span_resolved_ts``. First the buffered DDL job events at or below ``r`` are
  decoded (the changefeed's table filter); a job that gives a replicated table new physical ids (CREATE TABLE,
  TRUNCATE, partition DDL, RENAME into the filter...) has those spans subscribed from its commit ts - 1, which
  holds ``r`` back until they resolve, as TiCDC's schema store holds the resolved ts of a new table's span. Then the
  part ``(last_to, r]`` is written from the buffered events with ``commit_ts <= r`` (at most ``PART_ROWS`` of
  them a part: a larger backlog is cut at a commit ts); the rest stay buffered. Exact duplicates (a region
  re-scanned after a split, a store stop or a dropped stream re-delivers what it sent above its resolved ts) are
  dropped first, so a part holds each change once (:func:`~cdc_core.capture.parts.dedupe`). The part is renamed
  in under the lease's lock while this capture still holds the lease (:func:`~cdc_core.capture.lease.fenced`): a
  stalled capture whose lease a new one took over writes nothing and stops.
* **Status** (every flush): the lease renewed, ``<id>.capture.status.json`` rewritten (resolved ts, lag, regions,
  pending events and bytes, parts).
* **Stop** (SIGTERM, or :meth:`Capture.stop`): the loop ends between flushes (a part is written whole or not at
  all), the subscriptions close, the lease is released.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client import REGISTRY

from cdc_core.capture import lease as capture_lease
from cdc_core.capture import parts
from cdc_core.changefeed.config import ChangefeedConfig, load_config
from cdc_core.changefeed.ddl_puller import SchemaLog, decode_jobs
from cdc_core.changefeed.schema_loader import load_schema_jobs
from cdc_core.changefeed.state import load_state
from cdc_core.changefeed.steps import replicated_at, window_tables
from cdc_core.client.upstream import UpstreamClient, resolve_pd_addr
from cdc_core.codec import changelog, key, tso
from cdc_core.log import get_logger
from cdc_core.puller.subscription_client import SubscriptionClient
from cdc_core.schema import ddl_history

log = get_logger("cdcflow.capture")

DEFAULT_FLUSH_INTERVAL_S = 1.0


class Capture:
    """One changefeed's capture; :meth:`run` until :meth:`stop` (see the module docstring)."""

    def __init__(self, changefeed_id: str, *, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
                 part_rows: int = changelog.PART_ROWS) -> None:
        if flush_interval_s <= 0 or part_rows < 1:
            raise ValueError("flush_interval_s must be > 0 and part_rows >= 1")
        self.changefeed_id = changefeed_id
        self.flush_interval_s = flush_interval_s
        self.part_rows = part_rows
        self.cfg: ChangefeedConfig = load_config(changefeed_id)
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self._buffered_bytes = 0
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.resolved_ts = 0
        self.parts_written = 0
        self._subscribed: set[int] = set()
        self._held: capture_lease.CaptureLease | None = None

    # --- control ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to end (thread-safe; a signal handler's call)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def run_forever(self) -> None:
        """:meth:`run` in a new event loop, stopping on SIGTERM / SIGINT (the CLI's foreground process)."""
        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
            await self.run()

        asyncio.run(main())

    # --- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        cid, cfg = self.changefeed_id, self.cfg
        held = self._held = capture_lease.acquire(cid)
        client: SubscriptionClient | None = None
        try:
            checkpoint = load_state(cid).checkpoint_ts
            last = parts.resolved_ts(cfg.sink_uri, cid)
            parts.remove_temporaries(cfg.sink_uri, cid)  # of a predecessor killed mid-write
            if last is None or last < checkpoint:
                # Parts wholly below the checkpoint are no window's any more; a new run starts at the checkpoint.
                for p in parts.list_parts(cfg.sink_uri, cid):
                    p.path.unlink(missing_ok=True)
                last = checkpoint
            self.resolved_ts = last
            slog = await asyncio.to_thread(self._schema_at, checkpoint, last)
            client = SubscriptionClient(resolve_pd_addr(cfg.upstream), on_batch=self._on_batch, area=cid,
                                        **cfg.puller.client_kwargs())
            await client.subscribe(ddl_history.JOB_TABLE_ID, *key.table_span(ddl_history.JOB_TABLE_ID), last)
            self._subscribed.add(ddl_history.JOB_TABLE_ID)
            for pid in sorted({p for t in replicated_at(cfg, slog.storage(), last) for p in t.physical_ids}):
                await client.subscribe(pid, *key.table_span(pid), last)
                self._subscribed.add(pid)
            log.info("capture started", changefeed_id=cid, resume_ts=last, checkpoint_ts=checkpoint,
                     spans=len(self._subscribed), pid=os.getpid())
            next_flush = time.monotonic() + self.flush_interval_s
            next_renew = time.monotonic() + capture_lease.RENEW_S
            while not self._stop.is_set():
                client.check()
                wait = max(0.0, next_flush - time.monotonic())
                if wait > 0:
                    # Woken by a resolved ts moving (a full buffer may then seal early) or the flush interval;
                    # a full buffer whose resolved ts does not move waits too, never spins.
                    client.progress.clear()
                    stop_wait = asyncio.ensure_future(self._stop.wait())
                    progress = asyncio.ensure_future(client.progress.wait())
                    await asyncio.wait({stop_wait, progress}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                    stop_wait.cancel()
                    progress.cancel()
                    if self._stop.is_set():
                        break
                    if self._buffered_rows < self.part_rows and time.monotonic() < next_flush:
                        continue
                await self._seal(client, slog)
                next_flush = time.monotonic() + self.flush_interval_s
                if time.monotonic() >= next_renew:
                    held = self._held = await asyncio.to_thread(capture_lease.renew, cid, held)
                    next_renew = time.monotonic() + capture_lease.RENEW_S
                await asyncio.to_thread(capture_lease.write_status, cid, self.status(client))
        finally:
            if client is not None:
                await client.close()
            capture_lease.release(cid, held)
            log.info("capture stopped", changefeed_id=cid, resolved_ts=self.resolved_ts, parts=self.parts_written)

    def _schema_at(self, checkpoint: int, ts: int) -> SchemaLog:
        """The changefeed's schema log known up to ``ts``: the one on disk (created at the checkpoint on first use),
        plus, in memory only, the DDL jobs the parts hold above its resolved ts."""
        if SchemaLog.exists(self.changefeed_id):
            slog = SchemaLog.load(self.changefeed_id)
        else:  # as the first window makes it (tasks._schema_log): TiDB's meta snapshot at the checkpoint
            with UpstreamClient(resolve_pd_addr(self.cfg.upstream), tidb=self.cfg.tidb) as c:
                slog = SchemaLog(self.changefeed_id, load_schema_jobs(c, checkpoint, self.cfg.table_filter),
                                 checkpoint)
            slog.save()
        if ts > slog.resolved_ts:
            events = parts.read_events(self.cfg.sink_uri, self.changefeed_id, slog.resolved_ts, ts,
                                       {ddl_history.JOB_TABLE_ID})
            table = pa.Table.from_batches(list(events), schema=changelog.SCHEMA)
            known = {i for t in replicated_at(self.cfg, slog.storage(), slog.resolved_ts)
                     for i in (t.id, *t.physical_ids)}
            slog.advance(decode_jobs(table, self.cfg.table_filter.match, known), ts)
        return slog

    def _on_batch(self, span_id: int, batch: pa.RecordBatch) -> None:
        ts = batch.column(changelog.SCHEMA.get_field_index("commit_ts"))
        if pc.min(ts).as_py() <= self.resolved_ts:  # a re-scan's events below what is sealed: already in a part
            batch = batch.filter(pc.greater(ts, self.resolved_ts))
        if batch.num_rows:
            self._buffer.append(batch)
            self._buffered_rows += batch.num_rows
            self._buffered_bytes += batch.nbytes

    async def _seal(self, client: SubscriptionClient, slog: SchemaLog) -> None:
        r = min(client.span_resolved_ts(s) for s in self._subscribed)
        if r <= self.resolved_ts:
            return
        new = self._new_tables(slog, r)
        for pid, from_ts in sorted(new.items()):
            await client.subscribe(pid, *key.table_span(pid), from_ts)
            self._subscribed.add(pid)
            log.info("capture subscribed a new table's span", changefeed_id=self.changefeed_id, physical_id=pid,
                     start_ts=from_ts)
        if new:
            r = min(r, *new.values())
            if r <= self.resolved_ts:
                return
        while r > self.resolved_ts:
            upto, ready = self._take_upto(r)
            part = await asyncio.to_thread(self._publish, self.resolved_ts, upto, ready)
            self.parts_written += 1
            self.resolved_ts = upto
            log.debug("capture sealed a part", changefeed_id=self.changefeed_id, part=part.path.name,
                      rows=sum(b.num_rows for b in ready))

    def _publish(self, from_ts: int, to_ts: int, ready: list[pa.RecordBatch]) -> parts.Part:
        """Write the part ``(from_ts, to_ts]`` of ``ready``'s events, once each, fenced by the lease."""
        assert self._held is not None
        held = self._held
        return parts.write_part(self.cfg.sink_uri, self.changefeed_id, from_ts, to_ts, parts.dedupe(ready),
                                fence=lambda: capture_lease.fenced(self.changefeed_id, held))

    def _new_tables(self, slog: SchemaLog, r: int) -> dict[int, int]:
        """Physical ids the DDL jobs buffered at or below ``r`` give replicated tables, unsubscribed so far, each with
        the ts to subscribe it from (its job's commit ts - 1)."""
        ddl = [b.filter(pc.and_(pc.equal(b.column("table_id"), ddl_history.JOB_TABLE_ID),
                                pc.less_equal(b.column("commit_ts"), r))) for b in self._buffer]
        ddl = [b for b in ddl if b.num_rows]
        if not ddl:
            return {}
        storage = slog.storage()
        known = {i for t in replicated_at(self.cfg, storage, self.resolved_ts) for i in (t.id, *t.physical_ids)}
        jobs = decode_jobs(pa.Table.from_batches(ddl, schema=changelog.SCHEMA), self.cfg.table_filter.match, known)
        slog.advance(jobs, r)
        storage = slog.storage()
        out: dict[int, int] = {}
        for t in window_tables(self.cfg, storage, self.resolved_ts, r):
            for pid in t.physical_ids:
                if pid not in self._subscribed:
                    starts = [j.finished_ts for j in storage.jobs_between(self.resolved_ts, r)]
                    out[pid] = max(self.resolved_ts, min(starts, default=self.resolved_ts + 1) - 1)
        return out

    def _take_upto(self, r: int) -> tuple[int, list[pa.RecordBatch]]:
        """Remove from the buffer the events of the next part, ``(resolved_ts, upto]`` with ``upto <= r``: all those at
        or below ``r``, or, past ``part_rows`` of them, those at or below the commit ts the ``part_rows``-th ends."""
        upto = r
        ts_all = [b.column("commit_ts").to_numpy() for b in self._buffer]
        if ts_all:
            ts = np.concatenate(ts_all)
            ready_ts = np.sort(ts[ts <= r])
            if len(ready_ts) > self.part_rows:
                upto = int(ready_ts[self.part_rows - 1])
        ready: list[pa.RecordBatch] = []
        rest: list[pa.RecordBatch] = []
        for b in self._buffer:
            col = b.column("commit_ts")
            mask = pc.less_equal(col, upto)
            take = b.filter(mask)
            keep = b.filter(pc.invert(mask))
            if take.num_rows:
                ready.append(take)
            if keep.num_rows:
                rest.append(keep)
        self._buffer = rest
        self._buffered_rows = sum(b.num_rows for b in rest)
        self._buffered_bytes = sum(b.nbytes for b in rest)
        return upto, ready

    def status(self, client: SubscriptionClient | None = None) -> dict[str, Any]:
        regions = 0
        if client is not None:
            regions = sum(client.span_lock(s).locked_count for s in self._subscribed)
        lag = (max(0.0, (tso.now_physical_ms() - tso.physical_ms(self.resolved_ts)) / 1000.0)
               if self.resolved_ts else None)
        return {"changefeed_id": self.changefeed_id, "pid": os.getpid(), "updated_at": time.time(),
                "resolved_ts": self.resolved_ts, "resolved_lag_s": lag, "spans": len(self._subscribed),
                "regions": regions, "pending_events": self._buffered_rows, "pending_bytes": self._buffered_bytes,
                "parts_written": self.parts_written,
                # each region request is one incremental scan on its TiKV: start-up and region errors only
                "incremental_scans": int(REGISTRY.get_sample_value("cdcflow_puller_region_requests_total") or 0)}
