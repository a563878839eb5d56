from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SetSecretKeyRequest(_message.Message):
    __slots__ = ("name", "secret_key")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    secret_key: str
    def __init__(self, name: _Optional[str] = ..., secret_key: _Optional[str] = ...) -> None: ...

class SetSecretKeyResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...
