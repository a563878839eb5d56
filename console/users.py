"""The Users and roles page: whether auth is on, every user with its roles, every role with
its permissions (as ``etcdctl user get`` / ``role get`` print them), and the changes a console
started with ``--allow-writes`` may make, each confirmed by naming the user or role it changes.

Listing users and roles is root's while auth is on (etcd's rules): anyone else gets etcd's own
message ("etcdserver: permission denied"), which the page shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from console.errors import BadInput, ReadOnly
from console.keys import key_text
from nameserver.client import PERM_TYPES, Client, Permission, prefix_range_end

__all__ = ["ACTIONS", "change", "overview", "permission_row"]

#: users or roles shown with their roles or permissions at most (each is one request)
MAX_SHOWN = 500


def permission_row(p: Permission) -> dict[str, Any]:
    """One permission as ``etcdctl role get`` describes it: a key, a prefix, a range, or
    every key from ``key`` on."""
    if not p.range_end:
        what = "key"
    elif p.range_end == b"\0":
        what = "from key"
    elif p.range_end == prefix_range_end(p.key):
        what = "prefix"
    else:
        what = "range"
    return {
        "type": p.perm_type,
        "key": key_text(p.key),
        "range_end": key_text(p.range_end) if p.range_end != b"\0" else "",
        "kind": what,
    }


def overview(client: Client) -> dict[str, Any]:
    enabled = client.auth_enabled()
    users = client.user_list()
    roles = client.role_list()
    return {
        "auth_enabled": enabled,
        "users": [{"name": u, "roles": client.user_get(u)} for u in users[:MAX_SHOWN]],
        "roles": [
            {"name": r, "permissions": [permission_row(p) for p in client.role_get(r)]}
            for r in roles[:MAX_SHOWN]
        ],
        "more_users": max(0, len(users) - MAX_SHOWN),
        "more_roles": max(0, len(roles) - MAX_SHOWN),
    }


def _text(body: dict[str, Any], name: str, required: bool = True) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise BadInput(f"{name} must be a string")
    if required and not value:
        raise BadInput(f"{name} is missing")
    return value


def _permission(body: dict[str, Any]) -> Permission:
    perm_type = _text(body, "type").upper()
    if perm_type not in PERM_TYPES:
        raise BadInput(f"type must be one of {', '.join(PERM_TYPES)}, not {perm_type!r}")
    key = _text(body, "key").encode()
    kind = _text(body, "kind", required=False) or "key"
    ends = {
        "key": b"",
        "prefix": prefix_range_end(key),
        "from key": b"\0",
        "range": _text(body, "range_end", required=kind == "range").encode(),
    }
    if kind not in ends:
        raise BadInput(f"kind must be one of {', '.join(ends)}, not {kind!r}")
    return Permission(perm_type, key, ends[kind])


def _do(client: Client, action: str, body: dict[str, Any]) -> int:
    name = _text(body, "name")
    steps: dict[str, Callable[[], int]] = {
        "user_add": lambda: client.user_add(name, _text(body, "password")),
        "user_delete": lambda: client.user_delete(name),
        "user_grant_role": lambda: client.user_grant_role(name, _text(body, "role")),
        "user_revoke_role": lambda: client.user_revoke_role(name, _text(body, "role")),
        "role_add": lambda: client.role_add(name),
        "role_delete": lambda: client.role_delete(name),
        "role_grant_permission": lambda: client.role_grant_permission(name, _permission(body)),
        "role_revoke_permission": lambda: _revoke(client, name, body),
    }
    return steps[action]()


def _revoke(client: Client, name: str, body: dict[str, Any]) -> int:
    p = _permission({**body, "type": "READ"})
    return client.role_revoke_permission(name, p.key, p.range_end)


#: what each change is called on the page
ACTIONS = {
    "user_add": "add the user",
    "user_delete": "delete the user",
    "user_grant_role": "grant a role to the user",
    "user_revoke_role": "revoke a role from the user",
    "role_add": "add the role",
    "role_delete": "delete the role",
    "role_grant_permission": "grant a permission to the role",
    "role_revoke_permission": "revoke a permission from the role",
}


def change(client: Client, allow_writes: bool, body: dict[str, Any]) -> dict[str, Any]:
    """One change to users or roles; refused unless writes are allowed and ``confirm`` names
    the user or role it changes."""
    if not allow_writes:
        raise ReadOnly(
            "this console is read-only (start it with --allow-writes to change users and roles)"
        )
    action = _text(body, "action")
    if action not in ACTIONS:
        raise BadInput(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    name = _text(body, "name")
    if body.get("confirm") != name:
        raise BadInput(f"not confirmed: the confirmation must name {name!r}")
    return {"action": action, "name": name, "revision": _do(client, action, body)}
