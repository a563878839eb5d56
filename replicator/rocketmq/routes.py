"""Nameserver bodies to typed values, sans I/O: GET_ROUTEINFO_BY_TOPIC (105) TopicRouteData →
``nameserver.client.Route``, GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) TopicList →
topic names, GET_BROKER_CLUSTER_INFO (106) ClusterInfo → broker groups.

Bodies may be fastjson's own dialect, integer map keys unquoted (``"brokerAddrs":{0:"..."}``,
what RocketMQ's nameserver sends clients older than 4.9.4), or standard JSON; ``loads_lenient``
reads both. Every field is checked: a body of the wrong shape is :class:`BadAnswer`, never a
KeyError.
"""

from __future__ import annotations

import json
import re
from typing import Any

from nameserver.client import BrokerGroup, QueueData, Route
from replicator.rocketmq.errors import BadAnswer, RemotingError, TopicNotFound
from rmq.codec import RemotingCommand, loads_lenient

__all__ = ["parse_cluster_info", "parse_route", "parse_topic_list"]

SUCCESS = 0
TOPIC_NOT_EXIST = 17
INTEGER = re.compile(r"-?[0-9]{1,20}", re.ASCII)  # a Java long's digits, as text


def _body(answer: RemotingCommand, what: str) -> Any:
    try:
        return loads_lenient(answer.body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError):
        raise BadAnswer(f"{what}: the body is not JSON") from None


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadAnswer(f"{where} must be a JSON object")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadAnswer(f"{where} must be a JSON list")
    return value


def _str(obj: dict[str, Any], name: str, where: str, default: str | None = None) -> str:
    value = obj.get(name, default)
    if not isinstance(value, str):
        raise BadAnswer(f"{where}: {name} must be a string")
    return value


def _int(obj: dict[str, Any], name: str, where: str, default: int | None = None) -> int:
    value = obj.get(name, default)
    if isinstance(value, str) and INTEGER.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadAnswer(f"{where}: {name} must be an integer")
    return value


def _bool(obj: dict[str, Any], name: str, where: str) -> bool:
    value = obj.get(name, False)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise BadAnswer(f"{where}: {name} must be true or false")
    return value


def broker_group(obj: object, where: str) -> BrokerGroup:
    """One BrokerData: cluster, brokerName, brokerAddrs {id: addr}, zoneName, enableActingMaster."""
    d = _object(obj, where)
    addrs: dict[int, str] = {}
    for key, addr in _object(d.get("brokerAddrs", {}), f"{where}.brokerAddrs").items():
        if not INTEGER.fullmatch(key) or not isinstance(addr, str):
            raise BadAnswer(f"{where}.brokerAddrs: {key!r} is not an integer id with an address")
        addrs[int(key)] = addr
    return BrokerGroup(
        _str(d, "cluster", where, ""),
        _str(d, "brokerName", where),
        addrs,
        _str(d, "zoneName", where, ""),
        _bool(d, "enableActingMaster", where),
    )


def _queue(obj: object, where: str) -> QueueData:
    d = _object(obj, where)
    return QueueData(
        _str(d, "brokerName", where),
        _int(d, "readQueueNums", where),
        _int(d, "writeQueueNums", where),
        _int(d, "perm", where),
        _int(d, "topicSysFlag", where, 0),
    )


def parse_route(topic: str, answer: RemotingCommand) -> Route:
    """The route of ``topic`` (``apply_offset`` 0: the remoting answer does not carry it);
    TOPIC_NOT_EXIST (17) is :class:`TopicNotFound`, another code :class:`RemotingError`."""
    if answer.code == TOPIC_NOT_EXIST:
        raise TopicNotFound(topic, answer.remark)
    if answer.code != SUCCESS:
        raise RemotingError(answer.code, answer.remark, f"route of {topic}")
    doc = _object(_body(answer, "route"), "route")
    order = doc.get("orderTopicConf") or ""
    if not isinstance(order, str):
        raise BadAnswer("route: orderTopicConf must be a string")
    brokers = _list(doc.get("brokerDatas"), "route.brokerDatas")
    queues = _list(doc.get("queueDatas"), "route.queueDatas")
    return Route(
        topic,
        [broker_group(b, f"route.brokerDatas[{i}]") for i, b in enumerate(brokers)],
        [_queue(q, f"route.queueDatas[{i}]") for i, q in enumerate(queues)],
        order,
        0,
    )


def parse_topic_list(answer: RemotingCommand) -> list[str]:
    """TopicList ``{"topicList": [...], "brokerAddr"?}`` → the names, as sent."""
    if answer.code != SUCCESS:
        raise RemotingError(answer.code, answer.remark, "topic list")
    doc = _object(_body(answer, "topic list"), "topic list")
    topics = _list(doc.get("topicList"), "topic list.topicList")
    if not all(isinstance(t, str) for t in topics):
        raise BadAnswer("topic list: every topic must be a string")
    return list(topics)


def parse_cluster_info(answer: RemotingCommand) -> list[BrokerGroup]:
    """ClusterInfo ``{"brokerAddrTable": {name: BrokerData}, "clusterAddrTable": {...}}`` →
    the broker groups, sorted by broker name."""
    if answer.code != SUCCESS:
        raise RemotingError(answer.code, answer.remark, "cluster info")
    doc = _object(_body(answer, "cluster info"), "cluster info")
    table = _object(doc.get("brokerAddrTable") or {}, "cluster info.brokerAddrTable")
    return [broker_group(table[name], f"cluster info.{name}") for name in sorted(table)]
