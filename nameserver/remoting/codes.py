"""Which RocketMQ request codes the metaledger nameserver serves (its policy; the codes
themselves are RocketMQ's, in :mod:`rmq.codes`)."""

from __future__ import annotations

from rmq.codes import RequestCode

#: The request codes the metaledger nameserver answers (RocketMQ's nameserver codes for
#: routes, broker registration and heartbeats and KV config, plus the unit-topic queries
#: RocketMQ also answers); everything else gets REQUEST_CODE_NOT_SUPPORTED, as from RocketMQ's
#: own nameserver.
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
