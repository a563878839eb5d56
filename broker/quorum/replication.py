"""QuorumReplication: the send path's :class:`~broker.replication.Replication` on a replica group.

It joins three things: the decision functions of :mod:`broker.quorum.policy` (which rule,
how many acks), the replica group as metaledger last answered (:class:`GroupView`, kept by
:class:`broker.quorum.role.RoleManager`: role, fencing, in-sync set, policy, alive replicas)
and the HA master's slave acks (``broker/ha``, through :class:`HAMasterLike`).

**Acks count only from in-sync set members.** When the master dies, metaledger elects the
next one from the alive members of the SyncStateSet only (``elect`` in
nameserver/replica_groups/apply.py, RocketMQ's ``DefaultElectPolicy``). A message held by
the master and by a slave outside that set can be lost in a failover: the slave is never
elected, and the new master truncates everyone to its own log. So RocketMQ 5's quorum is
counted over set members: in-sync slaves (``inSyncSlaveNums``) and acks alike, and so is
RocketMQ 4.x's "one slave" rule. A slave that caught up joins the set through
:mod:`broker.quorum.isr` first, then its acks count.

**Nothing fenced gets PUT_OK.** :meth:`QuorumReplication.writable` is the role manager's
answer (a slave, or a master fenced by a higher epoch or by missing heartbeats) or "no HA
master running". A send admitted before a fence and answered after it gets
FLUSH_SLAVE_TIMEOUT (stored on this replica, replication not confirmed) instead of PUT_OK,
also when the master epoch changed in between (the admission remembers its epoch).

**Reads.** Under the QUORUM rule consumers see messages up to the confirm offset
(RocketMQ 5's ``DefaultMessageStore.getMessage``, ``AutoSwitchHAService.computeConfirmOffset``):
every in-sync set member holds them, so a failover never takes back a message a consumer saw. ASYNC
and ONE_SLAVE expose everything (4.x). A slave under the QUORUM rule serves up to the confirm
offset its master last sent it over HA (:meth:`QuorumReplication.follow`: the HA client, which
keeps ``min(frame's confirm offset, own end)``), as RocketMQ 5's controller-mode slave does
(``CommitLog.getConfirmOffset`` answers the master's confirm offset there, and
``DefaultMessageStore.getMessage`` reads up to it, slave reads included): the tail past it may be
truncated by the next failover. A replica that is not master and follows no master yet (just
started, between roles) serves nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.quorum import policy
from broker.quorum.group import GroupView
from broker.quorum.policy import Acked, Behaviour, QuorumSettings, SlaveAck
from broker.replication import Admission, PutStatus

__all__ = [
    "ConfirmSource",
    "HAMasterLike",
    "QuorumAdmission",
    "QuorumReplication",
    "RoleSource",
    "SlaveStateLike",
]

#: A send admitted under a master that is no longer one (fenced, demoted, a new epoch).
DEPOSED = PutStatus.FLUSH_SLAVE_TIMEOUT


class SlaveStateLike(Protocol):
    """``broker.ha.SlaveState`` as read here."""

    @property
    def broker_id(self) -> int: ...
    @property
    def acked(self) -> int: ...
    @property
    def connected(self) -> bool: ...
    @property
    def caught_up_at(self) -> float: ...  # time.monotonic() of the last catch-up


class HAMasterLike(Protocol):
    """``broker.ha.HAMaster`` as used here (/tmp/broker-plan.md)."""

    def slaves(self) -> Mapping[int, SlaveStateLike]: ...

    def slave_states(self) -> Mapping[int, SlaveStateLike]:
        """The same states, live and not copied (read at once, per message)."""
        ...

    async def wait_for(
        self, offset: int, count: int, timeout_s: float, among: Collection[int] | None = None
    ) -> bool:
        """True once ``count`` slaves (of ``among``) acked >= ``offset``; False at the deadline."""
        ...


class ConfirmSource(Protocol):
    """``broker.ha.HAClient`` as read here: the confirm offset its master last sent, never
    past its own log end."""

    @property
    def confirm_offset(self) -> int: ...


class RoleSource(Protocol):
    """What :class:`broker.quorum.role.RoleManager` tells the send path."""

    @property
    def view(self) -> GroupView | None: ...

    def writable(self) -> str | None: ...


@dataclass(frozen=True)
class QuorumAdmission(Admission):
    """An admission and the master epoch and rule it was given under."""

    master_epoch: int
    behaviour: Behaviour


def counted_slaves(
    view: GroupView, slaves: Mapping[int, SlaveStateLike], members: Iterable[int] | None = None
) -> list[Acked]:
    """The slaves whose acks count: the in-sync set's members other than the master, as the
    HA master sees them (its live states, read at once; a member without a connection to
    it: not connected). ``members``: ``sorted(view.in_sync_slaves)`` when the caller has it."""
    out: list[Acked] = []
    for broker_id in sorted(view.in_sync_slaves) if members is None else members:
        s = slaves.get(broker_id)
        out.append(SlaveAck(broker_id, -1, connected=False) if s is None else s)
    return out


class QuorumReplication:
    """The master replica's Replication. ``log_end`` gives the commit log's end offset
    (``store.log.end_offset``); :meth:`attach` an HA master when this replica becomes master,
    :meth:`detach` it when it stops being one."""

    def __init__(
        self, roles: RoleSource, settings: QuorumSettings, log_end: Callable[[], int]
    ) -> None:
        settings.validate()
        self.roles = roles
        self.settings = settings
        self.log_end = log_end
        self.ha: HAMasterLike | None = None
        #: a slave's HA client (:meth:`follow`); None on a master or between roles
        self.master_confirm: ConfirmSource | None = None
        self._confirm = 0
        # what the send path derives from one group view, derived once per view
        self._derived_from: GroupView | None = None
        self._derived: tuple[Behaviour, frozenset[int], tuple[int, ...]] | None = None
        self._admission: QuorumAdmission | None = None

    def attach(self, ha: HAMasterLike, confirmed: int) -> None:
        """Master from now on, with ``ha``. ``confirmed``: the confirm offset to start from,
        the log end at promotion (the new master's log is the group's truth from there on;
        slaves truncate to it), never lower than what consumers may already have seen."""
        self.ha = ha
        self._confirm = confirmed

    def detach(self) -> None:
        self.ha = None

    def follow(self, source: ConfirmSource) -> None:
        """A slave from now on: consumers read up to ``source``'s confirm offset."""
        self.master_confirm = source

    def unfollow(self) -> None:
        self.master_confirm = None

    # ------------------------------------------------------------ Replication
    def writable(self) -> str | None:
        why = self.roles.writable()
        if why is not None:
            return why
        if self.ha is None or self.roles.view is None:
            return "this replica's HA master is not running"
        return None

    def behaviour(self, view: GroupView) -> Behaviour:
        return policy.behaviour_for(self.settings.role, view.policy)

    def _derive(self, view: GroupView) -> tuple[Behaviour, frozenset[int], tuple[int, ...]]:
        """The rule, the in-sync slaves and them sorted, for ``view`` (a new view object
        for every change of the group, so they are computed once per view)."""
        if self._derived is None or self._derived_from is not view:
            members = view.in_sync_slaves
            self._derived = (self.behaviour(view), members, tuple(sorted(members)))
            self._derived_from = view
        return self._derived

    def admit(self, end_offset: int) -> Admission | PutStatus:
        view, ha = self.roles.view, self.ha
        if self.writable() is not None or view is None or ha is None:
            return PutStatus.SERVICE_NOT_AVAILABLE
        b, _, members = self._derive(view)
        if not b.quorum_admission:
            need: int | PutStatus = b.fixed_need  # policy.admit's answer, without the slaves
        else:
            counted = counted_slaves(view, ha.slave_states(), members)
            need = policy.admit(b, view.policy, view.alive_replicas, end_offset, counted)
        if isinstance(need, PutStatus):
            return need
        last = self._admission
        if (
            last is None
            or last.need_acks != need
            or last.master_epoch != view.master_epoch
            or last.behaviour is not b
        ):  # immutable: the sends admitted alike share one
            last = self._admission = QuorumAdmission(need, view.master_epoch, b)
        return last

    async def wait(self, next_offset: int, admission: Admission, wait_store_ok: bool) -> PutStatus:
        view, ha = self.roles.view, self.ha
        if view is None or ha is None:
            return DEPOSED
        derived, among, members = self._derive(view)
        if isinstance(admission, QuorumAdmission):
            b, epoch = admission.behaviour, admission.master_epoch
        else:
            b, epoch = derived, view.master_epoch
        # only the 4.x slave check reads the slaves after the append
        counted = counted_slaves(view, ha.slave_states(), members) if b.slave_check else []
        plan = policy.after_append(
            b, self.settings, admission.need_acks, next_offset, counted, wait_store_ok
        )
        if isinstance(plan, PutStatus):
            status = plan
        else:
            ok = await ha.wait_for(next_offset, plan.count, plan.timeout_s, among)
            status = PutStatus.PUT_OK if ok else policy.ON_TIMEOUT
        if status is PutStatus.PUT_OK and self._deposed(epoch, ha):
            return DEPOSED
        return status

    def _deposed(self, epoch: int, ha: HAMasterLike) -> bool:
        view = self.roles.view
        return (
            self.writable() is not None
            or self.ha is not ha
            or view is None
            or view.master_epoch != epoch
        )

    def readable_limit(self) -> int | None:
        view = self.roles.view
        if self.ha is not None:  # a master
            if view is None or not self.behaviour(view).confirmed_reads:
                return None
            return self.confirm_offset()
        if view is not None and not self.behaviour(view).confirmed_reads:
            return None  # 4.x and async rules: a slave exposes what it holds, as its master
        source = self.master_confirm
        if source is None:
            return 0  # no master told this replica what is committed: nothing
        return min(source.confirm_offset, self.log_end())

    # ------------------------------------------------------------ confirm offset
    def confirm_offset(self) -> int:
        """What every in-sync set member holds (:func:`broker.quorum.policy.confirm_offset`);
        the log end when this replica is not a master with an HA master."""
        view, ha = self.roles.view, self.ha
        if view is None or ha is None:
            return self.log_end()
        slaves = ha.slave_states()
        members = [
            None if (s := slaves.get(i)) is None else SlaveAck(i, s.acked, s.connected)
            for i in sorted(view.in_sync_slaves)
        ]
        self._confirm = policy.confirm_offset(self.log_end(), members, self._confirm)
        return self._confirm
