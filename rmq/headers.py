"""RocketMQ's typed request headers: one mechanism, and the headers every side shares.

A header is a dataclass whose fields each travel as one ext field (:func:`ext` names it;
RocketMQ's ``CommandCustomHeader`` classes, ``remoting/.../protocol/header/**.java``). The
same class parses a request (:meth:`Header.from_command`: a missing required field, a
number that is not one or out of its Java range, a boolean that is none, or text that is
not UTF-8 raises :class:`~rmq.codec.BadRequest` naming the field, as RocketMQ's
``decodeCommandCustomHeader`` does) and writes one (:meth:`Header.request`: values as
Java's ``toString`` writes them, None fields left out, in field order). So the nameserver,
the broker, the replicators, the tests and the benchmarks build and read requests with one
set of definitions.

Field kinds come from the annotation: ``str``, ``int`` (a Java long; ``ext(..., int32=True)``
for an ``int``), ``bool`` (``true``/``false``/``1``/``0`` in any case: C++ 1.x sends
``"0"``/``"1"`` in its heartbeat, rocketmq-client-cpp ``SubscriptionData.cpp``), each
``... | None`` when optional.
``ext(..., read=False)`` marks a field a server does not read (written by clients, skipped
by :meth:`~Header.from_fields`). Headers are slotted and not frozen: they are built per send
on the producers' path, where a frozen dataclass's ``__init__`` costs six times as much. The
few whose optional fields come between required ones are keyword-only.

SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) name the V1 fields ``a``…``m`` in order,
plus ``n`` = brokerName (RocketMQ 4.9's ``SendMessageRequestHeaderV2.java:32-60``):
:class:`SendMessageHeader` reads and writes both forms. Field lists: RocketMQ's
``*RequestHeader.java`` classes (``PullMessageRequestHeader``, ``SendMessageRequestHeader``,
the nameserver's ``GetRouteInfoRequestHeader``, ``RegisterBrokerRequestHeader``...).

The machinery (:func:`~rmq.headerfields.ext`, the field kinds, the loops that read and write
the fields) is :mod:`rmq.headerfields`, which the mypyc build compiles; this table stays Python
(mypyc's ``@dataclass`` loses ``ClassVar`` and ``X | None`` annotations). Like the codec, this
module has no I/O and imports nothing of metaledger. Over 500 lines on purpose: it is
RocketMQ's one table of headers, which every side reads from the same place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final, Self

from rmq.codec import RPC_ONEWAY, SERVER_LANGUAGE, RemotingCommand
from rmq.codes import RequestCode
from rmq.headerfields import ext, field_spec, read_fields, write_fields


class Header:
    """Base of the header dataclasses (see the module docstring)."""

    __slots__ = ()
    code: ClassVar[int]

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Self:
        return read_fields(cls, fields, field_spec(cls), None)

    @classmethod
    def from_command(cls, command: RemotingCommand) -> Self:
        return read_fields(cls, command.ext_fields, field_spec(cls), None)

    def to_ext_fields(self) -> dict[str, str]:
        """The ext fields, as Java writes them (None left out), in field order."""
        return write_fields(self, field_spec(type(self)))

    def request(
        self,
        body: bytes = b"",
        *,
        opaque: int = 0,
        oneway: bool = False,
        code: int | None = None,
        language: str = SERVER_LANGUAGE,
    ) -> RemotingCommand:
        """A request carrying this header; ``code`` for the classes shared by two codes."""
        return RemotingCommand(
            code=self.code if code is None else code,
            language=language,
            opaque=opaque,
            flag=RPC_ONEWAY if oneway else 0,
            ext_fields=self.to_ext_fields(),
            body=body,
        )

    def response(
        self, request: RemotingCommand, code: int, remark: str | None = None, body: bytes = b""
    ) -> RemotingCommand:
        """The answer to ``request`` carrying this (response) header."""
        return request.response(code, remark, self.to_ext_fields(), body)


# --- clients to brokers -------------------------------------------------------------------

DEFAULT_TOPIC: Final = "TBW102"

#: V2 short name → V1 name, in the order of SendMessageRequestHeaderV2 (a..n).
V2_FIELDS: Final = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
_V1_TO_V2: Final = {v1: v2 for v2, v1 in V2_FIELDS.items()}


@dataclass(slots=True, kw_only=True)
class SendMessageHeader(Header):
    """SEND_MESSAGE (10), or SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) with the short
    names (:meth:`request_v2`). defaultTopic and defaultTopicQueueNums are what a broker
    creates an unknown topic from (RocketMQ's autoCreateTopicEnable); the broker reads neither
    unitMode nor brokerName."""

    code = RequestCode.SEND_MESSAGE
    producer_group: str = ext("producerGroup")
    topic: str = ext("topic")
    default_topic: str | None = ext("defaultTopic", None)
    default_topic_queue_nums: int | None = ext("defaultTopicQueueNums", None, int32=True)
    queue_id: int = ext("queueId", int32=True)
    sys_flag: int = ext("sysFlag", int32=True)
    born_timestamp: int = ext("bornTimestamp")
    flag: int = ext("flag", int32=True)
    properties: str = ext("properties", "")
    reconsume_times: int = ext("reconsumeTimes", 0, int32=True)
    unit_mode: bool | None = ext("unitMode", None, read=False)
    max_reconsume_times: int | None = ext("maxReconsumeTimes", None, int32=True)
    batch: bool = ext("batch", False)
    broker_name: str | None = ext("brokerName", None, read=False)

    @classmethod
    def from_command(cls, command: RemotingCommand) -> Self:
        """Either form; SEND_BATCH_MESSAGE is a batch whatever ``batch`` says."""
        code = command.code
        if code == RequestCode.SEND_MESSAGE_V2 or code == RequestCode.SEND_BATCH_MESSAGE:
            fields = command.ext_fields
            if fields.keys() <= V2_FIELDS.keys():  # only short names: read them as they are
                header = read_fields(cls, fields, field_spec(cls), _V2_KEYS)
            else:
                header = cls.from_fields({V2_FIELDS.get(k, k): v for k, v in fields.items()})
            if code == RequestCode.SEND_BATCH_MESSAGE:
                header.batch = True
            return header
        return read_fields(cls, command.ext_fields, field_spec(cls), None)

    def request_v2(self, body: bytes = b"", *, language: str = SERVER_LANGUAGE) -> RemotingCommand:
        """SEND_MESSAGE_V2, or SEND_BATCH_MESSAGE when ``batch``: the short field names."""
        short = _V1_TO_V2
        return RemotingCommand(
            code=RequestCode.SEND_BATCH_MESSAGE if self.batch else RequestCode.SEND_MESSAGE_V2,
            language=language,
            ext_fields={short[k]: v for k, v in self.to_ext_fields().items()},
            body=body,
        )


#: SendMessageHeader's fields under their SEND_MESSAGE_V2 names, in field order
_V2_KEYS: Final = tuple(_V1_TO_V2[f.name] for f in field_spec(SendMessageHeader))


@dataclass(slots=True)
class PullMessageHeader(Header):
    """PULL_MESSAGE (11). ``subVersion`` is required by RocketMQ (its value unused here)."""

    code = RequestCode.PULL_MESSAGE
    consumer_group: str = ext("consumerGroup")
    topic: str = ext("topic")
    queue_id: int = ext("queueId", int32=True)
    queue_offset: int = ext("queueOffset")
    max_msg_nums: int = ext("maxMsgNums", int32=True)
    sys_flag: int = ext("sysFlag", int32=True)
    commit_offset: int = ext("commitOffset")
    suspend_timeout_ms: int = ext("suspendTimeoutMillis")
    sub_version: int = ext("subVersion")
    subscription: str | None = ext("subscription", None)
    expression_type: str = ext("expressionType", "TAG")


@dataclass(slots=True)
class QueueHeader(Header):
    """topic + queueId: GET_MAX_OFFSET (30) and GET_MIN_OFFSET (31)."""

    code = RequestCode.GET_MAX_OFFSET
    topic: str = ext("topic")
    queue_id: int = ext("queueId", int32=True)


@dataclass(slots=True)
class SearchOffsetHeader(Header):
    code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
    topic: str = ext("topic")
    queue_id: int = ext("queueId", int32=True)
    timestamp: int = ext("timestamp")


@dataclass(slots=True)
class QueryConsumerOffsetHeader(Header):
    code = RequestCode.QUERY_CONSUMER_OFFSET
    consumer_group: str = ext("consumerGroup")
    topic: str = ext("topic")
    queue_id: int = ext("queueId", int32=True)


@dataclass(slots=True)
class UpdateConsumerOffsetHeader(Header):
    """UPDATE_CONSUMER_OFFSET (15); C++ and ali-ons send it oneway."""

    code = RequestCode.UPDATE_CONSUMER_OFFSET
    consumer_group: str = ext("consumerGroup")
    topic: str = ext("topic")
    queue_id: int = ext("queueId", int32=True)
    commit_offset: int = ext("commitOffset")


@dataclass(slots=True)
class GetConsumerConnectionListHeader(Header):
    """GET_CONSUMER_CONNECTION_LIST (203), RocketMQ's ``GetConsumerConnectionListRequestHeader``."""

    code = RequestCode.GET_CONSUMER_CONNECTION_LIST
    consumer_group: str = ext("consumerGroup")


@dataclass(slots=True)
class GetProducerConnectionListHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST (204), RocketMQ's ``GetProducerConnectionListRequestHeader``."""

    code = RequestCode.GET_PRODUCER_CONNECTION_LIST
    producer_group: str = ext("producerGroup")


@dataclass(slots=True)
class GetConsumeStatsHeader(Header):
    """GET_CONSUME_STATS (208), RocketMQ's ``GetConsumeStatsRequestHeader``: one group's
    offsets on a broker, of ``topic`` (blank: every topic the group has offsets of) or of
    ``topicList`` (topics joined by ``;``)."""

    code = RequestCode.GET_CONSUME_STATS
    consumer_group: str = ext("consumerGroup")
    topic: str | None = ext("topic", None)
    topic_list: str | None = ext("topicList", None)


@dataclass(slots=True)
class SendBackHeader(Header):
    """CONSUMER_SEND_MSG_BACK (36): C++ sends only group, delayLevel, offset
    (rocketmq-client-cpp ``MQClientAPIImpl.cpp``)."""

    code = RequestCode.CONSUMER_SEND_MSG_BACK
    offset: int = ext("offset")
    group: str = ext("group")
    delay_level: int = ext("delayLevel", int32=True)
    origin_msg_id: str | None = ext("originMsgId", None)
    origin_topic: str | None = ext("originTopic", None)
    max_reconsume_times: int | None = ext("maxReconsumeTimes", None, int32=True)


@dataclass(slots=True)
class UnregisterClientHeader(Header):
    code = RequestCode.UNREGISTER_CLIENT
    client_id: str = ext("clientID")
    producer_group: str | None = ext("producerGroup", None)
    consumer_group: str | None = ext("consumerGroup", None)


@dataclass(slots=True, kw_only=True)
class CreateTopicHeader(Header):
    """UPDATE_AND_CREATE_TOPIC (17), RocketMQ 5's ``CreateTopicRequestHeader`` (the fields
    the Java admin sends). ``attributes``: RocketMQ 5's ``+name=value,-name``."""

    code = RequestCode.UPDATE_AND_CREATE_TOPIC
    topic: str = ext("topic")
    default_topic: str = ext("defaultTopic", DEFAULT_TOPIC)
    read_queue_nums: int = ext("readQueueNums")
    write_queue_nums: int = ext("writeQueueNums")
    perm: int = ext("perm")
    topic_filter_type: str = ext("topicFilterType", "SINGLE_TAG")
    topic_sys_flag: int = ext("topicSysFlag", 0)
    order: bool = ext("order", False)
    attributes: str | None = ext("attributes", None)


@dataclass(slots=True)
class QueryMessageHeader(Header):
    """QUERY_MESSAGE (12): messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is
    ``key`` when the request has the ext field ``_UNIQUE_KEY_QUERY`` = true), stored between
    the two timestamps (RocketMQ 5's ``QueryMessageRequestHeader``)."""

    code = RequestCode.QUERY_MESSAGE
    topic: str = ext("topic")
    key: str = ext("key")
    max_num: int = ext("maxNum", int32=True)
    begin_timestamp: int = ext("beginTimestamp")
    end_timestamp: int = ext("endTimestamp")


@dataclass(slots=True)
class ViewMessageHeader(Header):
    """VIEW_MESSAGE_BY_ID (33): the record at commit-log ``offset`` (RocketMQ 5's
    ``ViewMessageRequestHeader``; ``topic`` is optional there too)."""

    code = RequestCode.VIEW_MESSAGE_BY_ID
    offset: int = ext("offset")
    topic: str | None = ext("topic", None)


@dataclass(slots=True, kw_only=True)
class PopMessageHeader(Header):
    """POP_MESSAGE (200050), RocketMQ 5's ``PopMessageRequestHeader``: pop up to
    ``maxMsgNums`` messages of a queue (-1: any queue), invisible for ``invisibleTime`` ms,
    waiting up to ``pollTime`` ms; ``initMode`` 0 (MIN) or 1 (MAX) places a new group;
    ``order`` is a FIFO pop; ``expType``/``exp`` the subscription (TAG)."""

    code = RequestCode.POP_MESSAGE
    consumer_group: str = ext("consumerGroup")
    topic: str = ext("topic")
    queue_id: int = ext("queueId", int32=True)
    max_msg_nums: int = ext("maxMsgNums", int32=True)
    invisible_time: int = ext("invisibleTime")
    poll_time: int = ext("pollTime")
    born_time: int = ext("bornTime")
    init_mode: int = ext("initMode", int32=True)
    exp_type: str | None = ext("expType", None)
    exp: str | None = ext("exp", None)
    order: bool = ext("order", False)
    attempt_id: str | None = ext("attemptId", None)


@dataclass(slots=True)
class AckMessageHeader(Header):
    """ACK_MESSAGE (200051), RocketMQ 5's ``AckMessageRequestHeader``: ``extraInfo`` is the
    message's receipt handle (its POP_CK property)."""

    code = RequestCode.ACK_MESSAGE
    consumer_group: str = ext("consumerGroup")
    topic: str = ext("topic")
    queue_id: int = ext("queueId", int32=True)
    extra_info: str = ext("extraInfo")
    offset: int = ext("offset")


@dataclass(slots=True)
class ChangeInvisibleTimeHeader(Header):
    """CHANGE_MESSAGE_INVISIBLETIME (200053), RocketMQ 5's
    ``ChangeInvisibleTimeRequestHeader``: the message invisible for ``invisibleTime`` ms
    from now."""

    code = RequestCode.CHANGE_MESSAGE_INVISIBLETIME
    consumer_group: str = ext("consumerGroup")
    topic: str = ext("topic")
    queue_id: int = ext("queueId", int32=True)
    extra_info: str = ext("extraInfo")
    offset: int = ext("offset")
    invisible_time: int = ext("invisibleTime")


# --- brokers' answers (all numbers as strings, as in RocketMQ's SendMessageResponseHeader: ----
# --- C++ 1.x clients read a response ext field only when it is a JSON string) ---------------


@dataclass(slots=True)
class SendMessageResponseHeader(Header):
    """A send's answer: the offset message id (a batch's, comma-joined), the queue and the
    first message's queue offset."""

    code = RequestCode.SEND_MESSAGE
    msg_id: str = ext("msgId")
    queue_id: int = ext("queueId", int32=True)
    queue_offset: int = ext("queueOffset")


@dataclass(slots=True, kw_only=True)
class EndTransactionHeader(Header):
    """END_TRANSACTION (37): a producer commits or rolls back the half at ``commitLogOffset``
    (queue offset ``tranStateTableOffset`` of the half topic); ``commitOrRollback`` is a
    sysflag transaction type (0 unknown, 8 commit, 12 rollback). RocketMQ's
    ``EndTransactionRequestHeader.java``."""

    code = RequestCode.END_TRANSACTION
    topic: str | None = ext("topic", None)
    producer_group: str = ext("producerGroup")
    tran_state_table_offset: int = ext("tranStateTableOffset")
    commit_log_offset: int = ext("commitLogOffset")
    commit_or_rollback: int = ext("commitOrRollback", int32=True)
    from_transaction_check: bool = ext("fromTransactionCheck", False)
    msg_id: str = ext("msgId")
    transaction_id: str | None = ext("transactionId", None)


@dataclass(slots=True, kw_only=True)
class CheckTransactionStateHeader(Header):
    """CHECK_TRANSACTION_STATE (39, broker to producer, oneway; the half as the body):
    RocketMQ's ``CheckTransactionStateRequestHeader.java`` (``bname`` is the broker name)."""

    code = RequestCode.CHECK_TRANSACTION_STATE
    topic: str | None = ext("topic", None)
    tran_state_table_offset: int = ext("tranStateTableOffset")
    commit_log_offset: int = ext("commitLogOffset")
    msg_id: str | None = ext("msgId", None)
    transaction_id: str | None = ext("transactionId", None)
    offset_msg_id: str | None = ext("offsetMsgId", None)
    broker_name: str | None = ext("bname", None)


@dataclass(slots=True, kw_only=True)
class PullMessageResponseHeader(Header):
    """A pull's answer: the broker to pull from next (0: the master), the offset to go on
    at and the queue's bounds."""

    code = RequestCode.PULL_MESSAGE
    suggest_which_broker_id: int = ext("suggestWhichBrokerId", 0)
    next_begin_offset: int = ext("nextBeginOffset")
    min_offset: int = ext("minOffset")
    max_offset: int = ext("maxOffset")


@dataclass(slots=True)
class QueryMessageResponseHeader(Header):
    """QUERY_MESSAGE's answer: how far the index got (its last entry's store time and
    commit-log offset), so a client can tell "not there" from "not indexed yet"."""

    code = RequestCode.QUERY_MESSAGE
    index_last_update_timestamp: int = ext("indexLastUpdateTimestamp")
    index_last_update_phyoffset: int = ext("indexLastUpdatePhyoffset")


@dataclass(slots=True)
class OffsetResponseHeader(Header):
    """The answer of GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP and
    QUERY_CONSUMER_OFFSET."""

    code = RequestCode.GET_MAX_OFFSET
    offset: int = ext("offset")


@dataclass(slots=True, kw_only=True)
class PopMessageResponseHeader(Header):
    """A POP's answer (RocketMQ 5's ``PopMessageResponseHeader``): every message of it is
    invisible until ``popTime + invisibleTime``; ``reviveQid`` 999 marks a FIFO pop. The
    client builds each message's receipt handle from these and the ``;``-joined infos
    (``ExtraInfoUtil``): ``startOffsetInfo`` "<retry> <queueId> <offset>" per queue,
    ``msgOffsetInfo`` "<retry> <queueId> <o1>,<o2>...", ``orderCountInfo``
    "<retry> qo<queueId>%<offset> <count>" per message of a FIFO pop."""

    code = RequestCode.POP_MESSAGE
    pop_time: int = ext("popTime")
    invisible_time: int = ext("invisibleTime")
    revive_qid: int = ext("reviveQid", int32=True)
    rest_num: int = ext("restNum")
    start_offset_info: str | None = ext("startOffsetInfo", None)
    msg_offset_info: str | None = ext("msgOffsetInfo", None)
    order_count_info: str | None = ext("orderCountInfo", None)


@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader(Header):
    """CHANGE_MESSAGE_INVISIBLETIME's answer: the new handle is the old one with this
    ``popTime`` and ``invisibleTime``."""

    code = RequestCode.CHANGE_MESSAGE_INVISIBLETIME
    pop_time: int = ext("popTime")
    invisible_time: int = ext("invisibleTime")
    revive_qid: int = ext("reviveQid", int32=True)


# --- brokers, clients and admin tools to the nameserver -----------------------------------


@dataclass(slots=True)
class PutKvConfigHeader(Header):
    code = RequestCode.PUT_KV_CONFIG
    namespace: str = ext("namespace")
    key: str = ext("key")
    value: str = ext("value")


@dataclass(slots=True)
class KvConfigKeyHeader(Header):
    """GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102) carry the same fields."""

    code = RequestCode.GET_KV_CONFIG
    namespace: str = ext("namespace")
    key: str = ext("key")


@dataclass(slots=True)
class GetKvListByNamespaceHeader(Header):
    code = RequestCode.GET_KVLIST_BY_NAMESPACE
    namespace: str = ext("namespace")


@dataclass(slots=True)
class RegisterBrokerHeader(Header):
    """REGISTER_BROKER (103). ``zoneName`` is read raw from extFields by RocketMQ (it is
    not a field of RegisterBrokerRequestHeader); ``bodyCrc32`` 0 means "not checked"."""

    code = RequestCode.REGISTER_BROKER
    broker_name: str = ext("brokerName")
    broker_addr: str = ext("brokerAddr")
    cluster_name: str = ext("clusterName")
    ha_server_addr: str = ext("haServerAddr")
    broker_id: int = ext("brokerId")
    heartbeat_timeout_millis: int | None = ext("heartbeatTimeoutMillis", None)
    enable_acting_master: bool | None = ext("enableActingMaster", None)
    compressed: bool = ext("compressed", False)
    body_crc32: int = ext("bodyCrc32", 0)
    zone_name: str | None = ext("zoneName", None)


@dataclass(slots=True)
class BrokerIdentityHeader(Header):
    """UNREGISTER_BROKER (104) and QUERY_DATA_VERSION (322) carry the same fields."""

    code = RequestCode.UNREGISTER_BROKER
    broker_name: str = ext("brokerName")
    broker_addr: str = ext("brokerAddr")
    cluster_name: str = ext("clusterName")
    broker_id: int = ext("brokerId")


@dataclass(slots=True)
class GetRouteInfoHeader(Header):
    code = RequestCode.GET_ROUTEINFO_BY_TOPIC
    topic: str = ext("topic")
    accept_standard_json_only: bool | None = ext("acceptStandardJsonOnly", None)


@dataclass(slots=True)
class BrokerNameHeader(Header):
    """WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327)."""

    code = RequestCode.WIPE_WRITE_PERM_OF_BROKER
    broker_name: str = ext("brokerName")


@dataclass(slots=True)
class DeleteTopicHeader(Header):
    code = RequestCode.DELETE_TOPIC_IN_NAMESRV
    topic: str = ext("topic")
    cluster_name: str | None = ext("clusterName", None)


@dataclass(slots=True)
class RegisterTopicHeader(Header):
    code = RequestCode.REGISTER_TOPIC_IN_NAMESRV
    topic: str = ext("topic")


@dataclass(slots=True)
class GetTopicsByClusterHeader(Header):
    code = RequestCode.GET_TOPICS_BY_CLUSTER
    cluster: str = ext("cluster")


@dataclass(slots=True)
class GetBrokerMemberGroupHeader(Header):
    code = RequestCode.GET_BROKER_MEMBER_GROUP
    cluster_name: str = ext("clusterName")
    broker_name: str = ext("brokerName")


@dataclass(slots=True)
class BrokerHeartbeatHeader(Header):
    """BROKER_HEARTBEAT (904, RocketMQ 5), usually sent oneway. ``heartbeatTimeoutMills``
    is spelled that way in RocketMQ's BrokerHeartbeatRequestHeader."""

    code = RequestCode.BROKER_HEARTBEAT
    cluster_name: str = ext("clusterName")
    broker_addr: str = ext("brokerAddr")
    broker_name: str = ext("brokerName")
    broker_id: int | None = ext("brokerId", None)
    epoch: int | None = ext("epoch", None)
    max_offset: int | None = ext("maxOffset", None)
    confirm_offset: int | None = ext("confirmOffset", None)
    heartbeat_timeout_mills: int | None = ext("heartbeatTimeoutMills", None)
    election_priority: int | None = ext("electionPriority", None)
