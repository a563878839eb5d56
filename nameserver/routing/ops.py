"""What both routing fronts share: :class:`RoutingNode` (eventual reads of this node's image,
proposals of routing operations, broker registration), the registration operation built
from a request, and RocketMQ's words for what is not there.

The gRPC service (:mod:`nameserver.routing.service`) and the RocketMQ remoting front
(:mod:`nameserver.routing.remoting`) both call these; neither imports the other, and
nothing here imports gRPC: the node is the node's facade (:class:`nameserver.node.NodeFacade`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nameserver.errors import Aborted, ConfigNotFound, TopicNotExist
from nameserver.routing import apply as routing
from nameserver.routing.liveness import BrokerKeeper
from nameserver.routing.records import DEFAULT_HEARTBEAT_TIMEOUT_MS, DataVersion, broker_key
from nameserver.state import consistency
from nameserver.state.image import MetadataImage
from protos import records_pb2
from protos.metaledger.v1 import routing_pb2
from raftlog import Applied

if TYPE_CHECKING:
    from nameserver.node import Metadata, NodeFacade

log = logging.getLogger(__name__)

#: RocketMQ's remark for a topic without a route (ClientRequestProcessor), FAQ link included.
TOPIC_NOT_EXIST_FAQ = (
    "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
)


def quoted(name: str) -> str:
    """A name a client sent, for a remark: whole up to 256 characters, else its head and
    its length (a remark stays short whatever the client sent)."""
    if len(name) > 256:
        return f"{name[:128]}… ({len(name)} characters)"
    return name


def topic_not_exist(topic: str) -> str:
    # no such topic can exist past 127 characters: quote its head
    return f"No topic route info in name server for the topic: {quoted(topic)}"


def no_route(topic: str, faq: bool = False) -> TopicNotExist:
    """TOPIC_NOT_EXIST / NOT_FOUND for ``topic``; RocketMQ's remoting remark adds its FAQ."""
    return TopicNotExist(topic_not_exist(topic) + (TOPIC_NOT_EXIST_FAQ if faq else ""))


def kv_not_found(namespace: str, key: str) -> ConfigNotFound:
    """RocketMQ's QUERY_NOT_FOUND for GET_KV_CONFIG."""
    return ConfigNotFound(f"No config item, Namespace: {quoted(namespace)} Key: {quoted(key)}")


def namespace_not_found(namespace: str) -> ConfigNotFound:
    """RocketMQ's QUERY_NOT_FOUND for GET_KVLIST_BY_NAMESPACE."""
    return ConfigNotFound(f"No config item, Namespace: {quoted(namespace)}")


class RoutingNode:
    """What the gRPC service and the remoting front share: eventual reads of this node's
    image and proposals of routing operations through the log."""

    def __init__(self, node: NodeFacade, keeper: BrokerKeeper) -> None:
        self.node = node
        self.keeper = keeper
        self.route_reads = 0
        """Route reads served (a metric; each is logged at debug with its apply offset)."""

    async def read(self, what: str) -> MetadataImage:
        image, _ = await consistency.read_image(self.node, "broker", serializable=True)
        self.route_reads += 1
        log.debug("route read %s at apply offset %d", what, image.offset)
        return image

    async def propose(
        self, op: records_pb2.RoutingOperation, metadata: Metadata | None = None
    ) -> Applied:
        """Propose ``op`` (``metadata``: the request's, for de-duplication); one larger than
        ``max_request_bytes`` (a registration of a great many topics) is refused before it
        reaches the log."""
        entry = routing.routing_entry(op)
        self.node.check_encoded_size(len(entry.value))
        return await self.node.propose(entry, metadata)

    async def propose_count(
        self, op: records_pb2.RoutingOperation, metadata: Metadata | None = None
    ) -> tuple[int, int]:
        """:meth:`propose` an operation whose result is a count (brokers removed, topics
        deleted or changed): its revision and the count, 0 for a de-duplicated retry."""
        applied = await self.propose(op, metadata)
        return applied.offset, applied.result if isinstance(applied.result, int) else 0

    async def register(
        self, op: records_pb2.RegisterBrokerOp, metadata: Metadata | None = None
    ) -> tuple[int, routing.Registered]:
        """Register a broker. A re-registration that would change nothing in this node's
        image is a heartbeat only and writes nothing (the log holds changes of state)."""
        routing.check_register(op)
        image = self.node.state.image
        unchanged = _unchanged_registration(image, op)
        if unchanged is not None:
            self.keeper.heartbeat(op.broker_name, op.broker_id, op.addr)
            return image.offset, unchanged
        applied = await self.propose(records_pb2.RoutingOperation(register_broker=op), metadata)
        result = applied.result
        if not isinstance(result, routing.Registered):  # a de-duplicated retry
            result = _unchanged_registration(self.node.state.image, op)
            if result is None:
                raise Aborted("metaledger: registration superseded, register again")
        self.keeper.heartbeat(op.broker_name, op.broker_id, op.addr)
        return applied.offset, result


def _unchanged_registration(
    image: MetadataImage, op: records_pb2.RegisterBrokerOp
) -> routing.Registered | None:
    """The answer to a registration that would change nothing in ``image`` (same broker
    record, and for a master queue data already equal), else None."""
    old = image.brokers.get(broker_key(op.broker_name, op.broker_id))
    if old is None or old.addr != op.addr or old.cluster != op.cluster:
        return None
    same = (
        old.ha_addr == op.ha_addr
        and old.zone == op.zone
        and old.data_version == DataVersion.from_pb(op.data_version)
        and old.heartbeat_timeout_ms == (op.heartbeat_timeout_ms or DEFAULT_HEARTBEAT_TIMEOUT_MS)
        and old.enable_acting_master
        == (op.enable_acting_master if op.HasField("enable_acting_master") else None)
    )
    if not same:
        return None
    master = image.brokers.get(broker_key(op.broker_name, 0)) if op.broker_id else None
    return routing.Registered(
        old, False, master.addr if master else "", master.ha_addr if master else ""
    )


def register_op(request: routing_pb2.RegisterBrokerRequest) -> records_pb2.RegisterBrokerOp:
    """The log's registration operation for a RegisterBroker request (the remoting front
    builds the same request from REGISTER_BROKER's header and body)."""
    op = records_pb2.RegisterBrokerOp(
        cluster=request.cluster,
        broker_name=request.broker_name,
        broker_id=request.broker_id,
        addr=request.addr,
        ha_addr=request.ha_addr,
        zone=request.zone,
        data_version=records_pb2.DataVersionRecord(
            counter=request.data_version.counter,
            state_version=request.data_version.state_version,
            timestamp=request.data_version.timestamp,
        ),
        heartbeat_timeout_ms=request.heartbeat_timeout_ms,
    )
    if request.HasField("enable_acting_master"):
        op.enable_acting_master = request.enable_acting_master
    op.topics.extend(
        records_pb2.TopicConfigRecord(
            topic=t.topic,
            read_queue_nums=t.read_queue_nums,
            write_queue_nums=t.write_queue_nums,
            perm=t.perm,
            topic_sys_flag=t.topic_sys_flag,
            order=t.order,
        )
        for t in request.topics
    )
    return op
