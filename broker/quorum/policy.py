"""Quorum-write policy: how many replicas must hold a message before a send answers PUT_OK.

Pure functions and one table (:data:`RULES`), no I/O and no clock, so the table tests drive
them with plain numbers. :mod:`broker.quorum.replication` feeds them the HA master's slave
acks and the replica group's state from metaledger.

Which behaviour applies when (the broker's role is local config; the policy --
totalReplicas, inSyncReplicas, minInSyncReplicas, enableAutoInSyncReplicas,
haMaxGapNotInSync -- is the replica group's, kept in metaledger):

============  ===============  =========  =====================================================
role          inSyncReplicas   rule       behaviour
============  ===============  =========  =====================================================
ASYNC_MASTER  any              ASYNC      PUT_OK after the master's own write (RocketMQ 4's
                                          async replication)
SYNC_MASTER   <= 1             ONE_SLAVE  RocketMQ 4.x sync replication (4.9's
                                          ``CommitLog.java:888-905``, ``HAService.java:80-99``;
                                          one slave is enough, not all: it waits for the best
                                          ack, ``push2SlaveMaxOffset``): wait until one slave acked
                                          the message's end; SLAVE_NOT_AVAILABLE at once when
                                          no slave is connected or the best one lags
                                          >= haSlaveFallbehindMax (256 MiB); FLUSH_SLAVE_TIMEOUT
                                          after slaveTimeout (3 s). The message is stored either
                                          way (both statuses mean "stored on the master").
SYNC_MASTER   >= 2             QUORUM     RocketMQ 5 quorum write (5's ``CommitLog.java:995-1014,
                                          1285-1292``; its QuorumACK design doc): before the
                                          append inSync = min(alive replicas, 1 + slaves less
                                          than haMaxGapNotInSync behind), needAckNums =
                                          calcNeedAckNums(inSync) (auto mode: clamp to
                                          [minInSyncReplicas, inSyncReplicas]);
                                          needAckNums > inSync -> IN_SYNC_REPLICAS_NOT_ENOUGH,
                                          not stored (SYSTEM_ERROR 1 on the wire: RocketMQ 5
                                          has no response code for it);
                                          else wait for needAckNums - 1 slave acks,
                                          FLUSH_SLAVE_TIMEOUT after slaveTimeout.
============  ===============  =========  =====================================================

Where this differs from RocketMQ, and why:

* RocketMQ 5's SYNC_MASTER with the default inSyncReplicas 1 does not wait at all
  (``handleHA`` skips the wait for needAckNums <= 1): a two-replica sync group upgraded from
  4.x silently becomes async unless totalReplicas and inSyncReplicas are set to 2 (the
  "compatibility" note of RocketMQ's QuorumACK design doc). Here SYNC_MASTER keeps RocketMQ
  4.x's sync replication (ONE_SLAVE), what such a user wants (docs/broker.md, "Which answer
  a send gets"); a group asks for a quorum by setting inSyncReplicas >= 2.
* Degradation (enableAutoInSyncReplicas, down to minInSyncReplicas) is RocketMQ's
  slaveActingMaster mode: the formula above. The slaves it counts, and whose acks count, are only
  the in-sync set's members (SyncStateSet, kept in metaledger by :mod:`broker.quorum.isr`):
  metaledger elects the next master from that set, so an ack from any other slave would not make a
  message survive the master (:mod:`broker.quorum.replication`). ONE_SLAVE counts the same slaves.
* A message with ``WAIT`` = false answers after the master's own write in every rule
  (RocketMQ 5's ``CommitLog.needHandleHA``).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.replication import PutStatus
from nameserver.client import GroupPolicy

__all__ = [
    "RULES",
    "Behaviour",
    "BrokerRole",
    "QuorumSettings",
    "Rule",
    "SlaveAck",
    "WaitFor",
    "admit",
    "after_append",
    "behaviour_for",
    "calc_need_ack_nums",
    "confirm_offset",
    "in_sync_replicas",
    "in_sync_slave_nums",
    "slave_ok",
]

#: RocketMQ 4.x ``haSlaveFallbehindMax`` (4.9's ``MessageStoreConfig``): 256 MiB
HA_SLAVE_FALLBEHIND_MAX = 256 * 1024 * 1024
#: RocketMQ ``slaveTimeout`` (4.9.3+, and 5.x): 3 s
SLAVE_TIMEOUT_S = 3.0


class BrokerRole(enum.Enum):
    """A master replica's ``brokerRole`` (a slave answers no sends)."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"


class Rule(enum.Enum):
    ASYNC = "async"
    ONE_SLAVE = "one slave (RocketMQ 4.x)"
    QUORUM = "quorum (RocketMQ 5)"


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What a rule does, as flags the two decision functions read."""

    rule: Rule
    #: needAckNums from RocketMQ 5's formula before the append (else a fixed count)
    quorum_admission: bool
    #: replicas that must hold a message when not decided by the formula (incl. the master)
    fixed_need: int
    #: SLAVE_NOT_AVAILABLE at once after the append when no slave is close enough (4.x)
    slave_check: bool
    #: consumers see only up to the confirm offset (5.x, ``DefaultMessageStore.getMessage``);
    #: 4.x/async expose all
    confirmed_reads: bool
    source: str


#: The table: (role, group asks for a quorum: inSyncReplicas >= 2) -> behaviour.
RULES: Mapping[tuple[BrokerRole, bool], Behaviour] = {
    (BrokerRole.ASYNC_MASTER, False): Behaviour(
        Rule.ASYNC, False, 1, False, False, "RocketMQ 4: async replication"
    ),
    (BrokerRole.ASYNC_MASTER, True): Behaviour(
        Rule.ASYNC, False, 1, False, False, "RocketMQ 5 needHandleHA: ASYNC_MASTER never waits"
    ),
    (BrokerRole.SYNC_MASTER, False): Behaviour(
        Rule.ONE_SLAVE, False, 2, True, False, "RocketMQ 4.9 CommitLog.java:888-905"
    ),
    (BrokerRole.SYNC_MASTER, True): Behaviour(
        Rule.QUORUM, True, 0, False, True, "RocketMQ 5 CommitLog.java:995-1014, 1285-1292"
    ),
}


def behaviour_for(role: BrokerRole, policy: GroupPolicy) -> Behaviour:
    return RULES[(role, policy.in_sync_replicas >= 2)]


@dataclass(frozen=True, slots=True)
class QuorumSettings:
    """The broker's own replication settings (the quorum policy is the group's)."""

    role: BrokerRole = BrokerRole.SYNC_MASTER
    slave_timeout_s: float = SLAVE_TIMEOUT_S
    ha_slave_fallbehind_max_bytes: int = HA_SLAVE_FALLBEHIND_MAX

    def validate(self) -> None:
        if not self.slave_timeout_s > 0:
            raise ValueError(f"slave_timeout_s must be > 0 ({self.slave_timeout_s})")
        if self.ha_slave_fallbehind_max_bytes < 1:
            raise ValueError(
                f"ha_slave_fallbehind_max_bytes must be >= 1 ({self.ha_slave_fallbehind_max_bytes})"
            )


class Acked(Protocol):
    """A slave as the policy reads it: :class:`SlaveAck`, or the HA master's live state."""

    @property
    def broker_id(self) -> int: ...
    @property
    def acked(self) -> int: ...
    @property
    def connected(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class SlaveAck:
    """One slave as the master's HA service sees it: the commit-log offset it acked."""

    broker_id: int
    acked: int
    connected: bool = True


@dataclass(frozen=True, slots=True)
class WaitFor:
    """Wait until ``count`` of the counted slaves acked the message's end, at most
    ``timeout_s``; then PUT_OK, else FLUSH_SLAVE_TIMEOUT."""

    count: int
    timeout_s: float


# ------------------------------------------------------------------ RocketMQ 5 quorum write
def in_sync_slave_nums(master_offset: int, slaves: Iterable[Acked], max_gap: int) -> int:
    """Connected slaves less than ``max_gap`` (haMaxGapNotInSync) behind the master
    (RocketMQ 5's ``DefaultHAService.inSyncSlaveNums``:
    ``masterPutWhere - slaveAckOffset < haMaxGapNotInSync``)."""
    n = 0
    for s in slaves:  # a loop, not sum(generator): this runs for every send
        if s.connected and master_offset - s.acked < max_gap:
            n += 1
    return n


def in_sync_replicas(alive_replicas: int, in_sync_slaves: int) -> int:
    """RocketMQ 5's ``min(aliveReplicaNumInGroup, inSyncSlaveNums + 1)`` (``CommitLog``)."""
    return min(alive_replicas, in_sync_slaves + 1)


def calc_need_ack_nums(policy: GroupPolicy, in_sync: int) -> int:
    """RocketMQ 5's ``CommitLog.calcNeedAckNums``: inSyncReplicas, or in auto mode
    ``max(min(inSyncReplicas, in_sync), minInSyncReplicas)``."""
    need = policy.in_sync_replicas
    if policy.enable_auto_in_sync_replicas:
        need = min(need, in_sync)
        need = max(need, policy.min_in_sync_replicas)
    return need


def admit(
    behaviour: Behaviour,
    policy: GroupPolicy,
    alive_replicas: int,
    master_offset: int,
    slaves: Iterable[Acked],
) -> int | PutStatus:
    """Before the append, at commit-log end ``master_offset``: the replicas that must hold
    the message (incl. the master), or IN_SYNC_REPLICAS_NOT_ENOUGH (the message is
    not stored).
    ``slaves`` are the counted slaves (the in-sync set's, without the master)."""
    if not behaviour.quorum_admission:
        return behaviour.fixed_need
    in_sync = in_sync_replicas(
        alive_replicas,
        in_sync_slave_nums(master_offset, slaves, policy.ha_max_gap_not_in_sync),
    )
    need = calc_need_ack_nums(policy, in_sync)
    if need > in_sync:
        return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    return need


# ------------------------------------------------------------------ RocketMQ 4.x sync replication
def slave_ok(master_offset: int, slaves: Iterable[Acked], fallbehind_max: int) -> bool:
    """RocketMQ 4.x ``HAService.isSlaveOK`` (4.9's ``HAService.java:80-87``): a slave is
    connected and the best ack is less than ``fallbehind_max`` behind ``master_offset``."""
    acks = [s.acked for s in slaves if s.connected]
    return bool(acks) and master_offset - max(acks) < fallbehind_max


# ------------------------------------------------------------------ after the append
def after_append(
    behaviour: Behaviour,
    settings: QuorumSettings,
    need_acks: int,
    next_offset: int,
    slaves: Iterable[Acked],
    wait_store_ok: bool,
) -> PutStatus | WaitFor:
    """After the append, the message ending at ``next_offset``: an answer now, or what to
    wait for. ``need_acks`` is what :func:`admit` gave."""
    if not wait_store_ok or need_acks <= 1:
        return PutStatus.PUT_OK
    if behaviour.slave_check and not slave_ok(
        next_offset, slaves, settings.ha_slave_fallbehind_max_bytes
    ):
        return PutStatus.SLAVE_NOT_AVAILABLE
    return _wait_for(need_acks - 1, settings.slave_timeout_s)


@functools.lru_cache(maxsize=64)
def _wait_for(count: int, timeout_s: float) -> WaitFor:
    """One (immutable) WaitFor per plan, not one per send."""
    return WaitFor(count, timeout_s)


#: What a wait that ran out answers (RocketMQ 4.x and 5: the replica wait's deadline).
ON_TIMEOUT = PutStatus.FLUSH_SLAVE_TIMEOUT


# ------------------------------------------------------------------ visibility
def confirm_offset(master_end: int, members: Iterable[Acked | None], previous: int) -> int:
    """The commit-log offset every in-sync set member holds (RocketMQ 5's
    ``AutoSwitchHAService.computeConfirmOffset``): the least ack of
    the members (``None``: a member without an HA connection to this master), the master's
    end without members; unchanged (``previous``) while a member is disconnected; never
    lower than ``previous`` (consumers never see a message vanish)."""
    acks: list[int] = []
    for m in members:
        if m is None or not m.connected:
            return previous
        acks.append(m.acked)
    return max(previous, min([master_end, *acks]))
