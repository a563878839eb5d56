"""GET_CONSUMER_CONNECTION_LIST (203): a consumer group's connections, remoting and gRPC.

As RocketMQ's ``AdminBrokerProcessor.getConsumerConnectionList`` (``AdminBrokerProcessor.java``
:1749-1786): SUCCESS with a ``ConsumerConnection`` body (``connectionSet`` of ``{clientAddr,
clientId, language, version}``, ``consumeFromWhere``, ``consumeType``, ``messageModel``,
``subscriptionTable`` of ``SubscriptionData``), or CONSUMER_NOT_ONLINE (206) "the consumer
group[G] not online" when the group has no member here. Fastjson's layout: fields in
alphabetical order, enums by name.

Members: the remoting consumers that sent a heartbeat (``broker.state.consumers``, with the
heartbeat's language and version), and the gRPC consumers (5.x SimpleConsumer and
PushConsumer) whose heartbeat named the group (:meth:`broker.clients.GrpcClients.consumer`),
as RocketMQ's proxy registers them: the language of their user agent and version
``V5_3_3``'s ordinal (the proxy's ``parseClientVersion`` of a version like ``5.1.2`` falls
back to its own, ``MQVersion.CURRENT_VERSION``). A group with only gRPC members answers
``CONSUME_POP`` / ``CLUSTERING`` and no subscriptions (they are in the clients' settings,
which the broker does not keep per group).

One more, metaledger's own (fastjson and the dashboard ignore it): ``clientProtocols``, per
client id its ``protocol`` (``remoting`` or ``grpc``) and its version as the client gave it
(a remoting client's ``version`` header by name, ``V4_9_4``; a gRPC client's user agent,
``5.1.2``), which ``version``'s ordinal cannot tell for a gRPC client.

GET_PRODUCER_CONNECTION_LIST (204), as ``AdminBrokerProcessor.getProducerConnectionList``:
SUCCESS with a ``ProducerConnection`` body (``connectionSet`` of the same ``Connection``s), or
SYSTEM_ERROR "the producer group[G] not exist" when the group has no live connection here.
Members: the remoting producers whose heartbeats' ``producerDataSet`` named the group, and
the 5.x gRPC producers whose Telemetry settings publish to it (as RocketMQ's proxy registers
them, the group of a gRPC producer is the topic's name; ``broker.state.producers``), with
``clientProtocols`` as above.
"""

from __future__ import annotations

import json

from broker.clients import GrpcClients
from broker.core import BrokerCore
from broker.store.consume_queue import tags_code
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode, Version, version_name
from rmq.headers import GetConsumerConnectionListHeader, GetProducerConnectionListHeader
from rmq.server import Handler, Peer

__all__ = ["ConnectionsProcessor"]

GRPC_VERSION = Version.V5_3_3  # what the front answers as (broker/admin/processor.py)


class ConnectionsProcessor:
    def __init__(self, core: BrokerCore, grpc: GrpcClients) -> None:
        self.core = core
        self.grpc = grpc

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_list,
        }

    def producers(self, group: str) -> dict[str, object] | None:
        """The ProducerConnection of the group; None when nobody of it is here."""
        members = self.core.producers.connections(group)
        if not members:
            return None
        connections: dict[str, dict[str, object]] = {}
        protocols: dict[str, dict[str, str]] = {}
        for client_id, c in members:  # one row per client (RocketMQ's set: one per channel)
            connections[client_id] = {"clientAddr": c.address, "clientId": client_id,
                                      "language": c.language, "version": c.version}  # fmt: skip
            protocols[client_id] = {"protocol": c.protocol, "version": c.version_text}
        return {"clientProtocols": protocols, "connectionSet": list(connections.values())}

    async def producer_list(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = GetProducerConnectionListHeader.from_command(request)
        body = self.producers(h.producer_group)
        if body is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist"
            )
        text = json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        return request.response(ResponseCode.SUCCESS, body=text.encode())

    def body(self, group_name: str) -> dict[str, object] | None:
        """The ConsumerConnection of the group; None when nobody of it is here."""
        group = self.core.consumers.groups.get(group_name)
        connections = [
            {"clientAddr": m.peer.address, "clientId": m.client_id, "language": m.language,
             "version": m.version}
            for m in (group.members.values() if group is not None else ())
        ] + [
            {"clientAddr": c.address, "clientId": c.client_id, "language": c.language,
             "version": int(GRPC_VERSION)}
            for c in self.grpc.consumers(group_name)
        ]  # fmt: skip
        if not connections:
            return None
        protocols = {
            str(m.client_id): {"protocol": "remoting", "version": version_name(m.version)}
            for m in (group.members.values() if group is not None else ())
        }
        for c in self.grpc.consumers(group_name):
            protocols[c.client_id] = {"protocol": "grpc", "version": self.grpc.version(c.client_id)}
        if group is not None and group.members:
            where, kind, model = group.consume_from_where, group.consume_type, group.message_model
        else:
            where, kind, model = "CONSUME_FROM_LAST_OFFSET", "CONSUME_POP", "CLUSTERING"
        subscriptions = {
            topic: {
                "classFilterMode": False,
                "codeSet": sorted({tags_code(t) for t in s.tags or ()}),
                "expressionType": "TAG",
                "subString": s.expression,
                "subVersion": 0,
                "tagsSet": sorted(s.tags or ()),
                "topic": topic,
            }
            for topic, s in (sorted(group.subscriptions.items()) if group is not None else [])
        }
        return {
            "clientProtocols": protocols,
            "connectionSet": sorted(connections, key=lambda c: str(c["clientId"])),
            "consumeFromWhere": where,
            "consumeType": kind,
            "messageModel": model,
            "subscriptionTable": subscriptions,
        }

    async def connection_list(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = GetConsumerConnectionListHeader.from_command(request)
        body = self.body(h.consumer_group)
        if body is None:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group[{h.consumer_group}] not online",
            )
        text = json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        return request.response(ResponseCode.SUCCESS, body=text.encode())
