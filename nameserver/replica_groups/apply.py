"""Replica groups: the apply rules of ``replica_group`` entries and their pure functions.

Over 500 lines: the controller's rules (register, elect, alter the in-sync set, heartbeats)
share their pure helpers; they read as one RocketMQ class does.

RocketMQ 5 controller semantics (``controller/.../ReplicasInfoManager.java``,
``DefaultElectPolicy.java``, ``SyncStateInfo.java``) on the replicated log (docs/semantics.md,
"Replica groups"): per broker name the replicas (broker id -> address), the alive set, the master
and its epoch, the in-sync set ("syncStateSet") and its epoch, and the quorum-write policy. Like
the rest of the state machine this module reads no clock and imports nothing from gRPC:
every rule runs inside apply against the image as the entry finds it, so two racing
requests cannot both win and every node decides alike. Liveness is the leader's
(:mod:`nameserver.replica_groups.liveness`): heartbeats stay in its memory, and only a change of
the alive set becomes an entry (``ReplicaLiveness``), carrying the replicas' reported
offsets so that an election it triggers is decided from the entry alone.

Operations (``records.ReplicaGroupOperation``):

* **register** -- assigns a broker id (``broker_id`` 0: the one this address already has,
  else ``next_broker_id``; ids start at 1 as in RocketMQ 5's controller mode) or keeps the
  one asked for, marks the replica alive. The first replica of a group that never had a
  master becomes master (RocketMQ's "first time for elect"): master epoch 1, in-sync set
  {it}, in-sync set epoch 1.
* **liveness** -- alive/dead changes. A dead master triggers an election among the other
  alive in-sync replicas; none: the group has no master (master epoch still +1, the in-sync
  set is kept, so its members can be elected when they come back, never an outsider). A
  group without a master elects as soon as an in-sync replica is alive (RocketMQ's
  ``scanNeedReelectBrokerSets``).
* **alter_sync_state_set** -- compare-and-set fenced by BOTH epochs: checked in the order
  master epoch, in-sync set epoch, master id, replicas exist, replicas alive, the new set
  holds the master, the set changes (RocketMQ checks the master id first; here a deposed
  master learns that its epoch is stale, the more precise reason). On success the in-sync
  set epoch is +1.
* **elect_master** -- :func:`elect`: the alive members of the in-sync set ranked by reported
  epoch, then max offset (both descending), then broker id; with ``unclean`` the alive
  replicas outside the set come next. A still valid old master is kept (not an error:
  ``CONTROLLER_MASTER_STILL_EXIST`` in the result). A new master bumps the master epoch and
  the in-sync set epoch, and the in-sync set becomes {new master}.
* **set_policy** -- validated: ``1 <= min_in_sync_replicas <= in_sync_replicas <=
  total_replicas``, so :func:`need_ack_nums` is always within ``[1, total_replicas]``.

Errors are :class:`~nameserver.errors.Rejected` subclasses (their gRPC status); where RocketMQ's controller
has a response code for the case, the message carries its name and number in brackets
(``metaledger: [CONTROLLER_FENCED_MASTER_EPOCH 2000] ...``), see :data:`CONTROLLER_CODES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from nameserver.checks import check_name, check_non_negative, invalid
from nameserver.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Rejected,
    ResourceExhausted,
)
from nameserver.replica_groups.records import QuorumPolicy, Replica, ReplicaGroup
from nameserver.state.image import MetadataDelta
from protos import records_pb2
from raftlog import Effect, Entry

#: A replica that registers without a timeout is not alive after this long without heartbeat.
DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000
MAX_ADDRESS_BYTES = 1024
#: Broker ids are positive; a group holds at most this many replicas.
MAX_REPLICAS = 64
#: need_ack_nums status names (RocketMQ's PutMessageStatus)
PUT_OK = "PUT_OK"
IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"

#: RocketMQ's controller response codes (``ResponseCode.CONTROLLER_*``) used here.
CONTROLLER_CODES: dict[str, int] = {
    "CONTROLLER_FENCED_MASTER_EPOCH": 2000,
    "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH": 2001,
    "CONTROLLER_INVALID_MASTER": 2002,
    "CONTROLLER_INVALID_REPLICAS": 2003,
    "CONTROLLER_BROKER_NOT_ALIVE": 2006,
    "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED": 2010,
    "CONTROLLER_MASTER_STILL_EXIST": 2011,
    "CONTROLLER_ELECT_MASTER_FAILED": 2012,
    "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED": 2013,
    "CONTROLLER_BROKER_ID_INVALID": 2014,
}


def controller_error(kind: type[Rejected], code: str, message: str) -> Rejected:
    return kind(f"metaledger: [{code} {CONTROLLER_CODES[code]}] {message}")


# ------------------------------------------------------------------ need_ack_nums
@dataclass(frozen=True, slots=True)
class NeedAck:
    need_ack_nums: int
    #: min(alive replicas, in-sync slaves + 1): how many replicas can ack now
    in_sync_replicas: int
    alive_replicas: int

    @property
    def enough(self) -> bool:
        return self.need_ack_nums <= self.in_sync_replicas

    @property
    def status(self) -> str:
        return PUT_OK if self.enough else IN_SYNC_REPLICAS_NOT_ENOUGH


def need_ack_nums(policy: QuorumPolicy, alive_replicas: int, in_sync_slaves: int) -> NeedAck:
    """RocketMQ 5's quorum write, exactly as its ``store/CommitLog.java`` computes it
    (``asyncPutMessage``, ``calcNeedAckNums``; RocketMQ's QuorumACK design doc)::

    inSyncReplicas = min(aliveReplicaNumInGroup, inSyncSlaveNums + 1)
    needAckNums = config.inSyncReplicas
    if enableAutoInSyncReplicas:
        needAckNums = max(min(needAckNums, inSyncReplicas), config.minInSyncReplicas)
    needAckNums > inSyncReplicas -> IN_SYNC_REPLICAS_NOT_ENOUGH
    """
    in_sync = min(alive_replicas, in_sync_slaves + 1)
    need = policy.in_sync_replicas
    if policy.enable_auto_in_sync_replicas:
        need = min(need, in_sync)
        need = max(need, policy.min_in_sync_replicas)
    return NeedAck(need, in_sync, alive_replicas)


def in_sync_slave_nums(master_offset: int, slave_offsets: Iterable[int], max_gap: int) -> int:
    """Slaves whose acked offset is less than ``max_gap`` (haMaxGapNotInSync) behind the
    master's (RocketMQ's ``HAService.isInSyncSlave``: ``masterPutWhere - slaveAckOffset <
    haMaxGapNotInSync``)."""
    return sum(1 for offset in slave_offsets if master_offset - offset < max_gap)


def group_need_ack(group: ReplicaGroup) -> NeedAck:
    """need_ack_nums as the nameserver sees the group: alive replicas, and as in-sync slaves
    the alive members of the in-sync set other than the master (the master shrinks the set
    through AlterSyncStateSet when a slave lags past haMaxGapNotInSync)."""
    alive = set(group.alive)
    registered = {r.broker_id for r in group.replicas}
    slaves = [i for i in group.sync_state_set if i in alive and i != group.master_id]
    return need_ack_nums(group.policy, len(alive & registered), len(slaves))


# ------------------------------------------------------------------ election
@dataclass(frozen=True, slots=True)
class ReportedState:
    max_offset: int = 0
    epoch: int = 0


def states_of(states: Iterable[records_pb2.ReplicaState]) -> dict[int, ReportedState]:
    return {s.broker_id: ReportedState(s.max_offset, s.epoch) for s in states}


def elect(
    group: ReplicaGroup, states: Mapping[int, ReportedState], preferred: int, unclean: bool
) -> int | None:
    """The master RocketMQ's ``DefaultElectPolicy`` would pick: first among the alive members
    of the in-sync set, then (``unclean`` only) among all alive replicas. In each tier a
    still alive old master is kept unless another replica is ``preferred``; a ``preferred``
    replica is taken if it is in the tier, else the tier yields nothing; otherwise the best
    by (reported epoch, max offset) descending, then the lowest broker id. None: no one.

    A quorum-write group (``in_sync_replicas`` >= 2) without a master (every in-sync replica
    was dead at once: a restart of the whole group) elects without ``preferred`` or
    ``unclean`` only among the alive in-sync replicas
    that reported their offsets, and only once :func:`restart_quorum` of them did: every
    acknowledged message is on ``need_ack_nums`` members of the in-sync set, so that many
    include one that holds them all, and the longest of them is elected, never a short log
    first back."""
    alive = set(group.alive)
    registered = {r.broker_id for r in group.replicas}
    tiers = [[i for i in group.sync_state_set if i in alive and i in registered]]
    if not group.master_id and not preferred and not unclean and restart_quorum(group):
        tiers[0] = [i for i in tiers[0] if i in states]
        if len(tiers[0]) < restart_quorum(group):
            return None
    if unclean:
        tiers.append([r.broker_id for r in group.replicas if r.broker_id in alive])
    old = group.master_id
    for tier in tiers:
        if not tier:
            continue
        if old and old in tier and preferred in (0, old):
            return old
        if preferred:
            if preferred in tier:
                return preferred
            continue

        def rank(broker_id: int) -> tuple[int, int, int]:
            s = states.get(broker_id, ReportedState())
            return (-s.epoch, -s.max_offset, broker_id)

        return min(tier, key=rank)
    return None


def restart_quorum(group: ReplicaGroup) -> int:
    """How many in-sync replicas a quorum-write group without a master waits for before it
    elects: any that many members of the in-sync set include one of the ``need_ack_nums``
    that acked each message (need_ack_nums: the policy's ``in_sync_replicas``, or with auto
    mode on its floor ``min_in_sync_replicas``). 0: not a quorum-write group
    (``in_sync_replicas`` 1), which elects the first in-sync replica back, as RocketMQ's
    controller does."""
    p = group.policy
    if p.in_sync_replicas < 2:
        return 0
    acks = p.min_in_sync_replicas if p.enable_auto_in_sync_replicas else p.in_sync_replicas
    return max(1, len(group.sync_state_set) - acks + 1)


def with_master(group: ReplicaGroup, master_id: int) -> ReplicaGroup:
    """A new master: master epoch +1, in-sync set {master}, in-sync set epoch +1."""
    return replace(
        group,
        master_id=master_id,
        master_epoch=group.master_epoch + 1,
        sync_state_set=(master_id,),
        sync_state_set_epoch=group.sync_state_set_epoch + 1,
    )


def _reelect_if_masterless(
    group: ReplicaGroup, states: Mapping[int, ReportedState]
) -> ReplicaGroup:
    if group.master_id or not group.master_epoch:
        return group
    new = elect(group, states, 0, False)
    return with_master(group, new) if new is not None else group


# ------------------------------------------------------------------ validation
def check_broker_id(field: str, value: int, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        need = ">= 0" if zero_ok else ">= 1"
        raise invalid(f"{field} must be {need} ({field}: {value})")


def check_register(r: records_pb2.ReplicaRegister) -> None:
    check_name("cluster_name", r.cluster_name, nul_ok=True)
    check_name("broker_name", r.broker_name, nul_ok=True)
    if not r.address:
        raise invalid("address must not be empty (the broker's host:port)")
    host, sep, port = r.address.rpartition(":")
    if len(r.address.encode()) > MAX_ADDRESS_BYTES or not sep or not host or not port.isdigit():
        raise invalid(f"address must be host:port (address: {r.address!r})")
    check_broker_id("broker_id", r.broker_id, zero_ok=True)
    if r.heartbeat_timeout_ms < 0:
        raise invalid(f"heartbeat_timeout_ms must be >= 0, 0 = default ({r.heartbeat_timeout_ms})")


def check_alter(a: records_pb2.AlterSyncStateSet) -> None:
    check_name("broker_name", a.broker_name, nul_ok=True)
    check_broker_id("master_id", a.master_id)
    check_non_negative("master_epoch", a.master_epoch)
    check_non_negative("sync_state_set_epoch", a.sync_state_set_epoch)
    if not a.sync_state_set:
        raise invalid("sync_state_set must not be empty (it holds the master at least)")
    for i in a.sync_state_set:
        check_broker_id("sync_state_set", i)
    if len(set(a.sync_state_set)) != len(a.sync_state_set):
        raise invalid(f"sync_state_set has duplicates: {list(a.sync_state_set)}")


def check_elect(e: records_pb2.ElectMaster) -> None:
    check_name("broker_name", e.broker_name, nul_ok=True)
    check_broker_id("broker_id", e.broker_id, zero_ok=True)


def policy_of(p: records_pb2.ReplicaGroupPolicy) -> QuorumPolicy:
    """The policy a request asks for (``ha_max_gap_not_in_sync`` 0: RocketMQ's 256 KiB)."""
    policy = QuorumPolicy.from_pb(p)
    if policy.ha_max_gap_not_in_sync:
        return policy
    return replace(policy, ha_max_gap_not_in_sync=QuorumPolicy().ha_max_gap_not_in_sync)


def check_policy(s: records_pb2.SetReplicaGroupPolicy) -> None:
    check_name("broker_name", s.broker_name, nul_ok=True)
    if s.cluster_name:
        check_name("cluster_name", s.cluster_name, nul_ok=True)
    p = s.policy
    if p.total_replicas < 1:
        raise invalid(f"policy.total_replicas must be >= 1 ({p.total_replicas})")
    if not 1 <= p.in_sync_replicas <= p.total_replicas:
        raise invalid(
            f"policy.in_sync_replicas must be in [1, total_replicas={p.total_replicas}] "
            f"({p.in_sync_replicas})"
        )
    if not 1 <= p.min_in_sync_replicas <= p.in_sync_replicas:
        raise invalid(
            f"policy.min_in_sync_replicas must be in [1, in_sync_replicas={p.in_sync_replicas}]"
            f" ({p.min_in_sync_replicas})"
        )
    if p.ha_max_gap_not_in_sync < 0:
        raise invalid(
            f"policy.ha_max_gap_not_in_sync must be >= 0, 0 = 262144 ({p.ha_max_gap_not_in_sync})"
        )


# ------------------------------------------------------------------ apply
@dataclass(frozen=True, slots=True)
class GroupResult:
    """The result of a ``replica_group`` entry: the group after it, the broker id a
    register got, and whether an election changed the master (``code`` says why not)."""

    group: ReplicaGroup
    broker_id: int = 0
    changed: bool = True
    code: str = ""


def _require(delta: MetadataDelta, broker_name: str, code: str) -> ReplicaGroup:
    group = delta.replica_groups.get(broker_name)
    if group is None:
        raise controller_error(NotFound, code, f"replica group {broker_name!r} is not registered")
    return group


def _store(
    delta: MetadataDelta,
    old: ReplicaGroup | None,
    new: ReplicaGroup,
    rev: int,
    effects: list[Effect],
) -> ReplicaGroup:
    if old == new:
        return new
    new = replace(
        new,
        create_revision=old.create_revision if old is not None else rev,
        mod_revision=rev,
        version=(old.version if old is not None else 0) + 1,
    )
    delta.replica_groups.put(new)
    effects.append(Effect("replica_group", new.broker_name.encode(), new.to_record()))
    return new


def apply_replica_group_entry(
    delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]
) -> GroupResult | None:
    """One ``replica_group`` entry (the registry's rule)."""
    op = records_pb2.ReplicaGroupOperation.FromString(e.value)
    return apply_replica_group(delta, op, rev, effects)


def apply_replica_group(
    delta: MetadataDelta, op: records_pb2.ReplicaGroupOperation, rev: int, effects: list[Effect]
) -> GroupResult | None:
    """One ``replica_group`` entry."""
    which = op.WhichOneof("op")
    if which == "register":
        return register(delta, op.register, rev, effects)
    if which == "liveness":
        return liveness(delta, op.liveness, rev, effects)
    if which == "alter_sync_state_set":
        return alter_sync_state_set(delta, op.alter_sync_state_set, rev, effects)
    if which == "elect_master":
        return elect_master(delta, op.elect_master, rev, effects)
    if which == "set_policy":
        return set_policy(delta, op.set_policy, rev, effects)
    raise invalid("replica_group entry carries no operation")


def register(
    delta: MetadataDelta, r: records_pb2.ReplicaRegister, rev: int, effects: list[Effect]
) -> GroupResult:
    check_register(r)
    old = delta.replica_groups.get(r.broker_name)
    group = old or ReplicaGroup(r.broker_name, r.cluster_name)
    if group.cluster_name and group.cluster_name != r.cluster_name:
        raise invalid(
            f"cluster_name {r.cluster_name!r} does not match replica group "
            f"{r.broker_name!r} of cluster {group.cluster_name!r}"
        )
    by_address = next((x for x in group.replicas if x.address == r.address), None)
    broker_id = r.broker_id or (by_address.broker_id if by_address else group.next_broker_id)
    existing = group.replica(broker_id)
    if existing is not None and existing.address != r.address:
        raise controller_error(
            FailedPrecondition,
            "CONTROLLER_BROKER_ID_INVALID",
            f"broker_id {broker_id} of {r.broker_name!r} is registered with address "
            f"{existing.address!r}, not {r.address!r}",
        )
    if by_address is not None and by_address.broker_id != broker_id:
        raise controller_error(
            FailedPrecondition,
            "CONTROLLER_BROKER_ID_INVALID",
            f"address {r.address!r} is registered in {r.broker_name!r} as broker_id "
            f"{by_address.broker_id}, not {broker_id}",
        )
    if existing is None and len(group.replicas) >= MAX_REPLICAS:
        raise ResourceExhausted(
            f"metaledger: replica group {r.broker_name!r} already has {MAX_REPLICAS} replicas",
        )
    timeout = r.heartbeat_timeout_ms or DEFAULT_HEARTBEAT_TIMEOUT_MS
    replicas = {x.broker_id: x for x in group.replicas}
    if existing is None or existing.heartbeat_timeout_ms != timeout:
        replicas[broker_id] = Replica(
            broker_id, r.address, timeout, existing.registered_revision if existing else rev
        )
    new = replace(
        group,
        cluster_name=r.cluster_name,
        replicas=tuple(replicas[i] for i in sorted(replicas)),
        alive=tuple(sorted({*group.alive, broker_id})),
        next_broker_id=max(group.next_broker_id, broker_id + 1),
    )
    if not new.master_epoch:  # never had a master: the first replica is it
        new = with_master(new, broker_id)
    new = _reelect_if_masterless(new, {})
    return GroupResult(_store(delta, old, new, rev, effects), broker_id)


def liveness(
    delta: MetadataDelta, op: records_pb2.ReplicaLiveness, rev: int, effects: list[Effect]
) -> GroupResult | None:
    """Alive-set changes proposed by the leader; ids that are not (or no longer) registered
    are skipped: the proposal may be older than a change it did not see."""
    old = delta.replica_groups.get(op.broker_name)
    if old is None:
        return None
    registered = {r.broker_id for r in old.replicas}
    alive = set(old.alive) | (set(op.alive) & registered)
    alive -= set(op.dead)
    new = replace(old, alive=tuple(sorted(alive)))
    states = states_of(op.states)
    if new.master_id and new.master_id not in alive:  # the master died: elect among the rest
        chosen = elect(new, states, 0, False)
        if chosen is not None:
            new = with_master(new, chosen)
        else:
            new = replace(new, master_id=0, master_epoch=new.master_epoch + 1)
    new = _reelect_if_masterless(new, states)
    return GroupResult(_store(delta, old, new, rev, effects))


def alter_sync_state_set(
    delta: MetadataDelta, a: records_pb2.AlterSyncStateSet, rev: int, effects: list[Effect]
) -> GroupResult:
    check_alter(a)
    group = _require(delta, a.broker_name, "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED")
    name = repr(a.broker_name)
    if a.master_epoch != group.master_epoch:
        raise controller_error(
            FailedPrecondition,
            "CONTROLLER_FENCED_MASTER_EPOCH",
            f"master_epoch {a.master_epoch} is not the current master epoch "
            f"{group.master_epoch} of {name}",
        )
    if a.sync_state_set_epoch != group.sync_state_set_epoch:
        raise controller_error(
            FailedPrecondition,
            "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH",
            f"sync_state_set_epoch {a.sync_state_set_epoch} is not the current in-sync set "
            f"epoch {group.sync_state_set_epoch} of {name}",
        )
    if a.master_id != group.master_id:
        raise controller_error(
            FailedPrecondition,
            "CONTROLLER_INVALID_MASTER",
            f"master_id {a.master_id} is not the master of {name} (master: "
            f"{group.master_id or 'none'})",
        )
    new_set = tuple(sorted(a.sync_state_set))
    for i in new_set:
        if group.replica(i) is None:
            raise controller_error(
                InvalidArgument,
                "CONTROLLER_INVALID_REPLICAS",
                f"sync_state_set: broker_id {i} is not a replica of {name}",
            )
        if i not in group.alive:
            raise controller_error(
                FailedPrecondition,
                "CONTROLLER_BROKER_NOT_ALIVE",
                f"sync_state_set: broker_id {i} of {name} is not alive",
            )
    if group.master_id not in new_set:
        raise controller_error(
            InvalidArgument,
            "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED",
            f"sync_state_set {list(new_set)} does not hold the master {group.master_id}",
        )
    if new_set == group.sync_state_set:
        raise controller_error(
            FailedPrecondition,
            "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED",
            f"sync_state_set {list(new_set)} is already the in-sync set of {name}",
        )
    new = replace(
        group, sync_state_set=new_set, sync_state_set_epoch=group.sync_state_set_epoch + 1
    )
    return GroupResult(_store(delta, group, new, rev, effects))


def elect_master(
    delta: MetadataDelta, e: records_pb2.ElectMaster, rev: int, effects: list[Effect]
) -> GroupResult:
    check_elect(e)
    group = _require(delta, e.broker_name, "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED")
    name = repr(e.broker_name)
    if e.broker_id and group.replica(e.broker_id) is None:
        raise controller_error(
            NotFound,
            "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED",
            f"broker_id {e.broker_id} is not a replica of {name}",
        )
    chosen = elect(group, states_of(e.states), e.broker_id, e.unclean)
    if chosen is None:
        alive_isr = [i for i in group.sync_state_set if i in group.alive]
        if e.broker_id and e.broker_id not in group.alive:
            why = f"broker_id {e.broker_id} is not alive"
        elif e.broker_id:
            why = f"broker_id {e.broker_id} is not in the in-sync set {list(group.sync_state_set)}"
        elif group.alive and not alive_isr:
            why = (
                f"no member of the in-sync set {list(group.sync_state_set)} is alive "
                f"(alive: {list(group.alive)})"
            )
        else:
            why = "no replica is alive"
        hint = "" if e.unclean or not group.alive else "; unclean=true allows replicas outside it"
        raise controller_error(
            FailedPrecondition,
            "CONTROLLER_ELECT_MASTER_FAILED",
            f"cannot elect a master of {name}: {why}{hint}",
        )
    if chosen == group.master_id:
        return GroupResult(group, changed=False, code="CONTROLLER_MASTER_STILL_EXIST")
    return GroupResult(_store(delta, group, with_master(group, chosen), rev, effects))


def set_policy(
    delta: MetadataDelta, s: records_pb2.SetReplicaGroupPolicy, rev: int, effects: list[Effect]
) -> GroupResult:
    check_policy(s)
    old = delta.replica_groups.get(s.broker_name)
    if old is None and not s.cluster_name:
        raise invalid(f"cluster_name is required to create replica group {s.broker_name!r}")
    group = old or ReplicaGroup(s.broker_name, s.cluster_name)
    if s.cluster_name and group.cluster_name != s.cluster_name:
        raise invalid(
            f"cluster_name {s.cluster_name!r} does not match replica group "
            f"{s.broker_name!r} of cluster {group.cluster_name!r}"
        )
    new = replace(group, policy=policy_of(s.policy))
    return GroupResult(_store(delta, old, new, rev, effects))
