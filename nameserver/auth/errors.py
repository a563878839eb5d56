"""Errors of auth, in etcd 3.4's words and codes (``etcdserver/api/v3rpc/rpctypes/error.go``).

Each is a :class:`nameserver.errors.Rejected`, so the one converter
(:func:`nameserver.grpc.status.to_status`) gives etcd's status and text; on the remoting
port :class:`PermissionDenied` and :class:`Unauthenticated` answer RocketMQ's NO_PERMISSION.

    Rejected
    ├── FailedPrecondition
    │   ├── RootUserNotExist       "etcdserver: root user does not exist"
    │   ├── RootRoleNotExist       "etcdserver: root user does not have root role"
    │   ├── UserAlreadyExist / UserNotFound / RoleAlreadyExist / RoleNotFound
    │   ├── RoleNotGranted / PermissionNotGranted / AuthNotEnabled
    ├── InvalidArgument
    │   ├── UserEmpty / RoleEmpty / AuthFailed / InvalidAuthMgmt / AuthOldRevision
    ├── NoPasswordUser             UNKNOWN "auth: authentication failed, password was given
    │                              for no password user" (etcd 3.4 has no gRPC code for it)
    ├── Unconverted                UNKNOWN "auth: permission denied" (Defragment, Snapshot,
    │                              Hash, HashKV: etcd's maintenance server)
    ├── PermissionDenied           PERMISSION_DENIED "etcdserver: permission denied"
    └── Unauthenticated            UNAUTHENTICATED   "etcdserver: invalid auth token"
"""

from __future__ import annotations

import grpc

from nameserver.errors import FailedPrecondition, InvalidArgument, Rejected
from rmq.codes import ResponseCode


class _Fixed:
    """An error whose text is etcd's, always: ``raise UserNotFound()``."""

    text = ""

    def __init__(self, detail: str = "") -> None:
        super().__init__(self.text + detail)  # type: ignore[call-arg]


class RootUserNotExist(_Fixed, FailedPrecondition):
    text = "etcdserver: root user does not exist"


class RootRoleNotExist(_Fixed, FailedPrecondition):
    text = "etcdserver: root user does not have root role"


class UserAlreadyExist(_Fixed, FailedPrecondition):
    text = "etcdserver: user name already exists"


class UserNotFound(_Fixed, FailedPrecondition):
    text = "etcdserver: user name not found"


class RoleAlreadyExist(_Fixed, FailedPrecondition):
    text = "etcdserver: role name already exists"


class RoleNotFound(_Fixed, FailedPrecondition):
    text = "etcdserver: role name not found"


class RoleNotGranted(_Fixed, FailedPrecondition):
    text = "etcdserver: role is not granted to the user"


class PermissionNotGranted(_Fixed, FailedPrecondition):
    text = "etcdserver: permission is not granted to the role"


class AuthNotEnabled(_Fixed, FailedPrecondition):
    text = "etcdserver: authentication is not enabled"


class UserEmpty(_Fixed, InvalidArgument):
    text = "etcdserver: user name is empty"


class RoleEmpty(_Fixed, InvalidArgument):
    text = "etcdserver: role name is empty"


class AuthFailed(_Fixed, InvalidArgument):
    text = "etcdserver: authentication failed, invalid user ID or password"


class InvalidAuthMgmt(_Fixed, InvalidArgument):
    text = "etcdserver: invalid auth management"


class AuthOldRevision(_Fixed, InvalidArgument):
    text = "etcdserver: revision of auth store is old"


class NoPasswordUser(_Fixed, Rejected):
    """etcd 3.4 maps this one to no gRPC code: UNKNOWN with the auth store's own text."""

    text = "auth: authentication failed, password was given for no password user"


class Unconverted(Rejected):
    """An auth error as etcd's maintenance server returns it (``v3rpc/maintenance.go``
    ``isAuthenticated``): the auth store's own error, never converted to a gRPC code, so
    UNKNOWN with the store's text ("auth: permission denied")."""

    @classmethod
    def of(cls, exc: Rejected) -> Unconverted:
        return cls("auth: " + str(exc).removeprefix("etcdserver: "))


class PermissionDenied(_Fixed, Rejected):
    status = grpc.StatusCode.PERMISSION_DENIED
    remoting_code = ResponseCode.NO_PERMISSION
    text = "etcdserver: permission denied"


class Unauthenticated(_Fixed, Rejected):
    status = grpc.StatusCode.UNAUTHENTICATED
    remoting_code = ResponseCode.NO_PERMISSION
    text = "etcdserver: invalid auth token"
