"""The RocketMQ nameserver on the remoting front: handlers of codes 100-106, 205, 206, 216,
217, 219, 224, 304, 322, 327, 901 and 904 (the route, registration and KV-config codes of
RocketMQ's ``RequestCode.java`` that its nameserver's ``DefaultRequestProcessor`` answers),
on ``rmq``'s frame server as :mod:`nameserver.remoting.server` wires it.

Every node answers reads from its own image (eventual, logged with the apply offset);
writes go through the replicated log from any node (a follower forwards the proposal).
Answers follow RocketMQ's ``DefaultRequestProcessor`` / ``ClientRequestProcessor``:

- response codes and remarks are RocketMQ's (TOPIC_NOT_EXIST 17 with its remark and FAQ
  link, QUERY_NOT_FOUND 22 "No config item, ..."); a missing required ext field is
  SYSTEM_ERROR "the custom field <x> is null" (header decoding, :mod:`.headers`);
- any failure to write (no leader, timeout, a rule of apply) is SYSTEM_ERROR with the
  reason as remark: a broker retries its registration every 30 s, as against RocketMQ
  (every error leaves through :func:`nameserver.remoting.status.to_remoting`);
- the handlers call domain code (:mod:`.apply`, :mod:`.ops`), never the gRPC service, and
  render RocketMQ's JSON here from domain values (:func:`route_json`);
- route bodies are fastjson with unquoted integer keys for clients older than V4_9_4
  that did not ask for standard JSON; every other body is plain fastjson, as RocketMQ's.

Not done (answered SYSTEM_ERROR naming it): REGISTER_BROKER bodies in the deflated
``compressedRegister`` form. Liveness is by heartbeat only, not by connection: a broker
talks to every nameserver node, and a connection closing on one node says nothing about
the broker's liveness on the cluster (RocketMQ's channel-close cleanup is not copied).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nameserver.auth.acl import refusal as acl_refusal
from nameserver.checks import check_name
from nameserver.metrics import REJECTIONS
from nameserver.remoting.headers import DataVersion as DataVersionBody
from nameserver.remoting.headers import QueueData, RegisterBrokerBody, java_crc32
from nameserver.remoting.status import rejection_of, to_remoting
from nameserver.routing import apply as routing
from nameserver.routing import queries
from nameserver.routing.ops import (
    RoutingNode,
    kv_not_found,
    namespace_not_found,
    no_route,
    register_op,
)
from nameserver.routing.records import DataVersion, broker_key, kvconfig_key
from nameserver.state.image import MetadataImage
from protos import records_pb2
from protos.metaledger.v1 import routing_pb2
from rmq.codec import (
    BadRequest,
    RemotingCommand,
    dumps_fastjson,
    wants_standard_json,
)
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import (
    BrokerHeartbeatHeader,
    BrokerIdentityHeader,
    BrokerNameHeader,
    DeleteTopicHeader,
    GetBrokerMemberGroupHeader,
    GetKvListByNamespaceHeader,
    GetRouteInfoHeader,
    GetTopicsByClusterHeader,
    KvConfigKeyHeader,
    PutKvConfigHeader,
    RegisterBrokerHeader,
    RegisterTopicHeader,
)
from rmq.server import Handler, HandlerTable, Peer

log = logging.getLogger(__name__)

Answer = Callable[["NameserverRemoting", RemotingCommand], Awaitable[RemotingCommand | None]]


def _ok(request: RemotingCommand, body: bytes = b"", **ext: object) -> RemotingCommand:
    return request.response(ResponseCode.SUCCESS, None, ext or None, body)


def _json(obj: object) -> bytes:
    return dumps_fastjson(obj, standard=False)


def broker_data_json(group: queries.BrokerGroup) -> dict[str, Any]:
    """RocketMQ's BrokerData (fastjson property order; integer keys)."""
    out: dict[str, Any] = {
        "brokerAddrs": group.addrs,
        "brokerName": group.broker_name,
        "cluster": group.cluster,
        "enableActingMaster": group.enable_acting_master,
    }
    if group.zone:
        out["zoneName"] = group.zone
    return out


def route_json(route: queries.Route) -> dict[str, Any]:
    """RocketMQ's TopicRouteData of ``route``, as its clients read it (fastjson order)."""
    body: dict[str, Any] = {
        "brokerDatas": [broker_data_json(g) for g in route.groups],
        "filterServerTable": {},
    }
    if route.order_topic_conf is not None:
        body["orderTopicConf"] = route.order_topic_conf
    body["queueDatas"] = [q.to_json() for q in route.queues]
    return body


def cluster_info_json(image: MetadataImage) -> dict[str, Any]:
    """RocketMQ's ClusterInfo: brokerAddrTable and clusterAddrTable."""
    return {
        "brokerAddrTable": {
            name: broker_data_json(g) for name, g in queries.broker_groups(image).items()
        },
        "clusterAddrTable": queries.clusters(image),
    }


def _guarded(fn: Answer) -> Answer:
    """A handler whose write or rule failures answer with their remoting code and reason
    (:func:`nameserver.remoting.status.to_remoting`; a missing field stays the codec's
    BadRequest, answered by the server). An error that is no request's fault (a bug)
    answers a generic remark and logs one ERROR line: Python's exception text never
    reaches a client."""

    @functools.wraps(fn)
    async def wrapper(self: NameserverRemoting, request: RemotingCommand) -> RemotingCommand | None:
        try:
            return await fn(self, request)
        except BadRequest:
            raise
        except Exception as exc:
            code, remark = to_remoting(exc, request.code)
            rejection = rejection_of(exc)
            if rejection is None:
                log.error("remoting: code %d failed: %s: %s", request.code, type(exc).__name__, exc)
                log.debug("remoting: code %d failed", request.code, exc_info=True)
            else:  # the request's own mistake: counted, no operator's business
                REJECTIONS.count("remoting", rejection.status.name, type(exc).__name__)
                log.debug("remoting: code %d refused: %s", request.code, remark)
            return request.response(code, remark)

    return wrapper


class NameserverRemoting(HandlerTable):
    """The nameserver's :class:`~rmq.server.RemotingService`."""

    def __init__(self, routes: RoutingNode) -> None:
        super().__init__()
        self.routes = routes
        table: dict[int, Answer] = {
            RequestCode.PUT_KV_CONFIG: NameserverRemoting.put_kv_config,
            RequestCode.GET_KV_CONFIG: NameserverRemoting.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: NameserverRemoting.delete_kv_config,
            RequestCode.REGISTER_BROKER: NameserverRemoting.register_broker,
            RequestCode.UNREGISTER_BROKER: NameserverRemoting.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: NameserverRemoting.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: NameserverRemoting.cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: NameserverRemoting.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: NameserverRemoting.add_write_perm,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: NameserverRemoting.all_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: NameserverRemoting.delete_topic,
            RequestCode.REGISTER_TOPIC_IN_NAMESRV: NameserverRemoting.register_topic,
            RequestCode.GET_KVLIST_BY_NAMESPACE: NameserverRemoting.kv_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: NameserverRemoting.topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: NameserverRemoting.system_topics,
            RequestCode.QUERY_DATA_VERSION: NameserverRemoting.query_data_version,
            RequestCode.GET_BROKER_MEMBER_GROUP: NameserverRemoting.member_group,
            RequestCode.BROKER_HEARTBEAT: NameserverRemoting.broker_heartbeat,
        }
        for code, answer in table.items():
            self.handlers[code] = self._bind(answer)

    def _bind(self, answer: Answer) -> Handler:
        guarded = _guarded(answer)
        state = self.routes.node.state

        async def handler(request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
            # RocketMQ ACL 1.0 (nameserver/auth/acl.py): a write refused before it runs
            why = acl_refusal(state.image.auth, request.code, request.ext_fields, request.body)
            if why is not None:
                REJECTIONS.count("remoting", "PERMISSION_DENIED", "AclException")
                log.debug("remoting: code %d refused: %s", request.code, why)
                return request.response(ResponseCode.NO_PERMISSION, why)
            return await guarded(self, request)

        return handler

    async def _image(self, what: str) -> MetadataImage:
        return await self.routes.read(what)

    async def _propose(self, **op: Any) -> Any:
        applied = await self.routes.propose(records_pb2.RoutingOperation(**op))
        return applied.result

    # ------------------------------------------------------------- kv config
    async def put_kv_config(self, request: RemotingCommand) -> RemotingCommand:
        h = PutKvConfigHeader.from_command(request)
        if not h.namespace or not h.key:
            return request.response(ResponseCode.SYSTEM_ERROR, "namespace or key is null")
        routing.check_kv(h.namespace, h.key)
        item = records_pb2.KvConfigRecord(namespace=h.namespace, key=h.key, value=h.value)
        await self._propose(put_kv_config=item)
        return _ok(request)

    async def get_kv_config(self, request: RemotingCommand) -> RemotingCommand:
        h = KvConfigKeyHeader.from_command(request)
        image = await self._image("kv config")
        item = image.kvconfig.get(kvconfig_key(h.namespace, h.key))
        if item is None:
            raise kv_not_found(h.namespace, h.key)
        return _ok(request, value=item.value)

    async def delete_kv_config(self, request: RemotingCommand) -> RemotingCommand:
        h = KvConfigKeyHeader.from_command(request)
        routing.check_kv(h.namespace, h.key)
        op = records_pb2.DeleteKvConfigOp(namespace=h.namespace, key=h.key)
        await self._propose(delete_kv_config=op)
        return _ok(request)

    async def kv_list(self, request: RemotingCommand) -> RemotingCommand:
        h = GetKvListByNamespaceHeader.from_command(request)
        image = await self._image("kv list")
        items = queries.kv_list(image, h.namespace)
        if not items:
            raise namespace_not_found(h.namespace)
        return _ok(request, _json({"table": items}))

    # --------------------------------------------------------------- brokers
    async def register_broker(self, request: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerHeader.from_command(request)
        if h.body_crc32 and java_crc32(request.body) != h.body_crc32:
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if h.compressed:
            raise BadRequest(
                "metaledger: REGISTER_BROKER bodies in the compressed form are not supported; "
                "set compressedRegister=false on the broker"
            )
        body = RegisterBrokerBody.decode(request.body) if request.body else RegisterBrokerBody()
        # the same operation a gRPC RegisterBroker makes (one place builds it)
        req = routing_pb2.RegisterBrokerRequest(
            cluster=h.cluster_name,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            addr=h.broker_addr,
            ha_addr=h.ha_server_addr,
            zone=h.zone_name or "",
            data_version=routing_pb2.DataVersion(
                counter=body.data_version.counter,
                state_version=body.data_version.state_version,
                timestamp=body.data_version.timestamp,
            ),
            heartbeat_timeout_ms=h.heartbeat_timeout_millis or 0,
            topics=[
                routing_pb2.TopicConfig(
                    topic=t.topic_name,
                    read_queue_nums=t.read_queue_nums,
                    write_queue_nums=t.write_queue_nums,
                    perm=t.perm,
                    topic_sys_flag=t.topic_sys_flag,
                    order=t.order,
                )
                for t in body.topics
            ],
        )
        if h.enable_acting_master is not None:
            req.enable_acting_master = h.enable_acting_master
        op = register_op(req)
        _, r = await self.routes.register(op)
        image = self.routes.node.state.image
        order = queries.kv_list(image, routing.ORDER_TOPIC_CONFIG)
        return _ok(
            request,
            _json({"table": order}) if order else b"",
            haServerAddr=r.ha_server_addr or None,
            masterAddr=r.master_addr or None,
        )

    async def unregister_broker(self, request: RemotingCommand) -> RemotingCommand:
        h = BrokerIdentityHeader.from_command(request)
        check_name("broker_name", h.broker_name)
        op = records_pb2.UnregisterBrokerOp(
            cluster=h.cluster_name,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            addr=h.broker_addr,
        )
        await self._propose(unregister_broker=op)
        return _ok(request)

    async def query_data_version(self, request: RemotingCommand) -> RemotingCommand:
        h = BrokerIdentityHeader.from_command(request)
        dv = DataVersionBody.decode(request.body, "QUERY_DATA_VERSION")
        asked = DataVersion(dv.counter, dv.state_version, dv.timestamp)
        image = await self._image("data version")
        b = image.brokers.get(broker_key(h.broker_name, h.broker_id))
        known = b is not None and b.addr == h.broker_addr
        self.routes.keeper.heartbeat(h.broker_name, h.broker_id, h.broker_addr)
        changed = not known or b is None or b.data_version != asked
        body = _json(b.data_version.to_json()) if known and b is not None else b""
        return _ok(request, body, changed=changed)

    async def broker_heartbeat(self, request: RemotingCommand) -> RemotingCommand:
        h = BrokerHeartbeatHeader.from_command(request)
        image = self.routes.node.state.image
        ids = (
            [h.broker_id]
            if h.broker_id is not None
            else [b.broker_id for b in queries.brokers_of(image, h.broker_name)]
        )
        for broker_id in ids:
            self.routes.keeper.heartbeat(h.broker_name, broker_id, h.broker_addr)
        return _ok(request)

    async def member_group(self, request: RemotingCommand) -> RemotingCommand:
        h = GetBrokerMemberGroupHeader.from_command(request)
        image = await self._image("member group")
        brokers = [b for b in queries.brokers_of(image, h.broker_name)]
        group = {
            "brokerAddrs": {b.broker_id: b.addr for b in brokers if b.cluster == h.cluster_name},
            "brokerName": h.broker_name,
            "cluster": h.cluster_name,
        }
        return _ok(request, _json({"brokerMemberGroup": group}))

    async def wipe_write_perm(self, request: RemotingCommand) -> RemotingCommand:
        return await self._write_perm(request, wipe=True)

    async def add_write_perm(self, request: RemotingCommand) -> RemotingCommand:
        return await self._write_perm(request, wipe=False)

    async def _write_perm(self, request: RemotingCommand, *, wipe: bool) -> RemotingCommand:
        """WIPE_ (``wipe``) or ADD_WRITE_PERM_OF_BROKER: the topics it changed, counted."""
        h = BrokerNameHeader.from_command(request)
        check_name("broker_name", h.broker_name)
        op = records_pb2.WritePermOp(broker_name=h.broker_name, wipe=wipe)
        _, counted = await self.routes.propose_count(records_pb2.RoutingOperation(write_perm=op))
        return _ok(request, wipeTopicCount=counted) if wipe else _ok(request, addTopicCount=counted)

    async def cluster_info(self, request: RemotingCommand) -> RemotingCommand:
        image = await self._image("cluster info")
        return _ok(request, _json(cluster_info_json(image)))

    # ---------------------------------------------------------------- topics
    async def get_route(self, request: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoHeader.from_command(request)
        image = await self._image(f"topic {h.topic}")
        route = queries.pick_route(image, h.topic)
        if route is None:
            raise no_route(h.topic, faq=True)
        body = route_json(route)
        return _ok(request, dumps_fastjson(body, standard=wants_standard_json(request)))

    async def all_topics(self, request: RemotingCommand) -> RemotingCommand:
        image = await self._image("topic list")
        return _ok(request, _json({"topicList": queries.all_topics(image)}))

    async def topics_by_cluster(self, request: RemotingCommand) -> RemotingCommand:
        h = GetTopicsByClusterHeader.from_command(request)
        image = await self._image("topics of cluster")
        return _ok(request, _json({"topicList": queries.all_topics(image, h.cluster)}))

    async def system_topics(self, request: RemotingCommand) -> RemotingCommand:
        image = await self._image("system topics")
        topics, addr = queries.system_topics(image)
        body: dict[str, object] = {"brokerAddr": addr} if addr else {}
        body["topicList"] = topics
        return _ok(request, _json(body))

    async def delete_topic(self, request: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicHeader.from_command(request)
        check_name("topic", h.topic)
        op = records_pb2.DeleteTopicOp(topic=h.topic, cluster=h.cluster_name or "")
        await self._propose(delete_topic=op)
        return _ok(request)

    async def register_topic(self, request: RemotingCommand) -> RemotingCommand:
        h = RegisterTopicHeader.from_command(request)
        # The name first: each queue record repeats it (RocketMQ's topic name rules).
        routing.check_topic_name("topic", h.topic)
        queues = QueueData.decode_list(
            request.body, "REGISTER_TOPIC_IN_NAMESRV", routing.MAX_TOPIC_BROKERS
        )
        op = records_pb2.CreateTopicOp(topic=h.topic)
        for q in queues:
            op.queues.add(
                topic=h.topic,
                broker_name=q.broker_name,
                read_queue_nums=q.read_queue_nums,
                write_queue_nums=q.write_queue_nums,
                perm=q.perm,
                topic_sys_flag=q.topic_sys_flag,
            )
        routing.check_create_topic(op)
        routing.check_queue_nums(op)
        await self._propose(create_topic=op)
        return _ok(request)
