"""The ``member`` record kind: cluster members, registered in :mod:`nameserver.kinds`."""

from __future__ import annotations

from nameserver.cluster.apply import apply_member_entry
from nameserver.cluster.records import Member, MembersDelta, MembersImage
from nameserver.state.consistency import AS_REQUESTED
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
