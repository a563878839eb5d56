"""RocketMQ route queries: what the remoting front and the gRPC service answer from an image.

Read-only functions of a :class:`~nameserver.state.image.MetadataImage` (any node's: routes
are read with eventual consistency). They return domain values (:class:`Route`,
:class:`BrokerGroup`, records), never a wire format: ``routing/remoting.py`` renders
RocketMQ's JSON from them and ``routing/service.py`` its protobuf. A route exists only when
the topic has queue data and at least one of its broker names has a broker
(``pickupTopicRouteData``).
"""

from __future__ import annotations

from dataclasses import dataclass

from nameserver.routing.apply import ORDER_TOPIC_CONFIG, broker_names_of_cluster
from nameserver.routing.records import (
    SEP,
    Broker,
    KvConfig,
    TopicQueue,
    kvconfig_key,
    prefix_range,
    topic_key,
)
from nameserver.state.image import MetadataImage
from nameserver.state.mapdelta import RecordsImage


def brokers_of(image: MetadataImage, broker_name: str) -> list[Broker]:
    return list(image.brokers.range(*prefix_range(broker_name)))


@dataclass(frozen=True)
class BrokerGroup:
    """The brokers of one broker name (RocketMQ's BrokerData), in the image's order: the
    first names the group's cluster and acting-master flag."""

    brokers: tuple[Broker, ...]

    @property
    def broker_name(self) -> str:
        return self.brokers[0].broker_name

    @property
    def cluster(self) -> str:
        return self.brokers[0].cluster

    @property
    def enable_acting_master(self) -> bool:
        return bool(self.brokers[0].enable_acting_master)

    @property
    def zone(self) -> str:
        """The first zone a broker of the group names ("" when none does)."""
        return next((b.zone for b in self.brokers if b.zone), "")

    @property
    def addrs(self) -> dict[int, str]:
        """broker id -> address, by broker id."""
        return {b.broker_id: b.addr for b in sorted(self.brokers, key=lambda b: b.broker_id)}


@dataclass(frozen=True)
class Route:
    """The route of a topic (RocketMQ's TopicRouteData): its queue data, the broker group of
    each broker name that has brokers, and its order config if one is set."""

    topic: str
    queues: tuple[TopicQueue, ...]
    groups: tuple[BrokerGroup, ...]
    order_topic_conf: str | None = None


def queues_of(image: MetadataImage, topic: str) -> list[TopicQueue]:
    return list(image.topics.range(*prefix_range(topic)))


def pick_route(image: MetadataImage, topic: str) -> Route | None:
    """The route of ``topic``, or None (TOPIC_NOT_EXIST) unless it has both queue data and
    broker data (``pickupTopicRouteData``)."""
    queues = queues_of(image, topic)
    if not queues:
        return None
    groups = []
    for q in queues:
        brokers = brokers_of(image, q.broker_name)
        if brokers:
            groups.append(BrokerGroup(tuple(brokers)))
    if not groups:
        return None
    order = image.kvconfig.get(kvconfig_key(ORDER_TOPIC_CONFIG, topic))
    return Route(topic, tuple(queues), tuple(groups), order.value if order is not None else None)


def clusters(image: MetadataImage) -> dict[str, list[str]]:
    """cluster -> its broker names (sorted), derived from the broker records."""
    out: dict[str, set[str]] = {}
    for b in image.brokers.values():
        out.setdefault(b.cluster, set()).add(b.broker_name)
    return {c: sorted(names) for c, names in sorted(out.items())}


def broker_groups(image: MetadataImage) -> dict[str, BrokerGroup]:
    """broker name -> its group, over every broker of the image (RocketMQ's brokerAddrTable)."""
    by_name: dict[str, list[Broker]] = {}
    for b in image.brokers.values():
        by_name.setdefault(b.broker_name, []).append(b)
    return {name: BrokerGroup(tuple(bs)) for name, bs in by_name.items()}


def _topic_of(key: bytes) -> str:
    return key.split(SEP, 1)[0].decode()


def all_topics(image: MetadataImage, cluster: str = "") -> list[str]:
    """Topics with queue data (only on the brokers of ``cluster`` when given), sorted."""
    names = broker_names_of_cluster(image.brokers.values(), cluster) if cluster else None
    out: list[str] = []
    for key, q in image.topics.data.items():
        if names is not None and q.broker_name not in names:
            continue
        topic = _topic_of(key)
        if not out or out[-1] != topic:
            out.append(topic)
    return out


def system_topics(image: MetadataImage) -> tuple[list[str], str]:
    """RocketMQ's ``getSystemTopicList``: every cluster name and broker name, and the
    address of one broker (the TopicList's ``brokerAddr``)."""
    topics: list[str] = []
    addr = ""
    for c, names in clusters(image).items():
        topics.append(c)
        topics.extend(names)
    for b in image.brokers.values():
        addr = addr or b.addr
    return topics, addr


def kv_list(image: MetadataImage, namespace: str) -> dict[str, str]:
    return {c.key: c.value for c in image.kvconfig.range(*prefix_range(namespace))}


def kv_namespaces(records: RecordsImage[KvConfig]) -> list[str]:
    return sorted({c.namespace for c in records.values()})


def find_topic_queue(image: MetadataImage, topic: str, broker_name: str) -> TopicQueue | None:
    return image.topics.get(topic_key(topic, broker_name))
