from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataVersion(_message.Message):
    __slots__ = ("counter", "state_version", "timestamp")
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    STATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    counter: int
    state_version: int
    timestamp: int
    def __init__(self, counter: _Optional[int] = ..., state_version: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    def __init__(self, topic: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., order: _Optional[bool] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., order: _Optional[bool] = ...) -> None: ...

class Broker(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_id", "addr", "ha_addr", "zone", "data_version", "heartbeat_timeout_ms", "enable_acting_master", "registered_offset")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_ACTING_MASTER_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    ha_addr: str
    zone: str
    data_version: DataVersion
    heartbeat_timeout_ms: int
    enable_acting_master: bool
    registered_offset: int
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., addr: _Optional[str] = ..., ha_addr: _Optional[str] = ..., zone: _Optional[str] = ..., data_version: _Optional[_Union[DataVersion, _Mapping]] = ..., heartbeat_timeout_ms: _Optional[int] = ..., enable_acting_master: _Optional[bool] = ..., registered_offset: _Optional[int] = ...) -> None: ...

class BrokerGroup(_message.Message):
    __slots__ = ("cluster", "broker_name", "addrs", "zone", "enable_acting_master")
    class AddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRS_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    ENABLE_ACTING_MASTER_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    addrs: _containers.ScalarMap[int, str]
    zone: str
    enable_acting_master: bool
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., addrs: _Optional[_Mapping[int, str]] = ..., zone: _Optional[str] = ..., enable_acting_master: _Optional[bool] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_id", "addr", "ha_addr", "zone", "data_version", "heartbeat_timeout_ms", "enable_acting_master", "topics")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_ACTING_MASTER_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    ha_addr: str
    zone: str
    data_version: DataVersion
    heartbeat_timeout_ms: int
    enable_acting_master: bool
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., addr: _Optional[str] = ..., ha_addr: _Optional[str] = ..., zone: _Optional[str] = ..., data_version: _Optional[_Union[DataVersion, _Mapping]] = ..., heartbeat_timeout_ms: _Optional[int] = ..., enable_acting_master: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("revision", "changed", "master_addr", "ha_server_addr")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    revision: int
    changed: bool
    master_addr: str
    ha_server_addr: str
    def __init__(self, revision: _Optional[int] = ..., changed: _Optional[bool] = ..., master_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_id", "addr")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., addr: _Optional[str] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ("revision", "removed")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    revision: int
    removed: int
    def __init__(self, revision: _Optional[int] = ..., removed: _Optional[int] = ...) -> None: ...

class BrokerHeartbeat(_message.Message):
    __slots__ = ("broker_name", "broker_id", "addr", "seen_ms")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    SEEN_MS_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    addr: str
    seen_ms: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., addr: _Optional[str] = ..., seen_ms: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("heartbeats", "forwarded")
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_FIELD_NUMBER: _ClassVar[int]
    heartbeats: _containers.RepeatedCompositeFieldContainer[BrokerHeartbeat]
    forwarded: bool
    def __init__(self, heartbeats: _Optional[_Iterable[_Union[BrokerHeartbeat, _Mapping]]] = ..., forwarded: _Optional[bool] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("registered", "apply_offset")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    APPLY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    registered: _containers.RepeatedScalarFieldContainer[bool]
    apply_offset: int
    def __init__(self, registered: _Optional[_Iterable[bool]] = ..., apply_offset: _Optional[int] = ...) -> None: ...

class GetRouteRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class GetRouteResponse(_message.Message):
    __slots__ = ("topic", "brokers", "queues", "order_topic_conf", "apply_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    ORDER_TOPIC_CONF_FIELD_NUMBER: _ClassVar[int]
    APPLY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerGroup]
    queues: _containers.RepeatedCompositeFieldContainer[QueueData]
    order_topic_conf: str
    apply_offset: int
    def __init__(self, topic: _Optional[str] = ..., brokers: _Optional[_Iterable[_Union[BrokerGroup, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., order_topic_conf: _Optional[str] = ..., apply_offset: _Optional[int] = ...) -> None: ...

class GetClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("name", "broker_names")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    name: str
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class GetClusterInfoResponse(_message.Message):
    __slots__ = ("clusters", "brokers", "apply_offset")
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    APPLY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    clusters: _containers.RepeatedCompositeFieldContainer[Cluster]
    brokers: _containers.RepeatedCompositeFieldContainer[Broker]
    apply_offset: int
    def __init__(self, clusters: _Optional[_Iterable[_Union[Cluster, _Mapping]]] = ..., brokers: _Optional[_Iterable[_Union[Broker, _Mapping]]] = ..., apply_offset: _Optional[int] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("cluster", "system")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    system: bool
    def __init__(self, cluster: _Optional[str] = ..., system: _Optional[bool] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics", "broker_addr", "apply_offset")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    APPLY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    broker_addr: str
    apply_offset: int
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., broker_addr: _Optional[str] = ..., apply_offset: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueData]
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic", "cluster")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    cluster: str
    def __init__(self, topic: _Optional[str] = ..., cluster: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("revision", "deleted")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    revision: int
    deleted: int
    def __init__(self, revision: _Optional[int] = ..., deleted: _Optional[int] = ...) -> None: ...

class PutKvConfigRequest(_message.Message):
    __slots__ = ("namespace", "key", "value")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    value: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class PutKvConfigResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class GetKvConfigRequest(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class GetKvConfigResponse(_message.Message):
    __slots__ = ("value", "apply_offset")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    APPLY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    value: str
    apply_offset: int
    def __init__(self, value: _Optional[str] = ..., apply_offset: _Optional[int] = ...) -> None: ...

class DeleteKvConfigRequest(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class DeleteKvConfigResponse(_message.Message):
    __slots__ = ("revision", "deleted")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    revision: int
    deleted: bool
    def __init__(self, revision: _Optional[int] = ..., deleted: _Optional[bool] = ...) -> None: ...

class ListKvConfigRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class ListKvConfigResponse(_message.Message):
    __slots__ = ("items", "apply_offset")
    class ItemsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    APPLY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    items: _containers.ScalarMap[str, str]
    apply_offset: int
    def __init__(self, items: _Optional[_Mapping[str, str]] = ..., apply_offset: _Optional[int] = ...) -> None: ...
