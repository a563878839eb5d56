"""The RocketMQ requests a replicator reads a cluster with, and their answers, sans I/O
(no sockets, no asyncio): request builders return ``RemotingCommand``; parsers take the
answer and return typed values or raise ``replicator.rocketmq.errors``.

Codes and header fields (RocketMQ's ``RequestCode.java``, ``PullMessageProcessor``,
``ConsumerManageProcessor``):
PULL_MESSAGE 11 (consumerGroup, topic, queueId, queueOffset, maxMsgNums, sysFlag,
commitOffset, suspendTimeoutMillis, subVersion, subscription, expressionType; answer
nextBeginOffset, minOffset, maxOffset, suggestWhichBrokerId), QUERY_CONSUMER_OFFSET 14,
UPDATE_CONSUMER_OFFSET 15, UPDATE_AND_CREATE_TOPIC 17, SEARCH_OFFSET_BY_TIMESTAMP 29,
GET_MAX_OFFSET 30, GET_MIN_OFFSET 31, GET_ROUTEINFO_BY_TOPIC 105, GET_BROKER_CLUSTER_INFO 106,
GET_ALL_TOPIC_LIST_FROM_NAMESERVER 206, GET_TOPICS_BY_CLUSTER 224. Route bodies are parsed in ``routes``.

A pull SUCCESS body is stored records back to back, decoded by ``rmq.message`` with their
bodies inflated (zlib; LZ4 and ZSTD bodies, like records that do not decode, are
:class:`BadAnswer`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, TypeVar

from replicator.rocketmq.errors import BadAnswer, RemotingError
from replicator.rocketmq.routes import parse_cluster_info, parse_route, parse_topic_list
from rmq.codec import BadRequest, RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import (
    DEFAULT_TOPIC,
    CreateTopicHeader,
    GetRouteInfoHeader,
    GetTopicsByClusterHeader,
    Header,
    OffsetResponseHeader,
    PullMessageHeader,
    PullMessageResponseHeader,
    PutKvConfigHeader,
    QueryConsumerOffsetHeader,
    QueueHeader,
    SearchOffsetHeader,
    UpdateConsumerOffsetHeader,
)
from rmq.message import MessageError, StoredMessage, decode_records

H = TypeVar("H", bound=Header)

__all__ = [
    "SOURCE_PROPERTY",
    "PullResult",
    "PullStatus",
    "TopicSpec",
    "cluster_info_request",
    "create_topic_request",
    "max_offset_request",
    "min_offset_request",
    "order_conf_request",
    "parse_cluster_info",
    "parse_consumer_offset",
    "parse_offset",
    "parse_ok",
    "parse_pull",
    "parse_route",
    "parse_sources",
    "parse_topic_list",
    "pull_request",
    "query_consumer_offset_request",
    "route_request",
    "search_offset_request",
    "topic_list_request",
    "update_consumer_offset_request",
    "with_source",
]

LANGUAGE: Final = "PYTHON"

PULL_SUSPEND: Final = 0x2
PULL_SUBSCRIPTION: Final = 0x4

# --- ROCKETMQ_REPLICATOR_SOURCE: the clusters a message has been copied from ----------------

SOURCE_PROPERTY: Final = "ROCKETMQ_REPLICATOR_SOURCE"


def parse_sources(value: str | None) -> list[str]:
    """The cluster names in a ``ROCKETMQ_REPLICATOR_SOURCE`` value ("" or None: none)."""
    return [name for name in (value or "").split(",") if name]


def with_source(value: str | None, cluster: str) -> str:
    """``value`` with ``cluster`` appended (kept once)."""
    names = parse_sources(value)
    if cluster not in names:
        names.append(cluster)
    return ",".join(names)


# --- PULL_MESSAGE ----------------------------------------------------------------------------


class PullStatus(enum.Enum):
    FOUND = 0
    NO_NEW_MSG = 19
    NO_MATCHED_MSG = 20
    OFFSET_ILLEGAL = 21


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    suggest_broker_id: int = 0


def pull_request(
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int = 32,
    suspend_ms: int = 15_000,
    sys_flag: int = PULL_SUSPEND | PULL_SUBSCRIPTION,
) -> RemotingCommand:
    """PULL_MESSAGE from ``offset`` with subscription ``*`` (so no heartbeat is needed) and
    no offset commit; long polling for ``suspend_ms`` when ``sys_flag`` has SUSPEND."""
    return PullMessageHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_msgs,
        sys_flag=sys_flag,
        commit_offset=0,
        suspend_timeout_ms=suspend_ms,
        sub_version=0,
        subscription="*",
        expression_type="TAG",
    ).request(language=LANGUAGE)


def _answer_header(header: type[H], answer: RemotingCommand, what: str) -> H:
    """The answer's typed header; a field missing or of the wrong type is :class:`BadAnswer`."""
    try:
        return header.from_command(answer)
    except BadRequest as exc:
        raise BadAnswer(f"{what}: answer {exc}") from None


def parse_pull(answer: RemotingCommand, check_crc: bool = True) -> PullResult:
    """A pull answer (RocketMQ's ``PullMessageProcessor``): SUCCESS with its records, 19/20/21 with the
    offsets to go on at; any other code is :class:`RemotingError`. The messages' bodies are
    inflated (``rmq.message.decode_records``); records that do not decode are
    :class:`BadAnswer`."""
    try:
        status = PullStatus(answer.code)
    except ValueError:
        raise RemotingError(answer.code, answer.remark, "pull") from None
    messages: list[StoredMessage] = []
    if status is PullStatus.FOUND:
        try:
            messages = decode_records(answer.body, check_crc, inflate=True)
        except MessageError as exc:
            raise BadAnswer(f"pull: {exc}") from None
    h = _answer_header(PullMessageResponseHeader, answer, "pull")
    return PullResult(
        status,
        h.next_begin_offset,
        h.min_offset,
        h.max_offset,
        messages,
        h.suggest_which_broker_id,
    )


# --- offsets ---------------------------------------------------------------------------------


def min_offset_request(topic: str, queue_id: int) -> RemotingCommand:
    return QueueHeader(topic, queue_id).request(code=RequestCode.GET_MIN_OFFSET, language=LANGUAGE)


def max_offset_request(topic: str, queue_id: int) -> RemotingCommand:
    """GET_MAX_OFFSET: the answer is the next offset to be written (entry count)."""
    return QueueHeader(topic, queue_id).request(code=RequestCode.GET_MAX_OFFSET, language=LANGUAGE)


def search_offset_request(topic: str, queue_id: int, ts_ms: int) -> RemotingCommand:
    return SearchOffsetHeader(topic, queue_id, ts_ms).request(language=LANGUAGE)


def parse_offset(answer: RemotingCommand) -> int:
    """The ``offset`` of a GET_MIN/MAX_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP answer."""
    if answer.code != ResponseCode.SUCCESS:
        raise RemotingError(answer.code, answer.remark, "offset")
    return _answer_header(OffsetResponseHeader, answer, "offset").offset


def query_consumer_offset_request(group: str, topic: str, queue_id: int) -> RemotingCommand:
    return QueryConsumerOffsetHeader(group, topic, queue_id).request(language=LANGUAGE)


def parse_consumer_offset(answer: RemotingCommand) -> int | None:
    """The group's offset; None for QUERY_NOT_FOUND (22: the group has none; a broker answers
    0 instead while the queue still starts at 0: RocketMQ 4.9's
    ``ConsumerManageProcessor.java:118-152``)."""
    if answer.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return parse_offset(answer)


def update_consumer_offset_request(
    group: str, topic: str, queue_id: int, offset: int
) -> RemotingCommand:
    """UPDATE_CONSUMER_OFFSET as a two-way request (C++ and ali-ons send it oneway; here the
    answer says it was taken)."""
    return UpdateConsumerOffsetHeader(group, topic, queue_id, offset).request(language=LANGUAGE)


def parse_ok(answer: RemotingCommand, what: str) -> None:
    """An answer that carries nothing but SUCCESS."""
    if answer.code != ResponseCode.SUCCESS:
        raise RemotingError(answer.code, answer.remark, what)


# --- nameserver and admin --------------------------------------------------------------------


#: the nameserver KV namespace of orderly topics (NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG):
#: key the topic, value ``brokerName:queueNums;…``, served to clients as ``orderTopicConf``
ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"


def order_conf_request(topic: str, conf: str) -> RemotingCommand:
    """PUT_KV_CONFIG of a topic's order config, as ``mqadmin updateTopic -o true`` sends it
    to the nameservers."""
    return PutKvConfigHeader(ORDER_TOPIC_CONFIG, topic, conf).request(language=LANGUAGE)


def route_request(topic: str) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC; ``acceptStandardJsonOnly`` asks for quoted keys (the parser
    reads both forms anyway)."""
    return GetRouteInfoHeader(topic, True).request(language=LANGUAGE)


def topic_list_request(cluster: str | None = None) -> RemotingCommand:
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER, or GET_TOPICS_BY_CLUSTER (224) for one cluster."""
    if cluster is not None:
        return GetTopicsByClusterHeader(cluster).request(language=LANGUAGE)
    return RemotingCommand.request(
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, language=LANGUAGE
    )


def cluster_info_request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, language=LANGUAGE)


@dataclass(frozen=True)
class TopicSpec:
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = 6  # READ | WRITE
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5 topic attributes, ``+name=value,-name`` (e.g. ``+replica.of=A``: the
    #: destination refuses producers' writes, only replicated messages from A are taken)
    attributes: str = ""


def create_topic_request(spec: TopicSpec) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC (17) to one broker, the header as the Java admin sends it
    (``CreateTopicRequestHeader``: topic, defaultTopic, readQueueNums, writeQueueNums, perm,
    topicFilterType, topicSysFlag, order)."""
    return CreateTopicHeader(
        topic=spec.topic,
        default_topic=DEFAULT_TOPIC,
        read_queue_nums=spec.read_queue_nums,
        write_queue_nums=spec.write_queue_nums,
        perm=spec.perm,
        topic_filter_type="SINGLE_TAG",
        topic_sys_flag=spec.topic_sys_flag,
        order=spec.order,
        attributes=spec.attributes or None,
    ).request(language=LANGUAGE)
