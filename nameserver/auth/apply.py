"""The apply rule of ``auth`` entries: etcd's auth store operations (``auth/store.go``).

An entry's value is a ``records.AuthOperation``; :data:`OPERATIONS` maps its ``op`` to the
rule that checks it against the store and changes it, with etcd 3.4's refusals (root user
missing, user exists, role not granted, the root user or role kept while auth is on...).
Passwords arrive hashed (the proposing node hashed them): apply has no clock, no salt, no
I/O. Every change bumps the store's revision as etcd's ``commitRevision`` does.

A request whose key permissions were checked carries, first, a ``check_revision`` entry
with the auth revision it was checked at (:func:`revision_entry`); apply refuses the whole
request ("revision of auth store is old") if the store changed since (etcd's
``ErrAuthOldRevision``, ``auth/store.go`` ``isOpPermitted``). A management operation names
who asked (``by_user``), who must still be root when it applies (etcd's
``authApplierV3.Apply``, ``IsAdminPermitted``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from nameserver.auth import errors
from nameserver.auth.records import ROOT, AuthDelta, AuthState, Permission, Role, User
from nameserver.errors import InvalidArgument
from nameserver.state.image import MetadataDelta
from protos import records_pb2
from raftlog import Effect, Entry

Op = records_pb2.AuthOperation


def _put(auth: AuthDelta, item: User | Role | AuthState, effects: list[Effect]) -> None:
    auth.put(item)
    effects.append(Effect("auth", item.key, item.to_record()))


def _bump(auth: AuthDelta, effects: list[Effect], enabled: bool | None = None) -> None:
    state = auth.state()
    new = AuthState(state.enabled if enabled is None else enabled, state.revision + 1)
    _put(auth, new, effects)


def _user(auth: AuthDelta, name: str) -> User:
    user = auth.user(name)
    if user is None:
        raise errors.UserNotFound()
    return user


def _role(auth: AuthDelta, name: str) -> Role:
    role = auth.role(name)
    if role is None:
        raise errors.RoleNotFound()
    return role


def _enable(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    state = auth.state()
    if state.enabled:
        return  # etcd: already enabled, ignored
    root = auth.user(ROOT)
    if root is None:
        raise errors.RootUserNotExist()
    if not root.is_root:
        raise errors.RootRoleNotExist()
    _put(auth, AuthState(True, state.revision), effects)  # etcd does not bump it here


def _disable(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    if auth.state().enabled:
        _bump(auth, effects, enabled=False)


def _user_add(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    if not op.name:
        raise errors.UserEmpty()
    if auth.user(op.name) is not None:
        raise errors.UserAlreadyExist()
    _put(auth, User(op.name, op.password_hash, (), op.no_password), effects)
    _bump(auth, effects)


def _user_delete(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    if auth.state().enabled and op.name == ROOT:
        raise errors.InvalidAuthMgmt()
    user = _user(auth, op.name)
    auth.delete(user.key)
    effects.append(Effect("auth", user.key, delete=True))
    _bump(auth, effects)


def _user_change_password(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    user = _user(auth, op.name)
    _put(auth, replace(user, password_hash=op.password_hash), effects)
    _bump(auth, effects)


def _user_grant_role(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    user = _user(auth, op.name)
    if op.role != ROOT:
        _role(auth, op.role)
    if op.role in user.roles:
        return  # etcd: already granted, ignored
    _put(auth, replace(user, roles=tuple(sorted((*user.roles, op.role)))), effects)
    _bump(auth, effects)


def _user_revoke_role(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    if auth.state().enabled and op.name == ROOT and op.role == ROOT:
        raise errors.InvalidAuthMgmt()
    user = _user(auth, op.name)
    if op.role not in user.roles:
        raise errors.RoleNotGranted()
    _put(auth, replace(user, roles=tuple(r for r in user.roles if r != op.role)), effects)
    _bump(auth, effects)


def _user_set_secret(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    user = _user(auth, op.name)
    _put(auth, replace(user, remoting_secret=op.secret), effects)
    _bump(auth, effects)


def _role_add(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    if not op.name:
        raise errors.RoleEmpty()
    if auth.role(op.name) is not None:
        raise errors.RoleAlreadyExist()
    _put(auth, Role(op.name), effects)
    _bump(auth, effects)


def _role_delete(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    if auth.state().enabled and op.name == ROOT:
        raise errors.InvalidAuthMgmt()
    role = _role(auth, op.name)
    auth.delete(role.key)
    effects.append(Effect("auth", role.key, delete=True))
    for user in auth.users():  # etcd revokes the role from every user holding it
        if op.name in user.roles:
            _put(auth, replace(user, roles=tuple(r for r in user.roles if r != op.name)), effects)
    _bump(auth, effects)


def _role_grant_permission(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    role = _role(auth, op.name)
    new = Permission.from_pb(op.perm)
    if new.perm_type not in (0, 1, 2):
        raise InvalidArgument(f"perm.permType: {new.perm_type} is not READ, WRITE or READWRITE")
    kept = [p for p in role.permissions if (p.key, p.range_end) != (new.key, new.range_end)]
    perms = tuple(sorted((*kept, new), key=lambda p: p.key))
    _put(auth, Role(role.name, perms), effects)
    _bump(auth, effects)


def _role_revoke_permission(auth: AuthDelta, op: Op, effects: list[Effect]) -> None:
    role = _role(auth, op.name)
    gone = (op.perm.key, op.perm.range_end)
    kept = tuple(p for p in role.permissions if (p.key, p.range_end) != gone)
    if len(kept) == len(role.permissions):
        raise errors.PermissionNotGranted()
    _put(auth, Role(role.name, kept), effects)
    _bump(auth, effects)


#: ``AuthOperation.op`` -> its rule: the one table of what an ``auth`` entry may do.
OPERATIONS: dict[str, Callable[[AuthDelta, Op, list[Effect]], None]] = {
    "auth_enable": _enable,
    "auth_disable": _disable,
    "user_add": _user_add,
    "user_delete": _user_delete,
    "user_change_password": _user_change_password,
    "user_grant_role": _user_grant_role,
    "user_revoke_role": _user_revoke_role,
    "user_set_secret": _user_set_secret,
    "role_add": _role_add,
    "role_delete": _role_delete,
    "role_grant_permission": _role_grant_permission,
    "role_revoke_permission": _role_revoke_permission,
}


#: the op of the entry that goes first in a request whose key permissions were checked
CHECK_REVISION = "check_revision"


def revision_entry(revision: int) -> Entry:
    """The entry put before a request's own entries: "this request was permitted at auth
    revision ``revision``" (etcd's ``RequestHeader.auth_revision``)."""
    return Entry("auth", value=Op(op=CHECK_REVISION, revision=revision).SerializeToString())


def _check_revision(delta: MetadataDelta, op: Op) -> None:
    """etcd's ``isOpPermitted`` revision test at apply: a request permitted at an older auth
    revision than the store's is refused whole (its other entries roll back with it), so a
    permission revoked between the check and the apply lets nothing through. Read without
    making the auth sub-delta (a write must not touch auth)."""
    made: AuthDelta | None = delta.made("auth")
    state = made.state() if made is not None else delta.image.auth.state
    if state.enabled and op.revision < state.revision:
        raise errors.AuthOldRevision()


def apply_auth_entry(delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]) -> None:
    """One ``auth`` entry (an AuthOperation) applied to the auth sub-delta."""
    op = Op.FromString(e.value)
    if op.op == CHECK_REVISION:
        _check_revision(delta, op)
        return
    rule = OPERATIONS.get(op.op)
    if rule is None:
        raise InvalidArgument(f"auth entry: unknown operation {op.op!r}")
    auth = delta.sub("auth")
    if op.by_user:
        _admin_permitted(auth, op.by_user)
    rule(auth, op, effects)


def _admin_permitted(auth: AuthDelta, name: str) -> None:
    """etcd's ``IsAdminPermitted`` at apply: while auth is on, the user who asked must still
    exist and hold the root role. (An entry without ``by_user``, proposed while auth was off
    or written before this check existed, is not checked: replaying old logs gives the
    state they gave.)"""
    if not auth.state().enabled:
        return
    user = auth.user(name)
    if user is None:
        raise errors.UserNotFound()
    if not user.is_root:
        raise errors.PermissionDenied()
