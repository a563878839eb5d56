"""gRPC service ``metaledger.v1.Routing``: RocketMQ route data over gRPC.

The rules live in the state machine (:mod:`nameserver.routing.apply`), what this service
shares with the remoting front in :mod:`nameserver.routing.ops`. Here requests are checked
early (the same checks apply runs, so a bad request never reaches the log), proposed, and
answered. Route reads are eventual (:mod:`nameserver.state.consistency`): served
from this node's image with its ``apply_offset``, never after a read barrier.
"""

from __future__ import annotations

from typing import Any

from nameserver.checks import check_name
from nameserver.errors import InvalidArgument
from nameserver.grpc.status import rpc
from nameserver.routing import apply as routing
from nameserver.routing import queries
from nameserver.routing.ops import (
    RoutingNode,
    kv_not_found,
    namespace_not_found,
    no_route,
    register_op,
)
from nameserver.routing.records import Broker, TopicQueue, kvconfig_key
from protos import records_pb2
from protos.metaledger.v1 import routing_pb2, routing_pb2_grpc


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


class RoutingService(routing_pb2_grpc.RoutingServicer):  # type: ignore[misc]
    def __init__(self, routes: RoutingNode) -> None:
        self.routes = routes

    @rpc
    async def RegisterBroker(
        self, request: routing_pb2.RegisterBrokerRequest, context: Any
    ) -> routing_pb2.RegisterBrokerResponse:
        revision, r = await self.routes.register(
            register_op(request), context.invocation_metadata()
        )
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
        revision, removed = await self.routes.propose_count(
            records_pb2.RoutingOperation(unregister_broker=op), context.invocation_metadata()
        )
        return routing_pb2.UnregisterBrokerResponse(revision=revision, removed=removed)

    @rpc
    async def Heartbeat(
        self, request: routing_pb2.HeartbeatRequest, context: Any
    ) -> routing_pb2.HeartbeatResponse:
        keeper = self.routes.keeper
        out = routing_pb2.HeartbeatResponse(apply_offset=self.routes.node.state.image.offset)
        for hb in request.heartbeats:
            check_name("broker_name", hb.broker_name)
            # counted on this node's clock at receipt, also when a follower forwards it: its
            # seen_ms is the follower's clock, which may lag behind ours
            out.registered.append(keeper.heartbeat(hb.broker_name, hb.broker_id, hb.addr))
        return out

    @rpc
    async def GetRoute(
        self, request: routing_pb2.GetRouteRequest, context: Any
    ) -> routing_pb2.GetRouteResponse:
        check_name("topic", request.topic)
        image = await self.routes.read(f"topic {request.topic}")
        route = queries.pick_route(image, request.topic)
        if route is None:
            raise no_route(request.topic)
        resp = routing_pb2.GetRouteResponse(topic=request.topic, apply_offset=image.offset)
        resp.queues.extend(queue_pb(q) for q in route.queues)
        for g in route.groups:
            group = resp.brokers.add(
                cluster=g.cluster,
                broker_name=g.broker_name,
                zone=g.zone,
                enable_acting_master=g.enable_acting_master,
            )
            group.addrs.update(g.addrs)
        if route.order_topic_conf is not None:
            resp.order_topic_conf = route.order_topic_conf
        return resp

    @rpc
    async def GetClusterInfo(
        self, request: routing_pb2.GetClusterInfoRequest, context: Any
    ) -> routing_pb2.GetClusterInfoResponse:
        image = await self.routes.read("cluster info")
        resp = routing_pb2.GetClusterInfoResponse(apply_offset=image.offset)
        for name, names in queries.clusters(image).items():
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
        resp = routing_pb2.ListTopicsResponse(apply_offset=image.offset)
        if request.system:
            topics, resp.broker_addr = queries.system_topics(image)
        else:
            topics = queries.all_topics(image, request.cluster)
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
        applied = await self.routes.propose(
            records_pb2.RoutingOperation(create_topic=op), context.invocation_metadata()
        )
        return routing_pb2.CreateTopicResponse(revision=applied.offset)

    @rpc
    async def DeleteTopic(
        self, request: routing_pb2.DeleteTopicRequest, context: Any
    ) -> routing_pb2.DeleteTopicResponse:
        check_name("topic", request.topic)
        op = records_pb2.DeleteTopicOp(topic=request.topic, cluster=request.cluster)
        revision, deleted = await self.routes.propose_count(
            records_pb2.RoutingOperation(delete_topic=op), context.invocation_metadata()
        )
        return routing_pb2.DeleteTopicResponse(revision=revision, deleted=deleted)

    @rpc
    async def PutKvConfig(
        self, request: routing_pb2.PutKvConfigRequest, context: Any
    ) -> routing_pb2.PutKvConfigResponse:
        routing.check_kv(request.namespace, request.key)
        op = records_pb2.KvConfigRecord(
            namespace=request.namespace, key=request.key, value=request.value
        )
        applied = await self.routes.propose(
            records_pb2.RoutingOperation(put_kv_config=op), context.invocation_metadata()
        )
        return routing_pb2.PutKvConfigResponse(revision=applied.offset)

    @rpc
    async def GetKvConfig(
        self, request: routing_pb2.GetKvConfigRequest, context: Any
    ) -> routing_pb2.GetKvConfigResponse:
        routing.check_kv(request.namespace, request.key)
        image = await self.routes.read("kv config")
        item = image.kvconfig.get(kvconfig_key(request.namespace, request.key))
        if item is None:
            raise kv_not_found(request.namespace, request.key)
        return routing_pb2.GetKvConfigResponse(value=item.value, apply_offset=image.offset)

    @rpc
    async def DeleteKvConfig(
        self, request: routing_pb2.DeleteKvConfigRequest, context: Any
    ) -> routing_pb2.DeleteKvConfigResponse:
        routing.check_kv(request.namespace, request.key)
        op = records_pb2.DeleteKvConfigOp(namespace=request.namespace, key=request.key)
        applied = await self.routes.propose(
            records_pb2.RoutingOperation(delete_kv_config=op), context.invocation_metadata()
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
        items = queries.kv_list(image, request.namespace)
        if not items:
            raise namespace_not_found(request.namespace)
        return routing_pb2.ListKvConfigResponse(items=items, apply_offset=image.offset)
