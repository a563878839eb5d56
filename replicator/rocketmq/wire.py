"""The RocketMQ requests a replicator reads a cluster with, and their answers, sans I/O
(no sockets, no asyncio): request builders return ``RemotingCommand``; parsers take the
answer and return typed values or raise ``replicator.rocketmq.errors``.

Codes and header fields (research/broker.md §2-§3, research/rocketmq-clients.md §1.2):
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
from typing import Final

from replicator.rocketmq.errors import BadAnswer, RemotingError
from replicator.rocketmq.routes import INTEGER, parse_cluster_info, parse_route, parse_topic_list
from rmq.codec import RemotingCommand
from rmq.message import MessageError, StoredMessage, decode_records

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

PULL_MESSAGE: Final = 11
QUERY_CONSUMER_OFFSET: Final = 14
UPDATE_CONSUMER_OFFSET: Final = 15
UPDATE_AND_CREATE_TOPIC: Final = 17
SEARCH_OFFSET_BY_TIMESTAMP: Final = 29
GET_MAX_OFFSET: Final = 30
GET_MIN_OFFSET: Final = 31
PUT_KV_CONFIG: Final = 100
GET_ROUTEINFO_BY_TOPIC: Final = 105
GET_BROKER_CLUSTER_INFO: Final = 106
GET_ALL_TOPIC_LIST_FROM_NAMESERVER: Final = 206
GET_TOPICS_BY_CLUSTER: Final = 224

SUCCESS: Final = 0
QUERY_NOT_FOUND: Final = 22
LANGUAGE: Final = "PYTHON"

PULL_SUSPEND: Final = 0x2
PULL_SUBSCRIPTION: Final = 0x4
DEFAULT_TOPIC: Final = "TBW102"

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
    return RemotingCommand.request(
        PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_msgs,
            "sysFlag": sys_flag,
            "commitOffset": 0,
            "suspendTimeoutMillis": suspend_ms,
            "subVersion": 0,
            "subscription": "*",
            "expressionType": "TAG",
        },
        language=LANGUAGE,
    )


def _ext_int(answer: RemotingCommand, name: str, what: str, default: int | None = None) -> int:
    value = answer.ext_fields.get(name)
    if value is None and default is not None:
        return default
    if value is None or not INTEGER.fullmatch(value.strip()):
        raise BadAnswer(f"{what}: answer field {name} missing or not an integer: {value!r}")
    return int(value)


def parse_pull(answer: RemotingCommand, check_crc: bool = True) -> PullResult:
    """A pull answer (research/broker.md §2): SUCCESS with its records, 19/20/21 with the
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
    return PullResult(
        status,
        _ext_int(answer, "nextBeginOffset", "pull"),
        _ext_int(answer, "minOffset", "pull"),
        _ext_int(answer, "maxOffset", "pull"),
        messages,
        _ext_int(answer, "suggestWhichBrokerId", "pull", 0),
    )


# --- offsets ---------------------------------------------------------------------------------


def _queue_request(code: int, topic: str, queue_id: int, **more: object) -> RemotingCommand:
    return RemotingCommand.request(
        code, {"topic": topic, "queueId": queue_id, **more}, language=LANGUAGE
    )


def min_offset_request(topic: str, queue_id: int) -> RemotingCommand:
    return _queue_request(GET_MIN_OFFSET, topic, queue_id)


def max_offset_request(topic: str, queue_id: int) -> RemotingCommand:
    """GET_MAX_OFFSET: the answer is the next offset to be written (entry count)."""
    return _queue_request(GET_MAX_OFFSET, topic, queue_id)


def search_offset_request(topic: str, queue_id: int, ts_ms: int) -> RemotingCommand:
    return _queue_request(SEARCH_OFFSET_BY_TIMESTAMP, topic, queue_id, timestamp=ts_ms)


def parse_offset(answer: RemotingCommand) -> int:
    """The ``offset`` of a GET_MIN/MAX_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP answer."""
    if answer.code != SUCCESS:
        raise RemotingError(answer.code, answer.remark, "offset")
    return _ext_int(answer, "offset", "offset")


def query_consumer_offset_request(group: str, topic: str, queue_id: int) -> RemotingCommand:
    return RemotingCommand.request(
        QUERY_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": queue_id},
        language=LANGUAGE,
    )


def parse_consumer_offset(answer: RemotingCommand) -> int | None:
    """The group's offset; None for QUERY_NOT_FOUND (22: the group has none, research
    trap 12)."""
    if answer.code == QUERY_NOT_FOUND:
        return None
    return parse_offset(answer)


def update_consumer_offset_request(
    group: str, topic: str, queue_id: int, offset: int
) -> RemotingCommand:
    """UPDATE_CONSUMER_OFFSET as a two-way request (C++ and ali-ons send it oneway; here the
    answer says it was taken)."""
    return RemotingCommand.request(
        UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset},
        language=LANGUAGE,
    )


def parse_ok(answer: RemotingCommand, what: str) -> None:
    """An answer that carries nothing but SUCCESS."""
    if answer.code != SUCCESS:
        raise RemotingError(answer.code, answer.remark, what)


# --- nameserver and admin --------------------------------------------------------------------


#: the nameserver KV namespace of orderly topics (NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG):
#: key the topic, value ``brokerName:queueNums;…``, served to clients as ``orderTopicConf``
ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"


def order_conf_request(topic: str, conf: str) -> RemotingCommand:
    """PUT_KV_CONFIG of a topic's order config, as ``mqadmin updateTopic -o true`` sends it
    to the nameservers."""
    return RemotingCommand.request(
        PUT_KV_CONFIG,
        {"namespace": ORDER_TOPIC_CONFIG, "key": topic, "value": conf},
        language=LANGUAGE,
    )


def route_request(topic: str) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC; ``acceptStandardJsonOnly`` asks for quoted keys (the parser
    reads both forms anyway)."""
    return RemotingCommand.request(
        GET_ROUTEINFO_BY_TOPIC,
        {"topic": topic, "acceptStandardJsonOnly": True},
        language=LANGUAGE,
    )


def topic_list_request(cluster: str | None = None) -> RemotingCommand:
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER, or GET_TOPICS_BY_CLUSTER (224) for one cluster."""
    if cluster is not None:
        return RemotingCommand.request(
            GET_TOPICS_BY_CLUSTER, {"cluster": cluster}, language=LANGUAGE
        )
    return RemotingCommand.request(GET_ALL_TOPIC_LIST_FROM_NAMESERVER, language=LANGUAGE)


def cluster_info_request() -> RemotingCommand:
    return RemotingCommand.request(GET_BROKER_CLUSTER_INFO, language=LANGUAGE)


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
    return RemotingCommand.request(
        UPDATE_AND_CREATE_TOPIC,
        {
            "topic": spec.topic,
            "defaultTopic": DEFAULT_TOPIC,
            "readQueueNums": spec.read_queue_nums,
            "writeQueueNums": spec.write_queue_nums,
            "perm": spec.perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": spec.topic_sys_flag,
            "order": spec.order,
            **({"attributes": spec.attributes} if spec.attributes else {}),
        },
        language=LANGUAGE,
    )
