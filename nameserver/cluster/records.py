"""Cluster membership records: :class:`Member`, the members sub-image and its delta."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nameserver.state.mapdelta import MapDelta
from protos import records_pb2


def host_port(url: str) -> str:
    """``host:port`` of a member URL (``http://host:port/``; a bare ``host:port`` as is)."""
    return url.removeprefix("http://").removeprefix("https://").rstrip("/")


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    member_id: int
    peer_url: str
    client_urls: tuple[str, ...]

    @property
    def peer_address(self) -> str:
        """``host:port`` of the peer URL: how the consensus engine names this member."""
        return host_port(self.peer_url)

    @property
    def client_address(self) -> str | None:
        """``host:port`` of the first client URL (None: the member announced none yet)."""
        return host_port(self.client_urls[0]) if self.client_urls else None

    def to_record(self) -> bytes:
        data: bytes = records_pb2.MemberRecord(
            id=self.id,
            member_id=self.member_id,
            peer_url=self.peer_url,
            client_urls=list(self.client_urls),
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> Member:
        r = records_pb2.MemberRecord.FromString(data)
        return Member(r.id, r.member_id, r.peer_url, tuple(r.client_urls))


@dataclass(frozen=True, slots=True)
class MembersImage:
    members: Mapping[str, Member] = field(default_factory=lambda: MappingProxyType({}))

    def find(self, name_or_peer: str) -> Member | None:
        """The member named ``name_or_peer``, or whose peer address it is (engines report a
        leader by either): the one member lookup every service uses."""
        if not name_or_peer:
            return None
        member = self.members.get(name_or_peer)
        if member is not None:
            return member
        return next((m for m in self.members.values() if m.peer_address == name_or_peer), None)


class MembersDelta(MapDelta[str, Member]):
    """Pending member changes over a base image."""

    def __init__(self, base: MembersImage) -> None:
        super().__init__(base.members.get)
        self.base = base

    def put(self, member: Member) -> None:
        self._change(member.id, member)

    def build(self) -> MembersImage:
        if not self.changes:
            return self.base
        return MembersImage(self.merged(self.base.members))
