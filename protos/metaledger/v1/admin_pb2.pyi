from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("id", "role", "term", "leader", "end_offset", "commit_offset", "apply_offset", "applied_lag", "segment_flushed_offset", "cluster_id", "member_id", "db_size_bytes", "has_quorum", "peer_url", "client_urls", "items_proposed", "requests_proposed")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    APPLY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    APPLIED_LAG_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    DB_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HAS_QUORUM_FIELD_NUMBER: _ClassVar[int]
    PEER_URL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_URLS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: str
    term: int
    leader: str
    end_offset: int
    commit_offset: int
    apply_offset: int
    applied_lag: int
    segment_flushed_offset: int
    cluster_id: str
    member_id: int
    db_size_bytes: int
    has_quorum: bool
    peer_url: str
    client_urls: _containers.RepeatedScalarFieldContainer[str]
    items_proposed: int
    requests_proposed: int
    def __init__(self, id: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., leader: _Optional[str] = ..., end_offset: _Optional[int] = ..., commit_offset: _Optional[int] = ..., apply_offset: _Optional[int] = ..., applied_lag: _Optional[int] = ..., segment_flushed_offset: _Optional[int] = ..., cluster_id: _Optional[str] = ..., member_id: _Optional[int] = ..., db_size_bytes: _Optional[int] = ..., has_quorum: _Optional[bool] = ..., peer_url: _Optional[str] = ..., client_urls: _Optional[_Iterable[str]] = ..., items_proposed: _Optional[int] = ..., requests_proposed: _Optional[int] = ...) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "member_id", "peer_url", "client_urls")
    ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_URL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_URLS_FIELD_NUMBER: _ClassVar[int]
    id: str
    member_id: int
    peer_url: str
    client_urls: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., member_id: _Optional[int] = ..., peer_url: _Optional[str] = ..., client_urls: _Optional[_Iterable[str]] = ...) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ...) -> None: ...
