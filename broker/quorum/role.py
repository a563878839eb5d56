"""RoleManager: a replica's membership in its replica group, kept in metaledger.

RocketMQ 5's ``ReplicasManager`` against metaledger's ReplicaGroups service instead of a
controller (RocketMQ 5's ``broker/controller/ReplicasManager.java``, the controller's
``DefaultBrokerHeartbeatManager`` and ``DefaultElectPolicy``):

1. **Register** (``Client.replica_register``): metaledger assigns the broker id (or keeps
   the one this address has, so a restarted replica gets its id back) and answers the group.
   The first replica of a new group is its master (epoch 1).
2. **Heartbeat** every ``heartbeat_interval_s`` with the commit log's max offset and the
   newest epoch of the epoch file (metaledger ranks election candidates by them). The answer
   names the master, its epoch and the in-sync set epoch; a change re-reads the group, and so
   does every ``refresh_interval_s`` (alive set and policy change without an epoch).
   "Register first" (``CONTROLLER_BROKER_NEED_TO_BE_REGISTERED``) registers again.
3. **Follow the master**, acting only on a master epoch not lower than the one held
   (as RocketMQ 5's ``ReplicasManager``):
   named master at a new epoch -> ``hooks.become_master(view)`` (the replica appends
   ``(epoch, end)`` to its epoch file and starts its HA master); another replica named ->
   ``hooks.become_slave(view)`` (stop the HA master, connect an HA client to
   ``view.master_address`` whose handshake truncates to the consistent point).
4. **No master known** (the master died with no live in-sync replica; metaledger also
   elects by itself when one comes back) -> ``Client.replica_elect``.
5. **Fencing**: a master is fenced, :meth:`RoleManager.writable` saying why, (a) from the
   heartbeat that shows a higher master epoch naming another replica until it is demoted,
   and (b) while no heartbeat succeeded within ``fence_after_s`` (default: its heartbeat
   timeout). (b) is safe without clocks agreeing on anything but rates: metaledger's leader
   declares the replica dead no earlier than its timeout after *receiving* the last
   heartbeat, and the fence counts from *sending* the last one that succeeded, so the old
   master is fenced before a new one can be elected. A heartbeat that succeeds again lifts
   (b) (the same master epoch still names this replica).

Errors from metaledger (unavailable, timeouts) are logged and retried at the next beat;
a failing hook leaves the role unchanged (and a fenced master fenced), so the next beat
tries again. Hooks run inside the heartbeat loop: they must be quick (start or stop a
service), or the replica misses heartbeats.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from broker.quorum.group import GroupView
from nameserver.client import (
    ClientError,
    FailedPrecondition,
    NotFound,
    ReplicaGroupInfo,
    ReplicaGroupWrite,
    ReplicaHeartbeat,
)

__all__ = ["ReplicaGroupsClient", "Role", "RoleHooks", "RoleManager", "RoleSettings"]

log = logging.getLogger(__name__)


class Role(enum.Enum):
    UNKNOWN = "unknown"  # not registered yet, or no master known since start
    MASTER = "master"
    SLAVE = "slave"


@dataclass(frozen=True, slots=True)
class RoleSettings:
    cluster_name: str
    broker_name: str
    #: the remoting ``ip:port`` (the HA port is port + 1, RocketMQ's convention)
    address: str
    #: 0: metaledger assigns one (or gives back the one this address has)
    broker_id: int = 0
    heartbeat_interval_s: float = 1.0
    #: registered in metaledger: the replica is dead after this long without a heartbeat
    heartbeat_timeout_ms: int = 10_000
    #: a master without a successful heartbeat this long is fenced; 0: the heartbeat timeout
    fence_after_s: float = 0.0
    #: re-read the group this often (alive set, policy)
    refresh_interval_s: float = 5.0

    @property
    def fence_s(self) -> float:
        return self.fence_after_s or self.heartbeat_timeout_ms / 1000

    def validate(self) -> None:
        if not self.heartbeat_interval_s > 0:
            raise ValueError(f"heartbeat_interval_s must be > 0 ({self.heartbeat_interval_s})")
        if self.heartbeat_timeout_ms < 1:
            raise ValueError(f"heartbeat_timeout_ms must be >= 1 ({self.heartbeat_timeout_ms})")
        if not 0 <= self.fence_after_s <= self.heartbeat_timeout_ms / 1000:
            raise ValueError(
                f"fence_after_s must be in [0, heartbeat_timeout_ms / 1000] ({self.fence_after_s}):"
                " a later fence lets two masters answer PUT_OK"
            )
        if self.heartbeat_interval_s >= self.fence_s:
            raise ValueError(
                f"heartbeat_interval_s ({self.heartbeat_interval_s}) must be below the fence "
                f"timeout ({self.fence_s} s)"
            )
        if not self.refresh_interval_s > 0:
            raise ValueError(f"refresh_interval_s must be > 0 ({self.refresh_interval_s})")
        if self.broker_id < 0:
            raise ValueError(f"broker_id must be >= 0 ({self.broker_id})")


class RoleHooks(Protocol):
    """What the replica does on a role change, and what it reports in heartbeats."""

    def max_offset(self) -> int:
        """The commit log's end offset."""
        ...

    def last_epoch(self) -> int:
        """The newest epoch in the epoch file (0: none)."""
        ...

    async def become_master(self, view: GroupView) -> None:
        """Promoted at ``view.master_epoch``: record the epoch, start the HA master."""
        ...

    async def become_slave(self, view: GroupView) -> None:
        """Follow ``view.master_id`` at ``view.master_address`` (epoch ``view.master_epoch``)."""
        ...


class ReplicaGroupsClient(Protocol):
    """The part of :class:`nameserver.client.Client` used here (synchronous)."""

    def replica_register(
        self,
        cluster_name: str,
        broker_name: str,
        address: str,
        broker_id: int = 0,
        heartbeat_timeout_ms: int = 0,
    ) -> ReplicaGroupWrite: ...

    def replica_heartbeat(
        self, broker_name: str, broker_id: int, max_offset: int = 0, epoch: int = 0
    ) -> ReplicaHeartbeat: ...

    def replica_elect(
        self, broker_name: str, broker_id: int = 0, unclean: bool = False
    ) -> ReplicaGroupWrite: ...

    def replica_group(self, broker_name: str) -> ReplicaGroupInfo: ...


class RoleManager:
    """One replica's role in its group. ``start()`` runs the register/heartbeat loop."""

    def __init__(
        self,
        client: ReplicaGroupsClient,
        settings: RoleSettings,
        hooks: RoleHooks,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        settings.validate()
        self.client = client
        self.settings = settings
        self.hooks = hooks
        self.clock = clock
        self.broker_id = settings.broker_id
        self.view: GroupView | None = None
        self.role = Role.UNKNOWN
        #: the master epoch the current role was taken at
        self.epoch = 0
        self._registered = False
        self._fence: str | None = None
        self._last_ok: float | None = None
        self._last_refresh = 0.0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ the send path's view
    def writable(self) -> str | None:
        """None when this replica is the master and not fenced; else why not."""
        if self.role is Role.SLAVE and self.view is not None:
            return (
                f"slave of broker {self.view.master_id} ({self.view.master_address}), "
                f"master epoch {self.epoch}"
            )
        if self.role is not Role.MASTER:
            name = self.settings.broker_name
            if not self._registered:
                return f"not registered in replica group {name!r} yet"
            if self.view is not None and not self.view.master_id:
                return f"no master known in replica group {name!r}"
            return f"taking its role in replica group {name!r}"
        if self._fence is not None:
            return self._fence
        silent = self.clock() - (self._last_ok or 0.0)
        if self._last_ok is None or silent > self.settings.fence_s:
            return (
                f"fenced: no heartbeat answer from metaledger for {silent:.1f} s "
                f"(fence after {self.settings.fence_s:g} s): another master may be elected"
            )
        return None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop heartbeating (the role is kept; metaledger notices by the heartbeat timeout)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except NotFound as err:  # CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: again
                log.warning("replica %s: %s; registering again", self.broker_id, err)
                self._registered = False
            except ClientError as err:
                log.warning("replica %s: metaledger: %s", self.broker_id, err)
            except Exception:  # a hook failed: the role stays as it was, next beat retries
                log.exception("replica %s: role change failed", self.broker_id)
            await asyncio.sleep(self.settings.heartbeat_interval_s)

    async def beat(self) -> None:
        """One round: register if needed, heartbeat, act on the answer."""
        s = self.settings
        if not self._registered:
            await self.register()
        sent = self.clock()
        hb = await asyncio.to_thread(
            self.client.replica_heartbeat,
            s.broker_name,
            self.broker_id,
            self.hooks.max_offset(),
            self.hooks.last_epoch(),
        )
        self._last_ok = sent
        await self._on_heartbeat(hb)
        if self.clock() - self._last_refresh >= s.refresh_interval_s:
            await self.refresh()
        async with self._lock:  # a hook that failed before: try again (no-op when in role)
            if self.view is not None:
                await self._act(self.view)

    async def register(self) -> None:
        s = self.settings
        sent = self.clock()
        w = await asyncio.to_thread(
            self.client.replica_register,
            s.cluster_name,
            s.broker_name,
            s.address,
            self.broker_id,
            s.heartbeat_timeout_ms,
        )
        self.broker_id = w.broker_id
        self._registered = True
        self._last_ok = sent
        log.info("registered in %s as broker %d", s.broker_name, w.broker_id)
        await self.adopt(w.group)

    # ------------------------------------------------------------ following the group
    async def _on_heartbeat(self, hb: ReplicaHeartbeat) -> None:
        v = self.view
        if hb.master_epoch > self.epoch and self.role is Role.MASTER and self._fence is None:
            # fenced until acted on: demoted, or (named again) promoted at the new epoch
            self._fence = (
                f"fenced: master epoch {hb.master_epoch} names broker {hb.master_id or 'none'}"
                f" ({hb.master_address or 'no address'}); this replica was master at epoch "
                f"{self.epoch}"
            )
            log.warning("broker %d %s", self.broker_id, self._fence)
        if v is None or (hb.master_id, hb.master_epoch, hb.sync_state_set_epoch) != (
            v.master_id,
            v.master_epoch,
            v.sync_state_set_epoch,
        ):
            await self.refresh()
        if not hb.master_id:
            await self.elect()

    async def refresh(self) -> GroupView:
        """Re-read the group (linearizable) and act on it."""
        self._last_refresh = self.clock()
        info = await asyncio.to_thread(self.client.replica_group, self.settings.broker_name)
        return await self.adopt(info)

    async def elect(self) -> None:
        """Ask metaledger to elect a master (it picks among the alive in-sync replicas)."""
        try:
            w = await asyncio.to_thread(self.client.replica_elect, self.settings.broker_name)
        except FailedPrecondition as err:  # CONTROLLER_ELECT_MASTER_FAILED: none electable yet
            log.info("replica %d: no master elected: %s", self.broker_id, err)
            return
        await self.adopt(w.group)

    async def adopt(self, info: ReplicaGroupInfo) -> GroupView:
        """Take a group answer (ours or the in-sync set upkeep's) and act on it."""
        async with self._lock:
            view = GroupView.of(info, self.broker_id)
            if view.newer_than(self.view):
                self.view = view
                await self._act(view)
            assert self.view is not None
            return self.view

    async def _act(self, v: GroupView) -> None:
        if v.master_epoch < self.epoch:
            return  # an older master epoch: never act on it
        if not v.master_id:
            if self.role is Role.MASTER and self._fence is None:
                self._fence = f"fenced: replica group has no master (master epoch {v.master_epoch})"
            return
        if v.is_master:
            if self.role is not Role.MASTER or v.master_epoch != self.epoch:
                if self.role is Role.MASTER and self._fence is None:
                    self._fence = f"fenced: promotion to master epoch {v.master_epoch} under way"
                log.info("broker %d: becoming master at epoch %d", self.broker_id, v.master_epoch)
                await self.hooks.become_master(v)
                self.role, self.epoch, self._fence = Role.MASTER, v.master_epoch, None
            return
        if self.role is not Role.SLAVE or v.master_epoch != self.epoch:
            if self.role is Role.MASTER and self._fence is None:
                self._fence = f"fenced: master epoch {v.master_epoch} names broker {v.master_id}"
            log.info(
                "broker %d: following master %d (%s) at epoch %d",
                self.broker_id,
                v.master_id,
                v.master_address,
                v.master_epoch,
            )
            await self.hooks.become_slave(v)
            self.role, self.epoch, self._fence = Role.SLAVE, v.master_epoch, None
