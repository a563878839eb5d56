from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TypeDigest(_message.Message):
    __slots__ = ("type", "count", "hash")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    type: str
    count: int
    hash: str
    def __init__(self, type: _Optional[str] = ..., count: _Optional[int] = ..., hash: _Optional[str] = ...) -> None: ...

class SnapshotHeader(_message.Message):
    __slots__ = ("format_version", "cluster_id", "last_offset", "last_term", "raft_index", "created_ms", "hash_algorithm", "record_count", "types", "engine_meta")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_TERM_FIELD_NUMBER: _ClassVar[int]
    RAFT_INDEX_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    HASH_ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    ENGINE_META_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    cluster_id: str
    last_offset: int
    last_term: int
    raft_index: int
    created_ms: int
    hash_algorithm: str
    record_count: int
    types: _containers.RepeatedCompositeFieldContainer[TypeDigest]
    engine_meta: bytes
    def __init__(self, format_version: _Optional[int] = ..., cluster_id: _Optional[str] = ..., last_offset: _Optional[int] = ..., last_term: _Optional[int] = ..., raft_index: _Optional[int] = ..., created_ms: _Optional[int] = ..., hash_algorithm: _Optional[str] = ..., record_count: _Optional[int] = ..., types: _Optional[_Iterable[_Union[TypeDigest, _Mapping]]] = ..., engine_meta: _Optional[bytes] = ...) -> None: ...

class SnapshotFooter(_message.Message):
    __slots__ = ("record_count", "checksum_crc32c")
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_CRC32C_FIELD_NUMBER: _ClassVar[int]
    record_count: int
    checksum_crc32c: int
    def __init__(self, record_count: _Optional[int] = ..., checksum_crc32c: _Optional[int] = ...) -> None: ...
