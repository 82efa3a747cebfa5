"""The etcd key space PD embeds, as far as TiDB's clients read it: ``etcdserverpb.KV/Range`` on PD's client URL.

A PD server is also an etcd member, serving etcd's gRPC API on the same port; TiDB registers every SQL server
there (``pkg/domain/infosync/info.go``)::

    /topology/tidb/<host:port>/info   {"version", "git_hash", "status_port", "deploy_path", "start_timestamp",
                                       "labels"}   (topologyInfo)
    /topology/tidb/<host:port>/ttl    the registration's refresh time, unix nanoseconds as text, under the
                                      topology session's 45 s lease (the info key has none)

which is how a tool given only PD finds the SQL endpoints (TiDB Dashboard, TiProxy, cdcflow). The embedded
cluster writes those two keys for its MySQL front when it starts serving and removes them at stop; every PD
member answers Range (etcd reads are served by any member). Range follows etcd's rules: an empty
``range_end`` is the key alone, ``\\0`` every key from ``key``, otherwise ``[key, range_end)``; ``limit``,
``keys_only`` and ``count_only`` apply; keys come in key order. Writes (Put, Txn, leases, Watch) are not served:
only TiDB writes there.
"""

from __future__ import annotations

import json
import time

import grpc
from sortedcontainers import SortedDict

from cdc_core.codec import topology
from cdc_core.proto import etcdserverpb_pb2, etcdserverpb_pb2_grpc, mvccpb_pb2

TIDB_TOPOLOGY_VERSION = "v8.5.0-cdcflow"


class EtcdKeySpace:
    """The keys, each with etcd's revisions (a global counter bumped by every write)."""

    def __init__(self) -> None:
        self._kvs: SortedDict = SortedDict()  # key -> KeyValue
        self.revision = 1

    def put(self, key: str, value: str) -> None:
        self.revision += 1
        k = key.encode()
        old = self._kvs.get(k)
        self._kvs[k] = mvccpb_pb2.KeyValue(
            key=k, value=value.encode(), mod_revision=self.revision,
            create_revision=old.create_revision if old is not None else self.revision,
            version=old.version + 1 if old is not None else 1)

    def delete_prefix(self, prefix: str) -> None:
        p = prefix.encode()
        doomed = list(self._kvs.irange(p, prefix_end(p), inclusive=(True, False)))
        if doomed:
            self.revision += 1
        for k in doomed:
            del self._kvs[k]

    def range(self, key: bytes, range_end: bytes) -> list[mvccpb_pb2.KeyValue]:
        if not range_end:
            kv = self._kvs.get(key)
            return [kv] if kv is not None else []
        if range_end == b"\x00":
            return [self._kvs[k] for k in self._kvs.irange(key)]
        return [self._kvs[k] for k in self._kvs.irange(key, range_end, inclusive=(True, False))]

    def register_tidb(self, sql_addr: str, start_timestamp: int | None = None) -> None:
        """TiDB's registration of the SQL server at ``sql_addr`` (infosync's StoreTopologyInfo and the ttl key)."""
        now = time.time()
        info = {"version": TIDB_TOPOLOGY_VERSION, "git_hash": "", "status_port": 0, "deploy_path": "",
                "start_timestamp": int(start_timestamp if start_timestamp is not None else now), "labels": {}}
        self.put(topology.info_key(sql_addr), json.dumps(info, separators=(",", ":")))
        self.put(topology.ttl_key(sql_addr), str(time.time_ns()))

    def unregister_tidb(self, sql_addr: str) -> None:
        self.delete_prefix(topology.server_prefix(sql_addr))


def prefix_end(prefix: bytes) -> bytes:
    """etcd's ``GetPrefixRangeEnd``: the prefix with its last byte below 0xff incremented (``\\0``: no end)."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"


class EtcdKvService(etcdserverpb_pb2_grpc.KVServicer):
    """``KV.Range`` of one PD member over the cluster's key space."""

    def __init__(self, keys: EtcdKeySpace, cluster_id: int, member_id: int) -> None:
        self.keys = keys
        self.cluster_id = cluster_id
        self.member_id = member_id

    async def Range(self, request: etcdserverpb_pb2.RangeRequest, context: grpc.aio.ServicerContext
                    ) -> etcdserverpb_pb2.RangeResponse:
        if not request.key:
            # etcd's ErrGRPCEmptyKey (api/v3rpc/rpctypes/error.go)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: key is not provided")
        if request.revision > self.keys.revision:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE,
                                "etcdserver: mvcc: required revision is a future revision")
        kvs = self.keys.range(request.key, request.range_end)
        if request.sort_order == etcdserverpb_pb2.RangeRequest.DESCEND:
            kvs.reverse()
        count = len(kvs)
        more = bool(request.limit) and count > request.limit
        if request.limit:
            kvs = kvs[: request.limit]
        header = etcdserverpb_pb2.ResponseHeader(cluster_id=self.cluster_id, member_id=self.member_id,
                                                  revision=self.keys.revision, raft_term=1)
        if request.count_only:
            return etcdserverpb_pb2.RangeResponse(header=header, count=count)
        if request.keys_only:
            kvs = [mvccpb_pb2.KeyValue(key=kv.key, create_revision=kv.create_revision, mod_revision=kv.mod_revision,
                                       version=kv.version, lease=kv.lease) for kv in kvs]
        return etcdserverpb_pb2.RangeResponse(header=header, kvs=kvs, more=more, count=count)
