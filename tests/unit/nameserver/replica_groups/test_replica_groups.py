"""Replica groups (nameserver/replica_groups/apply.py): need_ack_nums exactly as the RocketMQ 5 seed
defines it, epoch fencing of AlterSyncStateSet, election rules, registration and liveness,
driven through the real state machine with lists of entries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from grpc import StatusCode

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.replica_groups.apply import (
    IN_SYNC_REPLICAS_NOT_ENOUGH,
    PUT_OK,
    GroupResult,
    group_need_ack,
    in_sync_slave_nums,
    need_ack_nums,
)
from nameserver.replica_groups.liveness import ReplicaLiveness
from nameserver.replica_groups.records import QuorumPolicy, ReplicaGroup
from nameserver.state.machine import (
    MetadataStateMachine,
    diff_images,
    image_from_records,
    image_records,
)
from protos import records_pb2 as r
from raftlog import Entry

GAP = 256 * 1024  # haMaxGapNotInSync's default (256K)


@dataclass(frozen=True)
class Case:
    """One example of the seed "Quorum Write和自动降级" (004_8bd4a6f296e41dd1.txt)."""

    id: str
    total: int
    in_sync: int
    min_in_sync: int
    auto: bool
    alive: int
    #: the slaves' acked offsets; the master is at 1_000_000
    slaves: tuple[int, ...]
    need: int
    status: str


M = 1_000_000
CASES = [
    Case(
        "2 replicas, inSyncReplicas=2: the message must be on master AND slave",
        2, 2, 1, False, 2, (M,), 2, PUT_OK,
    ),
    Case(
        "3 replicas, inSyncReplicas=2: master plus any one slave",
        3, 2, 1, False, 3, (M, M), 2, PUT_OK,
    ),
    Case(
        "3 replicas, inSyncReplicas=2, one slave down: still master plus one",
        3, 2, 1, False, 2, (M,), 2, PUT_OK,
    ),
    Case(
        "4 replicas, inSyncReplicas=3: master plus any two slaves",
        4, 3, 1, False, 4, (M, M, M), 3, PUT_OK,
    ),
    Case(
        "4 replicas, inSyncReplicas=3, two slaves down, auto off: not enough",
        4, 3, 1, False, 2, (M,), 3, IN_SYNC_REPLICAS_NOT_ENOUGH,
    ),
    Case(
        "4 replicas, inSyncReplicas=3, two slaves down, auto on, minInSyncReplicas=2: degrade to 2",
        4, 3, 2, True, 2, (M,), 2, PUT_OK,
    ),
    Case(
        "2 replicas total=2 inSync=2 min=1 auto on, normal: both replicate synchronously",
        2, 2, 1, True, 2, (M,), 2, PUT_OK,
    ),
    Case(
        "2 replicas total=2 inSync=2 min=1 auto on, slave offline: producer needs only the master",
        2, 2, 1, True, 1, (), 1, PUT_OK,
    ),
    Case(
        "2 replicas total=2 inSync=2 auto off, slave offline: IN_SYNC_REPLICAS_NOT_ENOUGH",
        2, 2, 1, False, 1, (), 2, IN_SYNC_REPLICAS_NOT_ENOUGH,
    ),
    Case(
        "2 replicas auto on, slave alive but lagging past haMaxGapNotInSync: degrade to master",
        2, 2, 1, True, 2, (M - GAP,), 1, PUT_OK,
    ),
    Case(
        "2 replicas auto off, slave lagging past haMaxGapNotInSync: not enough",
        2, 2, 1, False, 2, (M - GAP,), 2, IN_SYNC_REPLICAS_NOT_ENOUGH,
    ),
    Case(
        "2 replicas, slave lagging just under haMaxGapNotInSync: still in sync",
        2, 2, 1, False, 2, (M - GAP + 1,), 2, PUT_OK,
    ),
    Case(
        "3 replicas inSync=3 min=2 auto on, one slave lagging: degrade to 2",
        3, 3, 2, True, 3, (M, M - 10 * GAP), 2, PUT_OK,
    ),
    Case(
        "3 replicas inSync=3 min=2 auto on, both slaves down: min 2 cannot be met",
        3, 3, 2, True, 1, (), 2, IN_SYNC_REPLICAS_NOT_ENOUGH,
    ),
    Case(
        "compatibility: RocketMQ 5 defaults totalReplicas=inSyncReplicas=1 (asynchronous)",
        1, 1, 1, False, 1, (), 1, PUT_OK,
    ),
    Case(
        "compatibility: defaults with an old 2-replica group, slave down: still PUT_OK",
        1, 1, 1, False, 1, (), 1, PUT_OK,
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_need_ack_nums_follows_the_seed(case: Case) -> None:
    policy = QuorumPolicy(case.total, case.in_sync, case.min_in_sync, case.auto, GAP)
    slaves = in_sync_slave_nums(M, case.slaves, GAP)
    n = need_ack_nums(policy, case.alive, slaves)
    assert (n.need_ack_nums, n.status) == (case.need, case.status)
    assert n.in_sync_replicas == min(case.alive, slaves + 1)
    assert n.enough == (case.status == PUT_OK)


# ------------------------------------------------------------------ state machine driver
class Driver:
    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0

    def apply(self, **op: Any) -> Any:
        self.offset += 1
        value = r.ReplicaGroupOperation(**op).SerializeToString()
        entry = Entry(type="replica_group", key=b"g", value=value, timestamp_ms=1)
        _, result = self.sm.apply(self.offset, 1, [entry])
        self.sm.publish()
        return result

    def register(self, address: str, broker_id: int = 0) -> GroupResult:
        res: GroupResult = self.apply(
            register=r.ReplicaRegister(
                cluster_name="c", broker_name="g", address=address, broker_id=broker_id
            )
        )
        return res

    def alter(self, master: int, master_epoch: int, isr_epoch: int, isr: list[int]) -> Any:
        return self.apply(
            alter_sync_state_set=r.AlterSyncStateSet(
                broker_name="g",
                master_id=master,
                master_epoch=master_epoch,
                sync_state_set_epoch=isr_epoch,
                sync_state_set=isr,
            )
        )

    def live(self, alive: list[int] = [], dead: list[int] = [], **offsets: int) -> Any:  # noqa: B006
        states = [r.ReplicaState(broker_id=int(k[1:]), max_offset=v) for k, v in offsets.items()]
        return self.apply(
            liveness=r.ReplicaLiveness(broker_name="g", alive=alive, dead=dead, states=states)
        )

    def elect(self, broker_id: int = 0, unclean: bool = False, **offsets: int) -> GroupResult:
        states = [r.ReplicaState(broker_id=int(k[1:]), max_offset=v) for k, v in offsets.items()]
        res: GroupResult = self.apply(
            elect_master=r.ElectMaster(
                broker_name="g", broker_id=broker_id, unclean=unclean, states=states
            )
        )
        return res

    @property
    def group(self) -> ReplicaGroup:
        g = self.sm.image.replica_groups.get("g")
        assert g is not None
        return g


def three() -> Driver:
    """Replicas 1 (master), 2, 3, all alive and in sync."""
    d = Driver()
    for i in (1, 2, 3):
        assert d.register(f"h:{i}").broker_id == i
    d.alter(1, 1, 1, [1, 2, 3])
    assert d.group.sync_state_set == (1, 2, 3) and d.group.sync_state_set_epoch == 2
    return d


def test_register_assigns_ids_first_replica_is_master_and_reregister_keeps_the_id() -> None:
    d = Driver()
    first = d.register("h:1")
    assert (first.broker_id, first.group.master_id, first.group.master_epoch) == (1, 1, 1)
    assert first.group.sync_state_set == (1,) and first.group.sync_state_set_epoch == 1
    assert d.register("h:2").broker_id == 2
    version = d.group.version
    assert d.register("h:2").broker_id == 2  # same address: same id, nothing changes
    assert d.group.version == version
    assert d.register("h:9", broker_id=9).broker_id == 9
    assert d.register("h:10").broker_id == 10  # next id after the highest
    with pytest.raises(Rejected, match=r"CONTROLLER_BROKER_ID_INVALID 2014.*h:1"):
        d.register("h:11", broker_id=1)
    with pytest.raises(Rejected, match=r"registered in 'g' as broker_id 2, not 3"):
        d.register("h:2", broker_id=3)
    with pytest.raises(Rejected, match="cluster_name 'x' does not match"):
        d.apply(register=r.ReplicaRegister(cluster_name="x", broker_name="g", address="h:5"))
    for bad, field in [("", "address"), ("nohost", "host:port"), ("h:x", "host:port")]:
        with pytest.raises(Rejected, match=field) as e:
            d.register(bad)
        assert e.value.status == StatusCode.INVALID_ARGUMENT


def test_stale_master_epoch_cannot_alter_the_in_sync_set() -> None:
    d = three()
    d.live(dead=[1], m2=50, m3=40)  # master 1 dies: 2 (highest offset) is elected
    g = d.group
    assert (g.master_id, g.master_epoch, g.sync_state_set) == (2, 2, (2,))
    before = d.group
    with pytest.raises(Rejected) as e:  # the deposed master, with its old epochs
        d.alter(1, 1, 2, [1, 2, 3])
    assert e.value.status == StatusCode.FAILED_PRECONDITION
    assert "[CONTROLLER_FENCED_MASTER_EPOCH 2000]" in str(e.value)
    assert "master_epoch 1 is not the current master epoch 2" in str(e.value)
    with pytest.raises(Rejected, match="CONTROLLER_FENCED_MASTER_EPOCH"):  # even naming 2
        d.alter(2, 1, g.sync_state_set_epoch, [2, 3])
    assert d.group == before  # nothing changed


def test_stale_in_sync_set_epoch_cannot_alter_the_in_sync_set() -> None:
    d = three()
    epoch = d.group.sync_state_set_epoch
    d.alter(1, 1, epoch, [1, 2])  # the master shrinks the set: epoch + 1
    assert d.group.sync_state_set == (1, 2) and d.group.sync_state_set_epoch == epoch + 1
    with pytest.raises(Rejected) as e:  # a second alter built on the old set
        d.alter(1, 1, epoch, [1, 3])
    assert e.value.status == StatusCode.FAILED_PRECONDITION
    assert "[CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH 2001]" in str(e.value)
    assert d.group.sync_state_set == (1, 2)


def test_alter_rejects_a_wrong_master_unknown_dead_and_masterless_sets() -> None:
    d = three()
    e = d.group.sync_state_set_epoch
    with pytest.raises(Rejected, match="CONTROLLER_INVALID_MASTER 2002"):
        d.alter(2, 1, e, [1, 2])
    with pytest.raises(Rejected, match=r"CONTROLLER_INVALID_REPLICAS 2003.*broker_id 7"):
        d.alter(1, 1, e, [1, 7])
    with pytest.raises(Rejected, match="does not hold the master 1"):
        d.alter(1, 1, e, [2, 3])
    with pytest.raises(Rejected, match="already the in-sync set"):
        d.alter(1, 1, e, [1, 2, 3])
    d.live(dead=[3])
    with pytest.raises(Rejected, match=r"CONTROLLER_BROKER_NOT_ALIVE 2006.*broker_id 3"):
        d.alter(1, 1, e, [1, 3])
    with pytest.raises(Rejected, match="sync_state_set has duplicates"):
        d.alter(1, 1, e, [1, 1])
    with pytest.raises(Rejected, match="sync_state_set must not be empty"):
        d.alter(1, 1, e, [])


def test_election_prefers_the_alive_in_sync_replica_with_the_highest_offset() -> None:
    d = three()
    d.live(dead=[1])
    assert d.group.master_id == 2  # no offsets known: the lowest id breaks the tie
    d.live(alive=[1])
    d.alter(2, 2, d.group.sync_state_set_epoch, [1, 2, 3])
    res = d.elect()  # the master is alive: kept, not an error
    assert (res.changed, res.code, d.group.master_epoch) == (
        False,
        "CONTROLLER_MASTER_STILL_EXIST",
        2,
    )
    d.live(dead=[2], m1=10, m3=99)
    g = d.group
    assert (g.master_id, g.master_epoch, g.sync_state_set) == (3, 3, (3,))


def test_preferred_replica_and_unclean_election_only_when_allowed() -> None:
    d = three()
    epoch = d.group.sync_state_set_epoch
    d.alter(1, 1, epoch, [1, 2])  # 3 fell out of the in-sync set
    with pytest.raises(Rejected, match=r"broker_id 3 is not in the in-sync set \[1, 2\]") as e:
        d.elect(broker_id=3)
    assert "CONTROLLER_ELECT_MASTER_FAILED 2012" in str(e.value)
    assert "unclean=true" in str(e.value)
    res = d.elect(broker_id=2)  # preferred and in sync: elected
    assert res.changed and d.group.master_id == 2 and d.group.master_epoch == 2
    d.live(dead=[1, 2])  # every in-sync replica is gone: no master, set kept
    g = d.group
    assert (g.master_id, g.master_epoch, g.sync_state_set) == (0, 3, (2,))
    with pytest.raises(Rejected, match="no member of the in-sync set"):
        d.elect()
    res = d.elect(unclean=True)  # explicitly allowed: 3, outside the set
    g = d.group
    assert res.changed and (g.master_id, g.master_epoch, g.sync_state_set) == (3, 4, (3,))
    with pytest.raises(Rejected, match="CONTROLLER_BROKER_NEED_TO_BE_REGISTERED"):
        d.elect(broker_id=42)


def test_masterless_group_elects_when_an_in_sync_replica_comes_back() -> None:
    d = three()
    d.alter(1, 1, d.group.sync_state_set_epoch, [1])
    d.live(dead=[1])
    assert (d.group.master_id, d.group.master_epoch) == (0, 2)  # 2, 3 are not in sync
    d.live(alive=[1])
    assert (d.group.master_id, d.group.master_epoch) == (1, 3)


def test_group_restarted_whole_waits_for_a_quorum_of_in_sync_replicas_and_takes_the_longest() -> (
    None
):
    """Every replica died at once (a power cut): acknowledged messages are on 2 of the in-sync
    set {1, 2, 3} (in_sync_replicas 2), so the election waits for 2 reported offsets and takes
    the longer log, not the first one back; a replica that registered but did not report its
    offsets yet does not count."""
    d = three()
    policy = r.ReplicaGroupPolicy(total_replicas=3, in_sync_replicas=2, min_in_sync_replicas=1)
    d.apply(set_policy=r.SetReplicaGroupPolicy(broker_name="g", policy=policy))
    d.live(dead=[2, 3])
    d.live(dead=[1])
    assert d.group.master_id == 0 and d.group.sync_state_set == (1, 2, 3)
    assert d.register("h:2").broker_id == 2  # registers, no offsets yet: no election
    assert d.group.master_id == 0
    d.live(alive=[3], b3=3411)
    assert d.group.master_id == 0  # one of three in-sync replicas reported: wait
    with pytest.raises(Rejected, match="CONTROLLER_ELECT_MASTER_FAILED"):
        d.elect(b3=3411)
    d.elect(b3=3411, b2=129618)
    assert d.group.master_id == 2 and d.group.sync_state_set == (2,)


def test_liveness_of_unknown_groups_and_ids_is_skipped() -> None:
    d = Driver()
    assert d.live(alive=[1]) is None
    d.register("h:1")
    before = d.group
    d.live(alive=[5], dead=[6])
    assert d.group == before


def test_set_policy_validates_and_need_ack_follows_the_group() -> None:
    d = three()

    def policy(total: int, isr: int, mini: int, auto: bool = False, cluster: str = "") -> Any:
        return d.apply(
            set_policy=r.SetReplicaGroupPolicy(
                broker_name="g",
                cluster_name=cluster,
                policy=r.ReplicaGroupPolicy(
                    total_replicas=total,
                    in_sync_replicas=isr,
                    min_in_sync_replicas=mini,
                    enable_auto_in_sync_replicas=auto,
                ),
            )
        )

    policy(3, 3, 2, True)
    assert d.group.policy == QuorumPolicy(3, 3, 2, True, GAP)
    assert group_need_ack(d.group).need_ack_nums == 3
    d.alter(1, 1, d.group.sync_state_set_epoch, [1, 2])  # 3 lags: the master drops it
    n = group_need_ack(d.group)
    assert (n.need_ack_nums, n.in_sync_replicas, n.status) == (2, 2, PUT_OK)
    for args, field in [
        ((0, 1, 1), "total_replicas"),
        ((2, 3, 1), "in_sync_replicas"),
        ((3, 2, 3), "min_in_sync_replicas"),
        ((3, 2, 0), "min_in_sync_replicas"),
    ]:
        with pytest.raises(Rejected, match=f"policy.{field}") as e:
            policy(*args)
        assert e.value.status == StatusCode.INVALID_ARGUMENT
    with pytest.raises(Rejected, match="does not match"):
        policy(1, 1, 1, cluster="other")


def test_groups_round_trip_through_snapshot_records_and_replayed_effects() -> None:
    d = three()
    d.live(dead=[1], m2=5)
    image = d.sm.image
    rebuilt = image_from_records(image_records(image), image.revision, 1, REGISTRY)
    assert rebuilt.replica_groups == image.replica_groups
    assert diff_images(image, rebuilt) == []
    from_empty = diff_images(MetadataStateMachine.empty(REGISTRY).image, image)
    assert [e.type for e in from_empty] == ["replica_group"]


def test_a_replica_that_registers_again_has_no_offsets_until_its_next_heartbeat() -> None:
    """The leader's heartbeat memory feeds elections: offsets reported before a restart may
    be gone from the replica's disk, so a register forgets them."""
    live = ReplicaLiveness(None, None, 1.0, clock_ms=lambda: 5)  # type: ignore[arg-type]
    live.heartbeat("g", 1, 129618, 1)
    live.heartbeat("g", 2, 3411, 1)
    live.heartbeat("h", 1, 7, 1)
    assert [(s.broker_id, s.max_offset) for s in live.states("g")] == [(1, 129618), (2, 3411)]
    live.noticed("g", 1)  # registered again (restarted)
    live.noticed("g", 3)  # registered, never beat
    assert [(s.broker_id, s.max_offset) for s in live.states("g")] == [(2, 3411)]
    live.heartbeat("g", 1, 100, 1)
    assert [(s.broker_id, s.max_offset) for s in live.states("g")] == [(1, 100), (2, 3411)]
