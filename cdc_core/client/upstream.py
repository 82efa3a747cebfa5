"""Synchronous client of the upstream's PD server (PD, SQL and Catalog services on one address).

Used by the CLI and the changefeed runner::

    with UpstreamClient(resolve_pd_addr(None)) as up:
        up.execute("CREATE DATABASE d; USE d; CREATE TABLE t (a INT PRIMARY KEY)")
        rows = up.query("SELECT * FROM d.t", at_ts=up.get_ts())

Every gRPC failure becomes an ``UpstreamError`` carrying the server's message.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import grpc

from cdc_core.client import pd_protocol
from cdc_core.errors import UpstreamError
from cdc_core.home import upstream_file
from cdc_core.proto import catalogpb_pb2, catalogpb_pb2_grpc, pdpb_pb2, pdpb_pb2_grpc, sqlpb_pb2, sqlpb_pb2_grpc

ENV_UPSTREAM = "CDCFLOW_UPSTREAM"
NO_UPSTREAM = "no upstream running; start one with `cdcflow upstream start --detach`"


@dataclass(frozen=True)
class StatementResult:
    statement: str
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    affected_rows: int = 0
    commit_ts: int = 0  # commit ts of the transaction the statement committed (0: none)


@dataclass(frozen=True)
class StoreInfo:
    id: int
    address: str
    state: str  # "Up" | "Offline" | "Tombstone"


@dataclass(frozen=True)
class TableEntry:
    table_id: int
    schema: str
    name: str


def read_upstream_file() -> dict[str, Any] | None:
    """The ``$CDCFLOW_HOME/upstream.json`` written by a running upstream, or None."""
    path = upstream_file()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise UpstreamError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else None


def resolve_pd_addr(explicit: str | None) -> str:
    """The PD address: ``explicit``, else ``$CDCFLOW_UPSTREAM``, else ``$CDCFLOW_HOME/upstream.json``."""
    if explicit:
        return explicit
    env = os.environ.get(ENV_UPSTREAM)
    if env:
        return env
    data = read_upstream_file()
    if data and data.get("pd_addr"):
        return str(data["pd_addr"])
    raise UpstreamError(NO_UPSTREAM)


class UpstreamClient:
    def __init__(self, pd_addr: str, timeout: float = 60.0) -> None:
        self.pd_addr = pd_addr
        self.timeout = timeout
        self._channel = grpc.insecure_channel(pd_addr)
        self._pd = pdpb_pb2_grpc.PDStub(self._channel)
        self._sql = sqlpb_pb2_grpc.SQLStub(self._channel)
        self._catalog = catalogpb_pb2_grpc.CatalogStub(self._channel)
        self._cluster_id: int | None = None

    def _call(self, what: str, fn: Any, request: Any) -> Any:
        try:
            return fn(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.UNAVAILABLE:
                raise UpstreamError(f"cannot reach the upstream at {self.pd_addr} ({what}): {details}") from exc
            if code == grpc.StatusCode.FAILED_PRECONDITION and pd_protocol.is_cluster_id_mismatch(details):
                raise pd_protocol.mismatch_error(self.pd_addr, details) from exc
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise UpstreamError(f"upstream {self.pd_addr}: {what} timed out after {self.timeout:g}s") from exc
            raise UpstreamError(f"upstream {self.pd_addr}: {details}") from exc

    # --- SQL ----------------------------------------------------------------------------------
    def execute(self, sql: str, at_ts: int = 0) -> list[StatementResult]:
        """Run a script (statements share one session); one result per statement."""
        resp = self._call("SQL", self._sql.Execute, sqlpb_pb2.ExecuteRequest(sql=sql, at_ts=at_ts))
        return [
            StatementResult(
                statement=r.statement, columns=list(r.columns), rows=[json.loads(x) for x in r.rows_json],
                affected_rows=r.affected_rows, commit_ts=r.commit_ts,
            )
            for r in resp.results
        ]

    def query(self, sql: str, at_ts: int = 0) -> list[dict[str, Any]]:
        """The rows of the script's last statement (JSON objects keyed by column name)."""
        results = self.execute(sql, at_ts)
        return results[-1].rows if results else []

    # --- PD -----------------------------------------------------------------------------------
    def cluster_id(self) -> int:
        """The cluster id (``GetMembers``, once per client), which every other PD call carries."""
        if self._cluster_id is None:
            resp = self._call("GetMembers", self._pd.GetMembers, pdpb_pb2.GetMembersRequest())
            self._cluster_id = pd_protocol.cluster_id_of(resp, self.pd_addr)
        return self._cluster_id

    def get_ts(self) -> int:
        def one(request: pdpb_pb2.TsoRequest, timeout: float) -> pdpb_pb2.TsoResponse:
            return next(iter(self._pd.Tso(iter([request]), timeout=timeout)))

        resp = self._call("Tso", one, pd_protocol.tso_request(self.cluster_id()))
        return pd_protocol.last_ts(resp, self.pd_addr)

    def all_stores(self) -> list[StoreInfo]:
        resp = self._call("GetAllStores", self._pd.GetAllStores,
                          pdpb_pb2.GetAllStoresRequest(header=pd_protocol.header(self.cluster_id())))
        pd_protocol.check(resp, self.pd_addr, "GetAllStores")
        return [StoreInfo(s.id, s.address, _STATE.get(s.state, str(s.state))) for s in resp.stores]

    def ping(self) -> bool:
        """Whether the PD server answers (a GetMembers within a short timeout)."""
        try:
            self._pd.GetMembers(pdpb_pb2.GetMembersRequest(), timeout=min(self.timeout, 2.0))
        except grpc.RpcError:
            return False
        return True

    # --- catalog ------------------------------------------------------------------------------
    def list_tables(self, schema: str = "", pattern: str = "") -> list[TableEntry]:
        resp = self._call("ListTables", self._catalog.ListTables,
                          catalogpb_pb2.ListTablesRequest(schema=schema, pattern=pattern))
        return [TableEntry(t.table_id, t.schema, t.name) for t in resp.tables]

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> UpstreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_STATE = {0: "Up", 1: "Offline", 2: "Tombstone"}
