"""Cluster membership records: :class:`Member`, the members sub-image and its delta."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nameserver.state.mapdelta import MapDelta
from protos import records_pb2


def host_port(url: str) -> str:
    """``host:port`` of a member URL (``http://host:port/``; a bare ``host:port`` as is)."""
    return url.removeprefix("http://").removeprefix("https://").rstrip("/")


def member_id_of(peer_address: str) -> int:
    """etcd member ids are uint64: ours is a stable hash of the member's peer address."""
    text = "member:" + host_port(peer_address)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


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


# ------------------------------------------------------------------------ alarms
#: etcd's AlarmType values (etcdserverpb.AlarmType): NONE, NOSPACE, CORRUPT.
ALARM_NONE, ALARM_NOSPACE, ALARM_CORRUPT = 0, 1, 2
ALARM_TYPES = (ALARM_NONE, ALARM_NOSPACE, ALARM_CORRUPT)


@dataclass(frozen=True, slots=True)
class Alarm:
    """One member's raised alarm (etcd's AlarmMember): kept until disarmed."""

    member_id: int
    alarm: int

    @property
    def key(self) -> bytes:
        """The record key: member id (8 bytes big-endian) then the alarm type (1 byte)."""
        return alarm_key(self.member_id, self.alarm)

    def to_record(self) -> bytes:
        data: bytes = records_pb2.AlarmRecord(
            member_id=self.member_id, alarm=self.alarm
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> Alarm:
        r = records_pb2.AlarmRecord.FromString(data)
        return Alarm(r.member_id, r.alarm)


def alarm_key(member_id: int, alarm: int) -> bytes:
    return member_id.to_bytes(8, "big") + bytes([alarm])


#: etcd's AlarmType names, by value
ALARM_NAMES = {ALARM_NONE: "NONE", ALARM_NOSPACE: "NOSPACE", ALARM_CORRUPT: "CORRUPT"}


def alarm_text(member_id: int, alarm: int) -> str:
    """An AlarmMember as Go's gogoproto ``String()`` writes it (zero fields left out):
    ``memberID:<id> alarm:NOSPACE `` (etcd's StatusResponse.errors)."""
    text = f"memberID:{member_id} " if member_id else ""
    if alarm:
        text += f"alarm:{ALARM_NAMES.get(alarm, str(alarm))} "
    return text


@dataclass(frozen=True, slots=True)
class AlarmsImage:
    """Every member's raised alarms, by record key; ``nospace``, ``corrupt``: whether any
    NOSPACE, CORRUPT alarm is raised (the write refusals' one test, O(1))."""

    alarms: Mapping[bytes, Alarm] = field(default_factory=lambda: MappingProxyType({}))
    nospace: bool = False
    corrupt: bool = False

    def get(self, key: bytes) -> Alarm | None:
        return self.alarms.get(key)

    def list(self, alarm: int = ALARM_NONE) -> list[Alarm]:
        """The raised alarms of type ``alarm`` (NONE: all, as etcd's AlarmStore.Get)."""
        return [a for _, a in sorted(self.alarms.items()) if not alarm or a.alarm == alarm]


def alarms_image(items: Mapping[bytes, Alarm]) -> AlarmsImage:
    return AlarmsImage(
        MappingProxyType(dict(items)),
        any(a.alarm == ALARM_NOSPACE for a in items.values()),
        any(a.alarm == ALARM_CORRUPT for a in items.values()),
    )


class AlarmsDelta(MapDelta[bytes, Alarm]):
    """Pending alarm changes over a base image."""

    def __init__(self, base: AlarmsImage) -> None:
        super().__init__(base.get)
        self.base = base

    def put(self, alarm: Alarm) -> None:
        self._change(alarm.key, alarm)

    @property
    def nospace(self) -> bool:
        """Whether a NOSPACE alarm is raised as this delta would publish it."""
        if not self.changes:
            return self.base.nospace
        return any(a.alarm == ALARM_NOSPACE for a in self._merged().values())

    @property
    def corrupt(self) -> bool:
        """Whether a CORRUPT alarm is raised as this delta would publish it."""
        if not self.changes:
            return self.base.corrupt
        return any(a.alarm == ALARM_CORRUPT for a in self._merged().values())

    def _merged(self) -> Mapping[bytes, Alarm]:
        return self.merged(self.base.alarms)

    def build(self) -> AlarmsImage:
        if not self.changes:
            return self.base
        return alarms_image(self._merged())
