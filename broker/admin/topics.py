"""Topic administration: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21),
DELETE_TOPIC_IN_BROKER (215), as RocketMQ's ``AdminBrokerProcessor`` answers them.

UPDATE_AND_CREATE_TOPIC carries RocketMQ 5's ``CreateTopicRequestHeader``: ``topic``,
``defaultTopic``, ``readQueueNums``, ``writeQueueNums``, ``perm``, ``topicFilterType``
(SINGLE_TAG/MULTI_TAG), ``topicSysFlag`` (optional), ``order`` (default false). The topic is put in
the broker's :class:`~broker.topics.TopicTable` (created, or its queue numbers / perm / order
replaced) and the broker registers its table in metaledger's routes at once; the answer waits (up to
``REGISTER_WAIT_S``) for that registration, so a client that reads the route after SUCCESS
sees the change (RocketMQ's ``registerIncrementBrokerData``). A request that cannot be
applied is answered SYSTEM_ERROR (as RocketMQ answers a TopicValidator failure) with a remark
naming the field; nothing changes then.

GET_ALL_TOPIC_CONFIG answers RocketMQ's ``TopicConfigSerializeWrapper`` as JSON:
``{"topicConfigTable": {name: {topicName, readQueueNums, writeQueueNums, perm,
topicFilterType, topicSysFlag, order}}, "dataVersion": {timestamp, counter}}``.

DELETE_TOPIC_IN_BROKER (``topic``) stops serving a topic; its stored messages stay until
retention removes their segments. As in RocketMQ the routes keep the topic's queue data (a
registration only adds or updates topics) until DELETE_TOPIC_IN_NAMESRV (metaledger:
``route topic delete``), which ``mqadmin deleteTopic`` sends next; until then a send to the
topic adopts it again from the routes (broker/topics.py).
"""

from __future__ import annotations

import json

from broker.core import BrokerCore
from broker.remoting.errors import BrokerRequestError
from broker.routes import RouteRegistrar
from broker.topics import (
    REPLICA_OF,
    SCHEDULE_TOPIC,
    TOPIC_NAME,
    TopicConfig,
)
from rmq import headers as rmq_headers
from rmq.codec import RemotingCommand
from rmq.codes import PERM_INHERIT, PERM_PRIORITY, PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from rmq.server import Handler, Peer

PERM_ALL = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT
MAX_QUEUE_NUMS = 1024
FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
#: RocketMQ's TopicValidator system topics (a create/update of one is refused).
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SELF_TEST_TOPIC",
        "BenchmarkTest",
        "OFFSET_MOVED_EVENT",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        SCHEDULE_TOPIC,
    }
)
SYSTEM_PREFIX = "rmq_sys_"
#: RIP-45's heartbeat topic: ``rmq_sys_`` by name, but the replicator creates it in both
#: clusters through this request (RIP-45 names it; RocketMQ 5's validator would refuse it,
#: leaving it to broker auto-creation, which may be off: ``--no-auto-create-topic``)
REPLICATOR_HEARTBEAT_TOPIC = "rmq_sys_replicator_heartbeat"
REGISTER_WAIT_S = 5.0
#: attribute name -> its value check
ATTRIBUTES = {
    "message.type": lambda v: v in ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"),
    REPLICA_OF: lambda v: bool(TOPIC_NAME.fullmatch(v)),
}


class InvalidTopicRequest(BrokerRequestError):
    """A topic request that cannot be applied (SYSTEM_ERROR, the field named)."""


def check_topic_name(topic: str, reserved: frozenset[str] = frozenset()) -> None:
    """RocketMQ's ``TopicValidator.validateTopic`` plus its system-topic check."""
    if not topic.strip():
        raise InvalidTopicRequest("topic: the topic name is blank")
    if len(topic) > 127:
        raise InvalidTopicRequest(
            f"topic: the topic name is longer than 127 characters ({len(topic)})"
        )
    if not TOPIC_NAME.fullmatch(topic):
        raise InvalidTopicRequest(
            f"topic: the topic [{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    if topic == REPLICATOR_HEARTBEAT_TOPIC:
        return
    if topic in SYSTEM_TOPICS or topic in reserved or topic.startswith(SYSTEM_PREFIX):
        raise InvalidTopicRequest(f"topic: the topic [{topic}] is conflict with system topic")


class CreateTopicHeader(rmq_headers.CreateTopicHeader):
    """RocketMQ's UPDATE_AND_CREATE_TOPIC header (``rmq.headers``) with the broker's checks."""

    __slots__ = ()

    def config(
        self, reserved: frozenset[str] = frozenset(), existing: TopicConfig | None = None
    ) -> TopicConfig:
        """The topic config this header asks for (``attributes`` applied to the existing
        topic's); InvalidTopicRequest naming the bad field."""
        check_topic_name(self.topic, reserved)
        for name, value in (
            ("readQueueNums", self.read_queue_nums),
            ("writeQueueNums", self.write_queue_nums),
        ):
            if not 1 <= value <= MAX_QUEUE_NUMS:
                raise InvalidTopicRequest(f"{name}: {value} is not in 1..{MAX_QUEUE_NUMS}")
        if self.perm & ~PERM_ALL or self.perm < 0:
            raise InvalidTopicRequest(
                f"perm: {self.perm} is not a RocketMQ permission (bits PRIORITY 8, READ 4, "
                "WRITE 2, INHERIT 1)"
            )
        if self.topic_filter_type not in FILTER_TYPES:
            raise InvalidTopicRequest(
                f"topicFilterType: {self.topic_filter_type!r} is not SINGLE_TAG or MULTI_TAG"
            )
        if not 0 <= self.topic_sys_flag <= 2**31 - 1:
            raise InvalidTopicRequest(f"topicSysFlag: {self.topic_sys_flag} is not in 0..2^31-1")
        attributes = apply_attributes(
            dict(existing.attributes) if existing is not None else {}, self.attributes or ""
        )
        return TopicConfig(
            self.topic,
            self.read_queue_nums,
            self.write_queue_nums,
            self.perm,
            self.topic_sys_flag,
            self.order,
            self.topic_filter_type,
            tuple(attributes.items()),
        )


def apply_attributes(current: dict[str, str], text: str) -> dict[str, str]:
    """RocketMQ 5's ``AttributeParser``: ``+name=value`` sets, ``-name`` removes, comma
    separated. Known names only: ``message.type`` (RocketMQ's) and ``replica.of`` (ours: a
    cluster name, see ``TopicConfig.replica_of``)."""
    out = dict(current)
    for item in filter(None, (part.strip() for part in text.split(","))):
        op, body = item[0], item[1:]
        name, sep, value = body.partition("=")
        if op not in "+-" or not name or (op == "+") != bool(sep):
            raise InvalidTopicRequest(
                f"attributes: {item!r} is not +name=value or -name (RocketMQ's format)"
            )
        if name not in ATTRIBUTES:
            raise InvalidTopicRequest(
                f"attributes: {name!r} is not a supported attribute ({', '.join(ATTRIBUTES)})"
            )
        if op == "-":
            out.pop(name, None)
            continue
        if not ATTRIBUTES[name](value):
            raise InvalidTopicRequest(f"attributes: {value!r} is not a valid {name}")
        out[name] = value
    return out


def topic_config_json(t: TopicConfig) -> dict[str, object]:
    """One entry of TopicConfigSerializeWrapper's ``topicConfigTable``."""
    return {
        "topicName": t.topic,
        "readQueueNums": t.read_queue_nums,
        "writeQueueNums": t.write_queue_nums,
        "perm": t.perm,
        "topicFilterType": t.topic_filter_type,
        "topicSysFlag": t.topic_sys_flag,
        "order": t.order,
        "attributes": dict(t.attributes),
    }


class TopicAdmin:
    def __init__(self, core: BrokerCore, registrar: RouteRegistrar | None) -> None:
        self.core = core
        self.registrar = registrar

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete,
        }

    def _reserved(self) -> frozenset[str]:
        """The topics RocketMQ's TopicConfigManager makes for itself: the cluster's and the
        broker's name."""
        c = self.core.config
        return frozenset({c.cluster, c.broker_name})

    async def _register(self, request: RemotingCommand) -> RemotingCommand:
        """SUCCESS once the routes hold the table's current version (or after the wait, with
        a remark saying the registration is still pending)."""
        if self.registrar is None:
            return request.response(ResponseCode.SUCCESS)
        if await self.registrar.registered(self.core.topics.version, REGISTER_WAIT_S):
            return request.response(ResponseCode.SUCCESS)
        return request.response(
            ResponseCode.SUCCESS,
            "applied here; the registration in metaledger's routes is still pending (retried)",
        )

    async def update_and_create(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = CreateTopicHeader.from_command(request)
        config = header.config(self._reserved(), self.core.topics.get(header.topic))
        self.core.topics.put(config)
        return await self._register(request)

    async def delete(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        topic = request.ext_str("topic")
        check_topic_name(topic, self._reserved())
        self.core.topics.remove(topic)
        return await self._register(request)

    async def all_topic_config(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        topics = self.core.topics
        doc = {
            "topicConfigTable": {t.topic: topic_config_json(t) for t in topics.all()},
            "dataVersion": {
                "stateVersion": 0,
                "timestamp": topics.changed_ms,
                "counter": topics.version,
            },
        }
        return request.response(ResponseCode.SUCCESS, body=json.dumps(doc).encode())
