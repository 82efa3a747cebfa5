"""TiKV's change feed as a TiDB-side client sees it, for the tests: plain ``cdcpb`` messages on one
``EventFeedV2``/``EventFeed`` stream, recorded in order, independent of cdcflow's puller; and lookups.

By default the client is what TiCDC v8.5 is on the wire (``logservice/logpuller/grpc_conn.go``): ``EventFeedV2``
with ``features: stream-multiplexing``, ``Header{cluster_id (from PD's GetMembers), ticdc_version}`` on every
request, memcomparable-encoded ranges, old values. Each of these can be turned off to see what an older or a
careless client gets.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from cdc_core.codec import mysql_type
from cdc_core.codec.memcomparable import decode_key, encode_key
from cdc_core.codec.rowcodec import encode_row_v2
from cdc_core.proto import cdcpb_pb2, cdcpb_pb2_grpc, kvrpcpb_pb2, metapb_pb2
from wire.pd import PdWire

Row = cdcpb_pb2.Event.Row
T = cdcpb_pb2.Event  # log types: T.PREWRITE, T.COMMIT, ...


@dataclass
class RegionRef:
    id: int
    start_key: bytes
    end_key: bytes
    version: int
    conf_ver: int
    leader_store: int = 0


_INT = mysql_type.FieldType(mysql_type.TypeLong, flen=11)


def int_row(*values: int | None) -> bytes:
    """The rowcodec v2 value TiDB (and the embedded upstream) writes for a row of INT columns 1, 2, ..."""
    return encode_row_v2([(i, _INT, v) for i, v in enumerate(values, start=1)])


def scan_regions(pd_addr: str, start: bytes, end: bytes) -> list[RegionRef]:
    with PdWire(pd_addr) as pd:
        resp = pd.scan_regions(encode_key(start), encode_key(end))
    return [RegionRef(r.region.id, decode_key(r.region.start_key), decode_key(r.region.end_key),
                      r.region.region_epoch.version,
                      r.region.region_epoch.conf_ver, r.leader.store_id) for r in resp.regions]


def ref(region: metapb_pb2.Region, leader_store: int = 0) -> RegionRef:
    """A RegionRef from a metapb.Region (e.g. one of an epoch_not_match's current regions)."""
    return RegionRef(region.id, decode_key(region.start_key), decode_key(region.end_key), region.region_epoch.version,
                     region.region_epoch.conf_ver, leader_store)


def wait_until(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


TICDC_VERSION = "8.5.0"


class FeedClient:
    """One change-feed stream; ``items`` is the ordered list of (kind, request_id, region_id, payload).

    ``pd_addr`` (or ``cluster_id``) gives the header's cluster id; ``version`` is the header's TiCDC version
    ("" sends none); ``v2=False`` opens the old ``EventFeed``; ``features`` is the V2 call's metadata.
    Resolved ts are recorded per region whether they come batched (``ChangeDataEvent.resolved_ts``, kind
    "resolved") or per region (``Event.resolved_ts``, kind "region_resolved").
    """

    def __init__(self, store_addr: str, *, pd_addr: str | None = None, cluster_id: int = 0,
                 version: str = TICDC_VERSION, v2: bool = True, features: str = "stream-multiplexing") -> None:
        if pd_addr is not None and not cluster_id:
            with PdWire(pd_addr) as pd:
                cluster_id = pd.cluster_id
        self.cluster_id = cluster_id
        self.version = version
        self._channel = grpc.insecure_channel(store_addr, options=[("grpc.max_receive_message_length", 1 << 28)])
        self._requests: queue.Queue[cdcpb_pb2.ChangeDataRequest | None] = queue.Queue()
        stub = cdcpb_pb2_grpc.ChangeDataStub(self._channel)
        requests = iter(self._requests.get, None)
        self._call = (stub.EventFeedV2(requests, metadata=(("features", features),)) if v2
                      else stub.EventFeed(requests))
        self.message_sizes: list[int] = []
        self.row_events: collections.Counter[int] = collections.Counter()  # Events of rows, per request id
        self._lock = threading.Lock()
        self.items: list[tuple[str, int, int, Any]] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for msg in self._call:
                with self._lock:
                    self.message_sizes.append(msg.ByteSize())
                    for ev in msg.events:
                        kind = ev.WhichOneof("event")
                        if kind == "entries":
                            self.row_events[ev.request_id] += 1
                            for row in ev.entries.entries:
                                self.items.append(("row", ev.request_id, ev.region_id, row))
                        elif kind == "resolved_ts":
                            self.items.append(("region_resolved", ev.request_id, ev.region_id, ev.resolved_ts))
                        else:
                            self.items.append((kind, ev.request_id, ev.region_id, getattr(ev, kind)))
                    if msg.HasField("resolved_ts"):
                        rts = msg.resolved_ts
                        for rid in rts.regions:
                            self.items.append(("resolved", rts.request_id, rid, rts.ts))
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.error = exc

    def error_code(self) -> grpc.StatusCode | None:
        """The status the stream ended with (None while it runs or when we cancelled it)."""
        err = self.error
        return err.code() if isinstance(err, grpc.Call) else None

    def header(self) -> cdcpb_pb2.Header:
        return cdcpb_pb2.Header(cluster_id=self.cluster_id, ticdc_version=self.version)

    def register(self, region: RegionRef, request_id: int, checkpoint_ts: int, *, start_key: bytes = b"",
                 end_key: bytes = b"", old_value: bool = True, epoch: tuple[int, int] | None = None,
                 raw_range: bool = False, kv_api: int = 0) -> None:
        """Subscribe ``region`` (its range, or ``[start_key, end_key)``), the range memcomparable-encoded as TiKV
        expects it (``raw_range``: sent raw, as a client that forgets to encode would)."""
        version, conf_ver = epoch or (region.version, region.conf_ver)
        enc = (lambda k: k) if raw_range else encode_key
        self._requests.put(cdcpb_pb2.ChangeDataRequest(
            header=self.header(),
            region_id=region.id, region_epoch=metapb_pb2.RegionEpoch(version=version, conf_ver=conf_ver),
            checkpoint_ts=checkpoint_ts, start_key=enc(start_key or region.start_key),
            end_key=enc(end_key or region.end_key), request_id=request_id,
            extra_op=kvrpcpb_pb2.ReadOldValue if old_value else kvrpcpb_pb2.Noop,
            register=cdcpb_pb2.ChangeDataRequest.Register(), kv_api=kv_api))  # type: ignore[arg-type]

    def deregister(self, region_id: int, request_id: int) -> None:
        self._requests.put(cdcpb_pb2.ChangeDataRequest(header=self.header(), region_id=region_id,
                                                       request_id=request_id,
                                                       deregister=cdcpb_pb2.ChangeDataRequest.Deregister()))

    def snapshot(self) -> list[tuple[str, int, int, Any]]:
        with self._lock:
            return list(self.items)

    def rows(self, request_id: int | None = None) -> list[Row]:
        return [p for k, rq, _, p in self.snapshot() if k == "row" and (request_id is None or rq == request_id)]

    def resolved(self, request_id: int, region_id: int) -> int:
        """The region's highest resolved ts for ``request_id``, however the store sent it (a batch without
        multiplexing carries request id 0: it counts for every request of the stream)."""
        ts = [p for k, rq, rg, p in self.snapshot()
              if k in ("resolved", "region_resolved") and rq in (request_id, 0) and rg == region_id]
        return max(ts, default=0)

    def initialized(self, request_id: int) -> bool:
        return any(r.type == T.INITIALIZED for r in self.rows(request_id))

    def errors(self, request_id: int) -> list[cdcpb_pb2.Error]:
        return [p for k, rq, _, p in self.snapshot() if k == "error" and rq == request_id]

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()
        self._thread.join(10)
        self._channel.close()


def table_id(cluster: Any, db: str, name: str) -> int:
    info = cluster.call(lambda: cluster.cluster.catalog.table(db, name))
    assert info is not None, f"no table {db}.{name}"
    return int(info.id)


def table_regions(pd_addr: str, tid: int) -> list[RegionRef]:
    from cdc_core.codec import key as keycodec

    start, end = keycodec.table_span(tid)
    return scan_regions(pd_addr, start, end)


def changes_by_commit(fc: FeedClient, request_ids: list[int]) -> dict[int, list[tuple[bytes, int, bytes, bytes]]]:
    """commit_ts -> [(key, op_type, value, old_value)] from COMMITTED rows and matched PREWRITE+COMMIT."""
    out: dict[int, list[tuple[bytes, int, bytes, bytes]]] = {}
    for rq in request_ids:
        prewrites: dict[tuple[bytes, int], Row] = {}
        for r in fc.rows(rq):
            if r.type == T.PREWRITE:
                if (r.key, r.start_ts) in prewrites and not r.value:
                    continue  # a transaction heartbeat's fake prewrite
                prewrites[(r.key, r.start_ts)] = r
            elif r.type == T.COMMITTED:
                out.setdefault(r.commit_ts, []).append((r.key, r.op_type, r.value, r.old_value))
            elif r.type == T.COMMIT:
                p = prewrites.pop((r.key, r.start_ts))
                out.setdefault(r.commit_ts, []).append((r.key, p.op_type, p.value, p.old_value))
    for v in out.values():
        v.sort()
    return out


def register_all(fc: FeedClient, regions: list[RegionRef], checkpoint_ts: int, first_request_id: int,
                 **kw: Any) -> list[int]:
    ids = []
    for i, r in enumerate(regions):
        fc.register(r, first_request_id + i, checkpoint_ts, **kw)
        ids.append(first_request_id + i)
    wait_until(lambda: all(fc.initialized(i) for i in ids), what="regions initialized")
    return ids


def wait_resolved(fc: FeedClient, request_ids: list[int], regions: list[RegionRef], ts: int) -> None:
    wait_until(lambda: all(fc.resolved(rq, r.id) >= ts for rq, r in zip(request_ids, regions, strict=True)),
               what=f"resolved ts >= {ts}")
