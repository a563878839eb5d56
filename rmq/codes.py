"""RocketMQ remoting request, response and language codes: the one table (protocol facts).

Values and names are RocketMQ's own (``RequestCode.java``, ``ResponseCode.java``,
``RemotingSysResponseCode.java``, ``LanguageCode.java``, ``MQVersion.java``). They are wire
constants: never renumber. Which codes a program serves is its own policy (the
nameserver's list is ``nameserver.remoting.NAMESERVER_REQUEST_CODES``); this module only
names them. It imports nothing, like the codec.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class RequestCode(IntEnum):
    # Clients and admin tools to brokers.
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    CHECK_TRANSACTION_STATE = 39  # broker to a producer, oneway
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_CONSUME_STATS = 208  # (a request code; the response table's 208 is NO_MESSAGE)
    DELETE_TOPIC_IN_BROKER = 215
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    # Brokers, clients and admin tools to the nameserver.
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
    # RocketMQ 5's POP consumption (clients to brokers).
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151


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
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    INVALID_PARAMETER = 29
    CONSUMER_NOT_ONLINE = 206
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    FLOW_CONTROL = 215
    ILLEGAL_OPERATION = 604  # RocketMQ 5: an end past the producer's own check immunity
    GO_AWAY = 1500


#: Answers that may succeed when asked again, what RocketMQ's clients retry
#: (``DefaultMQProducer.retryResponseCodes``): SYSTEM_ERROR
#: (RocketMQ 5's "in-sync replicas not enough", our broker's "offsets not loaded yet"),
#: SYSTEM_BUSY, SERVICE_NOT_AVAILABLE, NO_PERMISSION (a master that stepped down: refresh the
#: route), TOPIC_NOT_EXIST (a broker that has not loaded the topic yet), FLOW_CONTROL and
#: GO_AWAY; and a send's FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT,
#: which the Java client takes as success but which mean stored on the master only, so never
#: a quorum confirmation (only sends are answered them).
RETRIABLE_CODES: Final[frozenset[int]] = frozenset(
    {
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.NO_PERMISSION,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.FLOW_CONTROL,
        ResponseCode.GO_AWAY,
    }
)


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


def version_name(ordinal: int) -> str:
    """``MQVersion.getVersionDesc``: the name of a ``version`` header's ordinal (401:
    ``"V4_9_4"``); one past the last is ``HIGHER_VERSION``, as in RocketMQ.

    ``MQVersion.Version`` lists 16 betas of 3.0.0 (``V3_0_0_SNAPSHOT`` .. ``V3_0_0_FINAL``),
    then a ``_SNAPSHOT`` and a release per version: 3.0.1-3.0.15, 3.1.0-3.2.9, x.y.1-x.y.9 for
    3.3-3.9, and x.y.0-x.y.9 for 4.0-5.9."""
    if ordinal < 0:
        return "UNKNOWN"
    if ordinal < len(_V3_0_0):
        return _V3_0_0[ordinal]
    index, snapshot = divmod(ordinal - len(_V3_0_0), 2)
    for major, minor, patches in _RELEASES:
        if index < len(patches):
            return f"V{major}_{minor}_{patches[index]}" + ("" if snapshot else "_SNAPSHOT")
        index -= len(patches)
    return "HIGHER_VERSION"


_V3_0_0: Final = tuple(
    "V3_0_0_" + s
    for s in "SNAPSHOT ALPHA1 BETA1 BETA2 BETA3 BETA4 BETA5 BETA6_SNAPSHOT BETA6 BETA7_SNAPSHOT"
    " BETA7 BETA8_SNAPSHOT BETA8 BETA9_SNAPSHOT BETA9 FINAL".split()
)
_RELEASES: Final = (
    [(3, 0, range(1, 16))]
    + [(3, minor, range(10)) for minor in (1, 2)]
    + [(3, minor, range(1, 10)) for minor in range(3, 10)]
    + [(major, minor, range(10)) for major in (4, 5) for minor in range(10)]
)


#: Permission bits of queue data (``PermName.java``).
PERM_PRIORITY: Final = 0x8
PERM_READ: Final = 0x4
PERM_WRITE: Final = 0x2
PERM_INHERIT: Final = 0x1
