"""etcd's auth revision check at apply (``ErrAuthOldRevision``, ``auth/store.go``
``isOpPermitted``): a request permitted at one auth revision is refused whole at apply if
the auth store changed since, so a permission revoked between the check and the apply lets
nothing through; and the watch create check (``v3rpc/watch.go`` ``isWatchPermitted``)."""

from __future__ import annotations

import contextvars
from typing import Any

import pytest

from nameserver.auth import errors
from nameserver.auth.apply import revision_entry
from nameserver.auth.check import CHECKED_AT, Authorizer, checked_entries
from nameserver.auth.records import READWRITE
from nameserver.auth.tokens import SimpleTokens
from nameserver.kinds import REGISTRY
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Entry

PUT = "/etcdserverpb.KV/Put"


def op(operation: str, **fields: Any) -> Entry:
    value = records_pb2.AuthOperation(op=operation, **fields).SerializeToString()
    return Entry(type="auth", key=b"", value=value)


def put(key: bytes, value: bytes) -> Entry:
    body = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=value))
    return Entry("kv", key, body.SerializeToString())


FOO = records_pb2.AuthPermissionRecord(perm_type=READWRITE, key=b"foo/", range_end=b"foo0")


class Node:
    """A state machine and an authorizer over its image, as a node has them."""

    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0
        self.tokens = SimpleTokens(ttl_s=300)
        self.authorizer = Authorizer(lambda: self.sm.image, self.tokens)
        self.apply(op("user_add", name="root"))
        self.apply(op("user_grant_role", name="root", role="root"))
        self.apply(op("user_add", name="alice"))
        self.apply(op("role_add", name="r1"))
        self.apply(op("role_grant_permission", name="r1", perm=FOO))
        self.apply(op("user_grant_role", name="alice", role="r1"))
        self.apply(op("auth_enable"))

    def apply(self, *entries: Entry) -> Any:
        self.offset += 1
        _, result = self.sm.apply(self.offset, 1, list(entries))
        self.sm.publish()
        return result

    def check(self, path: str, request: Any, token: str) -> list[Entry]:
        """The guard's check of one call, in a task context of its own, and the entries
        the call would propose (NodeFacade.propose)."""

        class Context:
            def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
                return (("token", token),)

        def call() -> list[Entry]:
            self.authorizer.check(path, request, Context())
            key, value = getattr(request, "key", b"k"), getattr(request, "value", b"v")
            return checked_entries([put(key, value)])[0]

        return contextvars.copy_context().run(call)


def test_a_permission_revoked_between_check_and_apply_lets_nothing_through() -> None:
    node = Node()
    token = node.tokens.assign("alice", node.sm.image.auth.revision)
    entries = node.check(PUT, rpc_pb2.PutRequest(key=b"foo/a", value=b"1"), token)
    assert [e.type for e in entries] == ["auth", "kv"]  # checked at the current revision

    # the revoke is applied after the check, before the put
    node.apply(op("role_revoke_permission", name="r1", perm=FOO))
    kv_before = node.sm.image.kv
    with pytest.raises(
        errors.AuthOldRevision, match=r"^etcdserver: revision of auth store is old$"
    ):
        node.apply(*entries)
    assert node.sm.image.kv == kv_before and node.sm.image.kv.get(b"foo/a") is None

    # checked again now, it is refused before anything is proposed
    with pytest.raises(errors.PermissionDenied):
        node.check(PUT, rpc_pb2.PutRequest(key=b"foo/a", value=b"1"), token)


def test_a_request_checked_at_the_current_revision_applies_and_auth_off_passes() -> None:
    node = Node()
    token = node.tokens.assign("alice", node.sm.image.auth.revision)
    entries = node.check(PUT, rpc_pb2.PutRequest(key=b"foo/a", value=b"1"), token)
    node.apply(op("user_add", name="bob"))  # any auth change makes the check old
    with pytest.raises(errors.AuthOldRevision):
        node.apply(*entries)
    entries = node.check(PUT, rpc_pb2.PutRequest(key=b"foo/a", value=b"2"), token)
    response = node.apply(*entries)
    assert isinstance(response, list) and isinstance(response[-1], rpc_pb2.PutResponse)
    assert getattr(node.sm.image.kv.get(b"foo/a"), "value", None) == b"2"

    # with auth disabled in between, the old check does not matter (etcd: nothing checked)
    stale = [revision_entry(0), put(b"foo/b", b"3")]
    node.apply(op("auth_disable"))
    node.apply(*stale)
    assert getattr(node.sm.image.kv.get(b"foo/b"), "value", None) == b"3"


def test_calls_not_checked_by_keys_propose_their_entries_alone() -> None:
    # in a context of its own, as each gRPC call has: a check an earlier test made in this
    # process's context (another module's, when pytest-xdist runs it first) set CHECKED_AT
    contextvars.Context().run(_calls_not_checked_by_keys_propose_their_entries_alone)


def _calls_not_checked_by_keys_propose_their_entries_alone() -> None:
    node = Node()
    assert CHECKED_AT.get() is None
    assert checked_entries([put(b"x", b"1")])[1] is False
    token = node.tokens.assign("root", node.sm.image.auth.revision)
    add = rpc_pb2.AuthUserAddRequest(name="carol")
    assert [e.type for e in node.check("/etcdserverpb.Auth/UserAdd", add, token)] == ["kv"]


def test_a_watch_create_is_refused_with_etcds_cancel_reason() -> None:
    node = Node()
    token = node.tokens.assign("alice", node.sm.image.auth.revision)

    class Context:
        def __init__(self, token: str | None) -> None:
            self.token = token

        def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
            return (("token", self.token),) if self.token else ()

    refusal = node.authorizer.watch_refusal(Context(token))
    assert refusal(b"foo/a", b"") is None
    assert refusal(b"bar", b"") == (
        "rpc error: code = PermissionDenied desc = etcdserver: permission denied"
    )
    assert refusal(b"foo/", b"\x00") is not None  # "from key" reaches past foo/
    assert node.authorizer.watch_refusal(Context(None))(b"foo/a", b"") == (
        "rpc error: code = InvalidArgument desc = etcdserver: user name is empty"
    )
    assert node.authorizer.watch_refusal(Context("forged"))(b"foo/a", b"") == (
        "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"
    )
    node.apply(op("auth_disable"))
    assert node.authorizer.watch_refusal(Context(None))(b"bar", b"") is None


def test_an_admin_demoted_between_check_and_apply_changes_nothing() -> None:
    """etcd's authApplierV3.Apply: IsAdminPermitted again at apply for management requests."""
    node = Node()
    node.apply(op("user_add", name="admin"))
    node.apply(op("user_grant_role", name="admin", role="root"))
    # admin's user add was checked while admin was root; root revokes the role first
    pending = op("user_add", name="mallory", by_user="admin")
    node.apply(op("user_revoke_role", name="admin", role="root"))
    before = node.sm.image.auth
    with pytest.raises(errors.PermissionDenied):
        node.apply(pending)
    assert node.sm.image.auth == before and "mallory" not in node.sm.image.auth.users

    node.apply(op("user_delete", name="admin"))
    with pytest.raises(errors.UserNotFound):
        node.apply(op("role_add", name="r9", by_user="admin"))
    node.apply(op("role_add", name="r9", by_user="root"))
    assert "r9" in node.sm.image.auth.roles
    # an entry proposed while auth was off (or before the check existed) names nobody
    node.apply(op("role_add", name="r10"))
    assert "r10" in node.sm.image.auth.roles
