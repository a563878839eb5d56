"""The client's calls of etcd's Auth service (users, roles, permissions, auth on or off)
against a real node, each checked against what etcdctl answers."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

from nameserver.client import Client, Permission, prefix_range_end
from tests.etcd_harness import etcdctl_json, etcdctl_ok
from tests.harness import running_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]


def _perms(endpoint: str, role: str, user: str | None = None) -> list[tuple[int, bytes, bytes]]:
    doc = etcdctl_json(endpoint, "role", "get", role, user=user)
    return [
        (
            int(p.get("permType", 0)),
            base64.b64decode(p.get("key", "")),
            base64.b64decode(p.get("range_end", "")),
        )
        for p in doc.get("perm", [])
    ]


def test_users_roles_and_permissions_are_what_etcdctl_answers(tmp_path: Path) -> None:
    with running_cluster(tmp_path, n=1) as cluster, Client(cluster.endpoints) as client:
        at = cluster.endpoints[0]
        assert client.auth_enabled() is False
        client.role_add("app")
        grants = [
            Permission("READWRITE", b"app/", prefix_range_end(b"app/")),
            Permission("READ", b"cfg"),
            Permission("WRITE", b"a", b"m"),
            Permission("READ", b"z", b"\0"),
        ]
        for p in grants:
            client.role_grant_permission("app", p)
        client.user_add("alice", "pw")
        client.user_grant_role("alice", "app")
        assert client.role_get("app") == sorted(grants, key=lambda p: (p.key, p.range_end))
        assert _perms(at, "app") == [
            ({"READ": 0, "WRITE": 1, "READWRITE": 2}[p.perm_type], p.key, p.range_end)
            for p in client.role_get("app")
        ]
        assert client.user_get("alice") == ["app"]
        assert etcdctl_json(at, "user", "get", "alice")["roles"] == ["app"]
        assert client.user_list() == ["alice"] and client.role_list() == ["app"]

        client.user_add("root", "rootpw")
        client.user_grant_role("root", "root")
        etcdctl_ok(at, "auth", "enable")
        assert client.auth_enabled() is True
        with Client(cluster.endpoints, user="root", password="rootpw") as root:
            assert root.auth_enabled() is True
            root.role_revoke_permission("app", b"cfg")
            root.user_revoke_role("alice", "app")
            assert root.user_get("alice") == []
            assert (0, b"cfg", b"") not in _perms(at, "app", user="root:rootpw")
            root.user_delete("alice")
            root.role_delete("app")
            assert root.user_list() == ["root"]
            assert root.role_list() == etcdctl_ok(at, "role", "list", user="root:rootpw").split()
            assert etcdctl_ok(at, "user", "list", user="root:rootpw").split() == ["root"]
            etcdctl_ok(at, "auth", "disable", user="root:rootpw")
