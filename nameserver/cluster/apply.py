"""The apply rules of the cluster domain: ``member`` entries (a member's name and URLs
added, changed or removed) and ``alarm`` entries (a member's alarm raised or disarmed).

The engine's own membership (voters, learners) is not here: this is the metadata the
Cluster service answers with (names and client URLs), replicated through the log.

Alarms follow etcd 3.4's ``applierV3backend.Alarm`` and ``v3alarm.AlarmStore``: ACTIVATE
stores (member, type) once and answers the alarm (the one already there if raised
before); DEACTIVATE removes it and answers it, or answers no alarm when it was not raised
(no error); any member id is taken (0 included), as etcd takes it.
"""

from __future__ import annotations

from nameserver.cluster.records import ALARM_TYPES, Alarm, Member, alarm_key
from nameserver.errors import InvalidArgument
from nameserver.state.image import MetadataDelta
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Effect, Entry


def apply_member_entry(delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]) -> None:
    """One ``member`` entry: a MemberRecord, or an empty value removing the member ``key``."""
    members = delta.members
    if not e.value:  # a removed member
        mid = e.key.decode()
        if members.get(mid) is not None:
            members.delete(mid)
            effects.append(Effect("member", e.key, delete=True))
        return None
    m = Member.from_record(e.value)
    if members.get(m.id) != m:
        members.put(m)
        effects.append(Effect("member", m.id.encode(), m.to_record()))
    return None


def validate_alarm(request: rpc_pb2.AlarmRequest) -> None:
    """An alarm request that can be proposed: ACTIVATE or DEACTIVATE of a known type."""
    if request.action not in (rpc_pb2.AlarmRequest.ACTIVATE, rpc_pb2.AlarmRequest.DEACTIVATE):
        raise InvalidArgument(
            f"metaledger: alarm action {request.action}: only ACTIVATE and DEACTIVATE are "
            "proposed (GET reads)"
        )
    if request.alarm not in ALARM_TYPES:
        raise InvalidArgument(
            f"metaledger: alarm type {request.alarm} is not one of NONE, NOSPACE, CORRUPT"
        )


def apply_alarm(
    delta: MetadataDelta, request: rpc_pb2.AlarmRequest, effects: list[Effect]
) -> rpc_pb2.AlarmResponse:
    """Raise or disarm one member's alarm; the answer lists the alarm changed (etcd's)."""
    validate_alarm(request)
    alarms = delta.alarms
    key = alarm_key(request.memberID, request.alarm)
    resp = rpc_pb2.AlarmResponse()
    current = alarms.get(key)
    if request.action == rpc_pb2.AlarmRequest.ACTIVATE:
        if current is None:
            current = Alarm(request.memberID, request.alarm)
            alarms.put(current)
            effects.append(Effect("alarm", key, current.to_record()))
        resp.alarms.add(memberID=current.member_id, alarm=current.alarm)
    elif current is not None:  # DEACTIVATE of a raised alarm (else: nothing, no error)
        alarms.delete(key)
        effects.append(Effect("alarm", key, delete=True))
        resp.alarms.add(memberID=current.member_id, alarm=current.alarm)
    return resp


def alarm_entry(request: rpc_pb2.AlarmRequest) -> Entry:
    """The ``alarm`` entry proposing ``request`` (ACTIVATE or DEACTIVATE)."""
    validate_alarm(request)
    return Entry(
        type="alarm",
        key=alarm_key(request.memberID, request.alarm),
        value=records_pb2.AlarmOperation(request=request).SerializeToString(),
    )


def apply_alarm_entry(
    delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]
) -> rpc_pb2.AlarmResponse:
    """One ``alarm`` entry (the registry's rule): an AlarmOperation."""
    return apply_alarm(delta, records_pb2.AlarmOperation.FromString(e.value).request, effects)
