"""The permission check: token -> user, user -> may it touch this key range (etcd's
``auth/store.go`` ``isOpPermitted`` and ``range_perm_cache.go``), and :meth:`Authorizer.check`,
the hook :mod:`nameserver.grpc.guard` calls before every handler (:mod:`nameserver.auth.rules`
says what each method needs).

With auth off the hook costs two attribute reads and a comparison. With auth on, a user's permissions are
merged once per auth sub-image into sorted disjoint intervals (per read / write), and a
request's ranges are checked against them: a key is permitted when an interval holds it,
a range [key, range_end) when the intervals cover all of it (etcd's interval tree
``Contains``); range_end ``\\x00`` means "to the end of the keyspace" on both sides.

A call without a token, on a node that verifies client certificates, is the user its
certificate's common name names (etcd's ``AuthInfoFromTLS``).

Errors as etcd answers them: no token -> "user name is empty" (INVALID_ARGUMENT); a token
not valid here -> "invalid auth token" (UNAUTHENTICATED); not permitted -> "permission
denied" (PERMISSION_DENIED); a token of a user since deleted -> "permission denied".
"""

from __future__ import annotations

import bisect
import hmac
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Any

from nameserver.auth import errors
from nameserver.auth.apply import revision_entry
from nameserver.auth.records import READ, READWRITE, WRITE, AuthImage, User
from nameserver.auth.rules import (
    OPEN,
    ROLE_OR_ROOT,
    ROOT,
    ROOT_UNCONVERTED,
    RULES,
    SELF_OR_ROOT,
    USER,
    Need,
)
from nameserver.auth.tokens import TokenProvider
from nameserver.errors import Rejected
from nameserver.state.image import MetadataImage
from raftlog import Entry

TOKEN_METADATA = "token"  # etcd's rpctypes.TokenFieldNameGRPC
#: What the Go front (``serve --grpc-front go``) adds to a call whose client presented a
#: verified certificate, under ``--client-cert-auth``: its common name, and the key the
#: node gave the front (front/identity.go; the front drops a client's own such keys).
FRONT_CN_METADATA = "x-ml-front-cn"
FRONT_KEY_METADATA = "x-ml-front-key"
FRONT_METADATA = (FRONT_CN_METADATA, FRONT_KEY_METADATA)

#: The auth revision the running gRPC call's key permissions were checked at (None: not
#: checked, auth off, or not a key rule). Set by :meth:`Authorizer.check` in the call's own
#: task; :func:`checked_entries` puts it in front of what the call proposes.
CHECKED_AT: ContextVar[int | None] = ContextVar("metaledger_auth_checked_at", default=None)


def checked_entries(entries: list[Entry]) -> tuple[list[Entry], bool]:
    """``entries`` of the running call, preceded by its ``check_revision`` entry when its
    permissions were checked (and whether they are)."""
    revision = CHECKED_AT.get()
    if revision is None:
        return entries, False
    return [revision_entry(revision), *entries], True


#: sorted disjoint [start, end) intervals; end None = to the end of the keyspace
Intervals = tuple[list[bytes], list[bytes | None]]


def _interval(key: bytes, range_end: bytes) -> tuple[bytes, bytes | None]:
    if not range_end:
        return key, key + b"\x00"  # the key alone
    if range_end == b"\x00":
        return key, None
    return key, range_end


def merge(ranges: Iterable[tuple[bytes, bytes | None]]) -> Intervals:
    """Sorted, overlapping or touching intervals joined (empty ones dropped)."""
    starts: list[bytes] = []
    ends: list[bytes | None] = []
    for start, end in sorted(ranges, key=lambda r: r[0]):
        if end is not None and end <= start:
            continue
        if ends and (ends[-1] is None or ends[-1] >= start):
            if ends[-1] is not None and (end is None or end > ends[-1]):
                ends[-1] = end
            continue
        starts.append(start)
        ends.append(end)
    return starts, ends


def covers(intervals: Intervals, key: bytes, range_end: bytes) -> bool:
    """Whether the merged ``intervals`` hold all of [key, range_end) (etcd's conventions)."""
    starts, ends = intervals
    start, end = _interval(key, range_end)
    i = bisect.bisect_right(starts, start) - 1
    if i < 0:
        return False
    last = ends[i]
    if last is None:
        return True
    if end is None:
        return False
    return end <= last if range_end else start < last


class Permissions:
    """One user's read and write intervals (etcd's unifiedRangePermissions)."""

    __slots__ = ("read", "write")

    def __init__(self, auth: AuthImage, user: User) -> None:
        read: list[tuple[bytes, bytes | None]] = []
        write: list[tuple[bytes, bytes | None]] = []
        for name in user.roles:
            role = auth.roles.get(name)
            for p in role.permissions if role is not None else ():
                ivl = _interval(p.key, p.range_end)
                if p.perm_type in (READ, READWRITE):
                    read.append(ivl)
                if p.perm_type in (WRITE, READWRITE):
                    write.append(ivl)
        self.read, self.write = merge(read), merge(write)


def permitted(auth: AuthImage, user: str, needs: Iterable[Need]) -> bool:
    """Whether ``user`` may do all of ``needs`` (no cache: tests and one-off checks)."""
    u = auth.users.get(user)
    if u is None:
        return False
    if u.is_root:
        return True
    perms = Permissions(auth, u)
    return all(covers(perms.read if p == "read" else perms.write, k, e) for k, e, p in needs)


class Authorizer:
    """Tokens and permission checks of one node (``image()``: the node's current image)."""

    def __init__(
        self,
        image: Callable[[], MetadataImage],
        tokens: TokenProvider,
        node_token: str | None = None,
        cert_names: bool = False,
        front_key: str | None = None,
    ) -> None:
        """``cert_names``: the node verifies client certificates (``--client-cert-auth``);
        a call without a token is then the user its certificate's common name names
        (etcd's ``AuthInfoFromTLS``). ``front_key``: the key of the node's Go front, which
        verifies the certificates and passes the name on in the call's metadata
        (:data:`FRONT_CN_METADATA`, trusted only beside this key)."""
        self._image = image
        self.tokens = tokens
        self._node_token = node_token
        self._cert_names = cert_names
        self._front_key = front_key
        self._cache_of: AuthImage | None = None
        self._cache: dict[str, Permissions] = {}

    # ------------------------------------------------------------ the plan's interface

    async def user_of(self, metadata: Sequence[tuple[str, Any]] | None) -> str | None:
        """The user of a request's metadata: None without a token; raises Unauthenticated
        for a token that is not valid here."""
        return self.user_of_token(_token(metadata))

    def allowed(
        self, image: MetadataImage, user: str, key: bytes, range_end: bytes, perm: str
    ) -> bool:
        return self._allowed(image.auth, user, ((key, range_end, perm),))

    def is_root(self, image: MetadataImage, user: str) -> bool:
        u = image.auth.users.get(user)
        return u is not None and u.is_root

    # ------------------------------------------------------------ internals

    def user_of_token(self, token: str | None) -> str | None:
        if token is None:
            return None
        if self._node_token is not None and token == self._node_token:
            return "root"  # another member of this cluster
        info = self.tokens.info(token)
        if info is None:
            raise errors.Unauthenticated()
        return info[0]

    def _refresh(self, auth: AuthImage) -> None:
        """A new auth image: drop the cached permissions, and forget the tokens etcd
        forgets on every member when it applies the change (``invalidateUser`` of a user
        deleted or whose password changed; every token when auth was disabled)."""
        old, self._cache_of, self._cache = self._cache_of, auth, {}
        if old is None:
            return
        if old.enabled and not auth.enabled:
            self.tokens.disable()
            return
        for name, user in old.users.items():
            now = auth.users.get(name)
            if now is None or now.password_hash != user.password_hash:
                self.tokens.invalidate_user(name)

    def observe(self, auth: AuthImage) -> None:
        """Catch up with ``auth`` (before issuing a token read from it: a token must not be
        forgotten for a change it already saw)."""
        if auth is not self._cache_of:
            self._refresh(auth)

    def _permissions(self, auth: AuthImage, user: User) -> Permissions:
        if auth is not self._cache_of:
            self._refresh(auth)
        perms = self._cache.get(user.name)
        if perms is None:
            perms = self._cache[user.name] = Permissions(auth, user)
        return perms

    def _allowed(self, auth: AuthImage, user: str, needs: Iterable[Need]) -> bool:
        u = auth.users.get(user)
        if u is None:
            return False
        if u.is_root:
            return True
        perms = self._permissions(auth, u)
        return all(covers(perms.read if p == "read" else perms.write, k, e) for k, e, p in needs)

    def check_needs(self, image: MetadataImage, user: str | None, rule: Any, request: Any) -> None:
        """Raise etcd's error unless ``user`` may make ``request`` under ``rule``."""
        auth = image.auth
        needs = None
        if callable(rule):
            needs = rule(request, image)
            if isinstance(needs, str):  # a rule that depends on the request (Alarm)
                rule, needs = needs, None
        if rule == OPEN:
            return
        if user is None:
            raise errors.UserEmpty()
        if rule == ROOT or rule == USER or rule == SELF_OR_ROOT or rule == ROLE_OR_ROOT:
            u = auth.users.get(user)
            if rule == USER and u is not None:
                return
            if u is not None and u.is_root:
                return
            if rule == SELF_OR_ROOT and u is not None and request.name == user:
                return
            if rule == ROLE_OR_ROOT and u is not None and request.role in u.roles:
                return
            if u is None:  # a token of a user since deleted (etcd's IsAdminPermitted)
                raise errors.UserNotFound()
            raise errors.PermissionDenied()
        if not self._allowed(auth, user, needs or ()):
            raise errors.PermissionDenied()

    def check(self, path: str, request: Any, context: Any) -> None:
        """The guard's hook: nothing when auth is off; else raise etcd's error unless the
        caller (``context.invocation_metadata()``'s token) may call ``path`` with ``request``."""
        image = self._image()
        auth = image.auth
        if auth is not self._cache_of:
            self._refresh(auth)
        if not auth.enabled:
            return
        rule = RULES.get(path, ROOT)
        if rule == OPEN:
            return
        if rule == ROOT_UNCONVERTED:
            try:
                self.check_needs(image, self.caller(context), ROOT, request)
            except Rejected as exc:
                raise errors.Unconverted.of(exc) from None
            return
        user = self.caller(context)  # from here on, an invalid token fails
        self.check_needs(image, user, rule, request)
        # what the call proposes is refused at apply if auth changed since (etcd's
        # ErrAuthOldRevision); set on every checked call: a stream's task reuses the var
        CHECKED_AT.set(auth.revision if callable(rule) else None)

    def caller(self, context: Any) -> str | None:
        """The user of a call (etcd's ``EtcdServer.AuthInfoFromCtx``): its token's; without
        one, under client-cert-auth, the common name of its verified certificate; else
        None. Raises Unauthenticated for a token not valid here."""
        user = self.user_of_token(_token(context.invocation_metadata()))
        if user is None and self._cert_names:
            user = _common_name(context, self._front_key)
        return user

    def watch_refusal(self, context: Any) -> Callable[[bytes, bytes], str | None]:
        """The check of each watch create of one stream (etcd's ``isWatchPermitted``, per
        create, with the stream's token): None when permitted or auth is off, else the
        cancel reason the create is answered with (the stream stays open): the error's
        Go status text, as etcd's ``rpctypes.ErrGRPC...Error()``."""

        def refusal(key: bytes, range_end: bytes) -> str | None:
            image = self._image()
            auth = image.auth
            if auth is not self._cache_of:
                self._refresh(auth)
            if not auth.enabled:
                return None
            try:
                user = self.caller(context)
                if user is None:
                    raise errors.UserEmpty()
                if not self._allowed(auth, user, ((key, range_end, "read"),)):
                    raise errors.PermissionDenied()
            except Rejected as exc:
                return go_status_text(exc)
            return None

        return refusal


def go_status_text(exc: Rejected) -> str:
    """``exc`` as etcd puts a gRPC error into a cancel reason: the Go status error's text,
    ``rpc error: code = PermissionDenied desc = etcdserver: permission denied``."""
    code = "".join(part.capitalize() for part in exc.status.name.split("_"))
    return f"rpc error: code = {code} desc = {exc}"


def _common_name(context: Any, front_key: str | None = None) -> str | None:
    """The CN of the call's verified client certificate: grpc's auth context, or with the
    Go front (``front_key``) the name it passed on, when the call also carries its key."""
    auth_context = getattr(context, "auth_context", None)
    names = auth_context().get("x509_common_name") if auth_context is not None else None
    if names:
        return bytes(names[0]).decode(errors="replace")
    if not front_key:
        return None
    found = dict(_text_pairs(context.invocation_metadata(), FRONT_METADATA))
    key = found.get(FRONT_KEY_METADATA)
    if key is None or not hmac.compare_digest(key.encode(), front_key.encode()):
        return None
    return found.get(FRONT_CN_METADATA)


def _text_pairs(
    metadata: Sequence[tuple[str, Any]] | None, keys: tuple[str, ...]
) -> list[tuple[str, str]]:
    """The first value of each of ``keys`` in ``metadata``, as text."""
    out: list[tuple[str, str]] = []
    for k, v in metadata or ():
        if k in keys and all(k != seen for seen, _ in out):
            out.append((k, v if isinstance(v, str) else bytes(v).decode(errors="replace")))
    return out


def _token(metadata: Sequence[tuple[str, Any]] | None) -> str | None:
    for k, v in metadata or ():
        if k == TOKEN_METADATA:
            return v if isinstance(v, str) else bytes(v).decode(errors="replace")
    return None
