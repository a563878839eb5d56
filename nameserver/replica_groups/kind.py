"""The ``replica_group`` record kind: replica groups, registered in :mod:`nameserver.kinds`."""

from __future__ import annotations

from nameserver.replica_groups.apply import apply_replica_group_entry
from nameserver.replica_groups.records import ReplicaGroup, ReplicaGroupDelta, ReplicaGroupsImage
from nameserver.state.consistency import LINEARIZABLE
from nameserver.state.registry import RecordKind

REPLICA_GROUP = RecordKind(
    name="replica_group",
    field="replica_groups",
    empty=ReplicaGroupsImage(),
    delta=ReplicaGroupDelta,
    decode=ReplicaGroup.from_record,
    # masters, epochs and the in-sync set fence brokers' writes
    consistency=LINEARIZABLE,
    items=lambda image: ((n.encode(), g) for n, g in sorted(image.groups.items())),
    lookup=lambda image, key: image.get(key.decode()),
    key_of=bytes.decode,
    usage=lambda delta: (
        len(delta.base) + delta.key_delta,
        delta.base.value_bytes + delta.byte_delta,
    ),
    rules={"replica_group": apply_replica_group_entry},
)
