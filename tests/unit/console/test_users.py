"""The Users and roles page's reads and changes against a fake Auth service, and the login
sessions: bounded, expiring, and closing the clients they drop."""

from __future__ import annotations

from typing import Any

import pytest

from console import users
from console.errors import BadInput, ReadOnly
from console.sessions import Sessions
from nameserver.client import Permission, prefix_range_end


class FakeAuth:
    def __init__(self) -> None:
        self.enabled = False
        self.users: dict[str, list[str]] = {}
        self.roles: dict[str, list[Permission]] = {}
        self.revision = 1

    def _bump(self) -> int:
        self.revision += 1
        return self.revision

    def auth_enabled(self) -> bool:
        return self.enabled

    def user_list(self) -> list[str]:
        return sorted(self.users)

    def user_get(self, name: str) -> list[str]:
        return self.users[name]

    def role_list(self) -> list[str]:
        return sorted(self.roles)

    def role_get(self, name: str) -> list[Permission]:
        return self.roles[name]

    def user_add(self, name: str, password: str) -> int:
        self.users[name] = []
        return self._bump()

    def role_add(self, name: str) -> int:
        self.roles[name] = []
        return self._bump()

    def user_grant_role(self, name: str, role: str) -> int:
        self.users[name].append(role)
        return self._bump()

    def role_grant_permission(self, name: str, perm: Permission) -> int:
        self.roles[name].append(perm)
        return self._bump()

    def role_revoke_permission(self, name: str, key: bytes, range_end: bytes = b"") -> int:
        self.roles[name] = [p for p in self.roles[name] if (p.key, p.range_end) != (key, range_end)]
        return self._bump()


def _change(auth: FakeAuth, **body: Any) -> dict[str, Any]:
    body.setdefault("confirm", body.get("name"))
    return users.change(auth, True, body)  # type: ignore[arg-type]


def test_the_overview_describes_permissions_as_etcdctl_does() -> None:
    auth = FakeAuth()
    _change(auth, action="role_add", name="app")
    _change(auth, action="user_add", name="alice", password="pw")
    _change(auth, action="user_grant_role", name="alice", role="app")
    _change(auth, action="role_grant_permission", name="app", type="readwrite", key="app/",
            kind="prefix")  # fmt: skip
    _change(auth, action="role_grant_permission", name="app", type="READ", key="cfg")
    _change(auth, action="role_grant_permission", name="app", type="WRITE", key="a",
            kind="range", range_end="m")  # fmt: skip
    _change(auth, action="role_grant_permission", name="app", type="READ", key="z",
            kind="from key")  # fmt: skip
    out = users.overview(auth)  # type: ignore[arg-type]
    assert out["auth_enabled"] is False
    assert out["users"] == [{"name": "alice", "roles": ["app"]}]
    perms = out["roles"][0]["permissions"]
    assert [(p["type"], p["kind"], p["key"], p["range_end"]) for p in perms] == [
        ("READWRITE", "prefix", "app/", "app0"),
        ("READ", "key", "cfg", ""),
        ("WRITE", "range", "a", "m"),
        ("READ", "from key", "z", ""),
    ]
    assert auth.roles["app"][0].range_end == prefix_range_end(b"app/")
    _change(auth, action="role_revoke_permission", name="app", key="app/", kind="prefix")
    assert [p.key for p in auth.roles["app"]] == [b"cfg", b"a", b"z"]


def test_a_change_needs_writes_allowed_and_a_confirmation_naming_its_target() -> None:
    auth = FakeAuth()
    with pytest.raises(ReadOnly):
        users.change(auth, False, {"action": "role_add", "name": "x", "confirm": "x"})  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="must name 'x'"):
        users.change(auth, True, {"action": "role_add", "name": "x", "confirm": "y"})  # type: ignore[arg-type]
    for bad in (
        {"action": "drop_everything", "name": "x"},
        {"action": "role_add", "name": ""},
        {"action": "role_grant_permission", "name": "x", "type": "ALL", "key": "k"},
        {"action": "role_grant_permission", "name": "x", "type": "READ", "key": "k", "kind": "?"},
        {"action": "role_grant_permission", "name": "x", "type": "READ", "key": "k",
         "kind": "range"},
        {"action": "user_add", "name": "x", "password": 5},
    ):  # fmt: skip
        with pytest.raises(BadInput):
            _change(auth, **bad)
    assert auth.roles == {} and auth.users == {}


class FakeClient:
    closed = 0

    def close(self) -> None:
        FakeClient.closed += 1


def test_sessions_are_bounded_expire_and_close_what_they_drop() -> None:
    FakeClient.closed = 0
    s = Sessions(max_sessions=2, idle_s=3600)
    a = s.add(None, "c1", "alice", FakeClient())  # type: ignore[arg-type]
    assert s.login(a, "c1") is not None and s.login(a, "c2") is None
    assert s.add(a, "c2", "bob", FakeClient()) == a  # type: ignore[arg-type]
    b = s.add(None, "c1", "carol", FakeClient())  # type: ignore[arg-type]
    s.login(a, "c1")  # a was used last: b is the oldest now
    s.add(None, "c1", "dave", FakeClient())  # type: ignore[arg-type]
    assert len(s) == 2 and s.login(b, "c1") is None and FakeClient.closed == 1
    assert s.logout(a, "c1") == "alice" and s.login(a, "c2") is not None
    assert s.login("forged", "c1") is None and s.logout("forged", "c1") is None
    s.idle_s = -1.0
    assert s.login(a, "c2") is None
    s.close()
    assert FakeClient.closed == 4
