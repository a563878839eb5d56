"""Stored messages as RocketMQ 5 clients see them: :func:`to_message`, the one stored-message →
``apache.rocketmq.v2.Message`` conversion (receive, lookup, a transaction's check), after
RocketMQ's proxy (``GrpcConverter.java``). Imports only the generated protos and ``rmq``, so
every gRPC module may use it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.message import SYSFLAG_COMPRESSED, StoredMessage, inflate

SHARDING_KEY = "__SHARDINGKEY"
RETRY_PREFIX = "%RETRY%"
#: RocketMQ's ``MessageConst.STRING_HASH_SET`` (properties a client never sees as its own),
#: and ``__SHARDINGKEY``, which a 5.x client sees as the message group instead
SYSTEM_PROPERTIES = frozenset(
    {
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
        "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
        "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
        "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
        "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
        "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
        "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
        "__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#",
        SHARDING_KEY,
    }
)  # fmt: skip


def to_message(
    m: StoredMessage, *, receipt_handle: str = "", attempt: int = 0, broker_name: str = ""
) -> v2.Message:
    """A stored message as a 5.x consumer sees it (``GrpcConverter.java``:50-206): the body
    inflated (IDENTITY, with its MD5), the message id (UNIQ_KEY, else the offset id), tag,
    keys, type, born/store timestamps and hosts, queue id and offset, message group, delivery
    attempt (``attempt``, else RECONSUME_TIMES + 1), receipt handle when given, and the user
    properties (all but :data:`SYSTEM_PROPERTIES`). A retried message carries its topic
    (RETRY_TOPIC), not ``%RETRY%<group>``."""
    props = m.properties
    body = inflate(m.body, m.sysflag) if m.sysflag & SYSFLAG_COMPRESSED else m.body
    out = v2.Message(body=body)
    topic = m.topic
    if topic.startswith(RETRY_PREFIX) and props.get("RETRY_TOPIC"):
        topic = props["RETRY_TOPIC"]
    out.topic.name = topic
    for k, v in props.items():
        if k not in SYSTEM_PROPERTIES:
            out.user_properties[k] = v
    sp = out.system_properties
    if "TAGS" in props:
        sp.tag = props["TAGS"]
    sp.keys.extend(k for k in props.get("KEYS", "").split(" ") if k)
    sp.message_id = m.msg_id
    sp.body_digest.type = v2.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = v2.IDENTITY
    sp.message_type = message_type(props)  # type: ignore[assignment]
    sp.born_timestamp.FromMilliseconds(m.born_timestamp)
    sp.born_host = props.get("__BORNHOST") or m.born_host.ip
    sp.store_timestamp.FromMilliseconds(m.store_timestamp)
    sp.store_host = f"{m.store_host.ip}:{m.store_host.port}"
    deliver = props.get("TIMER_DELIVER_MS", "")
    if deliver.isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(deliver))
    if SHARDING_KEY in props:
        sp.message_group = props[SHARDING_KEY]
    if receipt_handle:
        sp.receipt_handle = receipt_handle
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    sp.delivery_attempt = attempt or m.reconsume_times + 1
    if "TRACE_CONTEXT" in props:
        sp.trace_context = props["TRACE_CONTEXT"]
    if "DLQ_ORIGIN_TOPIC" in props and "DLQ_ORIGIN_MESSAGE_ID" in props:
        sp.dead_letter_queue.topic = props["DLQ_ORIGIN_TOPIC"]
        sp.dead_letter_queue.message_id = props["DLQ_ORIGIN_MESSAGE_ID"]
    return out


def message_type(props: Mapping[str, str]) -> int:
    """``GrpcConverter.java``:117-130: TRANSACTION, DELAY, FIFO (a message group), NORMAL."""
    if props.get("TRAN_MSG") == "true":
        return v2.TRANSACTION
    if {"DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC"} & props.keys():
        return v2.DELAY
    if SHARDING_KEY in props:
        return v2.FIFO
    return v2.NORMAL


__all__ = ["RETRY_PREFIX", "SHARDING_KEY", "SYSTEM_PROPERTIES", "message_type", "to_message"]
