"""The cluster domain's record kinds, registered in :mod:`nameserver.kinds`: ``member``
(cluster members) and ``alarm`` (members' raised alarms, etcd's alarm bucket)."""

from __future__ import annotations

from collections.abc import Sequence

from nameserver.cluster.apply import apply_alarm_entry, apply_member_entry
from nameserver.cluster.corrupt import corrupt, refused
from nameserver.cluster.nospace import no_space, puts_of
from nameserver.cluster.records import (
    Alarm,
    AlarmsDelta,
    AlarmsImage,
    Member,
    MembersDelta,
    MembersImage,
)
from nameserver.state.consistency import AS_REQUESTED, LINEARIZABLE
from nameserver.state.image import MetadataDelta
from nameserver.state.registry import RecordKind
from raftlog import Entry


class AlarmGuards:
    """The alarm kind's guard (a RequestGuard that keeps no token), one look at the alarms
    per request on the apply path of every write: while NOSPACE is raised a request that
    would grow the store (:mod:`nameserver.cluster.nospace`), while CORRUPT is raised one
    with a write etcd's applierV3Corrupt refuses (:mod:`nameserver.cluster.corrupt`), is
    rejected whole, the same on every member."""

    def before(self, delta: MetadataDelta, entries: Sequence[Entry]) -> None:
        made = delta.made("alarms")
        alarms = made if made is not None else delta.image.alarms
        if alarms.nospace and any(puts_of(e) for e in entries):
            raise no_space()
        if alarms.corrupt and any(refused(e) for e in entries):
            raise corrupt()
        return None

    def after(self, delta: MetadataDelta, before: None) -> None:  # never called: no token
        return None


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
    # a raised NOSPACE refuses growing writes, a raised CORRUPT kv and lease writes, on
    # every member
    guard=AlarmGuards(),
)
