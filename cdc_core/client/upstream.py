"""Synchronous client of an upstream cluster: PD (and its etcd) over gRPC, TiDB's SQL over the MySQL protocol.

Used by the CLI and the changefeed runner::

    with UpstreamClient(resolve_pd_addr(None)) as up:
        up.execute("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY)")
        rows = up.query("SELECT * FROM d.t", at_ts=up.get_ts())

SQL goes to ``tidb`` when given (``[user[:password]@]host:port``, comma-separated), else ``$CDCFLOW_TIDB``, else
to the SQL servers TiDB registered in PD's etcd (``/topology/tidb/<addr>/info``), as tools given only PD find
them (``cdc_core/client/tidb_sql.py``). Every failure becomes an ``UpstreamError`` carrying the server's message.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import grpc

from cdc_core import tls
from cdc_core.client import pd_protocol
from cdc_core.client.tidb_sql import (
    ENV_TIDB,
    StatementResult,
    TidbAddress,
    TidbSql,
    parse_addresses,
)
from cdc_core.codec import topology
from cdc_core.errors import UpstreamError
from cdc_core.log import get_logger
from cdc_core.proto import (
    etcdserverpb_pb2,
    etcdserverpb_pb2_grpc,
    pdpb_pb2,
    pdpb_pb2_grpc,
)
from cdc_core.upstream_record import read_upstream_file

log = get_logger("cdcflow.client.upstream")
_S = TypeVar("_S")
R = TypeVar("R")

ENV_UPSTREAM = "CDCFLOW_UPSTREAM"
NO_UPSTREAM = "no upstream running; start one with `cdcflow upstream start --detach`"


@dataclass(frozen=True)
class StoreInfo:
    id: int
    address: str
    state: str  # "Up" | "Offline" | "Tombstone"
    status_address: str = ""  # the store's status server (TiKV's status-addr: /metrics); "" when it has none


def listing_sql(schema: str = "", like: str = "%", *, literal: Callable[[str], str]) -> str:
    """The listing query of the base tables of ``schema`` (every schema when ""), names ``LIKE like``: a query
    TiDB answers from its schema cache, and the embedded upstream streams under its ``upstream-catalog`` limiter.
    ``literal`` writes a string as the session that runs the query reads it (``TidbSql.literal``)."""
    where = ["TABLE_TYPE = 'BASE TABLE'"]
    if schema:
        where.append(f"TABLE_SCHEMA = {literal(schema)}")
    if like != "%":
        where.append(f"TABLE_NAME LIKE {literal(like)}")
    return ("SELECT TIDB_TABLE_ID, TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "
            + " AND ".join(where))


@dataclass(frozen=True)
class TableEntry:
    table_id: int
    schema: str
    name: str


def resolve_pd_addr(explicit: str | None) -> str:
    """The PD address(es): ``explicit``, else ``$CDCFLOW_UPSTREAM``, else ``$CDCFLOW_HOME/upstream.json``."""
    if explicit:
        return explicit
    env = os.environ.get(ENV_UPSTREAM)
    if env:
        return env
    data = read_upstream_file()
    if data and data.get("pd_members"):
        return ",".join(str(a) for a in data["pd_members"])
    if data and data.get("pd_addr"):
        return str(data["pd_addr"])
    raise UpstreamError(NO_UPSTREAM)


class UpstreamClient:
    """``pd_addr``: one PD address or several, comma-separated (any members of the cluster); PD calls follow the
    leader (``pd_protocol.PdMembers``). SQL and the catalog go to the leader found too (every embedded member
    serves them)."""

    def __init__(self, pd_addr: str, timeout: float = 60.0, tidb: str | None = None) -> None:
        self.pd_addr = pd_addr
        self.timeout = timeout
        self.tidb = tidb
        self._addresses: list[TidbAddress] | None = None
        # A MySQL connection serves one thread at a time (gRPC channels are shared): one per thread.
        self._local = threading.local()
        self._sqls: list[TidbSql] = []
        self._sqls_lock = threading.Lock()
        self._members = pd_protocol.PdMembers(pd_addr)
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[tuple[str, type], Any] = {}

    def _channel(self, addr: str) -> grpc.Channel:
        ch = self._channels.get(addr)
        if ch is None:
            ch = self._channels[addr] = tls.grpc_channel(addr)
        return ch

    def _stub(self, addr: str, stub_type: type[_S]) -> _S:
        stub = self._stubs.get((addr, stub_type))
        if stub is None:
            stub = self._stubs[(addr, stub_type)] = cast(Callable[[grpc.Channel], _S], stub_type)(self._channel(addr))
        return cast(_S, stub)

    def _discover(self, what: str) -> str:
        """The leader's address, asking the members (``GetMembers``) when it is not known."""
        m = self._members
        if m.leader is not None:
            return m.leader
        m.start_round()
        for addr in m.candidates():
            try:
                resp = self._stub(addr, pdpb_pb2_grpc.PDStub).GetMembers(
                    pdpb_pb2.GetMembersRequest(header=pd_protocol.header(0)), timeout=min(self.timeout, 5.0))
            except grpc.RpcError as exc:
                m.members_failed(addr, _code(exc), _details(exc))
                continue
            leader = m.learn(addr, resp)
            if leader is not None:
                return leader
        raise m.no_leader(what, m.all_unreachable())

    def _error(self, what: str, addr: str, exc: grpc.RpcError) -> UpstreamError:
        code, details = _code(exc), _details(exc)
        if code == grpc.StatusCode.UNAVAILABLE:
            hint = tls.handshake_hint(details)
            return UpstreamError(f"cannot reach the upstream at {addr} ({what}): {details}{hint}")
        if code == grpc.StatusCode.FAILED_PRECONDITION and pd_protocol.is_cluster_id_mismatch(details):
            return pd_protocol.mismatch_error(addr, details)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return UpstreamError(f"upstream {addr}: {what} timed out after {self.timeout:g}s")
        return UpstreamError(f"upstream {addr}: {details}")

    def _call(self, what: str, stub_type: type[_S], rpc: Callable[[_S, float], R], *, follow: bool = True) -> R:
        """``rpc`` on a stub at the leader. With ``follow`` (PD's calls: all idempotent), a call that found no
        leader there is retried, a bounded number of times, after asking the members again."""
        attempts = pd_protocol.LEADER_ATTEMPTS if follow else 1
        for attempt in range(attempts):
            addr = self._discover(what)
            try:
                return rpc(self._stub(addr, stub_type), self.timeout)
            except grpc.RpcError as exc:
                wait = self._members.retry_after(what, addr, attempt, attempts, _code(exc), _details(exc))
                if wait is None:
                    raise self._error(what, addr, exc) from exc
                log.info("PD leader lost; asking the members again", what=what, address=addr, error=_details(exc),
                         attempt=attempt + 1)
                time.sleep(wait)
        raise AssertionError("unreachable: the last attempt raises")

    # --- SQL ----------------------------------------------------------------------------------
    def sql(self) -> TidbSql:
        """This thread's MySQL connection to TiDB (found as the module says; opened on first use)."""
        conn: TidbSql | None = getattr(self._local, "sql", None)
        if conn is None:
            conn = self._local.sql = TidbSql(self.sql_addresses(), self.timeout)
            with self._sqls_lock:
                self._sqls.append(conn)
        return conn

    def sql_addresses(self) -> list[TidbAddress]:
        """Where TiDB's SQL port is (found as the module says, once)."""
        if self._addresses is None:
            spec = self.tidb or os.environ.get(ENV_TIDB)
            if spec:
                self._addresses = parse_addresses(spec, "tidb" if self.tidb else ENV_TIDB)
            else:
                registered = self.tidb_addresses()
                if not registered:
                    raise UpstreamError(
                        f"no TiDB SQL server is registered in PD at {self.pd_addr} ({topology.TOPOLOGY_TIDB}/); "
                        f"give one with `tidb = \"host:port\"` in the config or ${ENV_TIDB}")
                self._addresses = parse_addresses(",".join(registered), f"PD {topology.TOPOLOGY_TIDB}")
        return self._addresses

    def execute(self, sql: str, at_ts: int = 0) -> list[StatementResult]:
        """Run a script (statements share one session); one result per statement. With ``at_ts`` the script
        reads at that ts (``SET @@tidb_snapshot``) and may not write."""
        return self.sql().execute(sql, at_ts)

    def query(self, sql: str, at_ts: int = 0) -> list[dict[str, Any]]:
        """The rows of a SELECT (JSON values keyed by column name), at ``at_ts`` when given; a script's last.
        Held in one list: for results of any size use ``iter_rows``."""
        results = self.execute(sql, at_ts)
        return results[-1].rows if results else []

    def iter_rows(self, sql: str, at_ts: int = 0) -> Iterator[dict[str, Any]]:
        """``query``'s rows, streamed off the connection as they are consumed (for results of any size)."""
        return self.sql().iter_rows(sql, at_ts)

    def literal(self, text: str) -> str:
        """``text`` as a string literal of this thread's session (``TidbSql.literal``: per its ``sql_mode``), for SQL
        this thread then runs."""
        return self.sql().literal(text)

    def tidb_addresses(self) -> list[str]:
        """The live SQL servers registered in PD's etcd: the addresses with both their ``info`` and ``ttl`` keys
        (:mod:`cdc_core.codec.topology`; a server that is gone leaves its ``info`` behind)."""
        prefix = (topology.TOPOLOGY_TIDB + "/").encode()
        request = etcdserverpb_pb2.RangeRequest(key=prefix, range_end=prefix[:-1] + b"0")  # "/" + 1 = "0"
        resp = self._call("etcd Range", etcdserverpb_pb2_grpc.KVStub, lambda stub, t: stub.Range(request, timeout=t),
                          follow=False)
        return topology.live_addresses(kv.key.decode(errors="replace") for kv in resp.kvs)

    # --- PD -----------------------------------------------------------------------------------
    def cluster_id(self) -> int:
        """The cluster id (from ``GetMembers``), which every other PD call carries."""
        self._discover("GetMembers")
        assert self._members.cluster_id is not None
        return self._members.cluster_id

    @property
    def leader_changes(self) -> int:
        """Calls that found no leader where they went and asked the members again."""
        return self._members.leader_changes

    @property
    def leader_addr(self) -> str:
        """The PD leader's address (asking the members if not known yet)."""
        return self._discover("GetMembers")

    def members(self) -> list[dict[str, Any]]:
        """PD's members as the leader lists them: ``{"id", "name", "address", "leader"}``."""
        request = pdpb_pb2.GetMembersRequest(header=pd_protocol.header(self.cluster_id()))
        resp = self._call("GetMembers", pdpb_pb2_grpc.PDStub, lambda stub, t: stub.GetMembers(request, timeout=t))
        leader = resp.leader.member_id
        return [{"id": m.member_id, "name": m.name,
                 "address": pd_protocol.url_addr(m.client_urls[0]) if m.client_urls else "",
                 "leader": m.member_id == leader} for m in resp.members]

    def get_ts(self) -> int:
        request = pd_protocol.tso_request(self.cluster_id())
        resp = self._call("Tso", pdpb_pb2_grpc.PDStub,
                          lambda stub, t: next(iter(stub.Tso(iter([request]), timeout=t))))
        return pd_protocol.last_ts(resp, self.pd_addr)

    def all_stores(self) -> list[StoreInfo]:
        request = pdpb_pb2.GetAllStoresRequest(header=pd_protocol.header(self.cluster_id()))
        resp = self._call("GetAllStores", pdpb_pb2_grpc.PDStub, lambda stub, t: stub.GetAllStores(request, timeout=t))
        pd_protocol.check(resp, self.pd_addr, "GetAllStores")
        return [StoreInfo(s.id, s.address, _STATE.get(s.state, str(s.state)), s.status_address) for s in resp.stores]

    def ping(self) -> bool:
        """Whether some PD member answers (a GetMembers within a short timeout)."""
        for addr in self._members.candidates():
            try:
                self._stub(addr, pdpb_pb2_grpc.PDStub).GetMembers(pdpb_pb2.GetMembersRequest(),
                                                                  timeout=min(self.timeout, 2.0))
            except grpc.RpcError:
                continue
            return True
        return False

    # --- catalog ------------------------------------------------------------------------------
    def list_tables(self, schema: str, like: str = "%") -> list[TableEntry]:
        """The base tables of ``schema`` whose names are ``LIKE like``, from ``information_schema.TABLES`` (a small
        schema's: one list; ``table_discovery`` lists schemas of any size under its memory limiter)."""
        rows = self.query(listing_sql(schema, like, literal=self.literal))
        return [TableEntry(int(r["TIDB_TABLE_ID"]), r["TABLE_SCHEMA"], r["TABLE_NAME"]) for r in rows]

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        with self._sqls_lock:
            sqls, self._sqls = self._sqls, []
        for conn in sqls:
            conn.close()
        self._local = threading.local()
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()
        self._stubs.clear()

    def __enter__(self) -> UpstreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_STATE = {0: "Up", 1: "Offline", 2: "Tombstone"}


def _code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    return exc.code() if hasattr(exc, "code") else None


def _details(exc: grpc.RpcError) -> str:
    return str(exc.details()) if hasattr(exc, "details") else str(exc)
