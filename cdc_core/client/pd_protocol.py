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
- **The leader.** A PD cluster is several members, of which only the leader serves; a client is given some of
  their addresses (TiCDC's ``--pd``, comma-separated URLs), asks each in turn for ``GetMembers`` until one
  answers with a leader, and sends everything to the leader's first client URL (pd client
  ``pd_service_discovery.go`` ``updateMember``). A follower answers ``UNAVAILABLE`` "not leader" (and ``Tso`` with
  "... is not leader ..."): the client then asks the members again and retries, a bounded number of times. It
  keeps every member's URL it learned, so it still finds the leader when the addresses it was given are gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from cdc_core.client.pd_addrs import split_addrs as split_addrs  # re-exported for the clients
from cdc_core.client.pd_addrs import url_addr as url_addr
from cdc_core.codec import tso
from cdc_core.errors import ChangefeedError, UpstreamError
from cdc_core.proto import pdpb_pb2

# RequestHeader.caller_id: who asks, which PD logs per request (TiCDC's PD client sets its component name).
CALLER_ID = "cdcflow"
# Calls that found no leader (a follower's "not leader", the leader gone) are retried after asking the members
# again, this many times, waiting 0.2 s, 0.4 s, ... up to 2 s between (about 5 s in all: PD elects a new leader
# within its 3 s leader lease).
LEADER_ATTEMPTS = 6
LEADER_BACKOFF_S = (0.2, 0.4, 0.8, 1.6, 2.0)
# pd client errs.NotLeaderErr: the substring PD's client takes as "the leader changed".
NOT_LEADER_MARKERS = ("not leader", "is not leader")


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


def is_not_leader(code: grpc.StatusCode | None, details: str | None) -> bool:
    """The call reached a member that is not (or no longer) the leader."""
    text = str(details or "")
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN) and any(
        m in text for m in NOT_LEADER_MARKERS)


def follow_leader(code: grpc.StatusCode | None, details: str | None) -> bool:
    """Whether a failed call is worth re-discovering the leader for: a follower answered, or the member it went
    to is unreachable (it may have died and another taken over)."""
    return code == grpc.StatusCode.UNAVAILABLE or is_not_leader(code, details)


class PdMembers:
    """What a client knows of a PD cluster's members: the addresses it was given, the ones ``GetMembers`` named,
    the leader and the cluster id. Holds no connection; the synchronous and asynchronous clients do the calls."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.seeds = split_addrs(spec)
        self.known: list[str] = []
        self.leader: str | None = None
        self.cluster_id: int | None = None
        self.failures: dict[str, str] = {}
        self.leader_changes = 0  # calls that found no leader where they went and asked the members again

    def candidates(self) -> Iterator[str]:
        """Where to ask ``GetMembers``: the members learned last time, then the given addresses."""
        seen: set[str] = set()
        for addr in [*self.known, *self.seeds]:
            if addr not in seen:
                seen.add(addr)
                yield addr

    def start_round(self) -> None:
        self.leader = None
        self.failures = {}

    def failed(self, addr: str, why: str) -> None:
        self.failures[addr] = why

    def members_failed(self, addr: str, code: grpc.StatusCode | None, details: str | None) -> None:
        """``GetMembers`` at ``addr`` failed."""
        self.failed(addr, f"unreachable: {details}" if code == grpc.StatusCode.UNAVAILABLE else str(details))

    def retry_after(self, what: str, addr: str, attempt: int, attempts: int, code: grpc.StatusCode | None,
                    details: str | None) -> float | None:
        """A call at ``addr`` (the leader as known) failed on its ``attempt``-th try (from 0): the seconds to wait
        before asking the members again and retrying, or None when the caller should report its own error (not
        a leader problem, or no attempt left). Raises when every attempt found a follower."""
        if not follow_leader(code, details):
            return None
        if attempt + 1 >= attempts:
            if is_not_leader(code, details):
                raise UpstreamError(f"PD {self.spec}: {what}: no leader after {attempts} attempts; last asked "
                                    f"{addr}: {details}")
            return None
        self.leader = None
        self.leader_changes += 1
        return LEADER_BACKOFF_S[min(attempt, len(LEADER_BACKOFF_S) - 1)]

    def learn(self, addr: str, resp: pdpb_pb2.GetMembersResponse) -> str | None:
        """Take ``addr``'s ``GetMembers`` answer; the leader's address, or None when it names no leader (an
        election under way) or reports an error. A cluster id other than the one learned first is fatal."""
        try:
            cid = cluster_id_of(resp, addr)
        except UpstreamError as exc:
            self.failed(addr, str(exc))
            return None
        if self.cluster_id is not None and cid != self.cluster_id:
            raise ClusterIdMismatch(
                f"PD {addr} belongs to another cluster: cluster id {cid}, but {self.spec} had {self.cluster_id}")
        self.cluster_id = cid
        urls = [url_addr(u) for m in resp.members for u in m.client_urls[:1]]
        if urls:
            self.known = urls
        if not resp.leader.client_urls:
            self.failed(addr, "no leader (an election may be under way)")
            return None
        self.leader = url_addr(resp.leader.client_urls[0])
        return self.leader

    def no_leader(self, what: str, unreachable_only: bool) -> UpstreamError:
        """The error when no member named a leader; every address and what it answered."""
        tried = "; ".join(f"{a}: {why}" for a, why in self.failures.items()) or "no address"
        if unreachable_only:
            from cdc_core.tls import handshake_hint

            return UpstreamError(f"cannot reach the upstream at {self.spec} ({what}): no PD member answered: {tried}"
                                 f"{handshake_hint(tried)}")
        return UpstreamError(f"PD {self.spec}: no leader found ({what}): {tried}")

    def all_unreachable(self) -> bool:
        return bool(self.failures) and all(w.startswith("unreachable") for w in self.failures.values())
