"""The nameserver's remoting requests: which header each code carries (the header classes
are RocketMQ's, in :mod:`rmq.headers`, shared with brokers and replicators) and the bodies
only the nameserver reads (REGISTER_BROKER, REGISTER_TOPIC_IN_NAMESRV, QUERY_DATA_VERSION).
Every body field is checked for its type, and a bad one is named in the
:class:`~rmq.codec.BadRequest`. Like the codec, this module has no I/O.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rmq.codec import (
    BadRequest,
    RemotingCommand,
    dumps_fastjson,
)
from rmq.codes import PERM_READ, PERM_WRITE, RequestCode
from rmq.headers import (
    BrokerHeartbeatHeader,
    BrokerIdentityHeader,
    BrokerNameHeader,
    DeleteTopicHeader,
    GetBrokerMemberGroupHeader,
    GetKvListByNamespaceHeader,
    GetRouteInfoHeader,
    GetTopicsByClusterHeader,
    Header,
    KvConfigKeyHeader,
    PutKvConfigHeader,
    RegisterBrokerHeader,
    RegisterTopicHeader,
)
from rmq.jsonfields import (
    boolean,
    integer,
    json_list,
    json_object,
    loads_body,
    optional_object,
    scalar,
    show,
    text,
    utf8,
)

#: The header class of each nameserver request code that has one.
HEADERS: Mapping[RequestCode, type[Header]] = {
    RequestCode.PUT_KV_CONFIG: PutKvConfigHeader,
    RequestCode.GET_KV_CONFIG: KvConfigKeyHeader,
    RequestCode.DELETE_KV_CONFIG: KvConfigKeyHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerHeader,
    RequestCode.UNREGISTER_BROKER: BrokerIdentityHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoHeader,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: BrokerNameHeader,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: BrokerNameHeader,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: DeleteTopicHeader,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: RegisterTopicHeader,
    RequestCode.GET_KVLIST_BY_NAMESPACE: GetKvListByNamespaceHeader,
    RequestCode.GET_TOPICS_BY_CLUSTER: GetTopicsByClusterHeader,
    RequestCode.QUERY_DATA_VERSION: BrokerIdentityHeader,
    RequestCode.GET_BROKER_MEMBER_GROUP: GetBrokerMemberGroupHeader,
    RequestCode.BROKER_HEARTBEAT: BrokerHeartbeatHeader,
}


# --- REGISTER_BROKER body -------------------------------------------------------------


@dataclass(frozen=True)
class DataVersion:
    counter: int = 0
    state_version: int = 0
    timestamp: int = 0

    @classmethod
    def decode(cls, body: bytes, what: str) -> DataVersion:
        """A DataVersion body (QUERY_DATA_VERSION); an empty body is the zero version."""
        obj = json_object(loads_body(body, what) if body else {}, f"{what} body")
        return cls.from_json(obj, f"{what} body")

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], where: str) -> DataVersion:
        return cls(
            counter=integer(obj, "counter", 0, where, long=True),
            state_version=integer(obj, "stateVersion", 0, where, long=True),
            timestamp=integer(obj, "timestamp", 0, where, long=True),
        )

    def to_json(self) -> dict[str, int]:
        return {
            "counter": self.counter,
            "stateVersion": self.state_version,
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True)
class TopicConfig:
    """A topic as a broker registers it (``TopicConfig.java``; Java's defaults)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, name: str, t: Mapping[str, Any], where: str) -> TopicConfig:
        """One entry of a ``topicConfigTable`` (keyed by ``name``)."""
        at = f"{where}: topic config {show(name)}"
        attributes = optional_object(t.get("attributes"), f"{at}: attributes")
        return cls(
            topic_name=text(t.get("topicName", name), f"{at}: topicName"),
            read_queue_nums=integer(t, "readQueueNums", 16, at),
            write_queue_nums=integer(t, "writeQueueNums", 16, at),
            perm=integer(t, "perm", PERM_READ | PERM_WRITE, at),
            topic_filter_type=text(
                t.get("topicFilterType", "SINGLE_TAG"), f"{at}: topicFilterType"
            ),
            topic_sys_flag=integer(t, "topicSysFlag", 0, at),
            order=boolean(t, "order", False, at),
            attributes={
                utf8(k, f"{at}: attributes key"): scalar(v, f"{at}: attributes.{show(k)}")
                for k, v in attributes.items()
            },
        )

    def to_json(self) -> dict[str, object]:
        # fastjson writes bean properties in alphabetical order.
        return {
            "attributes": dict(self.attributes),
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(frozen=True)
class RegisterBrokerBody:
    topics: tuple[TopicConfig, ...] = ()
    data_version: DataVersion = DataVersion()
    filter_servers: tuple[str, ...] = ()

    def encode(self) -> bytes:
        """The uncompressed form (a broker's default, ``compressedRegister=false``)."""
        return dumps_fastjson(
            {
                "filterServerList": list(self.filter_servers),
                "topicConfigSerializeWrapper": {
                    "dataVersion": self.data_version.to_json(),
                    "topicConfigTable": {t.topic_name: t.to_json() for t in self.topics},
                    "topicQueueMappingInfoMap": {},
                },
            },
            standard=False,
        )

    @classmethod
    def decode(cls, body: bytes) -> RegisterBrokerBody:
        """The uncompressed JSON form; a body of a broker older than V3_0_11 is a bare
        TopicConfigSerializeWrapper and is accepted too. (The deflated form of
        ``compressedRegister=true`` brokers is not decoded yet.) Every field is
        checked for its type, and a bad one is named in the :class:`BadRequest`."""
        where = "REGISTER_BROKER body"
        obj = json_object(loads_body(body, "REGISTER_BROKER"), where)
        wrapper = json_object(
            obj.get("topicConfigSerializeWrapper", obj), f"{where}: topicConfigSerializeWrapper"
        )
        dv = optional_object(wrapper.get("dataVersion"), f"{where}: dataVersion")
        table = optional_object(wrapper.get("topicConfigTable"), f"{where}: topicConfigTable")
        topics = [
            TopicConfig.from_json(
                name, json_object(raw, f"{where}: topic config {show(name)}"), where
            )
            for name, raw in table.items()
        ]
        filters = json_list(obj.get("filterServerList"), f"{where}: filterServerList")
        return cls(
            topics=tuple(topics),
            data_version=DataVersion.from_json(dv, f"{where}: dataVersion"),
            filter_servers=tuple(
                text(f, f"{where}: filterServerList[{i}]") for i, f in enumerate(filters)
            ),
        )


# --- REGISTER_TOPIC_IN_NAMESRV body --------------------------------------------------


@dataclass(frozen=True)
class QueueData:
    """One ``queueDatas`` entry of a TopicRouteData body (``QueueData.java``)."""

    broker_name: str
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0

    @classmethod
    def decode_list(cls, body: bytes, what: str, max_entries: int) -> list[QueueData]:
        """The ``queueDatas`` of a TopicRouteData body: a non-empty list of at most
        ``max_entries`` objects (counted before any is decoded)."""
        where = f"{what} body"
        obj = json_object(loads_body(body, what) if body else None, where)
        raw = json_list(obj.get("queueDatas"), f"{where}: queueDatas")
        if not raw:
            raise BadRequest(f"{where}: queueDatas must be a non-empty list")
        if len(raw) > max_entries:
            raise BadRequest(f"{where}: queueDatas has {len(raw)} entries > limit {max_entries}")
        out = []
        for i, item in enumerate(raw):
            at = f"{where}: queueDatas[{i}]"
            q = json_object(item, at)
            out.append(
                cls(
                    broker_name=text(q.get("brokerName", ""), f"{at}.brokerName"),
                    read_queue_nums=integer(q, "readQueueNums", 0, at),
                    write_queue_nums=integer(q, "writeQueueNums", 0, at),
                    perm=integer(q, "perm", PERM_READ | PERM_WRITE, at),
                    topic_sys_flag=integer(q, "topicSysFlag", 0, at),
                )
            )
        return out


def java_crc32(data: bytes) -> int:
    """RocketMQ's ``UtilAll.crc32``: CRC-32 with the sign bit masked off."""
    return zlib.crc32(data) & 0x7FFFFFFF


def register_broker_request(
    header: RegisterBrokerHeader, body: RegisterBrokerBody, *, opaque: int = 0
) -> RemotingCommand:
    """A REGISTER_BROKER request exactly as a broker sends one: uncompressed body,
    ``compressed=false``, ``bodyCrc32`` set (brokers always set it)."""
    data = body.encode()
    header = dataclasses.replace(header, compressed=False, body_crc32=java_crc32(data))
    return header.request(data, opaque=opaque)
