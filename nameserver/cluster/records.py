"""Cluster membership records: :class:`Member`, the members sub-image and its delta."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nameserver.state.mapdelta import MapDelta
from protos import records_pb2


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    member_id: int
    peer_url: str
    client_urls: tuple[str, ...]

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
