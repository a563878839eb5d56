from protos.etcdserverpb import rpc_pb2 as _rpc_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Entry(_message.Message):
    __slots__ = ("offset", "term", "type", "key", "value", "timestamp_ms", "client_id", "seq")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    offset: int
    term: int
    type: str
    key: bytes
    value: bytes
    timestamp_ms: int
    client_id: str
    seq: int
    def __init__(self, offset: _Optional[int] = ..., term: _Optional[int] = ..., type: _Optional[str] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., timestamp_ms: _Optional[int] = ..., client_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class EntryBatch(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ...) -> None: ...

class RaftItem(_message.Message):
    __slots__ = ("requests", "timestamp_ms")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[EntryBatch]
    timestamp_ms: int
    def __init__(self, requests: _Optional[_Iterable[_Union[EntryBatch, _Mapping]]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class KvOperation(_message.Message):
    __slots__ = ("put", "delete_range")
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_RANGE_FIELD_NUMBER: _ClassVar[int]
    put: _rpc_pb2.PutRequest
    delete_range: _rpc_pb2.DeleteRangeRequest
    def __init__(self, put: _Optional[_Union[_rpc_pb2.PutRequest, _Mapping]] = ..., delete_range: _Optional[_Union[_rpc_pb2.DeleteRangeRequest, _Mapping]] = ...) -> None: ...

class TxnOperation(_message.Message):
    __slots__ = ("txn",)
    TXN_FIELD_NUMBER: _ClassVar[int]
    txn: _rpc_pb2.TxnRequest
    def __init__(self, txn: _Optional[_Union[_rpc_pb2.TxnRequest, _Mapping]] = ...) -> None: ...

class MemberRecord(_message.Message):
    __slots__ = ("id", "peer_url", "client_urls", "member_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_URL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_URLS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    peer_url: str
    client_urls: _containers.RepeatedScalarFieldContainer[str]
    member_id: int
    def __init__(self, id: _Optional[str] = ..., peer_url: _Optional[str] = ..., client_urls: _Optional[_Iterable[str]] = ..., member_id: _Optional[int] = ...) -> None: ...

class Noop(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KvRecord(_message.Message):
    __slots__ = ("key", "value", "create_revision", "mod_revision", "version", "lease")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., create_revision: _Optional[int] = ..., mod_revision: _Optional[int] = ..., version: _Optional[int] = ..., lease: _Optional[int] = ...) -> None: ...

class Effect(_message.Message):
    __slots__ = ("type", "key", "value", "delete", "term", "timestamp_ms", "count")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    type: str
    key: bytes
    value: bytes
    delete: bool
    term: int
    timestamp_ms: int
    count: int
    def __init__(self, type: _Optional[str] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., delete: _Optional[bool] = ..., term: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class LeaseRecord(_message.Message):
    __slots__ = ("id", "ttl_s", "granted_offset", "last_refresh_ms", "granted_revision")
    ID_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    GRANTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_REFRESH_MS_FIELD_NUMBER: _ClassVar[int]
    GRANTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    id: int
    ttl_s: int
    granted_offset: int
    last_refresh_ms: int
    granted_revision: int
    def __init__(self, id: _Optional[int] = ..., ttl_s: _Optional[int] = ..., granted_offset: _Optional[int] = ..., last_refresh_ms: _Optional[int] = ..., granted_revision: _Optional[int] = ...) -> None: ...

class LeaseOperation(_message.Message):
    __slots__ = ("grant", "revoke", "refresh", "expire")
    GRANT_FIELD_NUMBER: _ClassVar[int]
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_FIELD_NUMBER: _ClassVar[int]
    grant: LeaseGrant
    revoke: LeaseRevoke
    refresh: LeaseRefresh
    expire: LeaseExpire
    def __init__(self, grant: _Optional[_Union[LeaseGrant, _Mapping]] = ..., revoke: _Optional[_Union[LeaseRevoke, _Mapping]] = ..., refresh: _Optional[_Union[LeaseRefresh, _Mapping]] = ..., expire: _Optional[_Union[LeaseExpire, _Mapping]] = ...) -> None: ...

class LeaseGrant(_message.Message):
    __slots__ = ("id", "ttl_s")
    ID_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    id: int
    ttl_s: int
    def __init__(self, id: _Optional[int] = ..., ttl_s: _Optional[int] = ...) -> None: ...

class LeaseRevoke(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class LeaseCheckpoint(_message.Message):
    __slots__ = ("id", "refreshed_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    REFRESHED_MS_FIELD_NUMBER: _ClassVar[int]
    id: int
    refreshed_ms: int
    def __init__(self, id: _Optional[int] = ..., refreshed_ms: _Optional[int] = ...) -> None: ...

class LeaseRefresh(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[LeaseCheckpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[LeaseCheckpoint, _Mapping]]] = ...) -> None: ...

class LeaseExpire(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class OffsetRecord(_message.Message):
    __slots__ = ("job", "partition", "offset", "position", "version", "epoch", "lease_id", "fencing_token", "create_revision", "mod_revision", "reset_revision", "fencing_revision", "reset_store_revision")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    RESET_REVISION_FIELD_NUMBER: _ClassVar[int]
    FENCING_REVISION_FIELD_NUMBER: _ClassVar[int]
    RESET_STORE_REVISION_FIELD_NUMBER: _ClassVar[int]
    job: str
    partition: str
    offset: bytes
    position: int
    version: int
    epoch: int
    lease_id: int
    fencing_token: int
    create_revision: int
    mod_revision: int
    reset_revision: int
    fencing_revision: int
    reset_store_revision: int
    def __init__(self, job: _Optional[str] = ..., partition: _Optional[str] = ..., offset: _Optional[bytes] = ..., position: _Optional[int] = ..., version: _Optional[int] = ..., epoch: _Optional[int] = ..., lease_id: _Optional[int] = ..., fencing_token: _Optional[int] = ..., create_revision: _Optional[int] = ..., mod_revision: _Optional[int] = ..., reset_revision: _Optional[int] = ..., fencing_revision: _Optional[int] = ..., reset_store_revision: _Optional[int] = ...) -> None: ...

class OffsetOperation(_message.Message):
    __slots__ = ("commit", "reset")
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    commit: OffsetCommit
    reset: OffsetReset
    def __init__(self, commit: _Optional[_Union[OffsetCommit, _Mapping]] = ..., reset: _Optional[_Union[OffsetReset, _Mapping]] = ...) -> None: ...

class OffsetCommit(_message.Message):
    __slots__ = ("job", "partition", "offset", "position", "lease_id", "fencing_token", "expected_version", "epoch")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    job: str
    partition: str
    offset: bytes
    position: int
    lease_id: int
    fencing_token: int
    expected_version: int
    epoch: int
    def __init__(self, job: _Optional[str] = ..., partition: _Optional[str] = ..., offset: _Optional[bytes] = ..., position: _Optional[int] = ..., lease_id: _Optional[int] = ..., fencing_token: _Optional[int] = ..., expected_version: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class OffsetReset(_message.Message):
    __slots__ = ("job", "partition", "offset", "position", "expected_version")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    job: str
    partition: str
    offset: bytes
    position: int
    expected_version: int
    def __init__(self, job: _Optional[str] = ..., partition: _Optional[str] = ..., offset: _Optional[bytes] = ..., position: _Optional[int] = ..., expected_version: _Optional[int] = ...) -> None: ...

class QuotaRecord(_message.Message):
    __slots__ = ("record_type", "max_keys", "max_bytes")
    RECORD_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_KEYS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    record_type: str
    max_keys: int
    max_bytes: int
    def __init__(self, record_type: _Optional[str] = ..., max_keys: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReplicaRecord(_message.Message):
    __slots__ = ("broker_id", "address", "heartbeat_timeout_ms", "registered_revision")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_REVISION_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    heartbeat_timeout_ms: int
    registered_revision: int
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., heartbeat_timeout_ms: _Optional[int] = ..., registered_revision: _Optional[int] = ...) -> None: ...

class ReplicaGroupPolicy(_message.Message):
    __slots__ = ("total_replicas", "in_sync_replicas", "min_in_sync_replicas", "enable_auto_in_sync_replicas", "ha_max_gap_not_in_sync")
    TOTAL_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MIN_IN_SYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_AUTO_IN_SYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    HA_MAX_GAP_NOT_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    total_replicas: int
    in_sync_replicas: int
    min_in_sync_replicas: int
    enable_auto_in_sync_replicas: bool
    ha_max_gap_not_in_sync: int
    def __init__(self, total_replicas: _Optional[int] = ..., in_sync_replicas: _Optional[int] = ..., min_in_sync_replicas: _Optional[int] = ..., enable_auto_in_sync_replicas: _Optional[bool] = ..., ha_max_gap_not_in_sync: _Optional[int] = ...) -> None: ...

class ReplicaGroupRecord(_message.Message):
    __slots__ = ("broker_name", "cluster_name", "replicas", "alive", "master_id", "master_epoch", "sync_state_set", "sync_state_set_epoch", "policy", "next_broker_id", "create_revision", "mod_revision", "version")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    NEXT_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    cluster_name: str
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaRecord]
    alive: _containers.RepeatedScalarFieldContainer[int]
    master_id: int
    master_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    policy: ReplicaGroupPolicy
    next_broker_id: int
    create_revision: int
    mod_revision: int
    version: int
    def __init__(self, broker_name: _Optional[str] = ..., cluster_name: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[ReplicaRecord, _Mapping]]] = ..., alive: _Optional[_Iterable[int]] = ..., master_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ..., policy: _Optional[_Union[ReplicaGroupPolicy, _Mapping]] = ..., next_broker_id: _Optional[int] = ..., create_revision: _Optional[int] = ..., mod_revision: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class ReplicaState(_message.Message):
    __slots__ = ("broker_id", "max_offset", "epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    max_offset: int
    epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., max_offset: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class ReplicaGroupOperation(_message.Message):
    __slots__ = ("register", "liveness", "alter_sync_state_set", "elect_master", "set_policy")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    LIVENESS_FIELD_NUMBER: _ClassVar[int]
    ALTER_SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    ELECT_MASTER_FIELD_NUMBER: _ClassVar[int]
    SET_POLICY_FIELD_NUMBER: _ClassVar[int]
    register: ReplicaRegister
    liveness: ReplicaLiveness
    alter_sync_state_set: AlterSyncStateSet
    elect_master: ElectMaster
    set_policy: SetReplicaGroupPolicy
    def __init__(self, register: _Optional[_Union[ReplicaRegister, _Mapping]] = ..., liveness: _Optional[_Union[ReplicaLiveness, _Mapping]] = ..., alter_sync_state_set: _Optional[_Union[AlterSyncStateSet, _Mapping]] = ..., elect_master: _Optional[_Union[ElectMaster, _Mapping]] = ..., set_policy: _Optional[_Union[SetReplicaGroupPolicy, _Mapping]] = ...) -> None: ...

class ReplicaRegister(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "address", "broker_id", "heartbeat_timeout_ms")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    address: str
    broker_id: int
    heartbeat_timeout_ms: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., address: _Optional[str] = ..., broker_id: _Optional[int] = ..., heartbeat_timeout_ms: _Optional[int] = ...) -> None: ...

class ReplicaLiveness(_message.Message):
    __slots__ = ("broker_name", "alive", "dead", "states")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    alive: _containers.RepeatedScalarFieldContainer[int]
    dead: _containers.RepeatedScalarFieldContainer[int]
    states: _containers.RepeatedCompositeFieldContainer[ReplicaState]
    def __init__(self, broker_name: _Optional[str] = ..., alive: _Optional[_Iterable[int]] = ..., dead: _Optional[_Iterable[int]] = ..., states: _Optional[_Iterable[_Union[ReplicaState, _Mapping]]] = ...) -> None: ...

class AlterSyncStateSet(_message.Message):
    __slots__ = ("broker_name", "master_id", "master_epoch", "sync_state_set_epoch", "sync_state_set")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    master_id: int
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_name: _Optional[str] = ..., master_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., sync_state_set_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ...) -> None: ...

class ElectMaster(_message.Message):
    __slots__ = ("broker_name", "broker_id", "unclean", "states")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    unclean: bool
    states: _containers.RepeatedCompositeFieldContainer[ReplicaState]
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., unclean: _Optional[bool] = ..., states: _Optional[_Iterable[_Union[ReplicaState, _Mapping]]] = ...) -> None: ...

class SetReplicaGroupPolicy(_message.Message):
    __slots__ = ("broker_name", "cluster_name", "policy")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    cluster_name: str
    policy: ReplicaGroupPolicy
    def __init__(self, broker_name: _Optional[str] = ..., cluster_name: _Optional[str] = ..., policy: _Optional[_Union[ReplicaGroupPolicy, _Mapping]] = ...) -> None: ...

class DataVersionRecord(_message.Message):
    __slots__ = ("counter", "state_version", "timestamp")
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    STATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    counter: int
    state_version: int
    timestamp: int
    def __init__(self, counter: _Optional[int] = ..., state_version: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class BrokerRecord(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_id", "addr", "ha_addr", "zone", "data_version", "heartbeat_timeout_ms", "enable_acting_master", "registered_offset", "registered_ms")
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
    REGISTERED_MS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    ha_addr: str
    zone: str
    data_version: DataVersionRecord
    heartbeat_timeout_ms: int
    enable_acting_master: bool
    registered_offset: int
    registered_ms: int
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., addr: _Optional[str] = ..., ha_addr: _Optional[str] = ..., zone: _Optional[str] = ..., data_version: _Optional[_Union[DataVersionRecord, _Mapping]] = ..., heartbeat_timeout_ms: _Optional[int] = ..., enable_acting_master: _Optional[bool] = ..., registered_offset: _Optional[int] = ..., registered_ms: _Optional[int] = ...) -> None: ...

class TopicQueueRecord(_message.Message):
    __slots__ = ("topic", "broker_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., order: _Optional[bool] = ...) -> None: ...

class KvConfigRecord(_message.Message):
    __slots__ = ("namespace", "key", "value")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    value: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class TopicConfigRecord(_message.Message):
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

class RegisterBrokerOp(_message.Message):
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
    data_version: DataVersionRecord
    heartbeat_timeout_ms: int
    enable_acting_master: bool
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfigRecord]
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., addr: _Optional[str] = ..., ha_addr: _Optional[str] = ..., zone: _Optional[str] = ..., data_version: _Optional[_Union[DataVersionRecord, _Mapping]] = ..., heartbeat_timeout_ms: _Optional[int] = ..., enable_acting_master: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[TopicConfigRecord, _Mapping]]] = ...) -> None: ...

class UnregisterBrokerOp(_message.Message):
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

class ExpiredBroker(_message.Message):
    __slots__ = ("broker_name", "broker_id", "registered_offset")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    registered_offset: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., registered_offset: _Optional[int] = ...) -> None: ...

class ExpireBrokersOp(_message.Message):
    __slots__ = ("brokers",)
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[ExpiredBroker]
    def __init__(self, brokers: _Optional[_Iterable[_Union[ExpiredBroker, _Mapping]]] = ...) -> None: ...

class WritePermOp(_message.Message):
    __slots__ = ("broker_name", "wipe")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    WIPE_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    wipe: bool
    def __init__(self, broker_name: _Optional[str] = ..., wipe: _Optional[bool] = ...) -> None: ...

class CreateTopicOp(_message.Message):
    __slots__ = ("topic", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[TopicQueueRecord]
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[TopicQueueRecord, _Mapping]]] = ...) -> None: ...

class DeleteTopicOp(_message.Message):
    __slots__ = ("topic", "cluster")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    cluster: str
    def __init__(self, topic: _Optional[str] = ..., cluster: _Optional[str] = ...) -> None: ...

class DeleteKvConfigOp(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class RoutingOperation(_message.Message):
    __slots__ = ("register_broker", "unregister_broker", "expire_brokers", "write_perm", "create_topic", "delete_topic", "put_kv_config", "delete_kv_config")
    REGISTER_BROKER_FIELD_NUMBER: _ClassVar[int]
    UNREGISTER_BROKER_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    WRITE_PERM_FIELD_NUMBER: _ClassVar[int]
    CREATE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELETE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    PUT_KV_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DELETE_KV_CONFIG_FIELD_NUMBER: _ClassVar[int]
    register_broker: RegisterBrokerOp
    unregister_broker: UnregisterBrokerOp
    expire_brokers: ExpireBrokersOp
    write_perm: WritePermOp
    create_topic: CreateTopicOp
    delete_topic: DeleteTopicOp
    put_kv_config: KvConfigRecord
    delete_kv_config: DeleteKvConfigOp
    def __init__(self, register_broker: _Optional[_Union[RegisterBrokerOp, _Mapping]] = ..., unregister_broker: _Optional[_Union[UnregisterBrokerOp, _Mapping]] = ..., expire_brokers: _Optional[_Union[ExpireBrokersOp, _Mapping]] = ..., write_perm: _Optional[_Union[WritePermOp, _Mapping]] = ..., create_topic: _Optional[_Union[CreateTopicOp, _Mapping]] = ..., delete_topic: _Optional[_Union[DeleteTopicOp, _Mapping]] = ..., put_kv_config: _Optional[_Union[KvConfigRecord, _Mapping]] = ..., delete_kv_config: _Optional[_Union[DeleteKvConfigOp, _Mapping]] = ...) -> None: ...

class AlarmRecord(_message.Message):
    __slots__ = ("member_id", "alarm")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ALARM_FIELD_NUMBER: _ClassVar[int]
    member_id: int
    alarm: int
    def __init__(self, member_id: _Optional[int] = ..., alarm: _Optional[int] = ...) -> None: ...

class AlarmOperation(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: _rpc_pb2.AlarmRequest
    def __init__(self, request: _Optional[_Union[_rpc_pb2.AlarmRequest, _Mapping]] = ...) -> None: ...

class MvccCompaction(_message.Message):
    __slots__ = ("revision", "physical")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_FIELD_NUMBER: _ClassVar[int]
    revision: int
    physical: bool
    def __init__(self, revision: _Optional[int] = ..., physical: _Optional[bool] = ...) -> None: ...

class AuthPermissionRecord(_message.Message):
    __slots__ = ("perm_type", "key", "range_end")
    PERM_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    RANGE_END_FIELD_NUMBER: _ClassVar[int]
    perm_type: int
    key: bytes
    range_end: bytes
    def __init__(self, perm_type: _Optional[int] = ..., key: _Optional[bytes] = ..., range_end: _Optional[bytes] = ...) -> None: ...

class AuthUserRecord(_message.Message):
    __slots__ = ("name", "password_hash", "roles", "no_password", "remoting_secret")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_HASH_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    NO_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    REMOTING_SECRET_FIELD_NUMBER: _ClassVar[int]
    name: str
    password_hash: bytes
    roles: _containers.RepeatedScalarFieldContainer[str]
    no_password: bool
    remoting_secret: str
    def __init__(self, name: _Optional[str] = ..., password_hash: _Optional[bytes] = ..., roles: _Optional[_Iterable[str]] = ..., no_password: _Optional[bool] = ..., remoting_secret: _Optional[str] = ...) -> None: ...

class AuthRoleRecord(_message.Message):
    __slots__ = ("name", "permissions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    permissions: _containers.RepeatedCompositeFieldContainer[AuthPermissionRecord]
    def __init__(self, name: _Optional[str] = ..., permissions: _Optional[_Iterable[_Union[AuthPermissionRecord, _Mapping]]] = ...) -> None: ...

class AuthStateRecord(_message.Message):
    __slots__ = ("enabled", "revision")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    revision: int
    def __init__(self, enabled: _Optional[bool] = ..., revision: _Optional[int] = ...) -> None: ...

class AuthRecord(_message.Message):
    __slots__ = ("user", "role", "state")
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    user: AuthUserRecord
    role: AuthRoleRecord
    state: AuthStateRecord
    def __init__(self, user: _Optional[_Union[AuthUserRecord, _Mapping]] = ..., role: _Optional[_Union[AuthRoleRecord, _Mapping]] = ..., state: _Optional[_Union[AuthStateRecord, _Mapping]] = ...) -> None: ...

class AuthOperation(_message.Message):
    __slots__ = ("op", "name", "role", "password_hash", "no_password", "perm", "secret", "revision", "by_user")
    OP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_HASH_FIELD_NUMBER: _ClassVar[int]
    NO_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    BY_USER_FIELD_NUMBER: _ClassVar[int]
    op: str
    name: str
    role: str
    password_hash: bytes
    no_password: bool
    perm: AuthPermissionRecord
    secret: str
    revision: int
    by_user: str
    def __init__(self, op: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[str] = ..., password_hash: _Optional[bytes] = ..., no_password: _Optional[bool] = ..., perm: _Optional[_Union[AuthPermissionRecord, _Mapping]] = ..., secret: _Optional[str] = ..., revision: _Optional[int] = ..., by_user: _Optional[str] = ...) -> None: ...
