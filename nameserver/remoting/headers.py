"""Request headers (ext fields) and bodies of the nameserver's remoting requests.

Field names are RocketMQ's (``remoting/.../protocol/header/namesrv/*.java``,
``research/rocketmq-clients.md`` §1.2): the ``ext`` name of each field below is what
travels in ``extFields``. A header class parses a request (``from_command``: a missing
required field or a bad number raises :class:`BadRequest` naming it, as RocketMQ's
``decodeCommandCustomHeader`` does) and writes one (``to_ext_fields``), so the tests and
the broker of a later issue build requests with the same definitions the nameserver
reads them with. Like the codec, this module has no I/O.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from nameserver.remoting.jsonfields import (
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
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
from rmq.codec import (
    BadRequest,
    RemotingCommand,
    dumps_fastjson,
)
from rmq.codes import PERM_READ, PERM_WRITE, RequestCode


def ext(name: str, default: Any = dataclasses.MISSING) -> Any:
    """A header field travelling as ext field ``name``; without a default it is required
    (RocketMQ's @CFNotNull)."""
    return field(default=default, metadata={"ext": name})


class Header:
    """Base of the header dataclasses: fields typed ``str``, ``int`` or ``bool`` (or
    ``... | None`` for optional ones), each declared with :func:`ext`."""

    code: ClassVar[RequestCode]

    @classmethod
    def from_command(cls, command: RemotingCommand) -> Self:
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = f.metadata["ext"]
            kind = _kind(f.type)
            required = f.default is dataclasses.MISSING
            if name not in command.ext_fields:
                if required:
                    raise BadRequest(f"the custom field <{name}> is null")
                continue
            if kind is int:
                number = command.ext_int(name)
                if not JAVA_LONG_MIN <= number <= JAVA_LONG_MAX:
                    raise BadRequest(f"the custom field <{name}> is out of the range of a long")
                values[f.name] = number
            elif kind is bool:
                values[f.name] = command.ext_bool(name)
            else:
                values[f.name] = utf8(command.ext_str(name), f"the custom field <{name}>")
        return cls(**values)

    def to_ext_fields(self) -> dict[str, object]:
        return {
            f.metadata["ext"]: getattr(self, f.name)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) is not None
        }

    def request(
        self,
        body: bytes = b"",
        *,
        opaque: int = 0,
        oneway: bool = False,
        code: int | None = None,
    ) -> RemotingCommand:
        """A request carrying this header; ``code`` for the classes shared by two codes."""
        return RemotingCommand.request(
            self.code if code is None else code,
            self.to_ext_fields(),
            body,
            opaque=opaque,
            oneway=oneway,
        )


def _kind(annotation: object) -> type:
    text = str(annotation)
    if text.startswith("int"):
        return int
    if text.startswith("bool"):
        return bool
    return str


@dataclass(frozen=True)
class PutKvConfigHeader(Header):
    code = RequestCode.PUT_KV_CONFIG
    namespace: str = ext("namespace")
    key: str = ext("key")
    value: str = ext("value")


@dataclass(frozen=True)
class KvConfigKeyHeader(Header):
    """GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102) carry the same fields."""

    code = RequestCode.GET_KV_CONFIG
    namespace: str = ext("namespace")
    key: str = ext("key")


@dataclass(frozen=True)
class GetKvListByNamespaceHeader(Header):
    code = RequestCode.GET_KVLIST_BY_NAMESPACE
    namespace: str = ext("namespace")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class BrokerIdentityHeader(Header):
    """UNREGISTER_BROKER (104) and QUERY_DATA_VERSION (322) carry the same fields."""

    code = RequestCode.UNREGISTER_BROKER
    broker_name: str = ext("brokerName")
    broker_addr: str = ext("brokerAddr")
    cluster_name: str = ext("clusterName")
    broker_id: int = ext("brokerId")


@dataclass(frozen=True)
class GetRouteInfoHeader(Header):
    code = RequestCode.GET_ROUTEINFO_BY_TOPIC
    topic: str = ext("topic")
    accept_standard_json_only: bool | None = ext("acceptStandardJsonOnly", None)


@dataclass(frozen=True)
class BrokerNameHeader(Header):
    """WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327)."""

    code = RequestCode.WIPE_WRITE_PERM_OF_BROKER
    broker_name: str = ext("brokerName")


@dataclass(frozen=True)
class DeleteTopicHeader(Header):
    code = RequestCode.DELETE_TOPIC_IN_NAMESRV
    topic: str = ext("topic")
    cluster_name: str | None = ext("clusterName", None)


@dataclass(frozen=True)
class RegisterTopicHeader(Header):
    code = RequestCode.REGISTER_TOPIC_IN_NAMESRV
    topic: str = ext("topic")


@dataclass(frozen=True)
class GetTopicsByClusterHeader(Header):
    code = RequestCode.GET_TOPICS_BY_CLUSTER
    cluster: str = ext("cluster")


@dataclass(frozen=True)
class GetBrokerMemberGroupHeader(Header):
    code = RequestCode.GET_BROKER_MEMBER_GROUP
    cluster_name: str = ext("clusterName")
    broker_name: str = ext("brokerName")


@dataclass(frozen=True)
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
        ``compressedRegister=true`` brokers is not decoded yet: issue 5.) Every field is
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
