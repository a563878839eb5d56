"""Property tests of replica groups: any sequence of register / liveness / alter / elect /
policy entries (valid or not) keeps the invariants -- the master is in the in-sync set, epochs
never go down, need_ack_nums stays within [1, totalReplicas], alive and in-sync replicas are
registered -- and replaying the effects record by record (what watches, snapshots and the
Spark job do) gives the image apply built."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.replica_groups.apply import group_need_ack
from nameserver.state.image import MetadataDelta, MetadataImage
from nameserver.state.machine import MetadataStateMachine, image_from_records, image_records
from protos import records_pb2 as r
from raftlog import Entry

NAMES = st.sampled_from(["g1", "g2"])
IDS = st.integers(1, 5)
ID_LISTS = st.lists(IDS, max_size=5)
STATES = st.lists(
    st.builds(
        r.ReplicaState, broker_id=IDS, max_offset=st.integers(0, 100), epoch=st.integers(0, 5)
    ),
    max_size=5,
)

register_ops = st.builds(
    lambda name, host, broker_id: r.ReplicaGroupOperation(
        register=r.ReplicaRegister(
            cluster_name="c", broker_name=name, address=f"h:{host}", broker_id=broker_id
        )
    ),
    NAMES,
    st.integers(1, 5),
    st.integers(0, 5),
)
liveness_ops = st.builds(
    lambda name, alive, dead, states: r.ReplicaGroupOperation(
        liveness=r.ReplicaLiveness(broker_name=name, alive=alive, dead=dead, states=states)
    ),
    NAMES,
    ID_LISTS,
    ID_LISTS,
    STATES,
)
alter_ops = st.builds(
    lambda name, master, me, ie, isr: r.ReplicaGroupOperation(
        alter_sync_state_set=r.AlterSyncStateSet(
            broker_name=name,
            master_id=master,
            master_epoch=me,
            sync_state_set_epoch=ie,
            sync_state_set=isr,
        )
    ),
    NAMES,
    IDS,
    st.integers(0, 6),
    st.integers(0, 8),
    ID_LISTS,
)
elect_ops = st.builds(
    lambda name, broker_id, unclean, states: r.ReplicaGroupOperation(
        elect_master=r.ElectMaster(
            broker_name=name, broker_id=broker_id, unclean=unclean, states=states
        )
    ),
    NAMES,
    st.integers(0, 5),
    st.booleans(),
    STATES,
)
policy_ops = st.builds(
    lambda name, total, isr, mini, auto: r.ReplicaGroupOperation(
        set_policy=r.SetReplicaGroupPolicy(
            broker_name=name,
            cluster_name="c",
            policy=r.ReplicaGroupPolicy(
                total_replicas=total,
                in_sync_replicas=isr,
                min_in_sync_replicas=mini,
                enable_auto_in_sync_replicas=auto,
            ),
        )
    ),
    NAMES,
    st.integers(0, 4),
    st.integers(0, 4),
    st.integers(0, 4),
    st.booleans(),
)
OPS = st.lists(st.one_of(register_ops, liveness_ops, alter_ops, elect_ops, policy_ops), max_size=40)


def check_invariants(before: MetadataImage, after: MetadataImage) -> None:
    for name, g in after.replica_groups.groups.items():
        registered = {x.broker_id for x in g.replicas}
        assert g.master_id == 0 or g.master_id in g.sync_state_set, g
        assert g.master_id == 0 or g.master_id in g.alive, g
        assert set(g.alive) <= registered and set(g.sync_state_set) <= registered, g
        assert list(g.sync_state_set) == sorted(set(g.sync_state_set))
        n = group_need_ack(g)
        assert 1 <= n.need_ack_nums <= g.policy.total_replicas, (g.policy, n)
        old = before.replica_groups.get(name)
        if old is not None:
            assert g.master_epoch >= old.master_epoch
            assert g.sync_state_set_epoch >= old.sync_state_set_epoch
            if g.master_id != old.master_id:  # a new master always comes with a new epoch
                assert g.master_epoch > old.master_epoch
            if g.sync_state_set != old.sync_state_set:
                assert g.sync_state_set_epoch > old.sync_state_set_epoch


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_any_sequence_keeps_the_invariants_and_replays_to_the_same_image(
    ops: list[r.ReplicaGroupOperation],
) -> None:
    sm = MetadataStateMachine.empty(REGISTRY)
    replayed = MetadataDelta(MetadataImage.empty(REGISTRY))
    for offset, op in enumerate(ops, start=1):
        before = sm.image
        name = op.WhichOneof("op")
        entry = Entry(
            type="replica_group",
            key=getattr(op, name).broker_name.encode(),
            value=op.SerializeToString(),
            timestamp_ms=offset,
        )
        try:
            effects, _ = sm.apply(offset, 1, [entry])
        except Rejected:
            effects = []  # rejected whole: nothing changed
        sm.publish()
        if not effects:
            assert sm.image.replica_groups == before.replica_groups
        for e in effects:
            replayed.replay(e.type, e.key, e.value, e.delete)
        check_invariants(before, sm.image)
    assert replayed.build().replica_groups.groups == sm.image.replica_groups.groups
    image = sm.image
    rebuilt = image_from_records(image_records(image), image.revision, 1, REGISTRY)
    assert rebuilt.replica_groups == image.replica_groups
