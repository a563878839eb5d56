"""The cluster domain's record kinds, registered in :mod:`nameserver.kinds`: ``member``
(cluster members) and ``alarm`` (members' raised alarms, etcd's alarm bucket)."""

from __future__ import annotations

from nameserver.cluster.apply import apply_alarm_entry, apply_member_entry
from nameserver.cluster.nospace import NoSpaceGuard
from nameserver.cluster.records import (
    Alarm,
    AlarmsDelta,
    AlarmsImage,
    Member,
    MembersDelta,
    MembersImage,
)
from nameserver.state.consistency import AS_REQUESTED, LINEARIZABLE
from nameserver.state.registry import RecordKind

MEMBER = RecordKind(
    name="member",
    field="members",
    empty=MembersImage(),
    delta=MembersDelta,
    decode=Member.from_record,
    consistency=AS_REQUESTED,  # etcd's MemberList ``linearizable`` flag
    items=lambda image: ((mid.encode(), m) for mid, m in sorted(image.members.items())),
    lookup=lambda image, key: image.members.get(key.decode()),
    key_of=bytes.decode,
    rules={"member": apply_member_entry},
)

ALARM = RecordKind(
    name="alarm",
    field="alarms",
    empty=AlarmsImage(),
    delta=AlarmsDelta,
    decode=Alarm.from_record,
    consistency=LINEARIZABLE,  # etcd answers AlarmList through the log
    items=lambda image: sorted(image.alarms.items()),
    lookup=lambda image, key: image.get(key),
    rules={"alarm": apply_alarm_entry},
    guard=NoSpaceGuard(),  # a raised NOSPACE refuses growing writes, on every member
)
