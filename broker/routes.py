"""The broker in metaledger's routes: registration, heartbeats, topics adopted from the routes.

RocketMQ's broker sends REGISTER_BROKER (103) with its whole topic table every 30 s and when
a topic changes (``BrokerController.registerBrokerAll``; the nameserver's
``RouteInfoManager``, ``RegisterBrokerBody``). Here the same goes
through ``nameserver.client``: ``broker_register`` with every topic of the :class:`TopicTable`
and a DataVersion whose counter is the table's version (so an unchanged re-registration is a
heartbeat only and logs nothing), ``broker_heartbeat`` every ``heartbeat_interval_ms`` in
between (registering again when metaledger answers "not registered"), and at once when the
table changes (``%RETRY%<group>`` on a consumer's first heartbeat). ``broker_unregister`` at
a clean stop. The table always holds the cluster-name and broker-name topics RocketMQ's
``TopicConfigManager`` creates (perm INHERIT only: nobody sends to them), which also keeps a
first registration from carrying a single topic (refused by the routes, as RocketMQ's
``RouteInfoManager`` does).

Client calls block: they run in threads. A metaledger that cannot be reached is logged and
retried; the broker keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from broker.config import BrokerConfig
from broker.topics import TopicConfig, TopicTable
from nameserver.client import Client, ClientError, NotFound
from protos.metaledger.v1 import routing_pb2
from rmq.codes import PERM_INHERIT

log = logging.getLogger(__name__)
NEGATIVE_CACHE_S = 1.0


def system_topics(config: BrokerConfig) -> list[TopicConfig]:
    return [
        TopicConfig(config.cluster, 1, 1, PERM_INHERIT),
        TopicConfig(config.broker_name, 1, 1, PERM_INHERIT),
    ]


class RouteRegistrar:
    def __init__(self, client: Client, config: BrokerConfig, topics: TopicTable) -> None:
        self.client = client
        self.config = config
        self.topics = topics
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._misses: dict[str, float] = {}
        self.registered_version = -1
        self.registrations = 0
        #: set (and replaced) after each round of the loop that registered
        self._progress = asyncio.Event()
        #: the id this replica has in the routes: 0 while it is the master, its replica
        #: id while a slave (RocketMQ 5 controller mode); set by the role (set_route_id)
        self.route_id = config.broker_id
        for t in system_topics(config):
            if topics.get(t.topic) is None:
                topics.put(t)

    def request(self) -> routing_pb2.RegisterBrokerRequest:
        c = self.config
        host, port = c.advertised_host, c.listen_port
        req = routing_pb2.RegisterBrokerRequest(
            cluster=c.cluster,
            broker_name=c.broker_name,
            broker_id=self.route_id,
            addr=c.address,
            ha_addr=f"{host}:{port + 1}",
            heartbeat_timeout_ms=c.heartbeat_timeout_ms,
        )
        req.data_version.counter = self.topics.version
        for t in self.topics.all():
            req.topics.add(
                topic=t.topic,
                read_queue_nums=t.read_queue_nums,
                write_queue_nums=t.write_queue_nums,
                perm=t.perm,
                topic_sys_flag=t.topic_sys_flag,
                order=t.order,
            )
        return req

    def register(self) -> None:
        version = self.topics.version
        self.client.broker_register(self.request())
        self.registered_version = version
        self.registrations += 1

    def set_route_id(self, route_id: int) -> None:
        """The replica's role changed: register under ``route_id`` at once (the routes drop
        this address's entry under its old id, and a new master's id 0 replaces the old
        master's)."""
        if route_id != self.route_id:
            self.route_id = route_id
            self.registered_version = -1
            self._wake.set()
        if self._task is None:
            self.start()

    def changed(self) -> None:
        """The topic table changed: register soon (called on the loop)."""
        self._wake.set()

    async def registered(self, version: int, timeout_s: float) -> bool:
        """Wait until a registration carrying table version ``version`` (or a later one) went
        through; False after ``timeout_s`` (metaledger unreachable, no role yet)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.registered_version < version:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._progress.wait()
        return True

    async def resolve(self, topic: str) -> TopicConfig | None:
        """The topic's queue data for this broker name from the routes, or None."""
        missed = self._misses.get(topic)
        if missed is not None and time.monotonic() - missed < NEGATIVE_CACHE_S:
            return None
        try:
            route = await asyncio.to_thread(self.client.route_get, topic)
        except NotFound:
            self._misses[topic] = time.monotonic()
            return None
        except ClientError as exc:
            log.warning("routes: cannot look up topic %s: %s", topic, exc)
            return None
        for q in route.queues:
            if q.broker_name == self.config.broker_name:
                return TopicConfig(
                    topic, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag, q.order
                )
        self._misses[topic] = time.monotonic()
        return None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="routes")

    async def stop(self, unregister: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if unregister:
            c = self.config
            try:
                await asyncio.to_thread(
                    self.client.broker_unregister,
                    c.cluster,
                    c.broker_name,
                    c.address,
                    self.route_id,
                )
            except ClientError as exc:
                log.warning("routes: unregister failed: %s", exc)

    async def _run(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        full_every = self.config.register_interval_ms / 1000
        last_full = -full_every
        c = self.config
        failing = False
        while True:
            self._wake.clear()  # a change from here on wakes the next round at once
            try:
                now = time.monotonic()
                if self.registered_version != self.topics.version or now - last_full >= full_every:
                    await asyncio.to_thread(self.register)
                    last_full = now
                elif not await asyncio.to_thread(
                    self.client.broker_heartbeat, c.broker_name, self.route_id, c.address
                ):
                    await asyncio.to_thread(self.register)
                    last_full = now
                if failing:
                    log.info("routes: registered in metaledger again")
                failing = False
                self._progress.set()
                self._progress = asyncio.Event()
            except ClientError as exc:
                if not failing:  # once per outage, not every heartbeat
                    log.warning("routes: registration in metaledger failed (retrying): %s", exc)
                failing = True
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the inner result
            # when a cancel arrives as the event is set, and stop() then waits on a task that
            # goes on forever (seen once as a hung unit test under load)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()
