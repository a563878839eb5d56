from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommitRequest(_message.Message):
    __slots__ = ("job", "partition", "offset", "position", "lease_id", "fencing_token", "expected_version", "epoch", "keepalive")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
    job: str
    partition: str
    offset: bytes
    position: int
    lease_id: int
    fencing_token: int
    expected_version: int
    epoch: int
    keepalive: bool
    def __init__(self, job: _Optional[str] = ..., partition: _Optional[str] = ..., offset: _Optional[bytes] = ..., position: _Optional[int] = ..., lease_id: _Optional[int] = ..., fencing_token: _Optional[int] = ..., expected_version: _Optional[int] = ..., epoch: _Optional[int] = ..., keepalive: _Optional[bool] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("revision", "version", "epoch", "ttl")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    revision: int
    version: int
    epoch: int
    ttl: int
    def __init__(self, revision: _Optional[int] = ..., version: _Optional[int] = ..., epoch: _Optional[int] = ..., ttl: _Optional[int] = ...) -> None: ...

class Offset(_message.Message):
    __slots__ = ("job", "partition", "offset", "position", "version", "epoch", "lease_id", "fencing_token", "create_revision", "mod_revision", "reset_revision")
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
    def __init__(self, job: _Optional[str] = ..., partition: _Optional[str] = ..., offset: _Optional[bytes] = ..., position: _Optional[int] = ..., version: _Optional[int] = ..., epoch: _Optional[int] = ..., lease_id: _Optional[int] = ..., fencing_token: _Optional[int] = ..., create_revision: _Optional[int] = ..., mod_revision: _Optional[int] = ..., reset_revision: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("job", "partition", "serializable")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SERIALIZABLE_FIELD_NUMBER: _ClassVar[int]
    job: str
    partition: str
    serializable: bool
    def __init__(self, job: _Optional[str] = ..., partition: _Optional[str] = ..., serializable: _Optional[bool] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("offset", "revision", "consistency")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    offset: Offset
    revision: int
    consistency: str
    def __init__(self, offset: _Optional[_Union[Offset, _Mapping]] = ..., revision: _Optional[int] = ..., consistency: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("job", "prefix", "serializable")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    SERIALIZABLE_FIELD_NUMBER: _ClassVar[int]
    job: str
    prefix: bool
    serializable: bool
    def __init__(self, job: _Optional[str] = ..., prefix: _Optional[bool] = ..., serializable: _Optional[bool] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("offsets", "revision", "consistency")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[Offset]
    revision: int
    consistency: str
    def __init__(self, offsets: _Optional[_Iterable[_Union[Offset, _Mapping]]] = ..., revision: _Optional[int] = ..., consistency: _Optional[str] = ...) -> None: ...

class ResetRequest(_message.Message):
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

class ResetResponse(_message.Message):
    __slots__ = ("revision", "version", "epoch")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    revision: int
    version: int
    epoch: int
    def __init__(self, revision: _Optional[int] = ..., version: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...
