from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SetQuotaRequest(_message.Message):
    __slots__ = ("record_type", "max_keys", "max_bytes")
    RECORD_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_KEYS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    record_type: str
    max_keys: int
    max_bytes: int
    def __init__(self, record_type: _Optional[str] = ..., max_keys: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class SetQuotaResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class ListQuotasRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QuotaUsage(_message.Message):
    __slots__ = ("record_type", "max_keys", "max_bytes", "keys", "bytes")
    RECORD_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_KEYS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    record_type: str
    max_keys: int
    max_bytes: int
    keys: int
    bytes: int
    def __init__(self, record_type: _Optional[str] = ..., max_keys: _Optional[int] = ..., max_bytes: _Optional[int] = ..., keys: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class ListQuotasResponse(_message.Message):
    __slots__ = ("quotas", "revision")
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    quotas: _containers.RepeatedCompositeFieldContainer[QuotaUsage]
    revision: int
    def __init__(self, quotas: _Optional[_Iterable[_Union[QuotaUsage, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...
