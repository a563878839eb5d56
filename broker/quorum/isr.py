"""In-sync set (SyncStateSet) upkeep on the master, through metaledger's AlterSyncStateSet.

RocketMQ 5's ``AutoSwitchHAService`` / ``ReplicasManager`` rules (``store/ha/autoswitch/``,
``broker/controller/``):

* **Expand**: a slave joins when its ack is at least the confirm offset and at least the
  start of the master's current epoch (it holds everything every member holds, and nothing
  of an older epoch is missing), and metaledger counts it alive.
* **Shrink**: a member leaves when it has not caught up (acked the master's end) for
  ``ha_max_time_slave_not_catchup_s`` (haMaxTimeSlaveNotCatchup, 15 s), or its HA
  connection is closed. A member that never connected to this master since it started
  gets the same time (a master that just restarted does not empty its set before the
  slaves reconnect).
* **Report** every change with ``Client.replica_alter_isr``: a compare-and-set fenced by
  both epochs (master epoch and in-sync set epoch). The answer's group is adopted by the
  role manager (new set, new set epoch). A refused change (``FailedPrecondition``: a fenced
  epoch, no longer the master, a replica not alive) re-reads the group; the next check
  plans again from there.
* **Re-read** the group first when a slave is connected that the view does not count alive
  (it registered after the view was read): it joins within one check, not only after the
  role manager's next refresh (``refresh_interval_s``, 5 s).

Difference from RocketMQ: the confirm offset a joining slave must reach is the one of the
previous check, not of this instant. RocketMQ's is a cached value updated as acks arrive;
against the live log end a slave that keeps up with a busy master (always a frame behind)
would never join a set of one.

Checks run every ``check_interval_s`` (RocketMQ: shrink every 5 s, expand on each ack), and
at once when a slave connects (:meth:`IsrKeeper.poke`): after a failover the new master
admits no send until a slave is back in its set, so waiting out the interval there is
time with no acknowledged send at all.
:func:`plan` is the pure decision; :class:`IsrKeeper` runs it against the HA master.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from broker.quorum.group import GroupView
from broker.quorum.replication import HAMasterLike, SlaveStateLike
from nameserver.client import (
    ClientError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ReplicaGroupInfo,
    ReplicaGroupWrite,
)

__all__ = ["IsrChange", "IsrKeeper", "IsrSettings", "plan"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IsrSettings:
    check_interval_s: float = 1.0
    #: RocketMQ haMaxTimeSlaveNotCatchup
    ha_max_time_slave_not_catchup_s: float = 15.0

    def validate(self) -> None:
        if not self.check_interval_s > 0:
            raise ValueError(f"check_interval_s must be > 0 ({self.check_interval_s})")
        if not self.ha_max_time_slave_not_catchup_s > 0:
            raise ValueError(
                "ha_max_time_slave_not_catchup_s must be > 0 "
                f"({self.ha_max_time_slave_not_catchup_s})"
            )


@dataclass(frozen=True, slots=True)
class IsrChange:
    new_set: frozenset[int]
    added: frozenset[int] = frozenset()
    #: broker id -> why it left
    removed: Mapping[int, str] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"in-sync set -> {sorted(self.new_set)}"]
        if self.added:
            parts.append(f"joined {sorted(self.added)}")
        parts += [f"{i} left ({why})" for i, why in sorted(self.removed.items())]
        return "; ".join(parts)


def plan(
    view: GroupView,
    slaves: Mapping[int, SlaveStateLike],
    confirm_offset: int,
    epoch_start: int,
    now: float,
    started_at: float,
    max_not_catchup_s: float,
) -> IsrChange | None:
    """The in-sync set this master should report, or None when it stays. ``now``,
    ``started_at`` (when this master began keeping the set) and the slaves' ``caught_up_at``
    are on one monotonic clock."""
    current = view.sync_state_set
    keep = {view.self_id}
    removed: dict[int, str] = {}
    for i in sorted(current - {view.self_id}):
        s = slaves.get(i)
        if s is None:
            if now - started_at > max_not_catchup_s:
                removed[i] = f"no HA connection for {max_not_catchup_s:g} s"
            else:
                keep.add(i)
        elif not s.connected:
            removed[i] = "HA connection closed"
        elif now - s.caught_up_at > max_not_catchup_s:
            removed[i] = f"not caught up for {now - s.caught_up_at:.1f} s"
        else:
            keep.add(i)
    added = set()
    for i, s in sorted(slaves.items()):
        if i in current or i == view.self_id or not s.connected or i not in view.alive:
            continue
        if s.acked >= confirm_offset and s.acked >= epoch_start:
            added.add(i)
    new = frozenset(keep | added)
    if new == current:
        return None
    return IsrChange(new, frozenset(added), removed)


class AltersIsr(Protocol):
    """The part of :class:`nameserver.client.Client` used here (synchronous)."""

    def replica_alter_isr(
        self,
        broker_name: str,
        *,
        master_id: int,
        master_epoch: int,
        sync_state_set_epoch: int,
        sync_state_set: Sequence[int],
    ) -> ReplicaGroupWrite: ...


class GroupRoles(Protocol):
    """What :class:`broker.quorum.role.RoleManager` offers the upkeep."""

    @property
    def view(self) -> GroupView | None: ...

    def writable(self) -> str | None: ...

    async def adopt(self, info: ReplicaGroupInfo) -> GroupView: ...

    async def refresh(self) -> GroupView: ...


class IsrKeeper:
    """Runs :func:`plan` every ``check_interval_s`` while this replica is an unfenced master
    and reports changes. ``confirm_offset`` is the master's (``QuorumReplication``)."""

    def __init__(
        self,
        client: AltersIsr,
        roles: GroupRoles,
        confirm_offset: Callable[[], int],
        settings: IsrSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or IsrSettings()
        self.settings.validate()
        self.client = client
        self.roles = roles
        self.confirm_offset = confirm_offset
        self.clock = clock
        self.ha: HAMasterLike | None = None
        self.epoch_start = 0
        self._started_at = 0.0
        self._mark: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._poked = asyncio.Event()

    def start(self, ha: HAMasterLike, epoch_start: int) -> None:
        """On promotion: keep the set of this master, whose epoch began at ``epoch_start``."""
        self.ha, self.epoch_start = ha, epoch_start
        self._started_at, self._mark = self.clock(), None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """On demotion (or shutdown)."""
        task, self._task, self.ha = self._task, None, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def poke(self, slave_id: int = 0) -> None:
        """Check now rather than at the next interval (a slave connected)."""
        self._poked.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.check_interval_s):
                    await self._poked.wait()
            self._poked.clear()
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except ClientError as err:
                log.warning("in-sync set upkeep: metaledger: %s", err)
            except Exception:
                log.exception("in-sync set upkeep failed")

    async def check(self) -> IsrChange | None:
        """One round: plan, and report a change. The change reported, or None."""
        view, ha = self.roles.view, self.ha
        if view is None or ha is None or not view.is_master or self.roles.writable() is not None:
            return None
        slaves = ha.slaves()
        if any(s.connected and i not in view.alive for i, s in slaves.items()):
            # a slave that registered after the group was last read: re-read it now, not at
            # the role manager's next refresh (up to refresh_interval_s later)
            view = await self.roles.refresh()
            if not view.is_master or self.roles.writable() is not None or self.ha is not ha:
                return None
        confirm = self.confirm_offset()
        threshold = confirm if self._mark is None else min(self._mark, confirm)
        self._mark = confirm
        change = plan(
            view,
            slaves,
            threshold,
            self.epoch_start,
            self.clock(),
            self._started_at,
            self.settings.ha_max_time_slave_not_catchup_s,
        )
        if change is None:
            return None
        try:
            w = await asyncio.to_thread(
                self.client.replica_alter_isr,
                view.broker_name,
                master_id=view.self_id,
                master_epoch=view.master_epoch,
                sync_state_set_epoch=view.sync_state_set_epoch,
                sync_state_set=sorted(change.new_set),
            )
        except (FailedPrecondition, InvalidArgument, NotFound) as err:
            # fenced epochs, no longer the master, a replica not alive: our view is stale
            log.info("in-sync set change refused (%s); re-reading the group", err)
            await self.roles.refresh()
            return None
        log.info(
            "%s (epoch %d -> %d)",
            change.describe(),
            view.sync_state_set_epoch,
            w.group.sync_state_set_epoch,
        )
        await self.roles.adopt(w.group)
        return change
