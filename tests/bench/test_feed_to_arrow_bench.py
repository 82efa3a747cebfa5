"""Row events per second from the EventFeed streams into bronze Arrow, next to the rate at which the same
process can only decode the same gRPC messages (issue 4's second benchmark; the ratio is the figure).

The upstream runs in its own process (``cdcflow upstream start --detach --stores 1``), so its CPU is not this
process's. ``ROWS`` rows are loaded into a table split into ``REGIONS`` regions; then, side by side, for
``REPEATS`` rounds:

* **pipeline** (after one cold round, reported apart): :func:`~cdc_core.puller.window_collector.collect_window`
  over the table's span for the window that holds the rows — PD region load, range lock, region requests, the
  event stream with memory control, matcher, resolved-ts advancer, and the Arrow table in the bronze schema;
* **raw receive**: one bare ``EventFeed`` call per round registering the same regions, receiving the raw bytes
  of every message until each region is INITIALIZED (the network and the store, no decoding);
* **raw decode**: ``ChangeDataEvent.FromString`` over those captured bytes, touching every row's key, value
  and commit ts — the least any client must do per message.

Reported: rows/s of each by wall clock (the pipeline is bounded by how fast the store serves, which the raw
receive shows), and by CPU seconds of this process (``time.process_time``: the client's own cost, gRPC threads
included), with the ratios pipeline / raw decode and pipeline / raw receive.

Run: ``.venv/bin/pytest tests/bench/test_feed_to_arrow_bench.py -q -p no:cacheprovider --override-ini addopts= -s``
Env: ``CDCFLOW_BENCH_ROWS`` (default 100000), ``CDCFLOW_BENCH_FEED_REGIONS`` (16), ``CDCFLOW_BENCH_REPEATS`` (3).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from wire.pd import PdWire

from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import key as keycodec
from cdc_core.codec.memcomparable import decode_key, encode_key
from cdc_core.proto import cdcpb_pb2, kvrpcpb_pb2, metapb_pb2
from cdc_core.puller.window_collector import collect_window

ROWS = int(os.environ.get("CDCFLOW_BENCH_ROWS", "100000"))
REGIONS = int(os.environ.get("CDCFLOW_BENCH_FEED_REGIONS", "16"))
REPEATS = int(os.environ.get("CDCFLOW_BENCH_REPEATS", "3"))
BATCH = 2_000


def _cli(home: Path, *args: str) -> str:
    env = {**os.environ, "CDCFLOW_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "cdc_core.cli.main", *args], env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    return out.stdout


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("feed-bench-home")
    _cli(home, "upstream", "start", "--detach", "--stores", "1", "--regions-per-table", "1")
    try:
        info = json.loads((home / "upstream.json").read_text())
        yield info["pd_addr"]
    finally:
        _cli(home, "upstream", "stop")


def _load(pd_addr: str) -> tuple[int, int, int]:
    """Create and fill the table; (table id, ts before the load, ts after it)."""
    with UpstreamClient(pd_addr, timeout=120) as c:
        c.execute("CREATE DATABASE IF NOT EXISTS bench; CREATE TABLE bench.feed "
                  "(id BIGINT PRIMARY KEY, k INT, c VARCHAR(120), pad VARCHAR(60))")
        [tid] = [t.table_id for t in c.list_tables("bench", "feed")]
        c.execute(f"SPLIT TABLE bench.feed BETWEEN (0) AND ({ROWS}) REGIONS {REGIONS}")
        before = c.get_ts()
        t0 = time.perf_counter()
        for lo in range(0, ROWS, BATCH):
            vals = ", ".join(f"({i}, {i % 1000}, 'c-{i:012d}-{'x' * 80}', 'pad-{i}')"
                             for i in range(lo, min(lo + BATCH, ROWS)))
            c.execute(f"INSERT INTO bench.feed VALUES {vals}")
        after = c.get_ts()
        print(f"\nloaded {ROWS:,} rows into {REGIONS} regions in {time.perf_counter() - t0:.1f}s")
    return tid, before, after


async def _raw_capture(pd_addr: str, span: tuple[bytes, bytes], start_ts: int) -> tuple[list[bytes], float, int]:
    """One bare EventFeed call registering every region of the span: raw message bytes, seconds, rows."""
    with PdWire(pd_addr) as pd:  # region boundaries and ranges memcomparable-encoded, as TiKV takes them
        resp = pd.scan_regions(encode_key(span[0]), encode_key(span[1]))
        regions = [r.region for r in resp.regions]
        store = pd.store(resp.regions[0].leader.store_id)
        header = cdcpb_pb2.Header(cluster_id=pd.cluster_id, ticdc_version="8.5.0")
    reqs = []
    for i, r in enumerate(regions):
        lo, hi = decode_key(r.start_key), decode_key(r.end_key)
        reqs.append(cdcpb_pb2.ChangeDataRequest(
            header=header, region_id=r.id, region_epoch=metapb_pb2.RegionEpoch(conf_ver=r.region_epoch.conf_ver,
                                                                version=r.region_epoch.version),
            checkpoint_ts=start_ts, start_key=encode_key(max(lo, span[0])),
            end_key=encode_key(min(hi, span[1]) if hi else span[1]), request_id=1 + i,
            extra_op=kvrpcpb_pb2.ReadOldValue, register=cdcpb_pb2.ChangeDataRequest.Register()))
    messages: list[bytes] = []
    pending = {r.id for r in regions}
    rows = 0
    async with grpc.aio.insecure_channel(store.store.address,
                                         options=[("grpc.max_receive_message_length", 1 << 28)]) as ch:
        call = ch.stream_stream("/cdcpb.ChangeData/EventFeedV2",
                                request_serializer=cdcpb_pb2.ChangeDataRequest.SerializeToString,
                                response_deserializer=None)(metadata=(("features", "stream-multiplexing"),))
        t0 = time.perf_counter()
        for req in reqs:
            await call.write(req)
        while pending:
            raw = await call.read()
            assert raw is not grpc.aio.EOF, "the store closed the stream"
            messages.append(raw)
            # Only to know when to stop: cheap relative to the transfer, and excluded from the decode figure.
            if b"\x18\x05" in raw:  # Row field 3 (type) = 5 (INITIALIZED) may be in the message
                msg = cdcpb_pb2.ChangeDataEvent.FromString(raw)
                for ev in msg.events:
                    for row in ev.entries.entries:
                        if row.type == cdcpb_pb2.Event.INITIALIZED:
                            pending.discard(ev.region_id)
        seconds = time.perf_counter() - t0
        call.cancel()
    for raw in messages:
        for ev in cdcpb_pb2.ChangeDataEvent.FromString(raw).events:
            rows += sum(1 for row in ev.entries.entries if row.type == cdcpb_pb2.Event.COMMITTED)
    return messages, seconds, rows


def _decode(messages: list[bytes]) -> tuple[float, int]:
    t0 = time.perf_counter()
    rows = 0
    committed = cdcpb_pb2.Event.COMMITTED
    for raw in messages:
        for ev in cdcpb_pb2.ChangeDataEvent.FromString(raw).events:
            for row in ev.entries.entries:
                if row.type == committed:
                    _ = (row.key, row.value, row.commit_ts)
                    rows += 1
    return time.perf_counter() - t0, rows


def test_bench_eventfeed_into_bronze_arrow_vs_raw_decode(upstream: str) -> None:
    pd_addr = upstream
    tid, before, after = _load(pd_addr)
    span = keycodec.table_span(tid)
    pipeline: list[float] = []
    receive: list[float] = []
    decode: list[float] = []
    pipeline_cpu: list[float] = []
    receive_cpu: list[float] = []
    cold = 0.0
    for i in range(REPEATS + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        table, resolved = asyncio.run(collect_window(pd_addr, {tid: span}, before, after))
        if i == 0:  # the first round pays one-off imports (pyarrow loads pandas lazily): reported apart
            cold = time.perf_counter() - t0
            continue
        pipeline.append(time.perf_counter() - t0)
        pipeline_cpu.append(time.process_time() - c0)
        assert table.num_rows == ROWS and resolved[tid] >= after
        assert len(set(table.column("key").to_pylist())) == ROWS  # every row once (a fresh scan: no reconnects)
        c0 = time.process_time()
        messages, seconds, raw_rows = asyncio.run(_raw_capture(pd_addr, span, before))
        receive_cpu.append(time.process_time() - c0)
        assert raw_rows == ROWS
        receive.append(seconds)
        dt, rows = _decode(messages)
        assert rows == ROWS
        decode.append(dt)
    size = sum(len(m) for m in messages)
    p, r, d, pc_, rc = (statistics.median(x) for x in (pipeline, receive, decode, pipeline_cpu, receive_cpu))
    print(f"\nEventFeed -> bronze Arrow, {ROWS:,} rows, {REGIONS} regions, {len(messages):,} messages "
          f"({size / 1e6:.1f} MB), median of {REPEATS}:")
    print(f"  pipeline (collect_window -> Arrow) {ROWS / p:>12,.0f} rows/s   {p:.2f}s   (first, cold: {cold:.2f}s)")
    print(f"  raw receive (bytes, no decode)     {ROWS / r:>12,.0f} rows/s   {r:.2f}s")
    print(f"  raw decode (FromString + fields)   {ROWS / d:>12,.0f} rows/s   {d:.2f}s")
    print(f"  pipeline, per CPU second of this process: {ROWS / pc_:>10,.0f} rows/s  ({pc_:.2f}s CPU)")
    print(f"  raw receive, per CPU second:               {ROWS / rc:>10,.0f} rows/s  ({rc:.2f}s CPU, incl. capture)")
    print(f"  wall:  pipeline / raw receive = {r / p:.2f}   pipeline / raw decode = {d / p:.3f}")
    print(f"  CPU:   pipeline / raw decode = {d / pc_:.3f}  (the client's own cost per row, the upstream excluded)")
