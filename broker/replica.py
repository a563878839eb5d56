"""One broker replica: the message store, the remoting and gRPC fronts, its group and its routes.

``Replica(config, replication)`` wires the parts: a :class:`MessageStore` under
``<data_dir>/store`` (with its message index, :mod:`broker.store.index`) whose STOREHOST is the advertised ``ip:port`` (where C++ clients send
CONSUMER_SEND_MSG_BACK), the topic table (``topics.json``), consumer offsets (in metaledger's
KV when endpoints are given, else in memory), the send/pull/consumer/admin/query processors on one
``rmq.server.RemotingServer``, the RocketMQ 5 gRPC front (:mod:`broker.grpc`, on
``grpc_listen``, sending through the same send processor), delayed delivery and timer
messages (``<data_dir>/timer``; their positions in metaledger too: :mod:`broker.timer`),
transactions (:mod:`broker.transactions`: END_TRANSACTION and the check-back), the route
registrar and the metrics endpoint.

With a metaledger client the replica is a member of its replica group
(:class:`~broker.group_member.GroupMember`): it registers there, takes the role metaledger
names, runs the HA master or client that role needs, and acknowledges sends through the
group's quorum (``broker.quorum``). It registers in the routes only once it has a role: as
broker id 0 while master, its replica id while slave (a slave must never claim id 0), and
loads the consumer offsets from metaledger on each promotion. Without a client (unit tests)
it is :class:`Standalone`, or the ``replication`` given.

Upkeep tasks: consumer offsets, POP progress (:mod:`broker.pop`: one PopService per replica,
served by the master only), the delivery positions of delay levels and timers, and the
transaction check's progress flushed every ``offset_flush_interval_ms`` (≤ 1 s) and at stop;
silent consumers, producers and gRPC clients (:mod:`broker.clients`) expired every
10 s; half messages checked every
``transaction_check_interval_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os

import grpc

from broker.admin.connections import ConnectionsProcessor
from broker.admin.consume_stats import ConsumeStatsProcessor, consumer_queues
from broker.admin.groups import GroupsProcessor
from broker.admin.processor import AdminProcessor
from broker.admin.topics import TopicAdmin
from broker.clients import ConnectedClients
from broker.config import BrokerConfig
from broker.consumers.processor import ConsumerProcessor
from broker.core import BrokerCore
from broker.group_member import GroupMember, HASettings
from broker.grpc.admin import AdminService
from broker.grpc.consume import ConsumeConfig, Consumers
from broker.grpc.forward import Forwarding, GroupFronts, role_view
from broker.grpc.front import ReplicaBackend, grpc_front
from broker.grpc.service import MessagingService
from broker.grpc.transactions import GrpcTransactions
from broker.lookup.processor import QueryProcessor
from broker.metrics import BrokerMetrics, View
from broker.pop.processor import PopProcessor
from broker.pop.progress import KvPopProgress
from broker.pop.service import PopService
from broker.pull.processor import PullProcessor
from broker.quorum import BrokerRole, IsrSettings, QuorumSettings, RoleSettings
from broker.quorum.role import Role
from broker.remoting.front import remoting_server
from broker.replication import Replication, Standalone
from broker.routes import RouteRegistrar
from broker.send.processor import SendProcessor
from broker.send.schedule import ScheduleService
from broker.state.offsets import InMemoryOffsetStore, KvOffsetStore, OffsetStore
from broker.store import MessageStore, RetentionPolicy, StoreConfig
from broker.timer.progress import DeliveryProgress
from broker.timer.service import TimerService, TimerSettings
from broker.topics import TopicTable
from broker.transactions.check import CheckService
from broker.transactions.processor import TransactionProcessor
from broker.transactions.service import TransactionService
from nameserver.client import Client, ClientError
from rmq.message import Host
from rmq.server import Handler, Peer

log = logging.getLogger(__name__)
EXPIRE_EVERY_S = 10.0


def replica_heartbeat_interval_s(c: BrokerConfig) -> float:
    """The replica heartbeat's interval: the configured one, at most a quarter of the
    timeout. With a short timeout (2 s) one heartbeat a second leaves metaledger a single
    lost or late heartbeat before it declares a live master dead, adds up to a second to
    noticing a dead one, and up to a second before an elected replica hears it was."""
    return min(c.replica_heartbeat_interval_ms, c.replica_heartbeat_timeout_ms / 4) / 1000


class Replica:
    def __init__(
        self,
        config: BrokerConfig,
        replication: Replication | None = None,
        client: Client | None = None,
    ) -> None:
        self.config = config.validate()
        if config.listen_port == 0:
            raise ValueError(
                "listen_port: a replica needs its real port (it is written as STOREHOST)"
            )
        self.client = client
        os.makedirs(config.data_dir, exist_ok=True)
        self.store = MessageStore(
            os.path.join(config.data_dir, "store"),
            StoreConfig(
                segment_size=config.segment_size_bytes,
                flush_mode=config.flush_mode,
                store_host=Host(config.advertised_host, config.listen_port),
            ),
        )
        self.member: GroupMember | None = None
        if client is not None and replication is None:
            self.member = self._member(client)
            self.replication: Replication = self.member.replication
        else:
            self.replication = replication or Standalone()
        self.clients = ConnectedClients()  # by protocol, language and version, for the metrics
        self.metrics = BrokerMetrics(config.broker_name, self._view)
        self.topics = TopicTable(os.path.join(config.data_dir, "topics.json"))
        self.topics.keep_default_topic(config.auto_create_topic, config.default_queue_nums)
        self.registrar: RouteRegistrar | None = None
        offsets: OffsetStore
        #: where the delayed and timer deliveries got to (broker/timer/progress.py)
        self.delivery: OffsetStore
        if client is not None:
            self.registrar = RouteRegistrar(client, config, self.topics)
            self.topics.resolver = self.registrar.resolve
            offsets = KvOffsetStore(client, config.broker_name)
            self.delivery = KvOffsetStore(client, config.broker_name, kind="delivery")
        else:
            offsets = InMemoryOffsetStore()
            self.delivery = InMemoryOffsetStore()
        self.offsets = offsets
        self.core = BrokerCore(config, self.store, self.replication, self.topics, offsets)
        self.core.metrics = self.metrics
        if self.member is not None:
            self.core.appended = self.member.appended
            if config.slave_read_enable:
                self.core.suggest_broker = self._suggest_broker
        self.sends = SendProcessor(self.core)
        self.consumers = ConsumerProcessor(self.core)
        self.queries = QueryProcessor(self.core)  # QUERY_MESSAGE, VIEW_MESSAGE_BY_ID
        self.transactions = TransactionService(self.core)
        self.checks = CheckService(self.transactions, self.core.producers)
        self.pop = PopService(
            self.core,
            os.path.join(config.data_dir, "pop"),
            config.broker_name,
            KvPopProgress(client, config.broker_name) if client is not None else None,
        )
        handlers: dict[int, Handler] = {}
        for processor in (
            self.sends,
            TransactionProcessor(self.transactions),
            PullProcessor(self.core),
            self.consumers,
            AdminProcessor(self.core, self._slave_acks),
            TopicAdmin(self.core, self.registrar),
            self.queries,
            PopProcessor(self.pop),
            ConsumeStatsProcessor(self.core, self.pop),
            ConnectionsProcessor(self.core, self.clients.grpc),
            GroupsProcessor(self.core, self.pop, self.clients.grpc),
        ):
            handlers.update(processor.handlers())
        self.server = remoting_server(
            handlers, on_close=self._connection_closed, on_request=self.clients.remoting.request
        )
        reload = self.delivery.load_all if isinstance(self.delivery, KvOffsetStore) else None
        self.schedule = ScheduleService(
            self.core,
            os.path.join(config.data_dir, "delayOffset.json"),
            DeliveryProgress(self.delivery, reload, "schedule"),
        )
        self.timer = TimerService(
            self.core,
            os.path.join(config.data_dir, "timer"),
            DeliveryProgress(self.delivery, reload, "timer"),
            TimerSettings(max_delay_sec=config.timer_max_delay_sec),
        )
        self.grpc: grpc.aio.Server | None = None
        self.grpc_port = 0
        self.fronts: GroupFronts | None = None
        self.forwarding: Forwarding | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._flush_failing = False

    async def start(self) -> tuple[str, int]:
        if isinstance(self.offsets, KvOffsetStore):
            try:
                n = await asyncio.to_thread(self.offsets.load_all)
                log.info("broker: %d consumer offsets loaded from metaledger", n)
            except ClientError as exc:
                log.warning("broker: cannot load consumer offsets yet: %s", exc)
        await self._load_pop()
        address = await self.server.start(self.config.listen_host, self.config.listen_port)
        if self.config.metrics_listen:
            host, _, port = self.config.metrics_listen.rpartition(":")
            self.metrics.serve(host or "0.0.0.0", int(port))
        await self._start_grpc()
        self.schedule.start()
        self.checks.start()
        self.timer.start()
        if self.registrar is not None:
            registrar = self.registrar
            loop = asyncio.get_running_loop()

            def changed() -> None:
                loop.call_soon_threadsafe(registrar.changed)

            self.topics.on_change = changed
            if self.member is None:
                registrar.start()
        if self.member is not None:
            self.member.start()
        self._tasks = [
            asyncio.create_task(self._flush_offsets(), name="offsets"),
            asyncio.create_task(self._expire_consumers(), name="consumers"),
            asyncio.create_task(self._retention(), name="retention"),
        ]
        return address

    async def _start_grpc(self) -> None:
        """The RocketMQ 5 gRPC front on ``grpc_listen``. A default address something else
        holds is skipped with a warning (several replicas on one machine); one given is not."""
        c = self.config
        if not c.grpc_listen:
            return
        host, _, port = c.grpc_listen.rpartition(":")
        backend = ReplicaBackend(
            self.sends,
            self.topics,
            self.client,
            broker_name=c.broker_name,
            remoting=(c.advertised_host, c.listen_port),
            grpc_port=int(port),
            pops=self.pop,
        )
        interceptors = []
        if self.client is not None and self.member is not None:
            own = (c.advertised_host, int(port))
            roles = self.member.roles
            self.fronts = GroupFronts(
                self.client, c.broker_name, own, backend.endpoint, lambda: role_view(roles)
            )
            self.forwarding = Forwarding(self.fronts.master_of, own)
            backend.fronts = self.fronts
            interceptors.append(self.forwarding)
        service = MessagingService(
            backend,
            transactions=GrpcTransactions(
                self.transactions, self.core.producers, (c.advertised_host, c.listen_port)
            ),
            consumers=Consumers(
                backend,
                ConsumeConfig(
                    default_invisible_ms=c.pop_auto_renew_invisible_ms,
                    fifo_groups=frozenset(c.fifo_groups),
                ),
            ),
            agents=self.clients.grpc,
        )
        try:
            self.grpc, self.grpc_port = await grpc_front(
                service,
                host or "0.0.0.0",
                int(port),
                interceptors,
                admin=AdminService(self.queries.lookup),
            )
        except OSError as exc:
            if not c.grpc_listen_is_default:
                raise
            log.warning("broker: RocketMQ 5 gRPC front off: %s (give --listen-grpc)", exc)
            self.fronts = self.forwarding = None
            return
        backend.grpc_port = self.grpc_port
        if self.fronts is not None and self.forwarding is not None:
            self.fronts.own = (c.advertised_host, self.grpc_port)
            self.forwarding.own = f"{c.advertised_host}:{self.grpc_port}"
        log.info("broker: RocketMQ 5 gRPC on %s:%d", host, self.grpc_port)

    async def _flush_offsets(self) -> None:
        while True:
            await asyncio.sleep(self.config.offset_flush_interval_ms / 1000)
            await self.flush_offsets()

    async def flush_offsets(self, pop_master: bool | None = None) -> None:
        """Consumer offsets, delivery positions, then POP progress (``pop_master``: see
        PopService.flush)."""
        try:
            await asyncio.to_thread(self.offsets.flush)
            await asyncio.to_thread(self.delivery.flush)
            await self.pop.flush(pop_master)
        except (ClientError, OSError) as exc:
            if not self._flush_failing:  # once per outage, not every second
                log.warning("broker: consumer offsets not flushed (retrying): %s", exc)
            self._flush_failing = True
            return
        if self._flush_failing:
            log.info("broker: consumer offsets flushed again")
        self._flush_failing = False

    async def _retention(self) -> None:
        c = self.config
        policy = RetentionPolicy(
            max_age_s=c.retention_hours * 3600, max_total_bytes=c.retention_bytes or None
        )
        while True:
            await asyncio.sleep(c.retention_check_interval_ms / 1000)
            try:
                n = await self.core.run(self.store.delete_expired, policy)
            except OSError as exc:
                log.warning("broker: retention: %s", exc)
                continue
            if n:
                log.info("broker: retention deleted %d commit-log segment(s)", n)

    async def _expire_consumers(self) -> None:
        while True:
            await asyncio.sleep(EXPIRE_EVERY_S)
            self.consumers.expire()
            self.clients.expire()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pop_master = self.pop.is_master()
        if self.member is not None:
            await self.member.stop()
        if self.registrar is not None:
            await self.registrar.stop()
        await self.server.close()
        if self.grpc is not None:
            await self.grpc.stop(grace=1.0)
        if self.forwarding is not None:
            await self.forwarding.close()
        await self.schedule.stop()
        await self.checks.stop()
        await self.timer.stop()
        await self.flush_offsets(pop_master)
        self.pop.close()
        self.core.close()
        self.metrics.close()
        self.store.close()

    # ------------------------------------------------------------ the replica group
    def _member(self, client: Client) -> GroupMember:
        c = self.config
        return GroupMember(
            self.store,
            client,
            RoleSettings(
                c.cluster,
                c.broker_name,
                c.address,
                broker_id=c.broker_id,
                heartbeat_interval_s=replica_heartbeat_interval_s(c),
                heartbeat_timeout_ms=c.replica_heartbeat_timeout_ms,
            ),
            QuorumSettings(
                BrokerRole(c.broker_role),
                slave_timeout_s=c.slave_timeout_ms / 1000,
                ha_slave_fallbehind_max_bytes=c.ha_slave_fallbehind_max_bytes,
            ),
            HASettings(
                c.ha_host or c.listen_host,
                c.ha_listen_port,
                heartbeat_interval_s=c.ha_heartbeat_interval_ms / 1000,
                idle_timeout_s=c.ha_idle_timeout_ms / 1000,
            ),
            IsrSettings(ha_max_time_slave_not_catchup_s=c.ha_max_time_slave_not_catchup_ms / 1000),
            on_role=self._on_role,
        )

    def _on_role(self, master: bool, route_id: int) -> None:
        """After a role change (on the loop): register under the new route id; a new master
        reloads the consumer offsets its predecessor flushed to metaledger."""
        if self.registrar is not None:
            self.registrar.set_route_id(route_id)
        if self.fronts is not None and self.member is not None:
            publish = self.fronts.keep_published(self.member.roles.broker_id)
            self._tasks.append(asyncio.get_running_loop().create_task(publish))
        if master and isinstance(self.offsets, KvOffsetStore):
            task = asyncio.get_running_loop().create_task(self._load_offsets())
            self._tasks.append(task)
        if master:
            self._tasks.append(asyncio.get_running_loop().create_task(self._load_pop()))

    async def _load_offsets(self) -> None:
        assert isinstance(self.offsets, KvOffsetStore)
        try:
            n = await asyncio.to_thread(self.offsets.load_all)
            log.info("broker: master now; %d consumer offsets loaded from metaledger", n)
        except ClientError as exc:
            log.warning("broker: cannot load consumer offsets yet: %s", exc)

    async def _load_pop(self) -> None:
        """POP progress a predecessor flushed, merged into this replica's books."""
        try:
            n = await self.pop.load()
        except ClientError as exc:
            log.warning("broker: cannot load POP progress yet: %s", exc)
            return
        if n:
            log.info("broker: POP progress of %d queue(s) loaded from metaledger", n)

    def _suggest_broker(self, behind: int) -> int:
        """RocketMQ's slaveReadEnable: a consumer lagging more than ``slave_read_lag_bytes``
        is sent to a slave (this one, on a slave; the lowest in-sync slave id, on a master);
        one that caught up, back to the master (0)."""
        member = self.member
        if member is None or behind <= self.config.slave_read_lag_bytes:
            return 0
        view = member.roles.view
        if member.roles.role is Role.SLAVE:
            return member.roles.broker_id
        slaves = sorted(view.in_sync_slaves) if view is not None else []
        return slaves[0] if slaves else 0

    def _slave_acks(self) -> dict[int, int]:
        """Each slave connected to this master's HA service: its acknowledged offset."""
        ha = self.member.ha_master if self.member is not None else None
        if ha is None:
            return {}
        return {i: s.acked for i, s in ha.slave_states().items() if s.connected}

    def _connection_closed(self, peer: Peer) -> None:
        self.consumers.connection_closed(peer)
        self.clients.remoting.closed(peer)

    def _view(self) -> View:
        if self.member is not None:
            view = self.member.view()
        else:
            view = View(role="MASTER", max_offset=self.store.log.end_offset)
        # the registry reads the view once as it is made, before the core and the books are
        queues = consumer_queues(self.core, self.pop.table.books) if hasattr(self, "pop") else ()
        return dataclasses.replace(view, clients=self.clients.counts(), consumer_queues=queues)
