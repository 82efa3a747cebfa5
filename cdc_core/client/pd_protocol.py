"""PD's client rules, as PD's own Go client and TiCDC follow them; shared by the synchronous client
(``cdc_core.client.upstream``) and the puller's asynchronous one (``cdc_core.puller.pd_client``).

- **Cluster id.** A client learns it from ``GetMembers`` (the one call PD answers without it) and sends it in
  ``RequestHeader.cluster_id`` on every other call; PD answers a wrong one with ``FAILED_PRECONDITION`` "mismatch
  cluster id, need N but got M" (pd ``server/grpc_service.go`` ``validateRequest``), which is fatal: the address
  names another cluster than the one the changefeed was made for.
- **Errors in the header.** PD reports most failures as ``ResponseHeader.error`` ``{type, message}`` with gRPC
  status OK (e.g. ``GetStore`` of an unknown id: ``UNKNOWN`` "invalid store ID N, not found").
- **TSO.** ``Tso`` is a bidirectional stream; a response's ``timestamp`` is the largest of the ``count`` allocated
  (pd client ``tso_dispatcher``: first logical = logical - count + 1).
"""

from __future__ import annotations

from typing import Any

from cdc_core.codec import tso
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.proto import pdpb_pb2

# RequestHeader.caller_id: who asks, which PD logs per request (TiCDC's PD client sets its component name).
CALLER_ID = "cdcflow"


class PdError(UpstreamError):
    """PD answered with an error in its response header (``pdpb.Error``)."""

    def __init__(self, pd_addr: str, what: str, error: pdpb_pb2.Error) -> None:
        self.type = pdpb_pb2.ErrorType.Name(error.type) if error.type in pdpb_pb2.ErrorType.values() \
            else str(error.type)
        super().__init__(f"PD {pd_addr}: {what}: {self.type}: {error.message}")


class ClusterIdMismatch(ChangefeedError, UpstreamError):
    """The PD at this address serves another cluster than the one asked for (or was replaced by one since the
    client learned the id): a changefeed error, never retried, since no retry makes it the same cluster."""


def header(cluster_id: int) -> pdpb_pb2.RequestHeader:
    return pdpb_pb2.RequestHeader(cluster_id=cluster_id, caller_id=CALLER_ID)


def check(resp: Any, pd_addr: str, what: str) -> Any:
    """``resp`` itself, or ``PdError`` when its header carries an error."""
    err = resp.header.error
    if err.type != pdpb_pb2.OK:
        raise PdError(pd_addr, what, err)
    return resp


def cluster_id_of(resp: pdpb_pb2.GetMembersResponse, pd_addr: str) -> int:
    check(resp, pd_addr, "GetMembers")
    if not resp.header.cluster_id:
        raise UpstreamError(f"PD {pd_addr}: GetMembers answered no cluster id (not bootstrapped?)")
    return int(resp.header.cluster_id)


def is_cluster_id_mismatch(details: str | None) -> bool:
    return bool(details) and "mismatch cluster id" in str(details)


def mismatch_error(pd_addr: str, details: str | None) -> ClusterIdMismatch:
    return ClusterIdMismatch(f"PD {pd_addr} belongs to another cluster: {details}")


def tso_request(cluster_id: int, count: int = 1) -> pdpb_pb2.TsoRequest:
    return pdpb_pb2.TsoRequest(header=header(cluster_id), count=count)


def last_ts(resp: pdpb_pb2.TsoResponse, pd_addr: str) -> int:
    """The largest timestamp a ``TsoResponse`` allocated."""
    check(resp, pd_addr, "Tso")
    return tso.compose(resp.timestamp.physical, resp.timestamp.logical)
