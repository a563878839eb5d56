"""The ``auth`` record kind driven through the state machine with plain entries: etcd 3.4's
rules (``auth/store.go``) and error texts, snapshot round trips, nothing changed on refusal."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from nameserver.auth import errors
from nameserver.auth.passwords import check_password, hash_password
from nameserver.auth.records import READ, READWRITE, Permission
from nameserver.errors import Rejected
from nameserver.grpc.status import to_status
from nameserver.kinds import REGISTRY
from nameserver.state.image import MetadataImage
from nameserver.state.machine import MetadataStateMachine, image_from_records, image_records
from protos import records_pb2
from raftlog import Entry


def op(operation: str, **fields: Any) -> Entry:
    value = records_pb2.AuthOperation(op=operation, **fields).SerializeToString()
    return Entry(type="auth", key=b"", value=value)


def perm(key: bytes, range_end: bytes = b"", perm_type: int = READWRITE) -> Any:
    return records_pb2.AuthPermissionRecord(perm_type=perm_type, key=key, range_end=range_end)


class Driver:
    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0

    def apply(self, *entries: Entry) -> Any:
        self.offset += 1
        _, result = self.sm.apply(self.offset, 1, list(entries))
        self.sm.publish()
        return result

    def rejected(self, entry: Entry) -> Rejected:
        before = self.sm.image.auth
        with pytest.raises(Rejected) as info:
            self.apply(entry)
        assert self.sm.image.auth == before  # nothing changed
        return info.value

    @property
    def auth(self) -> Any:
        return self.sm.image.auth


def test_enable_needs_a_root_user_with_the_root_role_in_etcds_words() -> None:
    d = Driver()
    exc = d.rejected(op("auth_enable"))
    assert to_status(exc) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "etcdserver: root user does not exist",
    )
    d.apply(op("user_add", name="root", password_hash=b"h"))
    assert str(d.rejected(op("auth_enable"))) == "etcdserver: root user does not have root role"
    d.apply(op("user_grant_role", name="root", role="root"))  # root role needs no RoleAdd
    d.apply(op("auth_enable"))
    assert d.auth.enabled
    d.apply(op("auth_enable"))  # again: ignored, as etcd
    assert d.auth.enabled


def test_user_and_role_management_errors_are_etcds() -> None:
    d = Driver()
    assert isinstance(d.rejected(op("user_add", name="")), errors.UserEmpty)
    d.apply(op("user_add", name="alice", password_hash=b"h"))
    assert str(d.rejected(op("user_add", name="alice"))) == "etcdserver: user name already exists"
    assert str(d.rejected(op("user_delete", name="bob"))) == "etcdserver: user name not found"
    assert str(d.rejected(op("user_grant_role", name="alice", role="r"))) == (
        "etcdserver: role name not found"
    )
    assert isinstance(d.rejected(op("role_add", name="")), errors.RoleEmpty)
    d.apply(op("role_add", name="r"))
    assert isinstance(d.rejected(op("role_add", name="r")), errors.RoleAlreadyExist)
    d.apply(op("user_grant_role", name="alice", role="r"))
    d.apply(op("user_grant_role", name="alice", role="r"))  # granted twice: ignored
    assert d.auth.users["alice"].roles == ("r",)
    assert isinstance(
        d.rejected(op("user_revoke_role", name="alice", role="x")), errors.RoleNotGranted
    )
    assert isinstance(
        d.rejected(op("role_revoke_permission", name="r", perm=perm(b"k"))),
        errors.PermissionNotGranted,
    )


def test_root_cannot_be_deleted_or_lose_its_role_while_auth_is_on() -> None:
    d = Driver()
    d.apply(op("user_add", name="root", password_hash=b"h"))
    d.apply(op("user_grant_role", name="root", role="root"))
    d.apply(op("role_add", name="root"))
    d.apply(op("auth_enable"))
    for entry in (
        op("user_delete", name="root"),
        op("user_revoke_role", name="root", role="root"),
        op("role_delete", name="root"),
    ):
        exc = d.rejected(entry)
        assert to_status(exc) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "etcdserver: invalid auth management",
        )
    d.apply(op("auth_disable"))
    d.apply(op("user_delete", name="root"))
    assert "root" not in d.auth.users


def test_permissions_are_kept_sorted_replaced_by_range_and_revoked_exactly() -> None:
    d = Driver()
    d.apply(op("role_add", name="r"))
    d.apply(op("role_grant_permission", name="r", perm=perm(b"b", b"c", READ)))
    d.apply(op("role_grant_permission", name="r", perm=perm(b"a")))
    d.apply(op("role_grant_permission", name="r", perm=perm(b"b", b"c", READWRITE)))
    assert d.auth.roles["r"].permissions == (
        Permission(READWRITE, b"a", b""),
        Permission(READWRITE, b"b", b"c"),
    )
    d.apply(op("role_revoke_permission", name="r", perm=perm(b"b", b"c")))
    assert d.auth.roles["r"].permissions == (Permission(READWRITE, b"a", b""),)


def test_role_delete_revokes_it_from_every_user_and_revisions_count_changes() -> None:
    d = Driver()
    d.apply(op("role_add", name="r"))
    d.apply(
        op("user_add", name="u1", password_hash=b"h"), op("user_add", name="u2", password_hash=b"h")
    )
    d.apply(op("user_grant_role", name="u1", role="r"))
    before = d.auth.revision
    d.apply(op("role_delete", name="r"))
    assert d.auth.users["u1"].roles == () and "r" not in d.auth.roles
    assert d.auth.revision == before + 1


def test_the_auth_records_survive_a_snapshot_round_trip() -> None:
    d = Driver()
    d.apply(op("user_add", name="root", password_hash=b"h"))
    d.apply(op("user_grant_role", name="root", role="root"))
    d.apply(op("role_add", name="r"))
    d.apply(op("role_grant_permission", name="r", perm=perm(b"k", b"\x00")))
    d.apply(op("user_set_secret", name="root", secret="s3"))
    d.apply(op("auth_enable"))
    image = d.sm.image
    again = image_from_records(list(image_records(image)), image.revision, 1, REGISTRY)
    assert again.auth == image.auth
    assert again.auth.enabled and again.auth.user_by_access_key("root") is not None
    assert MetadataImage.empty(REGISTRY).auth.enabled is False


def test_an_unknown_operation_is_refused_naming_it() -> None:
    assert "unknown operation 'nope'" in str(Driver().rejected(op("nope")))


def test_passwords_are_salted_hashes_that_verify() -> None:
    h1, h2 = hash_password("pw", cost=4), hash_password("pw", cost=4)
    assert h1 != h2 and b"pw" not in h1
    assert check_password(h1, "pw") and not check_password(h1, "pW")
    assert not check_password(b"garbage", "pw") and not check_password(b"", "")
