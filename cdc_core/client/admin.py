"""Synchronous client of the embedded upstream's control service (fault injection), on its control address.

Used by ``cdcflow upstream fault ...``; each method is one ``adminpb.Admin`` RPC and returns plain
data (JSON-ready dicts). Every gRPC failure becomes an ``UpstreamError`` with the server's message. The control
service is a server of its own that the upstream runs only when started with ``--control-addr``
(:func:`resolve_control_addr` finds it).
"""

from __future__ import annotations

import os
from typing import Any

import grpc

from cdc_core import tls
from cdc_core.codec.memcomparable import decode_key
from cdc_core.errors import UpstreamError
from cdc_core.proto import adminpb_pb2, adminpb_pb2_grpc


def _table(name: str) -> adminpb_pb2.TableRef:
    db, sep, table = name.partition(".")
    if not sep or not db or not table:
        raise UpstreamError(f"table {name!r} must be DB.TABLE")
    return adminpb_pb2.TableRef(db=db, table=table)


def _regions(resp: adminpb_pb2.RegionsResponse) -> list[dict[str, Any]]:
    # Region boundaries travel memcomparable-encoded (metapb); shown raw, as keys are written.
    return [{"id": r.region.id, "start_key": decode_key(r.region.start_key).hex(),
             "end_key": decode_key(r.region.end_key).hex(),
             "version": r.region.region_epoch.version, "conf_ver": r.region.region_epoch.conf_ver,
             "leader_store_id": r.leader_store_id} for r in resp.regions]


ENV_CONTROL = "CDCFLOW_UPSTREAM_CONTROL"
NO_CONTROL = ("the upstream serves no control port, so faults are off: start it with `cdcflow upstream start "
              "--control-addr 127.0.0.1:0` (tests and drills only), or name one with --control / $" + ENV_CONTROL)


def resolve_control_addr(explicit: str | None) -> str:
    """The control address: ``explicit``, else ``$CDCFLOW_UPSTREAM_CONTROL``, else upstream.json's."""
    if explicit:
        return explicit
    if os.environ.get(ENV_CONTROL):
        return os.environ[ENV_CONTROL]
    from cdc_core.upstream_record import read_upstream_file

    data = read_upstream_file()
    if data and data.get("control_addr"):
        return str(data["control_addr"])
    raise UpstreamError(NO_CONTROL)


class AdminClient:
    def __init__(self, control_addr: str, timeout: float = 60.0) -> None:
        self.control_addr = control_addr
        self.timeout = timeout
        self._channel = tls.grpc_channel(control_addr)
        self._stub = adminpb_pb2_grpc.AdminStub(self._channel)

    def _call(self, name: str, request: Any) -> Any:
        try:
            return getattr(self._stub, name)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                details = f"no control service there ({details})"
            raise UpstreamError(f"upstream control {self.control_addr}: {name}: {details}") from exc

    def split_region(self, region_id: int, keys: list[bytes]) -> list[dict[str, Any]]:
        return _regions(self._call("Split", adminpb_pb2.SplitRequest(region_id=region_id, keys=keys)))

    def split_table(self, table: str, *, handles: list[int] | None = None, lo: int = 0, hi: int = 0,
                    regions: int = 0) -> list[dict[str, Any]]:
        req = adminpb_pb2.SplitRequest(table=_table(table), handles=handles or [], lo=lo, hi=hi, regions=regions)
        return _regions(self._call("Split", req))

    def merge(self, region_id: int, into: int = 0) -> list[dict[str, Any]]:
        return _regions(self._call("Merge", adminpb_pb2.MergeRequest(region_id=region_id, target_region_id=into)))

    def merge_table(self, table: str) -> list[dict[str, Any]]:
        return _regions(self._call("Merge", adminpb_pb2.MergeRequest(table=_table(table))))

    def transfer_leader(self, to_store: int, *, region_id: int = 0, table: str = "") -> list[dict[str, Any]]:
        req = adminpb_pb2.TransferLeaderRequest(region_id=region_id, to_store_id=to_store,
                                                table=_table(table) if table else None)
        return _regions(self._call("TransferLeader", req))

    def stop_store(self, store_id: int, move_leaders: bool = False) -> dict[str, Any]:
        r = self._call("StopStore", adminpb_pb2.StoreRequest(store_id=store_id, move_leaders=move_leaders))
        return {"store_id": r.store_id, "up": r.up, "streams_dropped": r.streams_dropped,
                "leaders_moved": r.leaders_moved}

    def start_store(self, store_id: int) -> dict[str, Any]:
        r = self._call("StartStore", adminpb_pb2.StoreRequest(store_id=store_id))
        return {"store_id": r.store_id, "up": r.up}

    def drop_streams(self, store_id: int = 0) -> dict[str, Any]:
        r = self._call("DropStreams", adminpb_pb2.DropStreamsRequest(store_id=store_id))
        return {"streams_dropped": r.streams_dropped}

    def hold_lock(self, table: str, *, handles: list[int] | None = None, count: int = 1) -> dict[str, Any]:
        r = self._call("HoldLock", adminpb_pb2.HoldLockRequest(table=_table(table), handles=handles or [],
                                                               count=count))
        return {"start_ts": r.start_ts, "keys": [k.hex() for k in r.keys]}

    def release_lock(self, start_ts: int, rollback: bool = False) -> dict[str, Any]:
        r = self._call("ReleaseLock", adminpb_pb2.ReleaseLockRequest(start_ts=start_ts, rollback=rollback))
        return {"commit_ts": r.commit_ts, "keys": r.keys}

    def busy(self, store_id: int, duration_ms: int) -> dict[str, Any]:
        r = self._call("Busy", adminpb_pb2.BusyRequest(store_id=store_id, duration_ms=duration_ms))
        return {"store_id": r.store_id, "duration_ms": duration_ms}

    def gc(self) -> dict[str, Any]:
        r = self._call("RunGc", adminpb_pb2.GcRequest())
        return {"safe_point": r.safe_point, "versions_removed": r.versions_removed, "keys_removed": r.keys_removed}

    def transfer_pd_leader(self, member_id: int) -> dict[str, Any]:
        resp = self._call("TransferPdLeader", adminpb_pb2.PdLeaderRequest(member_id=member_id))
        return {"member_id": resp.member_id, "address": resp.address}

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
