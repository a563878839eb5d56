"""The RocketMQ request and response codes the broker serves and answers (wire constants).

Copied from RocketMQ (J5 ``remoting/.../protocol/RequestCode.java`` and ``ResponseCode.java``,
research/broker.md §3, research/rocketmq-clients.md §1.2), because a broker may not import
``nameserver.remoting.codes``. Never renumber.
"""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ROUTEINFO_BY_TOPIC = 105
    DELETE_TOPIC_IN_BROKER = 215
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
