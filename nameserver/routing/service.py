"""gRPC service ``metaledger.v1.Routing``: RocketMQ route data over gRPC.

The rules live in the state machine (:mod:`nameserver.routing.apply`); here requests are
checked early (the same checks apply runs, so a bad request never reaches the log),
proposed, and answered. Route reads are eventual (:mod:`nameserver.state.consistency`): served
from this node's image with its ``apply_offset``, never after a read barrier.
"""

from __future__ import annotations

import logging
from typing import Any

from nameserver.errors import Aborted, InvalidArgument, NotFound
from nameserver.grpc.context import NodeContext, rpc
from nameserver.offsets.apply import check_name
from nameserver.routing import apply as routing
from nameserver.routing.liveness import BrokerKeeper
from nameserver.routing.records import (
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    Broker,
    DataVersion,
    TopicQueue,
    broker_key,
    kvconfig_key,
)
from nameserver.state import consistency
from nameserver.state.image import MetadataImage
from protos import records_pb2
from protos.metaledger.v1 import routing_pb2, routing_pb2_grpc
from raftlog import Applied

log = logging.getLogger(__name__)

#: RocketMQ's remark for a topic without a route (ClientRequestProcessor), FAQ link included.
TOPIC_NOT_EXIST_FAQ = (
    "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
)


def topic_not_exist(topic: str) -> str:
    if len(topic) > 256:  # no such topic can exist (127 characters at most): quote its head
        topic = f"{topic[:128]}… ({len(topic)} characters)"
    return f"No topic route info in name server for the topic: {topic}"


class RoutingNode:
    """What the gRPC service and the remoting front share: eventual reads of this node's
    image and proposals of routing operations through the log."""

    def __init__(self, node: NodeContext, keeper: BrokerKeeper) -> None:
        self.node = node
        self.keeper = keeper
        self.route_reads = 0
        """Route reads served (a metric; each is logged at debug with its apply offset)."""

    async def read(self, what: str) -> MetadataImage:
        image, _ = await consistency.read_image(self.node, "broker", serializable=True)
        self.route_reads += 1
        log.debug("route read %s at apply offset %d", what, image.revision)
        return image

    async def propose(self, op: records_pb2.RoutingOperation, context: Any = None) -> Applied:
        """Propose ``op``; one larger than ``max_request_bytes`` (a registration of a great
        many topics) is refused before it reaches the log."""
        entry = routing.routing_entry(op)
        self.node.check_encoded_size(len(entry.value))
        return await self.node.propose(entry, context)

    async def register(
        self, op: records_pb2.RegisterBrokerOp, context: Any = None
    ) -> tuple[int, routing.Registered]:
        """Register a broker. A re-registration that would change nothing in this node's
        image is a heartbeat only and writes nothing (the log holds changes of state)."""
        routing.check_register(op)
        image = self.node.state.image
        unchanged = _unchanged_registration(image, op)
        if unchanged is not None:
            self.keeper.heartbeat(op.broker_name, op.broker_id, op.addr)
            return image.revision, unchanged
        applied = await self.propose(records_pb2.RoutingOperation(register_broker=op), context)
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


def broker_pb(b: Broker) -> routing_pb2.Broker:
    out = routing_pb2.Broker(
        cluster=b.cluster,
        broker_name=b.broker_name,
        broker_id=b.broker_id,
        addr=b.addr,
        ha_addr=b.ha_addr,
        zone=b.zone,
        data_version=routing_pb2.DataVersion(
            counter=b.data_version.counter,
            state_version=b.data_version.state_version,
            timestamp=b.data_version.timestamp,
        ),
        heartbeat_timeout_ms=b.heartbeat_timeout_ms,
        registered_offset=b.registered_offset,
    )
    if b.enable_acting_master is not None:
        out.enable_acting_master = b.enable_acting_master
    return out


def queue_pb(q: TopicQueue) -> routing_pb2.QueueData:
    return routing_pb2.QueueData(
        broker_name=q.broker_name,
        read_queue_nums=q.read_queue_nums,
        write_queue_nums=q.write_queue_nums,
        perm=q.perm,
        topic_sys_flag=q.topic_sys_flag,
        order=q.order,
    )


def register_op(request: routing_pb2.RegisterBrokerRequest) -> records_pb2.RegisterBrokerOp:
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


class RoutingService(routing_pb2_grpc.RoutingServicer):  # type: ignore[misc]
    def __init__(self, routes: RoutingNode) -> None:
        self.routes = routes

    @rpc
    async def RegisterBroker(
        self, request: routing_pb2.RegisterBrokerRequest, context: Any
    ) -> routing_pb2.RegisterBrokerResponse:
        revision, r = await self.routes.register(register_op(request), context)
        return routing_pb2.RegisterBrokerResponse(
            revision=revision,
            changed=r.changed,
            master_addr=r.master_addr,
            ha_server_addr=r.ha_server_addr,
        )

    @rpc
    async def UnregisterBroker(
        self, request: routing_pb2.UnregisterBrokerRequest, context: Any
    ) -> routing_pb2.UnregisterBrokerResponse:
        op = records_pb2.UnregisterBrokerOp(
            cluster=request.cluster,
            broker_name=request.broker_name,
            broker_id=request.broker_id,
            addr=request.addr,
        )
        check_name("broker_name", op.broker_name)
        applied = await self.routes.propose(
            records_pb2.RoutingOperation(unregister_broker=op), context
        )
        removed = applied.result if isinstance(applied.result, int) else 0
        return routing_pb2.UnregisterBrokerResponse(revision=applied.offset, removed=removed)

    @rpc
    async def Heartbeat(
        self, request: routing_pb2.HeartbeatRequest, context: Any
    ) -> routing_pb2.HeartbeatResponse:
        keeper = self.routes.keeper
        out = routing_pb2.HeartbeatResponse(apply_offset=self.routes.node.state.image.revision)
        for hb in request.heartbeats:
            check_name("broker_name", hb.broker_name)
            at = hb.seen_ms if request.forwarded else 0
            out.registered.append(keeper.heartbeat(hb.broker_name, hb.broker_id, hb.addr, at))
        return out

    @rpc
    async def GetRoute(
        self, request: routing_pb2.GetRouteRequest, context: Any
    ) -> routing_pb2.GetRouteResponse:
        check_name("topic", request.topic)
        image = await self.routes.read(f"topic {request.topic}")
        if routing.pick_route(image, request.topic) is None:
            raise NotFound(topic_not_exist(request.topic))
        resp = routing_pb2.GetRouteResponse(topic=request.topic, apply_offset=image.revision)
        for q in routing.queues_of(image, request.topic):
            resp.queues.append(queue_pb(q))
            brokers = routing.brokers_of(image, q.broker_name)
            if brokers:
                group = resp.brokers.add(
                    cluster=brokers[0].cluster,
                    broker_name=q.broker_name,
                    zone=next((b.zone for b in brokers if b.zone), ""),
                    enable_acting_master=bool(brokers[0].enable_acting_master),
                )
                for b in brokers:
                    group.addrs[b.broker_id] = b.addr
        order = image.kvconfig.get(kvconfig_key(routing.ORDER_TOPIC_CONFIG, request.topic))
        if order is not None:
            resp.order_topic_conf = order.value
        return resp

    @rpc
    async def GetClusterInfo(
        self, request: routing_pb2.GetClusterInfoRequest, context: Any
    ) -> routing_pb2.GetClusterInfoResponse:
        image = await self.routes.read("cluster info")
        resp = routing_pb2.GetClusterInfoResponse(apply_offset=image.revision)
        for name, names in routing.clusters(image).items():
            resp.clusters.add(name=name, broker_names=names)
        resp.brokers.extend(broker_pb(b) for b in image.brokers.values())
        return resp

    @rpc
    async def ListTopics(
        self, request: routing_pb2.ListTopicsRequest, context: Any
    ) -> routing_pb2.ListTopicsResponse:
        if request.system and request.cluster:
            raise InvalidArgument("metaledger: give cluster or system, not both")
        image = await self.routes.read("topic list")
        resp = routing_pb2.ListTopicsResponse(apply_offset=image.revision)
        if request.system:
            topics, resp.broker_addr = routing.system_topics(image)
        else:
            topics = routing.all_topics(image, request.cluster)
        resp.topics.extend(topics)
        return resp

    @rpc
    async def CreateTopic(
        self, request: routing_pb2.CreateTopicRequest, context: Any
    ) -> routing_pb2.CreateTopicResponse:
        # Checked before the operation is built: each queue record repeats the topic name.
        routing.check_create_topic_request(request.topic, len(request.queues))
        op = records_pb2.CreateTopicOp(topic=request.topic)
        op.queues.extend(
            records_pb2.TopicQueueRecord(
                topic=request.topic,
                broker_name=q.broker_name,
                read_queue_nums=q.read_queue_nums,
                write_queue_nums=q.write_queue_nums,
                perm=q.perm,
                topic_sys_flag=q.topic_sys_flag,
                order=q.order,
            )
            for q in request.queues
        )
        routing.check_create_topic(op)
        routing.check_queue_nums(op)
        applied = await self.routes.propose(records_pb2.RoutingOperation(create_topic=op), context)
        return routing_pb2.CreateTopicResponse(revision=applied.offset)

    @rpc
    async def DeleteTopic(
        self, request: routing_pb2.DeleteTopicRequest, context: Any
    ) -> routing_pb2.DeleteTopicResponse:
        check_name("topic", request.topic)
        op = records_pb2.DeleteTopicOp(topic=request.topic, cluster=request.cluster)
        applied = await self.routes.propose(records_pb2.RoutingOperation(delete_topic=op), context)
        deleted = applied.result if isinstance(applied.result, int) else 0
        return routing_pb2.DeleteTopicResponse(revision=applied.offset, deleted=deleted)

    @rpc
    async def PutKvConfig(
        self, request: routing_pb2.PutKvConfigRequest, context: Any
    ) -> routing_pb2.PutKvConfigResponse:
        routing.check_kv(request.namespace, request.key)
        op = records_pb2.KvConfigRecord(
            namespace=request.namespace, key=request.key, value=request.value
        )
        applied = await self.routes.propose(records_pb2.RoutingOperation(put_kv_config=op), context)
        return routing_pb2.PutKvConfigResponse(revision=applied.offset)

    @rpc
    async def GetKvConfig(
        self, request: routing_pb2.GetKvConfigRequest, context: Any
    ) -> routing_pb2.GetKvConfigResponse:
        routing.check_kv(request.namespace, request.key)
        image = await self.routes.read("kv config")
        item = image.kvconfig.get(kvconfig_key(request.namespace, request.key))
        if item is None:
            raise NotFound(kv_not_found(request.namespace, request.key))
        return routing_pb2.GetKvConfigResponse(value=item.value, apply_offset=image.revision)

    @rpc
    async def DeleteKvConfig(
        self, request: routing_pb2.DeleteKvConfigRequest, context: Any
    ) -> routing_pb2.DeleteKvConfigResponse:
        routing.check_kv(request.namespace, request.key)
        op = records_pb2.DeleteKvConfigOp(namespace=request.namespace, key=request.key)
        applied = await self.routes.propose(
            records_pb2.RoutingOperation(delete_kv_config=op), context
        )
        return routing_pb2.DeleteKvConfigResponse(
            revision=applied.offset, deleted=applied.result is True
        )

    @rpc
    async def ListKvConfig(
        self, request: routing_pb2.ListKvConfigRequest, context: Any
    ) -> routing_pb2.ListKvConfigResponse:
        check_name("namespace", request.namespace)
        image = await self.routes.read("kv list")
        items = routing.kv_list(image, request.namespace)
        if not items:
            raise NotFound(f"No config item, Namespace: {request.namespace}")
        return routing_pb2.ListKvConfigResponse(items=items, apply_offset=image.revision)


def kv_not_found(namespace: str, key: str) -> str:
    """RocketMQ's QUERY_NOT_FOUND remark for GET_KV_CONFIG."""
    return f"No config item, Namespace: {namespace} Key: {key}"
