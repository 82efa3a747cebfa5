"""The embedded PD's member group: which members there are, where each serves, and which one leads.

A PD cluster is several members (an etcd group), of which one is the leader; only the leader serves PD's
calls, the others answer them as not leader (pd ``server/grpc_service.go`` ``validateRequest``). Every member
answers ``GetMembers`` with the whole group and the current leader, which is how a client that knows any member
finds the leader (pd client ``updateMember``). Here the members share one process and its state, so a leader
transfer is a flip of ``leader_id``; the next call at the old leader is refused and the client must re-discover.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_core.proto import pdpb_pb2


@dataclass
class PdMember:
    member_id: int
    name: str
    client_url: str = ""  # http://host:port once bound

    def to_pb(self) -> pdpb_pb2.Member:
        urls = [self.client_url] if self.client_url else []
        return pdpb_pb2.Member(name=self.name, member_id=self.member_id, client_urls=urls, peer_urls=urls,
                               binary_version="cdcflow-embedded")


NO_LEADER = 0


class PdMembers:
    """Members ``1..n``; member 1 leads at start. ``leader_id`` 0: no leader (an election under way)."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"a PD cluster has at least one member, got {count}")
        self.members = [PdMember(i, f"pd-{i}") for i in range(1, count + 1)]
        self.leader_id = 1

    def member(self, member_id: int) -> PdMember:
        for m in self.members:
            if m.member_id == member_id:
                return m
        raise KeyError(f"PD member {member_id} does not exist (members: "
                       f"{', '.join(str(m.member_id) for m in self.members)})")

    def is_leader(self, member_id: int) -> bool:
        return member_id == self.leader_id

    def transfer(self, member_id: int) -> PdMember | None:
        """Make ``member_id`` the leader (as ``pd-ctl member leader transfer``); ``NO_LEADER``: none leads (as
        while the members elect one) until the next transfer."""
        target = None if member_id == NO_LEADER else self.member(member_id)
        self.leader_id = member_id
        return target

    def members_pb(self) -> list[pdpb_pb2.Member]:
        return [m.to_pb() for m in self.members]

    def leader_pb(self) -> pdpb_pb2.Member | None:
        return None if self.leader_id == NO_LEADER else self.member(self.leader_id).to_pb()
