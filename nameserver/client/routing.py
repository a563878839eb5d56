"""The routing surface: ``metaledger.v1.Routing`` (RocketMQ route data).

:class:`RoutingApi` gives :class:`nameserver.client.Client` ``route_get``,
``route_cluster_info``, ``route_topics``, ``route_topic_create``, ``route_topic_delete``,
``broker_register`` (for brokers), ``broker_unregister``, ``broker_heartbeat``,
``kvconfig_put``, ``kvconfig_get``, ``kvconfig_delete`` and ``kvconfig_list``; they fail over and raise the
client's typed errors like every other call: a topic without a route and an absent KV
config item are :class:`~nameserver.client.NotFound`. Reads are eventual: each answer
carries ``apply_offset``, the offset of the serving node's image.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nameserver.client.transport import Transport
from protos.metaledger.v1 import routing_pb2, routing_pb2_grpc

__all__ = [
    "BrokerGroup",
    "BrokerInfo",
    "ClusterInfo",
    "QueueData",
    "Route",
    "RoutingApi",
    "TopicList",
]


@dataclass(frozen=True, slots=True)
class BrokerGroup:
    cluster: str
    broker_name: str
    addrs: Mapping[int, str]
    zone: str
    enable_acting_master: bool


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0
    order: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    topic: str
    brokers: list[BrokerGroup]
    queues: list[QueueData]
    order_topic_conf: str
    apply_offset: int


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    ha_addr: str
    zone: str
    heartbeat_timeout_ms: int
    registered_offset: int


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    clusters: dict[str, list[str]]
    brokers: list[BrokerInfo]
    apply_offset: int


@dataclass(frozen=True, slots=True)
class TopicList:
    topics: list[str]
    broker_addr: str
    apply_offset: int


def _stub(method: str) -> Any:
    return lambda s: getattr(routing_pb2_grpc.RoutingStub(s.channel), method)


def _queue(q: routing_pb2.QueueData) -> QueueData:
    return QueueData(
        q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag, q.order
    )


class RoutingApi(Transport):
    """RocketMQ route data: topics, brokers, KV config (metaledger.v1.Routing)."""

    def route_get(self, topic: str) -> Route:
        r = self._call(_stub("GetRoute"), routing_pb2.GetRouteRequest(topic=topic), write=False)
        return Route(
            r.topic,
            [
                BrokerGroup(b.cluster, b.broker_name, dict(b.addrs), b.zone, b.enable_acting_master)
                for b in r.brokers
            ],
            [_queue(q) for q in r.queues],
            r.order_topic_conf,
            r.apply_offset,
        )

    def route_cluster_info(self) -> ClusterInfo:
        r = self._call(_stub("GetClusterInfo"), routing_pb2.GetClusterInfoRequest(), write=False)
        return ClusterInfo(
            {c.name: list(c.broker_names) for c in r.clusters},
            [
                BrokerInfo(
                    b.cluster,
                    b.broker_name,
                    b.broker_id,
                    b.addr,
                    b.ha_addr,
                    b.zone,
                    b.heartbeat_timeout_ms,
                    b.registered_offset,
                )
                for b in r.brokers
            ],
            r.apply_offset,
        )

    def route_topics(self, cluster: str = "", system: bool = False) -> TopicList:
        req = routing_pb2.ListTopicsRequest(cluster=cluster, system=system)
        r = self._call(_stub("ListTopics"), req, write=False)
        return TopicList(list(r.topics), r.broker_addr, r.apply_offset)

    def route_topic_create(self, topic: str, queues: Iterable[QueueData]) -> int:
        """Create or update a topic's queue data on registered broker names; the revision."""
        req = routing_pb2.CreateTopicRequest(topic=topic)
        for q in queues:
            req.queues.add(
                broker_name=q.broker_name,
                read_queue_nums=q.read_queue_nums,
                write_queue_nums=q.write_queue_nums,
                perm=q.perm,
                topic_sys_flag=q.topic_sys_flag,
                order=q.order,
            )
        return int(self._call(_stub("CreateTopic"), req, write=True).revision)

    def route_topic_delete(self, topic: str, cluster: str = "") -> tuple[int, int]:
        """(revision, queue data deleted)."""
        req = routing_pb2.DeleteTopicRequest(topic=topic, cluster=cluster)
        r = self._call(_stub("DeleteTopic"), req, write=True)
        return int(r.revision), int(r.deleted)

    def broker_register(
        self, request: routing_pb2.RegisterBrokerRequest
    ) -> routing_pb2.RegisterBrokerResponse:
        return self._call(_stub("RegisterBroker"), request, write=True)  # type: ignore[no-any-return]

    def broker_unregister(
        self, cluster: str, broker_name: str, addr: str = "", broker_id: int = 0
    ) -> tuple[int, int]:
        """(revision, brokers removed)."""
        req = routing_pb2.UnregisterBrokerRequest(
            cluster=cluster, broker_name=broker_name, broker_id=broker_id, addr=addr
        )
        r = self._call(_stub("UnregisterBroker"), req, write=True)
        return int(r.revision), int(r.removed)

    def broker_heartbeat(self, broker_name: str, broker_id: int, addr: str) -> bool:
        """Keep a broker alive; False: it is not registered (register it again)."""
        req = routing_pb2.HeartbeatRequest()
        req.heartbeats.add(broker_name=broker_name, broker_id=broker_id, addr=addr)
        r = self._call(_stub("Heartbeat"), req, write=False)
        return bool(r.registered[0])

    def kvconfig_put(self, namespace: str, key: str, value: str) -> int:
        req = routing_pb2.PutKvConfigRequest(namespace=namespace, key=key, value=value)
        return int(self._call(_stub("PutKvConfig"), req, write=True).revision)

    def kvconfig_get(self, namespace: str, key: str) -> str:
        req = routing_pb2.GetKvConfigRequest(namespace=namespace, key=key)
        return str(self._call(_stub("GetKvConfig"), req, write=False).value)

    def kvconfig_delete(self, namespace: str, key: str) -> bool:
        req = routing_pb2.DeleteKvConfigRequest(namespace=namespace, key=key)
        return bool(self._call(_stub("DeleteKvConfig"), req, write=True).deleted)

    def kvconfig_list(self, namespace: str) -> dict[str, str]:
        req = routing_pb2.ListKvConfigRequest(namespace=namespace)
        return dict(self._call(_stub("ListKvConfig"), req, write=False).items)
