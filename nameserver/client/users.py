"""Users and roles: etcd's Auth service (what ``etcdctl user|role|auth`` call), and users'
remoting secret keys (metaledger.v1.AuthExtra): the RocketMQ ACL 1.0 access key of a signed
remoting request is a user's name, its secret key set here (docs/auth.md).

Permissions are ``Permission(perm_type, key, range_end)``, ``perm_type`` one of ``READ``,
``WRITE``, ``READWRITE`` (etcd's ``authpb.Permission``). Everything but :meth:`auth_enabled`
and a user's own :meth:`user_get` is root's while auth is on (etcd's rules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nameserver.client.errors import FailedPrecondition, InvalidArgument
from nameserver.client.transport import Transport
from protos.etcdserverpb import auth_pb2 as authpb
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import auth_pb2, auth_pb2_grpc

__all__ = ["PERM_TYPES", "Permission", "UsersApi"]

#: etcd's ``authpb.Permission.Type`` by name
PERM_TYPES = {"READ": 0, "WRITE": 1, "READWRITE": 2}
_PERM_NAMES = {v: k for k, v in PERM_TYPES.items()}


@dataclass(frozen=True, slots=True)
class Permission:
    """A role's permission: ``key`` alone, or ``[key, range_end)`` (``range_end`` ``b"\\0"``:
    every key from ``key`` on)."""

    perm_type: str
    key: bytes
    range_end: bytes = b""


def _auth(method: str) -> Any:
    return lambda s: getattr(rpc_pb2_grpc.AuthStub(s.channel), method)


def _extra(method: str) -> Any:
    return lambda s: getattr(auth_pb2_grpc.AuthExtraStub(s.channel), method)


class UsersApi(Transport):
    """metaledger.v1.AuthExtra (root only while auth is on)."""

    def user_set_secret_key(self, name: str, secret_key: str) -> int:
        """Set (``""``: clear) ``name``'s remoting secret key; returns the revision."""
        req = auth_pb2.SetSecretKeyRequest(name=name, secret_key=secret_key)
        r = self._call(_extra("SetSecretKey"), req, write=True)
        return int(r.revision)

    def auth_enabled(self) -> bool:
        """Whether auth is on. etcd 3.4 has no AuthStatus: an Authenticate of no user answers
        "authentication is not enabled" only while it is off."""
        try:
            self._call(_auth("Authenticate"), rpc_pb2.AuthenticateRequest(), write=False)
        except FailedPrecondition as exc:
            if "not enabled" in exc.message:
                return False
            raise
        except InvalidArgument:  # authentication failed: auth is on
            return True
        return True

    def user_list(self) -> list[str]:
        r = self._call(_auth("UserList"), rpc_pb2.AuthUserListRequest(), write=False)
        return list(r.users)

    def user_get(self, name: str) -> list[str]:
        """The user's roles."""
        r = self._call(_auth("UserGet"), rpc_pb2.AuthUserGetRequest(name=name), write=False)
        return list(r.roles)

    def role_list(self) -> list[str]:
        r = self._call(_auth("RoleList"), rpc_pb2.AuthRoleListRequest(), write=False)
        return list(r.roles)

    def role_get(self, name: str) -> list[Permission]:
        """The role's permissions."""
        r = self._call(_auth("RoleGet"), rpc_pb2.AuthRoleGetRequest(role=name), write=False)
        return [
            Permission(_PERM_NAMES.get(p.permType, str(p.permType)), p.key, p.range_end)
            for p in r.perm
        ]

    def user_add(self, name: str, password: str) -> int:
        req = rpc_pb2.AuthUserAddRequest(name=name, password=password)
        return int(self._call(_auth("UserAdd"), req, write=True).header.revision)

    def user_delete(self, name: str) -> int:
        req = rpc_pb2.AuthUserDeleteRequest(name=name)
        return int(self._call(_auth("UserDelete"), req, write=True).header.revision)

    def user_grant_role(self, name: str, role: str) -> int:
        req = rpc_pb2.AuthUserGrantRoleRequest(user=name, role=role)
        return int(self._call(_auth("UserGrantRole"), req, write=True).header.revision)

    def user_revoke_role(self, name: str, role: str) -> int:
        req = rpc_pb2.AuthUserRevokeRoleRequest(name=name, role=role)
        return int(self._call(_auth("UserRevokeRole"), req, write=True).header.revision)

    def role_add(self, name: str) -> int:
        req = rpc_pb2.AuthRoleAddRequest(name=name)
        return int(self._call(_auth("RoleAdd"), req, write=True).header.revision)

    def role_delete(self, name: str) -> int:
        req = rpc_pb2.AuthRoleDeleteRequest(role=name)
        return int(self._call(_auth("RoleDelete"), req, write=True).header.revision)

    def role_grant_permission(self, name: str, perm: Permission) -> int:
        if perm.perm_type not in PERM_TYPES:
            raise InvalidArgument(
                f"perm_type: one of {', '.join(PERM_TYPES)}, not {perm.perm_type!r}"
            )
        p = authpb.Permission(permType=perm.perm_type, key=perm.key, range_end=perm.range_end)
        req = rpc_pb2.AuthRoleGrantPermissionRequest(name=name, perm=p)
        return int(self._call(_auth("RoleGrantPermission"), req, write=True).header.revision)

    def role_revoke_permission(self, name: str, key: bytes, range_end: bytes = b"") -> int:
        req = rpc_pb2.AuthRoleRevokePermissionRequest(role=name, key=key, range_end=range_end)
        return int(self._call(_auth("RoleRevokePermission"), req, write=True).header.revision)
