from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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

class Replica(_message.Message):
    __slots__ = ("broker_id", "address", "alive", "in_sync", "heartbeat_timeout_ms")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    alive: bool
    in_sync: bool
    heartbeat_timeout_ms: int
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., alive: _Optional[bool] = ..., in_sync: _Optional[bool] = ..., heartbeat_timeout_ms: _Optional[int] = ...) -> None: ...

class ReplicaGroup(_message.Message):
    __slots__ = ("broker_name", "cluster_name", "replicas", "master_id", "master_address", "master_epoch", "sync_state_set", "sync_state_set_epoch", "policy", "create_revision", "mod_revision", "version")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    cluster_name: str
    replicas: _containers.RepeatedCompositeFieldContainer[Replica]
    master_id: int
    master_address: str
    master_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    policy: ReplicaGroupPolicy
    create_revision: int
    mod_revision: int
    version: int
    def __init__(self, broker_name: _Optional[str] = ..., cluster_name: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[Replica, _Mapping]]] = ..., master_id: _Optional[int] = ..., master_address: _Optional[str] = ..., master_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ..., policy: _Optional[_Union[ReplicaGroupPolicy, _Mapping]] = ..., create_revision: _Optional[int] = ..., mod_revision: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class NeedAckNums(_message.Message):
    __slots__ = ("need_ack_nums", "in_sync_replicas", "alive_replicas", "enough", "status")
    NEED_ACK_NUMS_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ENOUGH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    need_ack_nums: int
    in_sync_replicas: int
    alive_replicas: int
    enough: bool
    status: str
    def __init__(self, need_ack_nums: _Optional[int] = ..., in_sync_replicas: _Optional[int] = ..., alive_replicas: _Optional[int] = ..., enough: _Optional[bool] = ..., status: _Optional[str] = ...) -> None: ...

class RegisterReplicaRequest(_message.Message):
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

class RegisterReplicaResponse(_message.Message):
    __slots__ = ("revision", "broker_id", "group")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    revision: int
    broker_id: int
    group: ReplicaGroup
    def __init__(self, revision: _Optional[int] = ..., broker_id: _Optional[int] = ..., group: _Optional[_Union[ReplicaGroup, _Mapping]] = ...) -> None: ...

class ReplicaHeartbeatRequest(_message.Message):
    __slots__ = ("broker_name", "broker_id", "max_offset", "epoch")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    max_offset: int
    epoch: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., max_offset: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class ReplicaHeartbeatResponse(_message.Message):
    __slots__ = ("alive", "master_id", "master_address", "master_epoch", "sync_state_set_epoch", "revision")
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    alive: bool
    master_id: int
    master_address: str
    master_epoch: int
    sync_state_set_epoch: int
    revision: int
    def __init__(self, alive: _Optional[bool] = ..., master_id: _Optional[int] = ..., master_address: _Optional[str] = ..., master_epoch: _Optional[int] = ..., sync_state_set_epoch: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class AlterSyncStateSetRequest(_message.Message):
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

class AlterSyncStateSetResponse(_message.Message):
    __slots__ = ("revision", "sync_state_set_epoch", "group")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    revision: int
    sync_state_set_epoch: int
    group: ReplicaGroup
    def __init__(self, revision: _Optional[int] = ..., sync_state_set_epoch: _Optional[int] = ..., group: _Optional[_Union[ReplicaGroup, _Mapping]] = ...) -> None: ...

class ElectMasterRequest(_message.Message):
    __slots__ = ("broker_name", "broker_id", "unclean")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    unclean: bool
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., unclean: _Optional[bool] = ...) -> None: ...

class ElectMasterResponse(_message.Message):
    __slots__ = ("revision", "changed", "code", "group")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    revision: int
    changed: bool
    code: str
    group: ReplicaGroup
    def __init__(self, revision: _Optional[int] = ..., changed: _Optional[bool] = ..., code: _Optional[str] = ..., group: _Optional[_Union[ReplicaGroup, _Mapping]] = ...) -> None: ...

class GetGroupRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class GetGroupResponse(_message.Message):
    __slots__ = ("group", "need_ack", "revision", "consistency")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NEED_ACK_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    group: ReplicaGroup
    need_ack: NeedAckNums
    revision: int
    consistency: str
    def __init__(self, group: _Optional[_Union[ReplicaGroup, _Mapping]] = ..., need_ack: _Optional[_Union[NeedAckNums, _Mapping]] = ..., revision: _Optional[int] = ..., consistency: _Optional[str] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("cluster_name",)
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    def __init__(self, cluster_name: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "revision", "consistency")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ReplicaGroup]
    revision: int
    consistency: str
    def __init__(self, groups: _Optional[_Iterable[_Union[ReplicaGroup, _Mapping]]] = ..., revision: _Optional[int] = ..., consistency: _Optional[str] = ...) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ("broker_name", "cluster_name", "policy")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    cluster_name: str
    policy: ReplicaGroupPolicy
    def __init__(self, broker_name: _Optional[str] = ..., cluster_name: _Optional[str] = ..., policy: _Optional[_Union[ReplicaGroupPolicy, _Mapping]] = ...) -> None: ...

class SetPolicyResponse(_message.Message):
    __slots__ = ("revision", "group")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    revision: int
    group: ReplicaGroup
    def __init__(self, revision: _Optional[int] = ..., group: _Optional[_Union[ReplicaGroup, _Mapping]] = ...) -> None: ...
