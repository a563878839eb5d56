"""Auth records and the ``auth`` sub-image: users, roles, the enabled flag (etcd's auth store).

etcd keeps three buckets (``auth/store.go``: ``authUsers``, ``authRoles``, ``auth`` with
``authEnabled`` and ``authRevision``); here they are one record type, ``auth``, whose keys
say which: ``user/<name>``, ``role/<name>``, ``state``. Values are ``records.AuthRecord``.
A user's password is stored hashed (:mod:`nameserver.auth.passwords`); its roles and a
role's permissions are kept sorted as etcd keeps them (roles by name, permissions by key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nameserver.state.mapdelta import MapDelta
from protos import records_pb2

READ, WRITE, READWRITE = 0, 1, 2  # authpb.Permission.Type
ROOT = "root"  # etcd's root user and root role
STATE_KEY = b"state"


@dataclass(frozen=True, slots=True)
class Permission:
    perm_type: int
    key: bytes
    range_end: bytes

    def to_pb(self) -> records_pb2.AuthPermissionRecord:
        return records_pb2.AuthPermissionRecord(
            perm_type=self.perm_type, key=self.key, range_end=self.range_end
        )

    @staticmethod
    def from_pb(p: records_pb2.AuthPermissionRecord) -> Permission:
        return Permission(p.perm_type, p.key, p.range_end)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: bytes = b""
    roles: tuple[str, ...] = ()
    no_password: bool = False
    remoting_secret: str = ""

    @property
    def key(self) -> bytes:
        return b"user/" + self.name.encode()

    @property
    def is_root(self) -> bool:
        return ROOT in self.roles

    def to_record(self) -> bytes:
        u = records_pb2.AuthUserRecord(
            name=self.name,
            password_hash=self.password_hash,
            roles=list(self.roles),
            no_password=self.no_password,
            remoting_secret=self.remoting_secret,
        )
        data: bytes = records_pb2.AuthRecord(user=u).SerializeToString()
        return data


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    permissions: tuple[Permission, ...] = ()

    @property
    def key(self) -> bytes:
        return b"role/" + self.name.encode()

    def to_record(self) -> bytes:
        r = records_pb2.AuthRoleRecord(
            name=self.name, permissions=[p.to_pb() for p in self.permissions]
        )
        data: bytes = records_pb2.AuthRecord(role=r).SerializeToString()
        return data


@dataclass(frozen=True, slots=True)
class AuthState:
    enabled: bool = False
    revision: int = 0

    @property
    def key(self) -> bytes:
        return STATE_KEY

    def to_record(self) -> bytes:
        s = records_pb2.AuthStateRecord(enabled=self.enabled, revision=self.revision)
        data: bytes = records_pb2.AuthRecord(state=s).SerializeToString()
        return data


AuthItem = User | Role | AuthState


def decode(data: bytes) -> AuthItem:
    """An ``auth`` record value -> the user, role or state it holds."""
    r = records_pb2.AuthRecord.FromString(data)
    which = r.WhichOneof("record")
    if which == "user":
        u = r.user
        return User(u.name, u.password_hash, tuple(u.roles), u.no_password, u.remoting_secret)
    if which == "role":
        return Role(r.role.name, tuple(Permission.from_pb(p) for p in r.role.permissions))
    if which == "state":
        return AuthState(r.state.enabled, r.state.revision)
    raise ValueError("auth record: none of user, role, state is set")


_NO_STATE = AuthState()
_EMPTY: Mapping[bytes, AuthItem] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class AuthImage:
    """Every auth record by key, with typed views built once per image (auth is small)."""

    records: Mapping[bytes, AuthItem] = field(default_factory=lambda: _EMPTY)
    users: Mapping[str, User] = field(init=False)
    roles: Mapping[str, Role] = field(init=False)
    state: AuthState = field(init=False)

    def __post_init__(self) -> None:
        users = {r.name: r for r in self.records.values() if isinstance(r, User)}
        roles = {r.name: r for r in self.records.values() if isinstance(r, Role)}
        state = self.records.get(STATE_KEY)
        object.__setattr__(self, "users", MappingProxyType(users))
        object.__setattr__(self, "roles", MappingProxyType(roles))
        object.__setattr__(self, "state", state if isinstance(state, AuthState) else _NO_STATE)

    @property
    def enabled(self) -> bool:
        return self.state.enabled

    @property
    def revision(self) -> int:
        return self.state.revision

    def user_by_access_key(self, access_key: str) -> User | None:
        """The user whose name is ``access_key`` and who has a remoting secret key."""
        user = self.users.get(access_key)
        return user if user is not None and user.remoting_secret else None


class AuthDelta(MapDelta[bytes, AuthItem]):
    """Pending auth changes over a base image."""

    def __init__(self, base: AuthImage) -> None:
        super().__init__(base.records.get)
        self.base = base

    def put(self, item: AuthItem) -> None:
        self._change(item.key, item)

    def user(self, name: str) -> User | None:
        item = self.get(b"user/" + name.encode())
        return item if isinstance(item, User) else None

    def role(self, name: str) -> Role | None:
        item = self.get(b"role/" + name.encode())
        return item if isinstance(item, Role) else None

    def state(self) -> AuthState:
        item = self.get(STATE_KEY)
        return item if isinstance(item, AuthState) else _NO_STATE

    def users(self) -> list[User]:
        merged = dict(self.base.records)
        merged.update(self.changes)  # type: ignore[arg-type]
        return [v for _, v in sorted(merged.items()) if isinstance(v, User)]

    def build(self) -> AuthImage:
        if not self.changes:
            return self.base
        return AuthImage(self.merged(self.base.records))
