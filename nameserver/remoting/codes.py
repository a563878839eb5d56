"""RocketMQ remoting request, response and language codes (protocol facts).

Values are RocketMQ's own (``RequestCode.java``, ``ResponseCode.java``,
``RemotingSysResponseCode.java``, ``LanguageCode.java``), as recorded in
``research/rocketmq-clients.md`` §1. They are wire constants: never renumber.
This module imports nothing, so brokers and replicators can share it with the
codec (DESIGN.md §2).
"""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    # Served by the nameserver (issue 5's list, plus the unit-topic queries RocketMQ also answers).
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_BROKER_MEMBER_GROUP = 901
    BROKER_HEARTBEAT = 904
    # Sent by clients to brokers (seen in the probes; the broker of a later issue serves them).
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    GET_CONSUMER_LIST_BY_GROUP = 38
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320


#: The request codes the metaledger nameserver answers (issue 5); everything else gets
#: REQUEST_CODE_NOT_SUPPORTED, as from RocketMQ's own nameserver.
NAMESERVER_REQUEST_CODES: frozenset[RequestCode] = frozenset(
    {
        RequestCode.PUT_KV_CONFIG,
        RequestCode.GET_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.REGISTER_TOPIC_IN_NAMESRV,
        RequestCode.GET_KVLIST_BY_NAMESPACE,
        RequestCode.GET_TOPICS_BY_CLUSTER,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        RequestCode.QUERY_DATA_VERSION,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.GET_BROKER_MEMBER_GROUP,
        RequestCode.BROKER_HEARTBEAT,
    }
)


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    INVALID_PARAMETER = 29
    CONSUMER_NOT_ONLINE = 206
    NO_MESSAGE = 208
    FLOW_CONTROL = 215
    GO_AWAY = 1500


class LanguageCode(IntEnum):
    """``language`` travels as the enum *name* in JSON headers and as this byte in the
    "ROCKETMQ" binary header. RocketMQ 4.x stops at OMS; RUST and NODE_JS are 5.x."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class Version(IntEnum):
    """Ordinals of ``MQVersion.Version`` that the protocol cares about."""

    V3_0_11 = 37
    V4_0_0 = 213
    V4_6_0 = 333
    #: From this version on, clients get route bodies in standard JSON (quoted integer keys).
    V4_9_4 = 401
    V5_0_0 = 413
    V5_3_3 = 479


#: Permission bits of queue data (``PermName.java``).
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
