"""The replica's RocketMQ 5 gRPC port (``--listen-grpc``, DESIGN §6: 8081): a grpc.aio server
with :class:`~broker.grpc.service.MessagingService` over :class:`ReplicaBackend`.

A queue's endpoints are its group's live replicas' gRPC addresses, the master's first: each
replica publishes its own in metaledger (``/brokers/<group>/grpc/<replica id>``) and forwards
what only the master serves (:mod:`broker.grpc.forward`). A replica that published nothing
is found by its remoting port shifted by this replica's own gRPC minus remoting offset: the
same on every replica of a ``cluster up --brokers`` layout (+2), and for replicas started
with matching ``--listen``/``--listen-grpc`` pairs.

A message with a message group (FIFO) goes to write queue ``crc32(group) % writeQueueNums``
(:func:`broker.topics.message_group_queue`, shared with ``metaledger send --fifo-group``), so
one group's messages share one queue and keep their order.
The consumer side (:class:`~broker.grpc.consume.ConsumerBackend`) is the replica's POP service,
its consumer offsets and its store's queue offsets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grpc

from broker.grpc.admin import AdminService, add_admin_to_server
from broker.grpc.convert import SHARDING_KEY
from broker.grpc.forward import GroupFronts
from broker.grpc.guard import DecodeGuard
from broker.grpc.service import MessagingService, RouteQueue, Sent, add_to_server
from broker.pop.service import PopService
from broker.remoting.errors import ServiceNotAvailable, TopicNotExist
from broker.send.processor import SendProcessor
from broker.topics import TopicTable, message_group_queue
from nameserver.client import Client, NotFound
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.headers import SendMessageHeader
from rmq.message import MAX_BODY, Host

#: a message of the broker's largest body fits in one request (gRPC's default is 4 MiB); no
#: SO_REUSEPORT (gRPC's default on Linux), or a second replica on the same port would share
#: the connections instead of failing to start
GRPC_OPTIONS = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", MAX_BODY + 1024 * 1024),
    ("grpc.max_send_message_length", MAX_BODY + 1024 * 1024),
]


class ReplicaBackend:
    """The service's view of one replica: its routes, its send path, its POP service and its
    offsets."""

    max_body_bytes = MAX_BODY

    def __init__(
        self,
        sends: SendProcessor,
        topics: TopicTable,
        client: Client | None,
        *,
        broker_name: str,
        remoting: tuple[str, int],
        grpc_port: int,
        pops: PopService | None = None,
    ) -> None:
        self.sends = sends
        self._pops = pops
        self.topics = topics
        self.client = client
        self.broker_name = broker_name
        self.remoting = remoting
        self.grpc_port = grpc_port
        #: where the groups' gRPC fronts are (None: a lone broker, or the master's only)
        self.fronts: GroupFronts | None = None

    def endpoint(self, remoting_address: str) -> tuple[str, int]:
        """A replica's gRPC ``(host, port)`` from its remoting ``host:port``."""
        host, _, port = remoting_address.rpartition(":")
        if (host, int(port)) == self.remoting:
            return host, self.grpc_port
        return host, int(port) + self.grpc_port - self.remoting[1]

    async def queues(self, topic: str) -> list[RouteQueue]:
        if self.client is None:  # a lone broker: its own topic table
            config = await self.topics.lookup(topic)
            if config is None:
                raise TopicNotExist(f"topic {topic} not found")
            n = max(config.read_queue_nums, config.write_queue_nums)
            return [
                RouteQueue(self.broker_name, 0, i, config.perm, (self.remoting[0], self.grpc_port))
                for i in range(n)
            ]
        try:
            route = await asyncio.to_thread(self.client.route_get, topic)
        except NotFound:
            raise TopicNotExist(f"topic {topic} not found in metaledger's routes") from None
        masters = {b.broker_name: b.addrs.get(0) for b in route.brokers}
        out = []
        for q in route.queues:
            master = masters.get(q.broker_name)
            if not master:
                continue  # no master now: not writable through any endpoint
            fronts = [self.endpoint(master)]
            if self.fronts is not None:
                fronts = await self.fronts.endpoints(q.broker_name, master)
            for i in range(max(q.read_queue_nums, q.write_queue_nums)):
                perm = q.perm
                if i >= q.write_queue_nums:
                    perm &= ~2
                if i >= q.read_queue_nums:
                    perm &= ~4
                out.append(RouteQueue(q.broker_name, 0, i, perm, fronts[0], tuple(fronts[1:])))
        if not out:
            raise TopicNotExist(f"topic {topic} has no queue with a master in the routes")
        return out

    async def send(
        self,
        topic: str,
        body: bytes,
        props: dict[str, str],
        born: Host,
        born_timestamp_ms: int,
        sys_flag: int = 0,
    ) -> Sent:
        h = SendMessageHeader(
            producer_group="",
            topic=topic,
            queue_id=-1,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp_ms,
            flag=0,
        )
        config, queue_id = await self.sends.target(h)
        group = props.get(SHARDING_KEY)
        if group is not None and config.write_queue_nums > 0:
            queue_id = message_group_queue(group, config.write_queue_nums)
        status, results, queue_id = await self.sends.put_one(h, body, props, born, config, queue_id)
        if not results:
            return Sent(status, queue_id, -1)
        return Sent(status, queue_id, results[0].queue_offset, results[0].physical_offset)

    # ------------------------------------------------------------------ consumers
    @property
    def pops(self) -> PopService:
        if self._pops is None:
            raise ServiceNotAvailable("this replica serves no POP consumers")
        return self._pops

    def offset(self, group: str, topic: str, queue_id: int) -> int | None:
        offsets = self.sends.core.offsets
        if not offsets.loaded:
            raise ServiceNotAvailable("consumer offsets are not loaded from metaledger yet")
        return offsets.load(group, topic, queue_id)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.sends.core.offsets.commit(group, topic, queue_id, offset)

    async def queue_offset(self, topic: str, queue_id: int, policy: int, timestamp_ms: int) -> int:
        store = self.sends.core.store
        if policy == v2.BEGINNING:
            return store.min_offset(topic, queue_id)
        if policy == v2.END:
            return store.max_offset(topic, queue_id)
        return await self.sends.core.run(
            store.search_offset_by_timestamp, topic, queue_id, timestamp_ms
        )


async def grpc_front(
    service: MessagingService,
    host: str,
    port: int,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    admin: AdminService | None = None,
) -> tuple[grpc.aio.Server, int]:
    """The started server and its bound port (``port`` 0: any free one); OSError when the
    address cannot be bound. ``admin``: the Admin service beside it (:mod:`broker.grpc.admin`)."""
    # the decode guard first: an undecodable request is answered here, never forwarded
    server = grpc.aio.server(options=GRPC_OPTIONS, interceptors=[DecodeGuard(), *interceptors])
    add_to_server(service, server)
    if admin is not None:
        add_admin_to_server(admin, server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {host}:{port} (gRPC): {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} (gRPC)")
    await server.start()
    return server, bound
