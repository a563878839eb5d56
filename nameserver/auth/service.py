"""etcd's Auth service (and metaledger's AuthExtra: a user's remoting secret key).

Management requests are proposed as ``auth`` entries (:mod:`nameserver.auth.apply` checks
them against the store as etcd does); passwords are hashed here, before proposing. Reads
(UserGet/List, RoleGet/List) and Authenticate read the image linearizably, so a user just
added anywhere in the cluster is seen. Who may call which method is
:mod:`nameserver.auth.rules`' (checked before the handler runs, by the guard).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from nameserver.auth import errors
from nameserver.auth.check import Authorizer
from nameserver.auth.passwords import check_password, hash_password
from nameserver.auth.records import AuthImage
from nameserver.grpc.status import rpc
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import auth_pb2, auth_pb2_grpc
from raftlog import Entry

if TYPE_CHECKING:
    from nameserver.node import NodeFacade


async def propose_auth(node: NodeFacade, context: Any, **fields: Any) -> int:
    """Propose one auth operation; the store revision once applied (etcd's header: auth
    keeps it, unless the store still counts by log offset)."""
    op = records_pb2.AuthOperation(**fields)
    applied = await node.propose(
        Entry(type="auth", key=b"", value=op.SerializeToString()), context.invocation_metadata()
    )
    return node.revision_after(applied)


class AuthService(rpc_pb2_grpc.AuthServicer):  # type: ignore[misc]
    def __init__(self, node: NodeFacade, authorizer: Authorizer, bcrypt_cost: int) -> None:
        self.node = node
        self.authorizer = authorizer
        self.cost = bcrypt_cost

    async def _auth(self) -> tuple[AuthImage, int]:
        image = await self.node.read_image(False)
        return image.auth, image.revision

    async def _op(self, context: Any, **fields: Any) -> Any:
        # who asks, checked again at apply (etcd's authApplierV3.Apply: IsAdminPermitted),
        # so root's role revoked while this was in flight lets nothing through
        if self.node.state.image.auth.enabled:
            fields["by_user"] = self.authorizer.caller(context) or ""
        return self.node.header(await propose_auth(self.node, context, **fields))

    @rpc
    async def AuthEnable(self, request: Any, context: Any) -> rpc_pb2.AuthEnableResponse:
        return rpc_pb2.AuthEnableResponse(header=await self._op(context, op="auth_enable"))

    @rpc
    async def AuthDisable(self, request: Any, context: Any) -> rpc_pb2.AuthDisableResponse:
        header = await self._op(context, op="auth_disable")
        self.authorizer.tokens.disable()
        return rpc_pb2.AuthDisableResponse(header=header)

    @rpc
    async def Authenticate(self, request: Any, context: Any) -> rpc_pb2.AuthenticateResponse:
        auth, revision = await self._auth()
        if not auth.enabled:
            raise errors.AuthNotEnabled()
        user = auth.users.get(request.name)
        if user is None:
            raise errors.AuthFailed()
        if user.no_password:  # CN based auth only (etcd's CheckPassword)
            raise errors.NoPasswordUser()
        ok = await asyncio.to_thread(check_password, user.password_hash, request.password)
        if not ok:
            raise errors.AuthFailed()
        self.authorizer.observe(auth)
        token = self.authorizer.tokens.assign(user.name, auth.revision)
        return rpc_pb2.AuthenticateResponse(header=self.node.header(revision), token=token)

    @rpc
    async def UserAdd(self, request: Any, context: Any) -> rpc_pb2.AuthUserAddResponse:
        if not request.name:
            raise errors.UserEmpty()
        no_password = request.options.no_password
        hashed = b"" if no_password else await self._hash(request.password)
        header = await self._op(
            context, op="user_add", name=request.name, password_hash=hashed, no_password=no_password
        )
        return rpc_pb2.AuthUserAddResponse(header=header)

    async def _hash(self, password: str) -> bytes:
        return await asyncio.to_thread(hash_password, password, self.cost)

    @rpc
    async def UserGet(self, request: Any, context: Any) -> rpc_pb2.AuthUserGetResponse:
        auth, revision = await self._auth()
        user = auth.users.get(request.name)
        if user is None:
            raise errors.UserNotFound()
        return rpc_pb2.AuthUserGetResponse(header=self.node.header(revision), roles=user.roles)

    @rpc
    async def UserList(self, request: Any, context: Any) -> rpc_pb2.AuthUserListResponse:
        auth, revision = await self._auth()
        return rpc_pb2.AuthUserListResponse(
            header=self.node.header(revision), users=sorted(auth.users)
        )

    @rpc
    async def UserDelete(self, request: Any, context: Any) -> rpc_pb2.AuthUserDeleteResponse:
        header = await self._op(context, op="user_delete", name=request.name)
        self.authorizer.tokens.invalidate_user(request.name)
        return rpc_pb2.AuthUserDeleteResponse(header=header)

    @rpc
    async def UserChangePassword(
        self, request: Any, context: Any
    ) -> rpc_pb2.AuthUserChangePasswordResponse:
        hashed = await self._hash(request.password)
        header = await self._op(
            context, op="user_change_password", name=request.name, password_hash=hashed
        )
        self.authorizer.tokens.invalidate_user(request.name)
        return rpc_pb2.AuthUserChangePasswordResponse(header=header)

    @rpc
    async def UserGrantRole(self, request: Any, context: Any) -> rpc_pb2.AuthUserGrantRoleResponse:
        header = await self._op(context, op="user_grant_role", name=request.user, role=request.role)
        return rpc_pb2.AuthUserGrantRoleResponse(header=header)

    @rpc
    async def UserRevokeRole(
        self, request: Any, context: Any
    ) -> rpc_pb2.AuthUserRevokeRoleResponse:
        header = await self._op(
            context, op="user_revoke_role", name=request.name, role=request.role
        )
        return rpc_pb2.AuthUserRevokeRoleResponse(header=header)

    @rpc
    async def RoleAdd(self, request: Any, context: Any) -> rpc_pb2.AuthRoleAddResponse:
        return rpc_pb2.AuthRoleAddResponse(
            header=await self._op(context, op="role_add", name=request.name)
        )

    @rpc
    async def RoleGet(self, request: Any, context: Any) -> rpc_pb2.AuthRoleGetResponse:
        auth, revision = await self._auth()
        role = auth.roles.get(request.role)
        if role is None:
            raise errors.RoleNotFound()
        resp = rpc_pb2.AuthRoleGetResponse(header=self.node.header(revision))
        for p in role.permissions:
            perm = resp.perm.add()
            perm.permType, perm.key, perm.range_end = p.perm_type, p.key, p.range_end  # type: ignore[assignment]
        return resp

    @rpc
    async def RoleList(self, request: Any, context: Any) -> rpc_pb2.AuthRoleListResponse:
        auth, revision = await self._auth()
        return rpc_pb2.AuthRoleListResponse(
            header=self.node.header(revision), roles=sorted(auth.roles)
        )

    @rpc
    async def RoleDelete(self, request: Any, context: Any) -> rpc_pb2.AuthRoleDeleteResponse:
        return rpc_pb2.AuthRoleDeleteResponse(
            header=await self._op(context, op="role_delete", name=request.role)
        )

    @rpc
    async def RoleGrantPermission(
        self, request: Any, context: Any
    ) -> rpc_pb2.AuthRoleGrantPermissionResponse:
        p = request.perm
        perm = records_pb2.AuthPermissionRecord(
            perm_type=p.permType, key=p.key, range_end=p.range_end
        )
        header = await self._op(context, op="role_grant_permission", name=request.name, perm=perm)
        return rpc_pb2.AuthRoleGrantPermissionResponse(header=header)

    @rpc
    async def RoleRevokePermission(
        self, request: Any, context: Any
    ) -> rpc_pb2.AuthRoleRevokePermissionResponse:
        perm = records_pb2.AuthPermissionRecord(key=request.key, range_end=request.range_end)
        header = await self._op(context, op="role_revoke_permission", name=request.role, perm=perm)
        return rpc_pb2.AuthRoleRevokePermissionResponse(header=header)


class AuthExtraService(auth_pb2_grpc.AuthExtraServicer):  # type: ignore[misc]
    """metaledger.v1.AuthExtra: a user's RocketMQ ACL secret key (root only)."""

    def __init__(self, node: NodeFacade) -> None:
        self.node = node

    @rpc
    async def SetSecretKey(
        self, request: auth_pb2.SetSecretKeyRequest, context: Any
    ) -> auth_pb2.SetSecretKeyResponse:
        revision = await propose_auth(
            self.node, context, op="user_set_secret", name=request.name, secret=request.secret_key
        )
        return auth_pb2.SetSecretKeyResponse(revision=revision)
