"""Who may call what when auth is on: ONE table, gRPC method -> rule (etcd 3.4's checks).

etcd checks key permissions per request (``etcdserver/apply_auth.go``: Range, Put,
DeleteRange, every op and compare of a Txn, LeaseRevoke and a Put's lease by the keys
attached to it, Watch's range in ``v3rpc/watch.go``, checked by the watch stream) and the root role for admin requests
(``needAdminPermission``: every Auth management request; ``checkMembershipOperationPermission``:
member add/remove/update/promote; ``v3rpc/maintenance.go``: Defragment, Snapshot, Hash,
HashKV). metaledger also takes root for MoveLeader, Compact and activating or disarming an
alarm (etcd 3.4 checks none of these: they are admin operations here, as the issue asks);
listing alarms, Status and MemberList
stay open, LeaseGrant / KeepAlive / TimeToLive / Leases need no permission (as etcd).

metaledger's own records are checked as keys (docs/auth.md): record type T, record key K
-> the permission key ``/_metaledger/T/K`` (:func:`record_key`), so
``etcdctl role grant-permission r readwrite --prefix=true /_metaledger/offset/job1/`` lets
role r commit and read job1's offsets. Quotas (limits of the whole store) are root's.

A rule is one of:

* :data:`OPEN` -- anyone, authenticated or not;
* :data:`ROOT` -- a user with the root role;
* :data:`ROOT_UNCONVERTED` -- the same, refused as etcd's maintenance server refuses
  Defragment, Snapshot, Hash and HashKV (UNKNOWN, "auth: permission denied");
* :data:`USER` -- any authenticated user;
* a function ``(request, image) -> [(key, range_end, perm), ...]`` -- every range named
  must be permitted (``perm`` "read" or "write"); or it returns one of the names above,
  for methods whose requirement depends on the request (Alarm: GET open, changes root);
* :data:`SELF_OR_ROOT` / :data:`ROLE_OR_ROOT` -- etcd's UserGet / RoleGet exceptions.

A method missing from :data:`RULES` takes root: new methods are closed until listed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from nameserver.state.image import MetadataImage

Need = tuple[bytes, bytes, str]  # key, range_end ("" = the key alone), "read" | "write"
KeysRule = Callable[[Any, MetadataImage], "Iterable[Need] | str"]

OPEN = "open"
ROOT = "root"
USER = "user"
#: root, refused with the auth store's own error unconverted (etcd's authMaintenanceServer:
#: UNKNOWN "auth: permission denied", where other services answer PERMISSION_DENIED)
ROOT_UNCONVERTED = "root, auth's errors"
SELF_OR_ROOT = "self or root"
ROLE_OR_ROOT = "role or root"

Rule = str | KeysRule

RECORD_PREFIX = b"/_metaledger/"


def record_key(record_type: str, key: str | bytes) -> bytes:
    """The permission key of metaledger record ``key`` of ``record_type``."""
    k = key.encode() if isinstance(key, str) else key
    return RECORD_PREFIX + record_type.encode() + b"/" + k


def prefix_end(prefix: bytes) -> bytes:
    """etcd's ``GetPrefixRangeEnd``: the range_end of every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"  # every key


def _prefix(key: bytes, perm: str) -> Need:
    return (key, prefix_end(key), perm)


# ---------------------------------------------------------------- etcd KV, Lease, Watch


def _range(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [(r.key, r.range_end, "read")]


def _lease_keys(lease_id: int, image: MetadataImage) -> list[Need]:
    """etcd's checkLeasePuts: write on every key attached to the lease."""
    if not lease_id:
        return []
    return [(k, b"", "write") for k in sorted(image.kv.keys_of_lease(lease_id))]


def _put(r: Any, image: MetadataImage) -> Iterable[Need]:
    needs = [(r.key, b"", "write"), *_lease_keys(r.lease, image)]
    if r.prev_kv:
        needs.append((r.key, b"", "read"))
    return needs


def _delete(r: Any, image: MetadataImage) -> Iterable[Need]:
    needs = [(r.key, r.range_end, "write")]
    if r.prev_kv:
        needs.append((r.key, r.range_end, "read"))
    return needs


def _ops(ops: Iterable[Any], image: MetadataImage) -> Iterable[Need]:
    for op in ops:
        which = op.WhichOneof("request")
        if which == "request_range":
            yield from _range(op.request_range, image)
        elif which == "request_put":
            yield (op.request_put.key, b"", "write")  # etcd's Txn checks the key only
        elif which == "request_delete_range":
            yield from _delete(op.request_delete_range, image)
        elif which == "request_txn":  # nested txn (3.4 has none; later versions)
            yield from _txn(op.request_txn, image)


def _txn(r: Any, image: MetadataImage) -> Iterable[Need]:
    for c in r.compare:
        yield (c.key, c.range_end, "read")
    yield from _ops(r.success, image)
    yield from _ops(r.failure, image)


def _lease_revoke(r: Any, image: MetadataImage) -> Iterable[Need]:
    return _lease_keys(r.ID, image)


def _alarm(r: Any, image: MetadataImage) -> str:
    """Listing alarms is open (etcd 3.4 checks no Alarm request); activating or disarming
    one is root's."""
    return OPEN if r.action == 0 else ROOT  # AlarmRequest.GET = 0


# ---------------------------------------------------------------- v3lock / v3election


def _lock(r: Any, image: MetadataImage) -> Iterable[Need]:
    # v3lock is a Txn on name/<lease> plus a range on name/ (as an etcd client runs it)
    prefix = r.name + b"/"
    return [_prefix(prefix, "read"), (prefix + b"%x" % r.lease, b"", "write")]


def _unlock(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [(r.key, b"", "write")]


def _leader_key(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [(r.leader.key, b"", "write")]


def _election_read(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [_prefix(r.name + b"/", "read")]


# ---------------------------------------------------------------- metaledger's records


def _offset_key(r: Any) -> bytes:
    return record_key("offset", f"{r.job}/{r.partition}")


def _offset_write(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [(_offset_key(r), b"", "write"), *_lease_keys(getattr(r, "lease_id", 0), image)]


def _offset_read(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [(_offset_key(r), b"", "read")]


def _offset_list(r: Any, image: MetadataImage) -> Iterable[Need]:
    job = record_key("offset", r.job if r.prefix else f"{r.job}/")
    return [_prefix(job, "read")]


def _group(perm: str) -> KeysRule:
    def rule(r: Any, image: MetadataImage) -> Iterable[Need]:
        return [(record_key("replica_group", r.broker_name), b"", perm)]

    return rule


def _groups_list(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [_prefix(record_key("replica_group", ""), "read")]


def _broker(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [(record_key("broker", r.broker_name), b"", "write")]


def _heartbeat(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [(record_key("broker", h.broker_name), b"", "write") for h in r.heartbeats]


def _topic(perm: str) -> KeysRule:
    def rule(r: Any, image: MetadataImage) -> Iterable[Need]:
        return [(record_key("topic", r.topic), b"", perm)]

    return rule


def _all(record_type: str) -> KeysRule:
    def rule(r: Any, image: MetadataImage) -> Iterable[Need]:
        return [_prefix(record_key(record_type, ""), "read")]

    return rule


def _kvconfig(perm: str) -> KeysRule:
    def rule(r: Any, image: MetadataImage) -> Iterable[Need]:
        return [(record_key("kvconfig", f"{r.namespace}/{r.key}"), b"", perm)]

    return rule


def _kvconfig_list(r: Any, image: MetadataImage) -> Iterable[Need]:
    return [_prefix(record_key("kvconfig", f"{r.namespace}/"), "read")]


_E = "/etcdserverpb."
_M = "/metaledger.v1."

#: gRPC method path -> rule. The one table; :mod:`nameserver.auth.check` applies it.
RULES: dict[str, Rule] = {
    # etcd KV
    _E + "KV/Range": _range,
    _E + "KV/Put": _put,
    _E + "KV/DeleteRange": _delete,
    _E + "KV/Txn": _txn,
    _E + "KV/Compact": ROOT,
    # etcd Watch: each create is checked by the watch stream itself and a refused one is
    # answered in band, as etcd's (Authorizer.watch_refusal): the stream stays open
    _E + "Watch/Watch": OPEN,
    # etcd Lease
    _E + "Lease/LeaseGrant": OPEN,
    _E + "Lease/LeaseRevoke": _lease_revoke,
    _E + "Lease/LeaseKeepAlive": OPEN,
    _E + "Lease/LeaseTimeToLive": OPEN,
    _E + "Lease/LeaseLeases": OPEN,
    # etcd Cluster
    _E + "Cluster/MemberAdd": ROOT,
    _E + "Cluster/MemberRemove": ROOT,
    _E + "Cluster/MemberUpdate": ROOT,
    _E + "Cluster/MemberPromote": ROOT,
    _E + "Cluster/MemberList": OPEN,
    # etcd Maintenance
    _E + "Maintenance/Status": OPEN,
    _E + "Maintenance/Alarm": _alarm,
    _E + "Maintenance/Defragment": ROOT_UNCONVERTED,
    _E + "Maintenance/Hash": ROOT_UNCONVERTED,
    _E + "Maintenance/HashKV": ROOT_UNCONVERTED,
    _E + "Maintenance/Snapshot": ROOT_UNCONVERTED,
    _E + "Maintenance/MoveLeader": ROOT,
    # etcd Auth
    _E + "Auth/Authenticate": OPEN,
    _E + "Auth/AuthEnable": ROOT,
    _E + "Auth/AuthDisable": ROOT,
    _E + "Auth/UserAdd": ROOT,
    _E + "Auth/UserGet": SELF_OR_ROOT,
    _E + "Auth/UserList": ROOT,
    _E + "Auth/UserDelete": ROOT,
    _E + "Auth/UserChangePassword": ROOT,
    _E + "Auth/UserGrantRole": ROOT,
    _E + "Auth/UserRevokeRole": ROOT,
    _E + "Auth/RoleAdd": ROOT,
    _E + "Auth/RoleGet": ROLE_OR_ROOT,
    _E + "Auth/RoleList": ROOT,
    _E + "Auth/RoleDelete": ROOT,
    _E + "Auth/RoleGrantPermission": ROOT,
    _E + "Auth/RoleRevokePermission": ROOT,
    _M + "AuthExtra/SetSecretKey": ROOT,
    # v3lock / v3election
    "/v3lockpb.Lock/Lock": _lock,
    "/v3lockpb.Lock/Unlock": _unlock,
    "/v3electionpb.Election/Campaign": _lock,
    "/v3electionpb.Election/Proclaim": _leader_key,
    "/v3electionpb.Election/Resign": _leader_key,
    "/v3electionpb.Election/Leader": _election_read,
    "/v3electionpb.Election/Observe": _election_read,
    # metaledger.v1
    _M + "Admin/Status": OPEN,
    _M + "Admin/Members": OPEN,
    _M + "Quotas/Set": ROOT,
    _M + "Quotas/List": USER,
    _M + "Offsets/Commit": _offset_write,
    _M + "Offsets/Reset": _offset_write,
    _M + "Offsets/Fetch": _offset_read,
    _M + "Offsets/List": _offset_list,
    _M + "ReplicaGroups/Register": _group("write"),
    _M + "ReplicaGroups/Heartbeat": _group("write"),
    _M + "ReplicaGroups/AlterSyncStateSet": _group("write"),
    _M + "ReplicaGroups/ElectMaster": _group("write"),
    _M + "ReplicaGroups/SetPolicy": _group("write"),
    _M + "ReplicaGroups/GetGroup": _group("read"),
    _M + "ReplicaGroups/ListGroups": _groups_list,
    _M + "Routing/RegisterBroker": _broker,
    _M + "Routing/UnregisterBroker": _broker,
    _M + "Routing/Heartbeat": _heartbeat,
    _M + "Routing/GetRoute": _topic("read"),
    _M + "Routing/GetClusterInfo": _all("broker"),
    _M + "Routing/ListTopics": _all("topic"),
    _M + "Routing/CreateTopic": _topic("write"),
    _M + "Routing/DeleteTopic": _topic("write"),
    _M + "Routing/PutKvConfig": _kvconfig("write"),
    _M + "Routing/GetKvConfig": _kvconfig("read"),
    _M + "Routing/DeleteKvConfig": _kvconfig("write"),
    _M + "Routing/ListKvConfig": _kvconfig_list,
}
