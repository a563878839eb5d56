"""Typed request headers of the codes the broker serves, parsed from a command's ext fields.

Every field comes through the codec's ``ext_str``/``ext_int``/``ext_bool``, so a missing
required field or one of the wrong type raises ``BadRequest`` naming the field (answered
SYSTEM_ERROR, as RocketMQ answers a RemotingCommandException). Booleans accept
``true``/``false``/``1``/``0`` (C++ 1.x sends ``"0"``/``"1"``, research/broker.md §0 trap 10).

SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) name the V1 fields ``a``…``m`` in order,
plus ``n`` = brokerName (J4 ``SendMessageRequestHeaderV2.java:32-60``). Field lists:
research/broker.md §2 (PULL_MESSAGE) and §3 (the rest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from rmq.codec import (
    BadRequest,
    RemotingCommand,
    parse_bool_field,
    parse_int_field,
)
from rmq.codes import RequestCode

T = TypeVar("T")

#: V2 short name → V1 name, in the order of SendMessageRequestHeaderV2 (a..m).
V2_FIELDS = {
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

_INT32 = (-(2**31), 2**31 - 1)


def _int32(request: RemotingCommand, name: str, default: int | None = None) -> int:
    value = request.ext_int(name, default)
    if not _INT32[0] <= value <= _INT32[1]:
        raise BadRequest(f"the custom field <{name}> is out of the int range: {value}")
    return value


def _field(
    fields: Mapping[str, str], name: str, default: T | None, parse: Callable[[str, str], T]
) -> T:
    """``RemotingCommand.ext_*`` over a plain mapping (the send path's renamed V2 fields)."""
    value = fields.get(name)
    if value is not None:
        return parse(name, value)
    if default is None:
        raise BadRequest(f"the custom field <{name}> is null")
    return default


def _str(_name: str, value: str) -> str:
    return value


def _int32_field(fields: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = _field(fields, name, default, parse_int_field)
    if not _INT32[0] <= value <= _INT32[1]:
        raise BadRequest(f"the custom field <{name}> is out of the int range: {value}")
    return value


@dataclass(frozen=True)
class SendHeader:
    producer_group: str
    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    max_reconsume_times: int | None
    batch: bool

    @classmethod
    def parse(cls, request: RemotingCommand) -> SendHeader:
        fields = request.ext_fields
        if request.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            fields = {V2_FIELDS.get(k, k): v for k, v in fields.items()}
        max_reconsume = fields.get("maxReconsumeTimes")
        return cls(
            producer_group=_field(fields, "producerGroup", None, _str),
            topic=_field(fields, "topic", None, _str),
            queue_id=_int32_field(fields, "queueId"),
            sys_flag=_int32_field(fields, "sysFlag"),
            born_timestamp=_field(fields, "bornTimestamp", None, parse_int_field),
            flag=_int32_field(fields, "flag"),
            properties=_field(fields, "properties", "", _str),
            reconsume_times=_int32_field(fields, "reconsumeTimes", 0),
            max_reconsume_times=(
                _int32_field(fields, "maxReconsumeTimes") if max_reconsume is not None else None
            ),
            batch=(
                request.code == RequestCode.SEND_BATCH_MESSAGE
                or _field(fields, "batch", False, parse_bool_field)
            ),
        )


@dataclass(frozen=True)
class PullHeader:
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_ms: int
    subscription: str | None
    expression_type: str

    @classmethod
    def parse(cls, request: RemotingCommand) -> PullHeader:
        request.ext_int("subVersion")  # required by RocketMQ; unused here
        return cls(
            consumer_group=request.ext_str("consumerGroup"),
            topic=request.ext_str("topic"),
            queue_id=_int32(request, "queueId"),
            queue_offset=request.ext_int("queueOffset"),
            max_msg_nums=_int32(request, "maxMsgNums"),
            sys_flag=_int32(request, "sysFlag"),
            commit_offset=request.ext_int("commitOffset"),
            suspend_timeout_ms=request.ext_int("suspendTimeoutMillis"),
            subscription=request.ext_fields.get("subscription"),
            expression_type=request.ext_str("expressionType", "TAG"),
        )


@dataclass(frozen=True)
class QueueHeader:
    """topic + queueId (GET_MAX/MIN_OFFSET, and the start of the others)."""

    topic: str
    queue_id: int

    @classmethod
    def parse(cls, request: RemotingCommand) -> QueueHeader:
        return cls(request.ext_str("topic"), _int32(request, "queueId"))


@dataclass(frozen=True)
class ConsumerOffsetHeader:
    """QUERY_CONSUMER_OFFSET (14) and UPDATE_CONSUMER_OFFSET (15, with commitOffset)."""

    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int | None

    @classmethod
    def parse(cls, request: RemotingCommand, with_offset: bool) -> ConsumerOffsetHeader:
        return cls(
            request.ext_str("consumerGroup"),
            request.ext_str("topic"),
            _int32(request, "queueId"),
            request.ext_int("commitOffset") if with_offset else None,
        )


@dataclass(frozen=True)
class SearchOffsetHeader:
    topic: str
    queue_id: int
    timestamp: int

    @classmethod
    def parse(cls, request: RemotingCommand) -> SearchOffsetHeader:
        return cls(
            request.ext_str("topic"), _int32(request, "queueId"), request.ext_int("timestamp")
        )


@dataclass(frozen=True)
class SendBackHeader:
    """CONSUMER_SEND_MSG_BACK (36): C++ sends only group, delayLevel, offset (§3.3)."""

    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None
    origin_topic: str | None
    max_reconsume_times: int | None

    @classmethod
    def parse(cls, request: RemotingCommand) -> SendBackHeader:
        has_max = request.ext_fields.get("maxReconsumeTimes") is not None
        return cls(
            offset=request.ext_int("offset"),
            group=request.ext_str("group"),
            delay_level=_int32(request, "delayLevel"),
            origin_msg_id=request.ext_fields.get("originMsgId"),
            origin_topic=request.ext_fields.get("originTopic"),
            max_reconsume_times=_int32(request, "maxReconsumeTimes") if has_max else None,
        )


@dataclass(frozen=True)
class UnregisterClientHeader:
    client_id: str
    producer_group: str | None
    consumer_group: str | None

    @classmethod
    def parse(cls, request: RemotingCommand) -> UnregisterClientHeader:
        return cls(
            request.ext_str("clientID"),
            request.ext_fields.get("producerGroup"),
            request.ext_fields.get("consumerGroup"),
        )
