"""A replica's life in its replica group: the role hooks that start and stop HA.

:class:`GroupMember` is what :class:`broker.quorum.RoleManager` calls when metaledger names
this replica master or slave (RocketMQ 5's ``ReplicasManager`` role change and
``AutoSwitchHAService.changeToMaster``):

- **become master** at epoch E: cut any half-copied record off the log's tail, record
  ``(E, log end)`` in the epoch file (unless E is already its last epoch: a restart at the
  same epoch keeps where E began), start the HA master on the HA port, hand it to the send
  path's :class:`~broker.quorum.QuorumReplication` and to the in-sync set keeper.
- **become slave** of M: stop all of that, and start an HA client to M's HA port (its
  remoting port + 1, RocketMQ's convention), whose handshake truncates this replica's log to
  the consistent point with M's epochs before it copies. Consumers of this replica then read
  up to the confirm offset M sends over HA (``QuorumReplication.follow``).

It also keeps the HA master's ``sync_state_set`` equal to the group's in-sync slaves
(``confirm_offset`` is the minimum ack over them) and wakes the HA streams after each append
(:meth:`appended`, called by the send path).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from broker.ha import EPOCH_FILE_NAME, EpochFile, HAClient, HAMaster
from broker.metrics import SlaveView, View
from broker.quorum import (
    GroupView,
    IsrKeeper,
    IsrSettings,
    QuorumReplication,
    QuorumSettings,
    RoleManager,
    RoleSettings,
)
from broker.quorum.role import Role
from broker.store import MessageStore
from nameserver.client import Client

__all__ = ["GroupMember", "HASettings"]

log = logging.getLogger(__name__)


class HASettings:
    """The HA port and the intervals of the HA connections (RocketMQ's defaults)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        heartbeat_interval_s: float = 5.0,
        idle_timeout_s: float = 20.0,
    ) -> None:
        # the bind address; 0.0.0.0 is fine: slaves dial the master's advertised host
        self.host = host
        self.port = port
        self.heartbeat_interval_s = heartbeat_interval_s
        self.idle_timeout_s = idle_timeout_s


class GroupMember:
    """Role hooks of one replica; owns its HA master or HA client, whichever the role needs."""

    def __init__(
        self,
        store: MessageStore,
        client: Client,
        roles: RoleSettings,
        quorum: QuorumSettings,
        ha: HASettings,
        isr: IsrSettings | None = None,
        on_role: Callable[[bool, int], None] | None = None,
    ) -> None:
        self.store = store
        #: told ``(is_master, route_id)`` after each role change: 0 for the master, the
        #: replica's id for a slave (the ids RocketMQ clients see in the routes)
        self.on_role = on_role or (lambda master, route_id: None)
        self.ha_settings = ha
        self.epochs = EpochFile(os.path.join(store.root, EPOCH_FILE_NAME))
        self.roles = RoleManager(client, roles, self)
        self.replication = QuorumReplication(self.roles, quorum, lambda: store.log.end_offset)
        self.keeper = IsrKeeper(client, self.roles, self.replication.confirm_offset, isr)
        self.ha_master: HAMaster | None = None
        self.ha_client: HAClient | None = None
        self._sync_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ life cycle
    def start(self) -> None:
        self.roles.start()
        self._sync_task = asyncio.get_running_loop().create_task(self._keep_sync_state_set())

    async def stop(self) -> None:
        await self.roles.stop()
        if self._sync_task is not None:
            self._sync_task.cancel()
            try:
                await self._sync_task
            except asyncio.CancelledError:
                pass
        await self._stop_master()
        await self._stop_client()

    def appended(self) -> None:
        """The send path wrote to the log: wake the HA streams."""
        if self.ha_master is not None:
            self.ha_master.notify_appended(self.store.log.end_offset)

    # ------------------------------------------------------------ RoleHooks
    def max_offset(self) -> int:
        return self.store.log.end_offset

    def last_epoch(self) -> int:
        return self.epochs.last_epoch

    async def become_master(self, view: GroupView) -> None:
        await self._stop_client()
        if self.ha_master is not None:  # a new epoch while master: keep the running HA master
            self._adopt_set(view)
            if self.epochs.last_epoch < view.master_epoch:
                self.epochs.begin(view.master_epoch, self.store.log.end_offset)
            return
        await asyncio.to_thread(self.store.truncate, self.store.dispatched_offset)
        end = self.store.log.end_offset
        if self.epochs.last_epoch != view.master_epoch:
            self.epochs.begin(view.master_epoch, end)
        s = self.ha_settings
        master = HAMaster(
            self.store,
            s.host,
            s.port,
            self.epochs,
            heartbeat_interval=s.heartbeat_interval_s,
            idle_timeout=s.idle_timeout_s,
            on_connect=self.keeper.poke,
            in_sync=self._in_sync_slaves,
        )
        await master.start()
        self.ha_master = master
        self._adopt_set(view)
        self.replication.attach(master, end)
        self.keeper.start(master, self._epoch_start(view.master_epoch, end))
        self.on_role(True, 0)
        log.info(
            "replica %s: master of %s at epoch %d from offset %d (HA %s:%d)",
            self.roles.broker_id,
            view.broker_name,
            view.master_epoch,
            end,
            s.host,
            master.port,
        )

    async def become_slave(self, view: GroupView) -> None:
        await self._stop_master()
        host, _, port = view.master_address.rpartition(":")
        target = (host, int(port) + 1)
        if self.ha_client is not None and self.ha_client.master_ha == target:
            return
        await self._stop_client()
        self.on_role(False, self.roles.broker_id)
        s = self.ha_settings
        client = HAClient(
            self.store,
            self.epochs,
            self.roles.broker_id,
            target,
            heartbeat_interval=s.heartbeat_interval_s,
            idle_timeout=s.idle_timeout_s,
        )
        await client.start()
        self.ha_client = client
        self.replication.follow(client)  # consumers read up to the confirm offset it hears
        log.info(
            "replica %s: slave of %d at %s (HA %s:%d), epoch %d",
            self.roles.broker_id,
            view.master_id,
            view.master_address,
            *target,
            view.master_epoch,
        )

    # ------------------------------------------------------------ metrics
    def view(self) -> View:
        role = self.roles.role
        shown = {Role.MASTER: "MASTER", Role.SLAVE: "SLAVE"}.get(role, "STARTING")
        if role is Role.MASTER and self.roles.writable() is not None:
            shown = "FENCED"
        group = self.roles.view
        master = self.ha_master
        slaves = (
            [SlaveView(i, s.acked, s.connected) for i, s in sorted(master.slaves().items())]
            if master is not None
            else []
        )
        return View(
            role=shown,
            epoch=self.roles.epoch,
            max_offset=self.store.log.end_offset,
            confirm_offset=(
                self.replication.confirm_offset()
                if master is not None
                else (self.ha_client.confirm_offset if self.ha_client else 0)
            ),
            in_sync_replicas=len(group.sync_state_set) if group is not None else 1,
            slaves=slaves,
        )

    # ------------------------------------------------------------ internals
    def _epoch_start(self, epoch: int, end: int) -> int:
        for e in reversed(self.epochs.entries):
            if e.epoch == epoch:
                return e.start_offset
        return end

    def _in_sync_slaves(self) -> frozenset[int]:
        """The HA master's confirm offset counts the in-sync slaves of the group's latest view
        (:meth:`_adopt_set` catches up every 0.2 s: too late for a slave that just joined)."""
        view, master = self.roles.view, self.ha_master
        if view is not None:
            return view.in_sync_slaves
        return master.sync_state_set if master is not None else frozenset()

    def _adopt_set(self, view: GroupView) -> None:
        if self.ha_master is not None:
            self.ha_master.sync_state_set = frozenset(view.in_sync_slaves)

    async def _keep_sync_state_set(self) -> None:
        """The HA master's confirm offset counts the group's in-sync slaves as they change."""
        while True:
            await asyncio.sleep(0.2)
            view = self.roles.view
            if view is not None and self.roles.role is Role.MASTER:
                self._adopt_set(view)

    async def _stop_master(self) -> None:
        master, self.ha_master = self.ha_master, None
        if master is not None:
            await self.keeper.stop()
            self.replication.detach()
            await master.stop()

    async def _stop_client(self) -> None:
        client, self.ha_client = self.ha_client, None
        self.replication.unfollow()
        if client is not None:
            await client.stop()
